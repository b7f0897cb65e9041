//! The drivers, which decide *when* a parent is reconciled: `poll` lists the parents every interval and
//! reconciles what changed; `watch` follows every change through cached watches. `observe` is the driver
//! for a resource with no sync at all: it reports changes and writes nothing. `changes` says what counts as a
//! change of a parent for both, `place` is how both name objects in their indexes, `cache` how both keep
//! objects small, and `owners` which cached children each parent controls (both follow children by watch).
//! Both take the end of a reconcile the same way (`conclude`).

pub mod cache;
pub mod changes;
pub mod events;
pub mod observe;
pub mod owners;
pub mod place;
pub mod poll;
pub mod watch;

use std::time::Duration;

use crate::controller::engine::{Context, ReconcileError};
use crate::controller::rules::next::{Again, Done, after};

/// The most reconciles `--once` gives one parent, with either driver: one that wrote something and is
/// not Ready yet is looked at again, up to this many times.
pub const PASSES: u32 = 10;

/// What a driver does after one reconcile, once the retry store has learnt of it.
#[derive(Debug)]
pub struct Concluded {
    /// Look again after this long without a change (a retry, a sync's resync, a finalizer's recheck);
    /// `None`: at the driver's resync.
    pub again: Option<Duration>,
    /// The inputs it was reconciled from need no new look before `again` (`rules::next::Next::settled`).
    pub settled: bool,
    /// Not Ready, and why (`--once` names it).
    pub not_ready: Option<String>,
}

/// The end of a reconcile of the parent with `uid`, as both drivers take it: `rules::next` decides what
/// follows, the retry store learns it (the only place a reconcile's end is counted), and a failure is
/// logged with when it is tried again (at warning level the first time, then only when it changes).
pub fn conclude(ctx: &Context, uid: &str, result: &Result<Done, ReconcileError>) -> Concluded {
    let next = after(result.as_ref().map_err(|err| format!("{}: {}", err.action, err.message)));
    let delay = ctx.memory().learn(uid, next.retry);
    if let (Err(err), Some(delay)) = (result, delay) {
        // The same failure at every retry is said once (and again every ten minutes while it lasts).
        let text = err.to_string();
        match ctx.memory().worth_saying(uid, &text) {
            true => tracing::warn!("{text}; retrying in {}s", delay.as_secs()),
            false => tracing::debug!("{text}; retrying in {}s", delay.as_secs()),
        }
    }
    let again = match next.again {
        Again::Resync(after) => after,
        Again::After(after) => Some(after),
        Again::Backoff => delay,
    };
    Concluded { again, settled: next.settled, not_ready: next.not_ready }
}
