//! Everything written for the user to read: kubectl's tables (from the server's columns), json, yaml and
//! name output, watch lines, and colour. It formats what `cluster` read; it sends no request and decides
//! nothing about what to read.

pub mod color;
pub mod columns;
pub mod go_print;
pub mod jsonpath;
pub mod objects;
pub mod paged;
pub mod sort;
pub mod table;
pub mod template;
pub mod terminal;
