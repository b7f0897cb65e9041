//! Sharding a controller's parents across replicas (`--shard-ring`): `coordinator`, the one member that
//! labels each parent for its member and moves parents as members come and go. Which member a parent
//! belongs to, and the labels, are rules (`rules::ring`, `rules::shard`); what a member does with a parent
//! moved away from it is the engine's (`engine::handover`).

pub mod controllers;
pub mod coordinator;
pub mod renewals;
