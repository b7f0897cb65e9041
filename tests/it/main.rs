//! The integration tests, one binary with a module per area (as ripgrep and cargo arrange theirs): one
//! link of the crate instead of one per file. Every test runs against the local cluster, in a namespace of
//! its own; `support::shared()` and `support::exclusive()` say which tests may run beside others.

// The tests write as a user would, beside samplectl: no Lease fences them (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod support;

mod bad_input;
mod churn;
mod completion;
mod controllers;
mod faults;
mod fencing;
mod graphs;
mod hooks;
mod hung_requests;
mod in_cluster;
mod install_crd;
mod kro_states;
mod list;
mod local_cluster;
mod node;
mod reconcile;
mod reconcile_input;
mod reconcile_races;
mod reconcile_scale;
mod schemaless_crd;
mod secrets_in_logs;
mod sharding;
mod shell_hooks;
mod streaming_lists;
mod takeover_race;
mod templates;
mod warnings;
mod watch;
mod watch_restart;
