//! What the integration tests share, by concern: the cluster and who holds it (`cluster`), running
//! samplectl and kubectl (`process`), the objects tests make and check (`objects`), and a proxy that
//! makes chosen requests hang (`hang`).

pub mod cluster;
pub mod hang;
pub mod objects;
pub mod process;

pub use cluster::*;
pub use objects::*;
pub use process::*;
