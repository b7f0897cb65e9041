//! What `/healthz` and `/readyz` answer, kept up to date by the drivers and the election: alive while the
//! API server has not been out of reach (nor the Lease unrenewed) for longer than the lease duration;
//! ready when the API server answers now and the replica is either leading with its caches synced or a
//! healthy standby.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::requests::LastAnswer;
use crate::error::out_of_reach;

pub struct Health {
    /// How many controllers have not yet seen all their parents (poll: a full pass done; watch: the
    /// parents listed at start-up). One until told otherwise.
    unsynced: AtomicUsize,
    /// Waiting for the lease, with the election loop running: ready to take over.
    pub standby: AtomicBool,
    /// Since when the API server has been out of reach: a poll's list or a watch failed, and nothing has
    /// been answered since. An idle watch reports nothing, and is healthy.
    unreachable_since: Mutex<Option<Instant>>,
    /// Since when the Lease could not be read or renewed (failed, or no answer within the deadline),
    /// however the other requests fare.
    lease_failing_since: Mutex<Option<Instant>>,
    answered: LastAnswer,
    /// How long either may last before this replica is not alive any more, so that the kubelet restarts
    /// it: the lease duration, after which a standby would take over anyway.
    patience: Duration,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Health {
    pub fn new(patience: Duration, answered: LastAnswer) -> Self {
        Health {
            unsynced: AtomicUsize::new(1),
            standby: AtomicBool::new(false),
            unreachable_since: Mutex::new(None),
            lease_failing_since: Mutex::new(None),
            answered,
            patience,
        }
    }

    /// A list or a watch failed with `err`: if the API server did not answer (a 4xx is an answer: the
    /// server is there, it refused), the first such failure since it last answered starts the clock.
    pub fn failed(&self, err: &kube::Error) {
        if out_of_reach(err) {
            self.unreachable();
        }
    }

    /// A list or a watch got no answer; the first failure since the API server last answered starts the
    /// clock.
    pub fn unreachable(&self) {
        let mut since = lock(&self.unreachable_since);
        if since.is_none() || self.answered_since(*since) {
            *since = Some(Instant::now());
        }
    }

    /// A Lease request succeeded (`true`) or failed or timed out (`false`).
    pub fn lease(&self, ok: bool) {
        let mut since = lock(&self.lease_failing_since);
        match ok {
            true => *since = None,
            false => {
                since.get_or_insert_with(Instant::now);
            }
        }
    }

    fn answered_since(&self, since: Option<Instant>) -> bool {
        matches!((self.answered.get(), since), (Some(answer), Some(since)) if answer > since)
    }

    /// How long the API server has been out of reach, if it is.
    fn out_of_reach_for(&self) -> Option<Duration> {
        let since = *lock(&self.unreachable_since);
        if self.answered_since(since) {
            return None;
        }
        since.map(|s| s.elapsed())
    }

    /// `/healthz`: an error once the API server has been out of reach, or the Lease not renewed, for
    /// longer than `patience`.
    pub fn alive(&self) -> Result<(), String> {
        let too_long = |gone: Option<Duration>| gone.filter(|g| *g > self.patience).map(|g| g.as_secs());
        let patience = self.patience.as_secs();
        if let Some(secs) = too_long(lock(&self.lease_failing_since).map(|s| s.elapsed())) {
            return Err(format!(
                "the Lease has not been renewed or read for {secs}s (the lease duration is {patience}s)"
            ));
        }
        if let Some(secs) = too_long(self.out_of_reach_for()) {
            return Err(format!(
                "the API server has been out of reach for {secs}s (the lease duration is {patience}s)"
            ));
        }
        Ok(())
    }

    /// `controllers` run in this process; /readyz waits for each one's first full list.
    pub fn expect(&self, controllers: usize) {
        self.unsynced.store(controllers, Ordering::Relaxed);
    }

    /// `controllers` more were started (`--from-cluster`, as controller objects appear).
    pub fn expect_more(&self, controllers: usize) {
        self.unsynced.fetch_add(controllers, Ordering::Relaxed);
    }

    /// One more controller has seen all its parents; each calls this once.
    pub fn synced(&self) {
        let _ = self.unsynced.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub fn ready(&self) -> bool {
        self.out_of_reach_for().is_none()
            && lock(&self.lease_failing_since).is_none()
            && (self.unsynced.load(Ordering::Relaxed) == 0 || self.standby.load(Ordering::Relaxed))
    }

    /// What /readyz answers when ready: a standby says so, since the kubelet's Ready alone does not tell
    /// the replica that would take over from the one that works.
    pub fn ready_words(&self) -> &'static str {
        match self.standby.load(Ordering::Relaxed) {
            true => "ok: standing by for the lease",
            false => "ok",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Duration = Duration::from_millis(50);

    #[test]
    fn alive_until_out_of_reach_for_longer_than_patience() {
        let health = Health::new(SHORT, LastAnswer::default());
        assert!(health.alive().is_ok());
        health.unreachable();
        assert!(health.alive().is_ok(), "a failure is not yet a dead replica");
        std::thread::sleep(Duration::from_millis(30));
        health.unreachable();
        std::thread::sleep(Duration::from_millis(30));
        assert!(health.alive().unwrap_err().contains("out of reach"), "the clock runs from the first failure");
    }

    #[test]
    fn any_answer_after_the_failure_means_within_reach() {
        let answered = LastAnswer::default();
        let health = Health::new(SHORT, answered.clone());
        health.synced();
        health.unreachable();
        assert!(!health.ready());
        std::thread::sleep(Duration::from_millis(60));
        answered.record(http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(health.alive().is_err(), "a 503 is not an answer");
        answered.record(http::StatusCode::NOT_FOUND);
        assert!(health.alive().is_ok() && health.ready());
        health.unreachable();
        std::thread::sleep(Duration::from_millis(60));
        assert!(health.alive().is_err(), "a new failure after the answer starts a new clock");
    }

    #[test]
    fn a_refusal_is_an_answer_and_a_5xx_or_no_answer_is_not() {
        let api = |code: u16| kube::Error::Api(Box::new(kube::core::Status::failure("x", "y").with_code(code)));
        let health = Health::new(SHORT, LastAnswer::default());
        health.synced();
        for refused in [403, 404, 410, 429] {
            health.failed(&api(refused));
            assert!(health.ready(), "{refused} is the server answering");
        }
        health.failed(&api(503));
        assert!(!health.ready());
        let health = Health::new(SHORT, LastAnswer::default());
        health.failed(&kube::Error::LinesCodecMaxLineLengthExceeded);
        assert!(health.out_of_reach_for().is_some(), "a transport failure is no answer");
    }

    #[test]
    fn ready_once_every_controller_has_listed() {
        let answered = LastAnswer::default();
        let health = Health::new(SHORT, answered.clone());
        health.expect(2);
        health.synced();
        assert!(!health.ready(), "one of two");
        health.synced();
        assert!(health.ready());
        health.synced();
        assert!(health.ready(), "never below zero");
        assert_eq!(health.ready_words(), "ok");
    }

    #[test]
    fn a_lease_not_renewed_is_not_alive_whatever_else_answers() {
        let answered = LastAnswer::default();
        let health = Health::new(SHORT, answered.clone());
        health.standby.store(true, Ordering::Relaxed);
        health.lease(false);
        assert!(!health.ready() && health.alive().is_ok());
        std::thread::sleep(Duration::from_millis(60));
        answered.record(http::StatusCode::OK);
        assert!(health.alive().unwrap_err().contains("Lease"));
        health.lease(true);
        assert!(health.alive().is_ok() && health.ready());
        assert_eq!(health.ready_words(), "ok: standing by for the lease");
    }
}
