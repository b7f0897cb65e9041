//! The controller, the only layer that writes to the cluster, and only what it owns. One engine for every
//! parent type, in rooms:
//!
//! - `define`: where controllers come from: the flags, the built-in Sample controller, and metacontroller's
//!   CompositeController objects read from manifests, each made a `Definition`.
//! - `rules`: the decisions, without a cluster: which children a parent may have and whose an object is,
//!   what its status says and when it is written, where it stands with its finalizer.
//! - `sync`: what says what a parent wants, in metacontroller's terms: the built-in Sample sync or a hook.
//! - `engine`: one reconcile of one parent: the sync, then the safe writes, status, finalizer and Events,
//!   and the small stores kept between reconciles (backoff, conflicts, written statuses).
//! - `drive`: when reconciles happen: the poll and watch drivers, and observe mode for a resource with no
//!   sync.
//! - `serve`: `/healthz`, `/readyz` and `/metrics`.
//! - `leader`: leader election on a Lease.
//! - `settings` and `run`: the command line's settings, and the wiring of the above.
//! - `crd`: the embedded Sample CRD, for `install-crd`.

pub mod crd;
pub mod define;
pub mod drive;
pub mod engine;
pub mod leader;
pub mod rules;
pub mod run;
pub mod serve;
pub mod settings;
pub mod sync;
