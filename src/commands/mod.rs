//! One module per subcommand; each is thin: it resolves what it needs, calls the API and hands the result
//! to `output`.

pub mod install_crd;
pub mod list;
pub mod reconcile;
pub mod select;
pub mod watch;
