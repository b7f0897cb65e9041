//! The one per-object retry store both drivers use: consecutive failures back off exponentially (1s, 2s,
//! 4s ... 5 minutes, as controller-runtime's rate limiter does), and consecutive conflicts with someone
//! else's ConfigMap are looked at again more gently (1s ... [`CONFLICT_RECHECK_MAX`]), since the watch
//! driver hears of that ConfigMap going away but the poll driver has only its next look.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The longest wait before a Sample blocked by another's ConfigMap is looked at again: how long it may
/// take, once that ConfigMap is deleted, for the Sample to become Ready.
pub const CONFLICT_RECHECK_MAX: Duration = Duration::from_secs(10);

/// Exponential per-object backoff after `failures` failures in a row: 1s, 2s, 4s ... capped at 5 minutes.
pub fn failure_delay(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

/// The recheck delay after `n` conflicts in a row: 1s, 2s, 4s, 8s, then [`CONFLICT_RECHECK_MAX`].
pub fn conflict_delay(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(4)).min(CONFLICT_RECHECK_MAX)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    conflicts: u32,
    until: Instant,
}

/// Per-object (by uid) counts of failures and conflicts in a row, and when each object may be tried again.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Backoff {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Entry>) -> T) -> T {
        f(&mut self.entries.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn entry(entries: &mut HashMap<String, Entry>, uid: &str) -> Entry {
        entries.get(uid).copied().unwrap_or(Entry { failures: 0, conflicts: 0, until: Instant::now() })
    }

    /// Counts a failure and says how long to wait before trying again.
    pub fn failed(&self, uid: &str) -> Duration {
        self.with(|entries| {
            let mut entry = Self::entry(entries, uid);
            entry.failures += 1;
            entry.conflicts = 0;
            let delay = failure_delay(entry.failures);
            entry.until = Instant::now() + delay;
            entries.insert(uid.to_owned(), entry);
            delay
        })
    }

    /// Counts a conflict and says how long until the next look.
    pub fn conflicted(&self, uid: &str) -> Duration {
        self.with(|entries| {
            let mut entry = Self::entry(entries, uid);
            entry.failures = 0;
            entry.conflicts += 1;
            let delay = conflict_delay(entry.conflicts);
            entry.until = Instant::now() + delay;
            entries.insert(uid.to_owned(), entry);
            delay
        })
    }

    /// Nothing to wait for any more: the object is as it should be, or gone.
    pub fn clear(&self, uid: &str) {
        self.with(|entries| entries.remove(uid));
    }

    /// Whether the object must still wait before it is tried again.
    pub fn waiting(&self, uid: &str, now: Instant) -> bool {
        self.with(|entries| entries.get(uid).is_some_and(|entry| entry.until > now))
    }

    /// Forgets every object not in `present`, after a full list.
    pub fn retain(&self, present: &HashSet<String>) {
        self.with(|entries| entries.retain(|uid, _| present.contains(uid)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_double_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=10).map(|n| failure_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 256]);
        assert!(failure_delay(100) <= Duration::from_secs(300));
    }

    #[test]
    fn conflicts_are_rechecked_less_often_up_to_a_cap() {
        let delays: Vec<u64> = (1..=7).map(|n| conflict_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10, 10]);
    }

    #[test]
    fn the_store_counts_in_a_row_and_forgets() {
        let store = Backoff::default();
        assert_eq!(store.failed("a"), Duration::from_secs(1));
        assert_eq!(store.failed("a"), Duration::from_secs(2));
        assert!(store.waiting("a", Instant::now()));
        assert!(!store.waiting("a", Instant::now() + Duration::from_secs(3)));
        // A conflict starts its own count; a failure after it starts the failures again from one.
        assert_eq!(store.conflicted("a"), Duration::from_secs(1));
        assert_eq!(store.conflicted("a"), Duration::from_secs(2));
        assert_eq!(store.conflicted("a"), Duration::from_secs(4));
        assert_eq!(store.failed("a"), Duration::from_secs(1));
        assert_eq!(store.conflicted("a"), Duration::from_secs(1), "a conflict after a failure counts from one");
        store.failed("b");
        store.retain(&HashSet::from(["a".to_owned()]));
        assert!(!store.waiting("b", Instant::now()));
        store.failed("a");
        store.clear("a");
        assert!(!store.waiting("a", Instant::now()));
    }
}
