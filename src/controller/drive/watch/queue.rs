//! The watch driver's work queue: which parents to reconcile next. Each parent is in it at most once,
//! and never handed out while its last reconcile runs (one triggered meanwhile goes in again when that
//! one ends). Two lanes, as controller-runtime's priority queue has: a change (a parent or a child
//! created, changed or deleted, a retry coming due) goes before the sweep (every parent after a list or
//! relist, and the periodic resync), so that while 100,000 parents are looked at after a start, a Sample
//! created meanwhile waits for a reconcile slot, not for the sweep. Retries and a sync's own
//! `resyncAfterSeconds` wait in a timeline; the periodic resync is one sweep of every parent, not a
//! timer per parent.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::controller::drive::place::Place;

/// Which lane a parent waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Something about it changed, or a retry is due.
    Change,
    /// Everything is looked at again.
    Sweep,
}

#[derive(Default)]
pub struct Queue {
    change: VecDeque<Place>,
    sweep: VecDeque<Place>,
    /// The lane each waiting parent is in; a parent moved up to the change lane leaves a stale entry in
    /// the sweep lane, skipped when it comes up.
    waiting: HashMap<Place, Lane>,
    running: HashSet<Place>,
    /// Triggered while running: goes in again, in this lane, when its reconcile ends.
    again: HashMap<Place, Lane>,
    later: BTreeSet<(Instant, Place)>,
    due: HashMap<Place, Instant>,
}

impl Queue {
    /// `place` is to be reconciled, in `lane`. A retry it was waiting for is not needed any more: this
    /// reconcile's outcome decides the next.
    pub fn add(&mut self, place: Place, lane: Lane) {
        if let Some(at) = self.due.remove(&place) {
            self.later.remove(&(at, place.clone()));
        }
        if self.running.contains(&place) {
            let again = self.again.entry(place).or_insert(lane);
            if lane == Lane::Change {
                *again = Lane::Change;
            }
            return;
        }
        match self.waiting.get_mut(&place) {
            Some(Lane::Change) => {}
            Some(waiting) => {
                if lane == Lane::Change {
                    *waiting = Lane::Change;
                    self.change.push_back(place);
                }
            }
            None => {
                self.waiting.insert(place.clone(), lane);
                match lane {
                    Lane::Change => self.change.push_back(place),
                    Lane::Sweep => self.sweep.push_back(place),
                }
            }
        }
    }

    /// `place` is to be reconciled `after` from `now`, unless something brings it sooner.
    pub fn add_after(&mut self, place: Place, after: Duration, now: Instant) {
        let at = now + after;
        if let Some(&due) = self.due.get(&place) {
            if due <= at {
                return;
            }
            self.later.remove(&(due, place.clone()));
        }
        self.due.insert(place.clone(), at);
        self.later.insert((at, place));
    }

    /// Moves the retries due by `now` into the change lane; returns when the next one is due.
    pub fn wake(&mut self, now: Instant) -> Option<Instant> {
        while let Some((at, _)) = self.later.first() {
            if *at > now {
                return Some(*at);
            }
            let (_, place) = self.later.pop_first().expect("just seen");
            self.due.remove(&place);
            self.add(place, Lane::Change);
        }
        None
    }

    /// The parent `next` would hand out, left waiting.
    pub fn peek(&mut self) -> Option<&Place> {
        // Stale entries (moved up to the change lane, or handed out from it) are dropped on the way.
        while let Some(place) = self.change.front() {
            if self.waiting.get(place) == Some(&Lane::Change) {
                return self.change.front();
            }
            self.change.pop_front();
        }
        while let Some(place) = self.sweep.front() {
            if self.waiting.get(place) == Some(&Lane::Sweep) {
                return self.sweep.front();
            }
            self.sweep.pop_front();
        }
        None
    }

    /// The next parent to reconcile, now counted as running.
    pub fn next(&mut self) -> Option<Place> {
        let place = loop {
            let (place, lane) = match self.change.pop_front() {
                Some(place) => (place, Lane::Change),
                None => (self.sweep.pop_front()?, Lane::Sweep),
            };
            if self.waiting.get(&place) == Some(&lane) {
                break place;
            }
        };
        self.waiting.remove(&place);
        self.running.insert(place.clone());
        Some(place)
    }

    /// `place`'s reconcile ended.
    pub fn done(&mut self, place: &Place) {
        self.running.remove(place);
        if let Some(lane) = self.again.remove(place) {
            self.add(place.clone(), lane);
        }
        if self.waiting.is_empty() {
            // Let the lanes' memory go after a burst.
            self.change.clear();
            self.sweep.clear();
            self.change.shrink_to_fit();
            self.sweep.shrink_to_fit();
        }
    }

    /// How many parents wait (for the backlog metric).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str) -> Place {
        Place::new("ns", name)
    }

    fn drain(queue: &mut Queue) -> Vec<String> {
        let mut order = Vec::new();
        while let Some(place) = queue.next() {
            order.push(place.name.to_string());
            queue.done(&place);
        }
        order
    }

    #[test]
    fn a_change_goes_before_the_sweep_and_each_parent_comes_once() {
        let mut queue = Queue::default();
        for name in ["a", "b", "c"] {
            queue.add(p(name), Lane::Sweep);
        }
        queue.add(p("new"), Lane::Change);
        queue.add(p("c"), Lane::Change);
        queue.add(p("a"), Lane::Sweep);
        assert_eq!(queue.waiting(), 4);
        assert_eq!(drain(&mut queue), ["new", "c", "a", "b"]);
    }

    #[test]
    fn a_peek_shows_what_comes_next_and_leaves_it_waiting() {
        let mut queue = Queue::default();
        assert_eq!(queue.peek(), None);
        for name in ["a", "b"] {
            queue.add(p(name), Lane::Sweep);
        }
        queue.add(p("b"), Lane::Change);
        assert_eq!(queue.peek(), Some(&p("b")));
        assert_eq!(queue.peek(), Some(&p("b")), "still waiting");
        let b = queue.next().unwrap();
        assert_eq!(b, p("b"));
        // b's stale place in the sweep lane is passed over.
        assert_eq!(queue.peek(), Some(&p("a")));
        assert_eq!(queue.next(), Some(p("a")));
        assert_eq!(queue.peek(), None, "b runs, and was not triggered again");
        queue.done(&b);
        assert_eq!(queue.waiting(), 0);
    }

    #[test]
    fn a_parent_triggered_while_it_runs_comes_again_after_it_ends() {
        let mut queue = Queue::default();
        queue.add(p("a"), Lane::Sweep);
        let a = queue.next().unwrap();
        queue.add(p("a"), Lane::Sweep);
        queue.add(p("a"), Lane::Change);
        assert_eq!(queue.next(), None, "not while it runs");
        queue.add(p("b"), Lane::Sweep);
        queue.done(&a);
        assert_eq!(drain(&mut queue), ["a", "b"], "back in the change lane");
    }

    #[test]
    fn a_retry_waits_until_due_and_a_change_makes_it_unneeded() {
        let mut queue = Queue::default();
        let now = Instant::now();
        queue.add_after(p("a"), Duration::from_secs(10), now);
        queue.add_after(p("a"), Duration::from_secs(5), now);
        queue.add_after(p("a"), Duration::from_secs(20), now);
        queue.add_after(p("b"), Duration::from_secs(7), now);
        assert_eq!(queue.wake(now), Some(now + Duration::from_secs(5)), "the sooner retry is kept");
        assert_eq!(queue.next(), None);
        assert_eq!(queue.wake(now + Duration::from_secs(6)), Some(now + Duration::from_secs(7)));
        assert_eq!(drain(&mut queue), ["a"]);

        queue.add(p("b"), Lane::Change);
        assert_eq!(queue.wake(now + Duration::from_secs(60)), None, "b's retry went with the change");
        assert_eq!(drain(&mut queue), ["b"]);
    }
}
