//! Sharding a controller's parents across replicas (`--shard-ring`): `ring`, which member a parent
//! belongs to; `member`, the labels that say it and what a member does with a parent moved away from it;
//! `coordinator`, the one member that writes those labels.

pub mod coordinator;
pub mod member;
pub mod ring;
