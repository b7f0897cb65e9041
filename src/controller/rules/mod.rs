//! The rules of the engine, decided without a cluster: which children a parent may have and whose an
//! existing object is (`children`), what a parent's status says and when and how it is written
//! (`status`), where a parent stands with its finalizer (`finalizer`), and whether a selector takes an
//! object in (`selector`). The syncs answer in these terms and the engine acts on them; nothing here sends
//! a request, so every rule has unit tests.

pub mod children;
pub mod finalizer;
pub mod selector;
pub mod status;

/// samplectl's name as a field manager, on every write it makes.
pub const FIELD_MANAGER: &str = "samplectl";
