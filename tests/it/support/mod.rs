//! What the integration tests share, by concern: the cluster and who holds it (`cluster`), running
//! samplectl and kubectl (`process`), the objects tests make and check (`objects`), and a proxy that
//! makes chosen requests hang (`hang`), and the API server's audit log as a witness of who wrote what (`audit`).

pub mod audit;
pub mod cluster;
pub mod hang;
pub mod node;
pub mod objects;
pub mod process;

pub use cluster::*;
pub use objects::*;
pub use process::*;
