//! When each member's Lease renewals arrive, as a watch of the ring's Leases shows them.
//!
//! Members are judged from lists of the ring's Leases (`coordinator::Members`), and a renewal is dated
//! from when it is first seen: a list every retry period sees it up to a retry period after it was
//! written, so a member that dies is given up, and its parents served again, up to that much later. The
//! watch sees each renewal as it is written. Its sightings only ever date a record a list shows too, so
//! nothing is decided from the watch alone: a watch that falls behind or breaks dates renewals later,
//! as the lists do, never earlier than they were written (an event is sent once its write is stored).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::cluster::scope;
use crate::controller::rules::shard::{RING_LABEL, lease_prefix};

/// A Lease's holder (none when empty), renew time and duration: a new value is a renewal, a release or a
/// takeover.
pub type Record = (Option<String>, Option<MicroTime>, Option<i32>);

/// The member a Lease of the ring is for (its name after `<ring>.`), and its record.
pub fn record_of(lease: &Lease, prefix: &str) -> Option<(String, Record)> {
    let member = lease.metadata.name.as_deref()?.strip_prefix(prefix)?.to_owned();
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty());
    Some((member, (holder, spec.and_then(|s| s.renew_time.clone()), spec.and_then(|s| s.lease_duration_seconds))))
}

/// The latest record of each member's Lease, and when it was first seen. Stops watching when dropped.
#[derive(Debug)]
pub struct Renewals {
    seen: Arc<Mutex<Sightings>>,
    watch: AbortHandle,
}

/// By member: its Lease's latest record and when it was first seen.
#[derive(Debug, Default)]
struct Sightings(HashMap<String, (Record, Instant)>);

impl Sightings {
    fn saw(&mut self, member: String, record: Record, now: Instant) {
        match self.0.get(&member) {
            Some((known, _)) if *known == record => {}
            _ => {
                self.0.insert(member, (record, now));
            }
        }
    }

    fn sighted(&self, member: &str, record: &Record) -> Option<Instant> {
        self.0.get(member).filter(|(known, _)| known == record).map(|(_, at)| *at)
    }
}

impl Renewals {
    /// Watches the Leases of `ring` in `namespace` from now on, in a task of its own.
    pub fn follow(client: Client, namespace: &str, ring: &str) -> Self {
        let api: Api<Lease> = scope::api(client, Some(namespace));
        let config = watcher::Config::default().labels(&format!("{RING_LABEL}={ring}"));
        let prefix = lease_prefix(ring);
        let seen = Arc::new(Mutex::new(Sightings::default()));
        let sightings = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let now = Instant::now();
                let mut seen = sightings.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                match event {
                    Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                        if let Some((member, record)) = record_of(&lease, &prefix) {
                            seen.saw(member, record, now);
                        }
                    }
                    Ok(watcher::Event::Delete(lease)) => {
                        if let Some((member, _)) = record_of(&lease, &prefix) {
                            seen.0.remove(&member);
                        }
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                    // Not allowed (RBAC from before the watch): the lists date the renewals, as they did.
                    Err(
                        watcher::Error::InitialListFailed(kube::Error::Api(status))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(status)),
                    ) if status.code == 403 => {
                        tracing::warn!(
                            "cannot watch the ring's Leases ({}); a member that dies is given up up to a retry \
                             period later (grant watch on leases: manifests/sharded/rbac.yaml)",
                            status.message
                        );
                        return;
                    }
                    // Retried with backoff; meanwhile the lists date the renewals.
                    Err(err) => tracing::debug!("watching the ring's Leases: {err}"),
                }
            }
        });
        Renewals { seen, watch: task.abort_handle() }
    }

    /// When `member`'s Lease was first seen holding `record`, if that is still its latest record seen.
    pub fn sighted(&self, member: &str, record: &Record) -> Option<Instant> {
        self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).sighted(member, record)
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(holder: &str, renewed: i64) -> Record {
        let at = k8s_openapi::jiff::Timestamp::from_second(renewed).unwrap();
        (Some(holder.to_owned()), Some(MicroTime(at)), Some(15))
    }

    #[test]
    fn a_record_is_dated_from_its_first_sighting_and_only_while_it_is_the_latest() {
        let start = Instant::now();
        let later = |s: u64| start + Duration::from_secs(s);
        let mut seen = Sightings::default();
        seen.saw("a".into(), record("a_1", 1), start);
        seen.saw("a".into(), record("a_1", 1), later(1));
        assert_eq!(seen.sighted("a", &record("a_1", 1)), Some(start), "seen again: still dated from the first");
        seen.saw("a".into(), record("a_1", 3), later(2));
        assert_eq!(seen.sighted("a", &record("a_1", 3)), Some(later(2)));
        assert_eq!(seen.sighted("a", &record("a_1", 1)), None, "an older record is not dated by a newer sighting");
        assert_eq!(seen.sighted("a", &record("a_2", 3)), None, "nor another holder's");
        assert_eq!(seen.sighted("b", &record("b_1", 1)), None);
    }
}
