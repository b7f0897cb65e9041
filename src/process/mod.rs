//! Child processes as a careful parent runs them: each hook in a process group of its own, ended with
//! everything it started whenever its call ends; its output read as bounded lines of any bytes; and,
//! when samplectl is the first process of its container, an init that reaps what hooks leave behind;
//! and the private files hooks are given.
//! A leaf: it knows nothing of hooks' protocols, only of processes.

pub mod group;
pub mod init;
pub mod lines;
pub mod private;
