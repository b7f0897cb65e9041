//! Talking to the API server, schema-less: building the client from a kubeconfig, resolving what a user
//! names into a served resource, reading it page by page, and following its changes through disconnects
//! and `410 Gone`. It knows nothing of the command line, of printing, or of the Sample controller, and it
//! never writes: writes belong to `controller`.

pub mod changes;
pub mod client;
pub mod deadline;
pub mod openapi;
pub mod read;
pub mod requests;
pub mod resolve;
pub mod scope;
pub mod stream;
pub mod transport;
