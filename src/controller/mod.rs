//! The controller: the Sample reconcile (`sample` plans, `engine` writes, under the ownership rules), the
//! two drivers that decide when to call it (`poll`, `watch`), observe mode for any other resource, and
//! what runs around them (`run`: leader election, shutdown, health, metrics, events). It is the only
//! layer that writes to the cluster, and it writes only what it owns.

pub mod backoff;
pub mod crd;
pub mod engine;
pub mod events;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod metrics_access;
pub mod observe;
pub mod poll;
pub mod run;
pub mod sample;
pub mod tls;
pub mod watch;
