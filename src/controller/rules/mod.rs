//! The rules of the engine, decided without a cluster: which children a parent may have and whose an
//! existing object is (`children`), what a parent's status says and when and how it is written
//! (`status`), where a parent stands with its finalizer (`finalizer`), what follows a reconcile (`next`), whether a selector takes an
//! object in (`selector`), and, for a shard ring, which member a parent belongs to (`ring`) and the labels
//! that say so (`shard`). The syncs answer in these terms and the engine acts on them; nothing here sends
//! a request, so every rule has unit tests.

pub mod adoption;
pub mod child_write;
pub mod children;
pub mod decorate;
pub mod finalizer;
pub mod graph;
pub mod next;
pub mod related;
pub mod ring;
pub mod rolling;
pub mod selector;
pub mod shard;
pub mod shell;
pub mod status;

/// JSON as Go's `encoding/json` writes it (metacontroller's revision names and kro's `json.marshal`
/// depend on it).
pub use crate::go_json::encode as go_json;

/// samplectl's name as a field manager, on every write it makes.
pub const FIELD_MANAGER: &str = "samplectl";

/// The shape of a hook's requests and answers, as metacontroller's `hooks.*.version`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Version {
    /// Objects keyed relative to the parent: `name`, or `namespace/name` for a namespaced object of a
    /// cluster-scoped parent.
    #[default]
    V1,
    /// Objects keyed uniformly: `namespace/name` for every namespaced object, `name` otherwise.
    V2,
}
