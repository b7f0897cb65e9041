//! `--once` with the watch driver: the parents of the first full list are the work, and the driver stops
//! when each of them has been reconciled to where it rests, with the ones that are not Ready and why. A
//! parent rests once a reconcile finds it Ready, or writes nothing: one that wrote and is not Ready yet
//! (a graph whose next resource waits for the one just created) is triggered again by its own writes and
//! looked at again, up to [`PASSES`] times.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::controller::drive::place::Place;

use crate::controller::drive::PASSES;

pub struct Once {
    /// `None` until the parents have been listed; then each parent still to rest, with its reconciles
    /// so far.
    pending: Mutex<Option<HashMap<Place, u32>>>,
    not_ready: Mutex<Vec<String>>,
    done: watch::Sender<bool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Once {
    pub fn new() -> Self {
        Once { pending: Mutex::new(None), not_ready: Mutex::new(Vec::new()), done: watch::channel(false).0 }
    }

    /// Turns true once every parent of the first list has been reconciled.
    pub fn done(&self) -> watch::Receiver<bool> {
        self.done.subscribe()
    }

    /// The parents listed: the first list is the work; later relists add nothing.
    pub fn listed(&self, parents: &[Place]) {
        let mut pending = lock(&self.pending);
        if pending.is_none() {
            *pending = Some(parents.iter().map(|p| (p.clone(), 0)).collect());
            if parents.is_empty() {
                self.done.send_replace(true);
            }
        }
    }

    /// A reconcile of `parent` ended, not Ready for `reason` if given, having `wrote` or not. The one
    /// it rests at counts.
    pub fn finished(&self, parent: &Place, not_ready: Option<String>, wrote: bool) {
        let mut pending = lock(&self.pending);
        let Some(pending) = pending.as_mut() else { return };
        let Some(passes) = pending.get_mut(parent) else { return };
        *passes += 1;
        if not_ready.is_some() && wrote && *passes < PASSES {
            return;
        }
        pending.remove(parent);
        if let Some(reason) = not_ready {
            lock(&self.not_ready).push(format!("{parent} ({reason})"));
        }
        if pending.is_empty() {
            self.done.send_replace(true);
        }
    }

    /// The parents found not Ready, with why.
    pub fn not_ready(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.not_ready))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(name: &str) -> Place {
        Place::new("ns", name)
    }

    #[test]
    fn done_once_every_parent_of_the_first_list_is_reconciled() {
        let once = Once::new();
        let done = once.done();
        once.finished(&parent("early"), Some("before the list".into()), false);
        once.listed(&[parent("a"), parent("b")]);
        once.listed(&[parent("a"), parent("b"), parent("c")]);
        once.finished(&parent("a"), Some("Broken".into()), false);
        assert!(!*done.borrow());
        once.finished(&parent("a"), None, false);
        once.finished(&parent("b"), None, true);
        assert!(*done.borrow());
        assert_eq!(once.not_ready(), ["ns/a (Broken)"], "a parent at rest counts once");
    }

    #[test]
    fn a_parent_that_wrote_and_is_not_ready_is_looked_at_again() {
        let once = Once::new();
        let done = once.done();
        once.listed(&[parent("graph"), parent("stuck")]);
        once.finished(&parent("graph"), Some("waiting for config".into()), true);
        once.finished(&parent("graph"), None, true);
        for _ in 0..PASSES {
            assert!(!*done.borrow());
            once.finished(&parent("stuck"), Some("ever changing".into()), true);
        }
        assert!(*done.borrow());
        assert_eq!(once.not_ready(), ["ns/stuck (ever changing)"]);
    }

    #[test]
    fn nothing_listed_is_done_at_once() {
        let once = Once::new();
        once.listed(&[]);
        assert!(*once.done().borrow());
    }
}
