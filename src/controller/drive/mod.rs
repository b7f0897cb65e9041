//! The drivers, which decide *when* a parent is reconciled: `poll` lists the parents every interval and
//! reconciles what changed; `watch` follows every change through cached watches. `observe` is the driver
//! for a resource with no sync at all: it reports changes and writes nothing. `changes` says what counts as a
//! change of a parent for both, `place` is how both name objects in their indexes, `cache` how both keep
//! objects small, and `owners` which cached children each parent controls (both follow children by watch).

pub mod cache;
pub mod changes;
pub mod observe;
pub mod owners;
pub mod place;
pub mod poll;
pub mod watch;
