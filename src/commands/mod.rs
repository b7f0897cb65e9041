//! One thin module per subcommand: it turns the parsed arguments into what the library takes, calls
//! `cluster` or `controller`, and hands the result to `output`. No logic of its own beyond that.

pub mod install_crd;
pub mod list;
pub mod reconcile;
pub mod select;
pub mod watch;
