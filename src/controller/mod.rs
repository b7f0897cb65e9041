//! The controller, the only layer that writes to the cluster, and only what it owns. One engine for every
//! parent type: a sync (`sample`, built in, or a `hook`) says what a parent wants in metacontroller's
//! terms (`sync`), `children` and `status` decide without a cluster what that means for what exists, and
//! `engine` writes it safely. The two drivers decide when to call it (`poll`, `watch`); observe mode
//! reports any resource without a sync; `run` wires in leader election, shutdown, health, metrics and
//! events.

pub mod backoff;
pub mod children;
pub mod crd;
pub mod engine;
pub mod events;
pub mod health;
pub mod hook;
pub mod leader;
pub mod metrics;
pub mod metrics_access;
pub mod observe;
pub mod poll;
pub mod run;
pub mod sample;
pub mod status;
pub mod sync;
pub mod tls;
pub mod watch;
