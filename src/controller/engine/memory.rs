//! What the engine remembers of each parent between reconciles, behind one handle: retry timing
//! (`backoff`), the objects in its way (`conflicts`), the statuses it wrote (`written`), its customize
//! answer and related objects (`related`), when its children were last looked for whatever their shard
//! label (`swept`), which parents this process handed over (`released`), the version its own last
//! write to each left (`own_writes`), and the failure last logged for each (`said`). The drivers reach
//! it only through the methods here: what a reconcile's end teaches the retry store, whether a parent
//! waits, which parents an object concerns, and forgetting a parent that is gone.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::backoff::Backoff;
use super::conflicts::{Conflicts, NamespacedName};
use super::related::Related;
use super::written::WrittenStatuses;
use crate::controller::rules::children::ChildKey;
use crate::controller::rules::next::Retry;
use crate::controller::rules::shard::read_before;

/// When a parent this process holds had its children looked for whatever member they name (`handover`),
/// each time by when the look's list was sent; none yet is no entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Swept {
    /// The first look, when it was taken in.
    pub taken: Instant,
    /// The latest look.
    pub last: Instant,
    /// A stray list sent then showed one of its children labelled for no live member (`strays`).
    pub stray: Option<Instant>,
}

impl Swept {
    /// Whether it is to be looked for again: once a stray list showed a child the last look may not
    /// have, and once `again` after it was taken in unless a look was made since then.
    pub fn due(&self, again: Duration) -> bool {
        self.stray_unseen() || self.last < self.taken + again && self.taken.elapsed() >= again
    }

    /// Whether a stray list showed one of its children after its latest look.
    fn stray_unseen(&self) -> bool {
        self.stray.is_some_and(|stray| stray > self.last)
    }

    /// A look whose list was sent at `since` went through.
    pub fn looked(&mut self, since: Instant) {
        self.last = self.last.max(since);
        if self.stray.is_some_and(|stray| stray <= self.last) {
            self.stray = None;
        }
    }
}

pub struct Memory {
    pub(super) retry: Backoff,
    pub(super) conflicts: Conflicts,
    pub(super) written: WrittenStatuses,
    pub(super) related: Related,
    pub(super) swept: Mutex<HashMap<String, Swept>>,
    /// In a shard ring: the parents this process handed over, each with the resourceVersion its release
    /// left, so that a driver's copy from before the release is not written from (`handover`).
    pub(super) released: Mutex<HashMap<String, String>>,
    /// The resourceVersion this process's last write to each parent left (its status, labels and
    /// annotations, finalizer), until a driver's copy as new arrives (`behind_own_write`), and whether a
    /// reconcile was put off until then.
    own_writes: Mutex<HashMap<String, OwnWrite>>,
    /// The failure last logged for each parent, and when: the same failure again is not worth a warning
    /// at every retry (a Secret that is wrong stays wrong until someone fixes it).
    said: Mutex<HashMap<String, (String, Instant)>>,
}

struct OwnWrite {
    version: String,
    put_off: bool,
}

/// A failure that keeps coming is said again after this long, so that it does not go quiet for ever.
const SAY_AGAIN: Duration = Duration::from_secs(600);

impl Memory {
    pub(super) fn new(related: Related) -> Self {
        Memory {
            retry: Backoff::default(),
            conflicts: Conflicts::default(),
            written: WrittenStatuses::default(),
            related,
            swept: Mutex::default(),
            released: Mutex::default(),
            own_writes: Mutex::default(),
            said: Mutex::default(),
        }
    }

    /// A write of this process to the parent with `uid` left it at `version`.
    pub(super) fn wrote(&self, uid: &str, version: Option<&str>) {
        if let Some(version) = version {
            let write = OwnWrite { version: version.to_owned(), put_off: false };
            self.own_writes.lock().unwrap_or_else(|e| e.into_inner()).insert(uid.to_owned(), write);
        }
    }

    /// Whether a copy of the parent with `uid` at `version` was read before this process's last write to
    /// it. A driver's cache can hand a reconcile such a copy after the write, and what it then decides
    /// from the copy is wrong without a sign of it: a status the copy already shows is not written,
    /// though the write changed it since, and the event of a status-only change (the write itself)
    /// triggers nothing when status changes are ignored. A copy as new as the write, or newer, ends
    /// the memory. `put_off`: a behind copy's reconcile is put off until the copy that ends the memory
    /// arrives, which `seen` then says is due.
    pub(super) fn behind_own_write(&self, uid: &str, version: Option<&str>, put_off: bool) -> bool {
        let mut own = self.own_writes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(written) = own.get_mut(uid) else { return false };
        let behind = read_before(version, &written.version);
        match behind {
            true => written.put_off |= put_off,
            false => drop(own.remove(uid)),
        }
        behind
    }

    /// A driver saw the parent with `uid` at `version`: the memory of this process's last write to it
    /// ends if this is as new (it is kept only while a copy from before the write may still come).
    /// True when a reconcile was put off for this copy: it is due now, even if the copy's only change is
    /// the write's own status, which a driver ignoring status changes would not trigger on. Else it
    /// waited for its retry (200 ms), as a kro instance's next wave did after each status it wrote.
    pub fn seen(&self, uid: &str, version: Option<&str>) -> bool {
        let mut own = self.own_writes.lock().unwrap_or_else(|e| e.into_inner());
        match own.get(uid) {
            Some(written) if !read_before(version, &written.version) => own.remove(uid).is_some_and(|w| w.put_off),
            _ => false,
        }
    }

    /// Whether the failure `text` of the parent with `uid` is worth a warning: not when it is the one
    /// said last for it, less than [`SAY_AGAIN`] ago.
    pub fn worth_saying(&self, uid: &str, text: &str) -> bool {
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((last, at)) = said.get(uid)
            && last == text
            && at.elapsed() < SAY_AGAIN
        {
            return false;
        }
        said.insert(uid.to_owned(), (text.to_owned(), Instant::now()));
        true
    }

    /// Whether a stray list showed a child of the parent with `uid` that no look has seen since.
    pub fn stray_found(&self, uid: &str) -> bool {
        let swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
        swept.get(uid).is_some_and(Swept::stray_unseen)
    }

    /// The retry store learns how a reconcile of the parent with `uid` ended; after a failure or a
    /// conflict, how long until it is tried again. The one place that counts failures and conflicts.
    pub fn learn(&self, uid: &str, retry: Retry) -> Option<Duration> {
        match retry {
            Retry::Clear => {
                self.retry.clear(uid);
                self.said.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
                None
            }
            Retry::Conflicted => Some(self.retry.conflicted(uid)),
            Retry::Failed => Some(self.retry.failed(uid)),
        }
    }

    /// Whether the parent with `uid` must still wait before it is tried again.
    pub fn waiting(&self, uid: &str, now: tokio::time::Instant) -> bool {
        self.retry.waiting(uid, now)
    }

    /// After a full list: the retry timing of parents not in `present` is forgotten.
    pub fn retain(&self, present: &HashSet<String>) {
        self.retry.retain(present);
        self.own_writes.lock().unwrap_or_else(|e| e.into_inner()).retain(|uid, _| present.contains(uid));
        self.said.lock().unwrap_or_else(|e| e.into_inner()).retain(|uid, _| present.contains(uid));
    }

    /// The parents whose children `key` is in the way of.
    pub fn blocked_by(&self, key: &ChildKey) -> Vec<NamespacedName> {
        self.conflicts.blocked_by(key)
    }

    /// The customize answers and related objects, which the drivers follow.
    pub fn related(&self) -> &Related {
        &self.related
    }

    /// The parent with this uid is gone: everything kept for it is forgotten.
    pub fn forget(&self, parent_uid: &str) {
        self.swept.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
        self.released.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
        self.own_writes.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
        self.said.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
        self.written.forget(parent_uid);
        self.retry.clear(parent_uid);
        self.conflicts.forget(parent_uid);
        self.related.forget(parent_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::rules::Version;

    #[test]
    fn a_copy_older_than_the_own_last_write_is_behind_until_one_as_new_arrives() {
        let memory = Memory::new(Related::new(Version::V1));
        assert!(!memory.behind_own_write("a", Some("5"), false), "nothing written");
        memory.wrote("a", Some("12"));
        assert!(memory.behind_own_write("a", Some("11"), false), "read before the write");
        assert!(memory.behind_own_write("a", Some("9"), false), "compared as numbers");
        assert!(!memory.behind_own_write("a", Some("12"), false), "the write itself");
        assert!(!memory.behind_own_write("a", Some("11"), false), "the memory ended with it");
        memory.wrote("b", Some("7"));
        memory.forget("b");
        assert!(!memory.behind_own_write("b", Some("6"), false), "forgotten with the parent");
        memory.wrote("c", Some("20"));
        assert!(!memory.seen("c", Some("19")), "an older copy seen ends nothing");
        assert!(memory.behind_own_write("c", Some("19"), false));
        assert!(!memory.seen("c", Some("21")), "no reconcile waited for it");
        assert!(memory.own_writes.lock().unwrap().is_empty(), "a newer one seen ends the memory");
    }

    #[test]
    fn a_reconcile_put_off_for_the_own_write_is_due_when_the_write_is_seen() {
        let memory = Memory::new(Related::new(Version::V1));
        memory.wrote("a", Some("12"));
        assert!(memory.behind_own_write("a", Some("11"), true), "put off");
        assert!(!memory.seen("a", Some("11")), "the same old copy again");
        assert!(memory.seen("a", Some("12")), "the write's own copy: due now");
        assert!(!memory.seen("a", Some("13")), "once");
        // A new write starts over: what was put off before it was reconciled by it.
        memory.wrote("b", Some("5"));
        assert!(memory.behind_own_write("b", Some("4"), true));
        memory.wrote("b", Some("6"));
        assert!(!memory.seen("b", Some("6")));
    }

    #[test]
    fn a_parent_is_looked_for_once_more_a_while_after_it_was_taken_in_and_then_only_after_a_stray() {
        let again = Duration::from_secs(10);
        let now = Instant::now();
        let ago = |secs| now.checked_sub(Duration::from_secs(secs)).expect("the clock has run that long");
        let mut swept = Swept { taken: now, last: now, stray: None };
        assert!(!swept.due(again), "just taken in");
        swept = Swept { taken: ago(20), last: ago(20), stray: None };
        assert!(swept.due(again), "taken in longer ago than `again`");
        swept.looked(ago(15));
        assert!(swept.due(again), "a look less than `again` after the first does not count as the second");
        swept.looked(now);
        assert!(!swept.due(again), "looked for twice");
        swept.stray = Some(ago(1));
        assert!(!swept.due(again), "a stray list sent before the latest look");
        swept.stray = Some(now + Duration::from_millis(1));
        assert!(swept.due(again), "a stray list sent after it");
        swept.looked(now);
        assert!(swept.due(again), "a look sent before that stray list leaves it due");
        swept.looked(now + Duration::from_millis(2));
        assert!(!swept.due(again) && swept.stray.is_none(), "one sent after it ends it");
    }

    #[test]
    fn the_same_failure_is_said_once_until_it_changes_or_the_parent_recovers() {
        let memory = Memory::new(Related::new(Version::V1));
        assert!(memory.worth_saying("a", "clientTLS: Secret n/s key \"tls.crt\": bad"));
        assert!(!memory.worth_saying("a", "clientTLS: Secret n/s key \"tls.crt\": bad"));
        // Another parent, or another failure, is said.
        assert!(memory.worth_saying("b", "clientTLS: Secret n/s key \"tls.crt\": bad"));
        assert!(memory.worth_saying("a", "hook answered HTTP 500"));
        // After a success, the failure is news again.
        memory.learn("a", Retry::Clear);
        assert!(memory.worth_saying("a", "hook answered HTTP 500"));
        memory.forget("a");
        assert!(memory.worth_saying("a", "hook answered HTTP 500"));
    }
}
