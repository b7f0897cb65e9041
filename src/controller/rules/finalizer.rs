//! Where a parent stands with samplectl's finalizer, from three facts: whether this controller finalizes
//! (`--finalize`), whether the parent carries the finalizer, and whether it is being deleted. The engine
//! takes the step and then syncs, or stops.

/// The finalizer `--finalize` puts on each parent.
pub const FINALIZER: &str = "samplectl.io/finalizer";

/// What to do with the finalizer before (or instead of) syncing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sync as usual.
    Sync,
    /// Put the finalizer on, then sync, so that the hook sees the parent's deletion.
    AddThenSync,
    /// Being deleted and holding the finalizer: sync with `finalizing: true` until the hook says done.
    Finalize,
    /// Left by an earlier run with `--finalize`: without it nothing would ever take it off. Take it off,
    /// then sync.
    RemoveThenSync,
    /// The same, on a parent being deleted: take it off and stop.
    RemoveThenStop,
    /// Being deleted, and nothing (more) for samplectl to do: garbage collection removes the children.
    Stop,
}

pub fn step(finalize: bool, holds_finalizer: bool, deleting: bool) -> Step {
    match (finalize, holds_finalizer, deleting) {
        (true, true, true) => Step::Finalize,
        (true, false, true) => Step::Stop,
        (true, false, false) => Step::AddThenSync,
        (true, true, false) => Step::Sync,
        (false, true, true) => Step::RemoveThenStop,
        (false, true, false) => Step::RemoveThenSync,
        (false, false, true) => Step::Stop,
        (false, false, false) => Step::Sync,
    }
}

/// Whether a parent's finalizers hold samplectl's.
pub fn holds(finalizers: Option<&[String]>) -> bool {
    finalizers.into_iter().flatten().any(|f| f == FINALIZER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_has_its_step() {
        // (finalize, holds, deleting) → step
        let table = [
            ((true, false, false), Step::AddThenSync),
            ((true, true, false), Step::Sync),
            ((true, true, true), Step::Finalize),
            ((true, false, true), Step::Stop),
            ((false, true, false), Step::RemoveThenSync),
            ((false, true, true), Step::RemoveThenStop),
            ((false, false, true), Step::Stop),
            ((false, false, false), Step::Sync),
        ];
        for ((finalize, holds, deleting), expected) in table {
            assert_eq!(
                step(finalize, holds, deleting),
                expected,
                "finalize={finalize} holds={holds} deleting={deleting}"
            );
        }
    }

    #[test]
    fn only_samplectls_finalizer_counts() {
        assert!(!holds(None));
        assert!(!holds(Some(&["example.com/other".to_owned()])));
        assert!(holds(Some(&["example.com/other".to_owned(), FINALIZER.to_owned()])));
    }
}
