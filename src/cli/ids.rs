//! The ids of the arguments that completion reads back from what was typed, shared by their definition
//! (`cli`) and their reader (`complete`): renaming a flag cannot silently break TAB.

pub const KUBECONFIG: &str = "kubeconfig";
pub const CONTEXT: &str = "context";
pub const NAMESPACE: &str = "namespace";
pub const ALL_NAMESPACES: &str = "all_namespaces";
pub const GVR: &str = "gvr";
/// `RESOURCE [NAME]...` of `list` and `watch`.
pub const NAMES: &str = "names";
/// The subcommand that follows one object at most.
pub const WATCH: &str = "watch";
