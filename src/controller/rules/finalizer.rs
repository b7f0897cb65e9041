//! Where a parent stands with its controller's finalizer, from four facts: whether the controller
//! finalizes (`--finalize`, or a finalize hook), whether the parent carries the finalizer, whether it is
//! being deleted, and whether the controller's selector still takes it in. The engine takes the step and
//! then syncs, or stops.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The finalizer `--finalize` puts on each parent. A CompositeController's or DecoratorController's is
/// metacontroller's own name for it, so that either engine finishes what the other started.
pub const FINALIZER: &str = "samplectl.io/finalizer";

/// metacontroller's finalizer for the controller object `kind` (`CompositeController`,
/// `DecoratorController`) named `name`.
pub fn metacontroller_finalizer(kind: &str, name: &str) -> String {
    format!("metacontroller.io/{}-{name}", kind.to_lowercase())
}

/// A controller's finalizer: its name, and whether the controller puts it on its parents (a controller
/// that does not still takes its own off, should an earlier run have left it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalizer {
    pub name: String,
    pub enabled: bool,
}

/// What to do with the finalizer before (or instead of) syncing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sync as usual.
    Sync,
    /// Put the finalizer on, then sync, so that the hook sees the parent's deletion.
    AddThenSync,
    /// Being deleted (or no longer selected) and holding the finalizer: sync with `finalizing: true`
    /// until the hook says done.
    Finalize,
    /// Left by an earlier run that finalized: without it nothing would ever take it off. Take it off,
    /// then sync.
    RemoveThenSync,
    /// The same, on a parent being deleted or no longer selected: take it off and stop.
    RemoveThenStop,
    /// Being deleted, and nothing (more) for samplectl to do: garbage collection removes the children.
    Stop,
    /// Not selected (any more), and nothing of this controller's on it: not this controller's parent.
    Ignore,
}

/// The facts a step is decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The controller finalizes its parents.
    pub finalize: bool,
    /// The parent carries the controller's finalizer.
    pub carries: bool,
    pub deleting: bool,
    /// The controller's selector takes the parent in (always, without a selector).
    pub selected: bool,
}

pub fn step(facts: Facts) -> Step {
    let Facts { finalize, carries, deleting, selected } = facts;
    let leaving = deleting || !selected;
    match (finalize, carries, leaving) {
        (true, true, true) => Step::Finalize,
        (true, true, false) => Step::Sync,
        (true, false, false) => Step::AddThenSync,
        (false, true, true) => Step::RemoveThenStop,
        (false, true, false) => Step::RemoveThenSync,
        (_, false, true) if !selected => Step::Ignore,
        (_, false, true) => Step::Stop,
        (false, false, false) => Step::Sync,
    }
}

/// Whether a parent's finalizers hold `name`.
pub fn carries(finalizers: Option<&[String]>, name: &str) -> bool {
    finalizers.into_iter().flatten().any(|f| f == name)
}

/// Whether the garbage collector is deleting the object `meta` describes in the foreground, or orphaning
/// its children: then the children are its business, and nothing is written for them.
pub fn gc_finalizing(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
        && meta.finalizers.iter().flatten().any(|f| f == "foregroundDeletion" || f == "orphan")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_combination_has_its_step() {
        // (finalize, carries, deleting, selected) → step
        let table = [
            ((true, false, false, true), Step::AddThenSync),
            ((true, true, false, true), Step::Sync),
            ((true, true, true, true), Step::Finalize),
            ((true, false, true, true), Step::Stop),
            ((false, true, false, true), Step::RemoveThenSync),
            ((false, true, true, true), Step::RemoveThenStop),
            ((false, false, true, true), Step::Stop),
            ((false, false, false, true), Step::Sync),
            // No longer selected: finalized if it carries the finalizer, else not this controller's.
            ((true, true, false, false), Step::Finalize),
            ((true, true, true, false), Step::Finalize),
            ((false, true, false, false), Step::RemoveThenStop),
            ((true, false, false, false), Step::Ignore),
            ((false, false, false, false), Step::Ignore),
            ((false, false, true, false), Step::Ignore),
        ];
        for ((finalize, carries, deleting, selected), expected) in table {
            let facts = Facts { finalize, carries, deleting, selected };
            assert_eq!(step(facts), expected, "{facts:?}");
        }
    }

    #[test]
    fn only_the_named_finalizer_counts() {
        assert!(!carries(None, FINALIZER));
        assert!(!carries(Some(&["example.com/other".to_owned()]), FINALIZER));
        assert!(carries(Some(&["example.com/other".to_owned(), FINALIZER.to_owned()]), FINALIZER));
        assert_eq!(
            metacontroller_finalizer("CompositeController", "catset"),
            "metacontroller.io/compositecontroller-catset"
        );
    }

    #[test]
    fn children_are_the_garbage_collector_s_while_it_deletes_in_the_foreground_or_orphans() {
        let meta = |deleting: bool, finalizer: &str| ObjectMeta {
            deletion_timestamp: deleting
                .then(|| serde_json::from_value(serde_json::json!("2026-11-26T10:00:00Z")).unwrap()),
            finalizers: Some(vec![finalizer.to_owned()]),
            ..ObjectMeta::default()
        };
        assert!(gc_finalizing(&meta(true, "foregroundDeletion")));
        assert!(gc_finalizing(&meta(true, "orphan")));
        assert!(!gc_finalizing(&meta(true, "samplectl.io/finalizer")));
        assert!(!gc_finalizing(&meta(false, "foregroundDeletion")), "not being deleted yet");
    }
}
