//! `--once` with the watch driver: the parents of the first full list are the work, and the driver stops
//! when each of them has been reconciled once, with the ones that are not Ready and why.

use std::collections::HashSet;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::controller::drive::place::Place;

pub struct Once {
    /// `None` until the parents have been listed.
    pending: Mutex<Option<HashSet<Place>>>,
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
            *pending = Some(parents.iter().cloned().collect());
            if parents.is_empty() {
                self.done.send_replace(true);
            }
        }
    }

    /// A reconcile of `parent` ended, not Ready for `reason` if given. Only the first one counts.
    pub fn finished(&self, parent: &Place, not_ready: Option<String>) {
        let mut pending = lock(&self.pending);
        let Some(pending) = pending.as_mut() else { return };
        if let (true, Some(reason)) = (pending.remove(parent), not_ready) {
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
        once.finished(&parent("early"), Some("before the list".into()));
        once.listed(&[parent("a"), parent("b")]);
        once.listed(&[parent("a"), parent("b"), parent("c")]);
        once.finished(&parent("a"), Some("Broken".into()));
        assert!(!*done.borrow());
        once.finished(&parent("a"), None);
        once.finished(&parent("b"), None);
        assert!(*done.borrow());
        assert_eq!(once.not_ready(), ["ns/a (Broken)"], "only each first reconcile counts");
    }

    #[test]
    fn nothing_listed_is_done_at_once() {
        let once = Once::new();
        once.listed(&[]);
        assert!(*once.done().borrow());
    }
}
