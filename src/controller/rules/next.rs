//! What follows one reconcile of a parent, the same for both drivers: what the retry store learns, when
//! the parent is looked at again without a change, whether the inputs it was reconciled from are settled,
//! and why it is not Ready. The drivers differ only in how they wait: the watch driver sets a timer
//! for `again`; the poll driver skips a settled parent's unchanged inputs until `again`, and an
//! unsettled one is looked at on its next tick unless the retry store says to wait.

use std::time::Duration;

use serde_json::Value;

use super::status::summary;

/// While a hook has not yet said `finalized`, how soon it is asked again when it gave no resyncAfterSeconds.
pub const FINALIZE_RECHECK: Duration = Duration::from_secs(5);

/// How one reconcile of a parent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Synced, and the status's Ready condition (if it has one) is True.
    Ready,
    /// Synced, and the status's Ready condition is False for a reason of the parent's own: the status says
    /// why, and this is the reason it gives. Not a failure to retry.
    NotReady(String),
    /// An object a child would be is someone else's; nothing will change that but a change to that
    /// object, which the watch driver hears of and the poll driver checks with backoff.
    Conflict(String),
    /// Being deleted, and nothing (more) for samplectl to do: garbage collection removes the children.
    Deleting,
    /// Being deleted, and the hook has not yet said it is done cleaning up.
    Finalizing,
    /// Not selected by the controller, and nothing of the controller's on it: left alone.
    Ignored,
}

/// An outcome, when the sync asked to be called again, and whether anything was written: a reconcile
/// that wrote nothing says its inputs already were what the parent wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub outcome: Outcome,
    pub resync_after: Option<Duration>,
    pub wrote: bool,
}

/// What the retry store learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The reconcile got through: failures and conflicts no longer count.
    Clear,
    /// Someone else's object is in the way: looked at again gently (1 s to 10 s).
    Conflicted,
    /// It failed: backed off (1 s to 5 minutes).
    Failed,
}

/// When the parent is looked at again if nothing changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// At the sync's `resyncAfterSeconds` if it gave one, else at the driver's resync.
    Resync(Option<Duration>),
    /// After this long: a finalize hook not done yet.
    After(Duration),
    /// After the retry store's delay.
    Backoff,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next {
    pub retry: Retry,
    pub again: Again,
    /// A good reconcile that wrote nothing: the same inputs need no new look before `again`. After a
    /// write the same inputs can come back (a child created, then deleted by someone else) and must be
    /// looked at again.
    pub settled: bool,
    /// Not Ready, and why (`--once` names it).
    pub not_ready: Option<String>,
}

/// How a reconcile that wrote (or kept) `status` ended: Ready unless its Ready condition is False, and a
/// conflict when that is because an object in the way of a child is someone else's.
pub fn outcome(status: &Value, conflicted: bool) -> Outcome {
    match summary(status) {
        Some(readiness) if !readiness.ready && conflicted => Outcome::Conflict(readiness.reason),
        Some(readiness) if !readiness.ready => Outcome::NotReady(readiness.reason),
        _ => Outcome::Ready,
    }
}

/// What follows a reconcile that ended as `ended` (a failure as the reason it gives).
pub fn after(ended: Result<&Done, String>) -> Next {
    let Done { outcome, resync_after, wrote } = match ended {
        Ok(done) => done,
        Err(reason) => {
            return Next { retry: Retry::Failed, again: Again::Backoff, settled: false, not_ready: Some(reason) };
        }
    };
    let synced = |not_ready: Option<&String>| Next {
        retry: Retry::Clear,
        again: Again::Resync(*resync_after),
        settled: !wrote,
        not_ready: not_ready.cloned(),
    };
    match outcome {
        Outcome::Ready | Outcome::Deleting | Outcome::Ignored => synced(None),
        Outcome::NotReady(reason) => synced(Some(reason)),
        Outcome::Conflict(reason) => Next {
            retry: Retry::Conflicted,
            again: Again::Resync(*resync_after),
            settled: false,
            not_ready: Some(reason.clone()),
        },
        Outcome::Finalizing => Next {
            retry: Retry::Clear,
            again: Again::After(resync_after.unwrap_or(FINALIZE_RECHECK)),
            settled: false,
            not_ready: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(outcome: Outcome, resync_after: Option<u64>, wrote: bool) -> Done {
        Done { outcome, resync_after: resync_after.map(Duration::from_secs), wrote }
    }

    #[test]
    fn a_good_reconcile_clears_the_retries_and_settles_only_if_it_wrote_nothing() {
        for outcome in [Outcome::Ready, Outcome::Deleting, Outcome::Ignored] {
            let quiet = after(Ok(&done(outcome.clone(), None, false)));
            assert_eq!(quiet, Next { retry: Retry::Clear, again: Again::Resync(None), settled: true, not_ready: None });
            let wrote = after(Ok(&done(outcome, Some(7), true)));
            assert_eq!((wrote.settled, wrote.again), (false, Again::Resync(Some(Duration::from_secs(7)))));
        }
        let not_ready = after(Ok(&done(Outcome::NotReady("Waiting".into()), None, false)));
        assert_eq!((not_ready.retry, not_ready.settled), (Retry::Clear, true));
        assert_eq!(not_ready.not_ready.as_deref(), Some("Waiting"), "not a failure, but named by --once");
    }

    #[test]
    fn a_conflict_is_rechecked_and_never_settled() {
        let next = after(Ok(&done(Outcome::Conflict("ConfigMapConflict".into()), None, false)));
        assert_eq!((next.retry, next.settled), (Retry::Conflicted, false));
        assert_eq!(next.not_ready.as_deref(), Some("ConfigMapConflict"));
    }

    #[test]
    fn finalizing_is_asked_again_soon_and_a_failure_backs_off() {
        let waiting = after(Ok(&done(Outcome::Finalizing, None, true)));
        assert_eq!((waiting.again, waiting.settled), (Again::After(FINALIZE_RECHECK), false));
        let asked = after(Ok(&done(Outcome::Finalizing, Some(2), false)));
        assert_eq!(asked.again, Again::After(Duration::from_secs(2)));
        let failed = after(Err("syncing: the hook exited 1".into()));
        assert_eq!(
            failed,
            Next {
                retry: Retry::Failed,
                again: Again::Backoff,
                settled: false,
                not_ready: Some("syncing: the hook exited 1".into())
            }
        );
    }

    #[test]
    fn the_status_written_says_how_the_reconcile_ended() {
        let ready = |flag: &str, reason: &str| serde_json::json!({"conditions": [{"type": "Ready", "status": flag, "reason": reason, "message": ""}]});
        assert_eq!(outcome(&ready("True", "Synced"), false), Outcome::Ready);
        assert_eq!(outcome(&serde_json::json!({"phase": "Up"}), true), Outcome::Ready, "no Ready condition");
        assert_eq!(outcome(&ready("False", "Waiting"), false), Outcome::NotReady("Waiting".into()));
        assert_eq!(outcome(&ready("False", "ConfigMapConflict"), true), Outcome::Conflict("ConfigMapConflict".into()));
    }
}
