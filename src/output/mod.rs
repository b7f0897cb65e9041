//! Everything that writes for the user: colour decisions now; tables, json, yaml and watch lines as the
//! commands that print them arrive.

pub mod color;
pub mod objects;
pub mod table;
