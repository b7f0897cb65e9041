//! samplectl: list, watch and reconcile any Kubernetes resource without generated types, and run a
//! controller for `Sample` custom resources (`samples.example.com/v1alpha1`).
//!
//! Layers, each depending only on those after it: `cli` and `commands` (the command line), `controller`
//! (the only writer), `output` (printing), `cluster` (reading from the API server), and the leaves
//! `error`, `duration`, `limits`, `logging`, `process` and `signal`. ARCHITECTURE.md is the map.

pub mod certificates;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod controller;
pub mod duration;
pub mod error;
pub mod go_json;
pub mod limits;
pub mod logging;
pub mod output;
pub mod process;
pub mod signal;
