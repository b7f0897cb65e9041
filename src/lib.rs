//! samplectl: list, watch and reconcile any Kubernetes resource without generated types, and run a
//! controller for `Sample` custom resources (`samples.example.com/v1alpha1`).

pub mod changes;
pub mod cli;
pub mod client;
pub mod commands;
pub mod error;
pub mod fetch;
pub mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod metrics_access;
pub mod output;
pub mod reconcile;
pub mod requests;
pub mod resource;
pub mod signal;
pub mod tls;
