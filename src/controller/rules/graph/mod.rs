//! kro's ResourceGraphDefinitions, decided without a cluster: the instance API's schema from SimpleSchema,
//! the CRD kro would generate for it, the resource graph and its order, and the conditions kro reports.

pub mod applyset;
pub mod authored;
pub mod cel;
pub mod check;
pub mod compat;
pub mod conditions;
pub mod cost;
pub mod dag;
pub mod expr;
pub mod instance;
pub mod kubernetes;
pub mod label_selector;
pub mod macros;
pub mod plural;
pub mod revision;
pub mod rgd;
pub mod schema;
pub mod types;
pub mod walk;
