//! The controller, the only layer that writes to the cluster, and only what it owns. One engine for every
//! parent type, in rooms, each using only the rooms before it:
//!
//! - `rules`: the decisions, without a cluster: which children a parent may have and whose an object is,
//!   what its status says and when it is written, where it stands with its finalizer, selectors.
//! - `sync`: what says what a parent wants, in metacontroller's terms: the built-in Sample sync or hooks.
//! - `serve`: `/healthz`, `/readyz` and `/metrics`.
//! - `engine`: one reconcile of one parent: the sync, then the safe writes, status, finalizer and Events,
//!   and the small stores kept between reconciles (backoff, conflicts, written statuses).
//! - `drive`: when reconciles happen: the poll and watch drivers, and observe mode for a resource with no
//!   sync.
//! - `leader`: leader election on a Lease; `crd`: the embedded CRDs, for `install-crd`.
//! - `settings`: the command line's settings, split into parts.
//! - `define`: where controllers come from: the flags, the built-in Sample controller, and metacontroller's
//!   controller objects read from manifests or the cluster, each made `Definition`s.
//! - `reconciling`: a set of definitions driven together; `fleet`: `--from-cluster`, the cluster's
//!   controller objects started, restarted and stopped as they change.
//! - `run`: the wiring of the above.

pub mod crd;
pub mod define;
pub mod drive;
pub mod engine;
pub mod fleet;
pub mod leader;
pub mod reconciling;
pub mod rules;
pub mod run;
pub mod serve;
pub mod settings;
pub mod shard;
pub mod stages;
pub mod sync;
