//! Events leave through a bounded queue drained by one background task, as client-go's event broadcaster
//! does: a reconcile never waits for them, so recording that a ConfigMap was created does not hold a
//! concurrency slot for another round trip, and a slow events API never slows reconciling. When the queue
//! is full (a burst of thousands of creates), an event is dropped, as client-go drops them, rather than
//! held in memory.
//!
//! The same event again (same object, type, reason and note) within six minutes becomes a series on the
//! first one (`series.count`, `lastObservedTime`), as client-go's and kube's recorders do. Written here
//! rather than with kube's `Recorder`, which keeps every event it sent for six minutes and sweeps that
//! cache on every publish: after a burst of 100,000 creates that was 100,000 events held, and a sweep of
//! all of them per event. Here a series is a few words, and at most [`SERIES`] are kept.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::fence::Fence;
use super::request::Fenced;
use crate::cluster::scope;

/// Events published at the same time; enough to keep up with any reconcile concurrency seen in practice.
const PUBLISHERS: usize = 8;
/// Events waiting to be sent; more are dropped.
const QUEUED: usize = 1000;
/// Series remembered; the oldest go first.
const SERIES: usize = 4096;
/// How long after an event the same one extends it rather than making a new one.
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// What an Event says about the object it regards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

pub struct Note {
    pub kind: Kind,
    pub reason: String,
    pub note: String,
    pub action: &'static str,
}

/// Who reports the events: the controller and this replica.
pub struct Reporter {
    pub controller: String,
    pub instance: String,
}

pub struct EventQueue {
    sender: Mutex<Option<mpsc::Sender<(Note, ObjectReference)>>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// An event was dropped since the last warning about it.
    dropping: AtomicBool,
}

/// The events sent lately, by what they say: where each is and how often it was seen.
#[derive(Default)]
struct Series {
    by_key: HashMap<u64, Sent>,
}

#[derive(Clone)]
struct Sent {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

impl Series {
    fn key(note: &Note, regarding: &ObjectReference) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&regarding.uid, &regarding.namespace, &regarding.name, &regarding.kind).hash(&mut hasher);
        (note.kind == Kind::Warning, &note.reason, &note.note, note.action).hash(&mut hasher);
        hasher.finish()
    }

    /// The series this event continues, counted one more, if one was seen within the window.
    fn continued(&mut self, key: u64, now: Timestamp) -> Option<Sent> {
        let sent = self.by_key.get_mut(&key).filter(|sent| sent.last + SERIES_WINDOW > now)?;
        sent.count += 1;
        sent.last = now;
        Some(sent.clone())
    }

    fn started(&mut self, key: u64, sent: Sent) {
        if self.by_key.len() >= SERIES {
            let now = sent.last;
            self.by_key.retain(|_, s| s.last + SERIES_WINDOW > now);
            if self.by_key.len() >= SERIES {
                // Still full of live series: the older half goes.
                let mut times: Vec<Timestamp> = self.by_key.values().map(|s| s.last).collect();
                times.sort_unstable();
                let cut = times[times.len() / 2];
                self.by_key.retain(|_, s| s.last > cut);
            }
            self.by_key.shrink_to_fit();
        }
        self.by_key.insert(key, sent);
    }
}

struct Publisher {
    client: Client,
    /// An Event is a write like any other: a process that may no longer write sends none.
    fence: Fence,
    reporter: Reporter,
    series: Mutex<Series>,
}

impl Publisher {
    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn publish(&self, note: &Note, regarding: &ObjectReference) -> Result<(), super::request::Failed> {
        let now = Timestamp::now();
        let key = Series::key(note, regarding);
        let continued = self.series().continued(key, now);
        if let Some(sent) = continued {
            let api: Api<K8sEvent> = scope::api(self.client.clone(), Some(&sent.namespace));
            let series = EventSeries { count: sent.count, last_observed_time: MicroTime(now) };
            let patch = Patch::Merge(json!({ "series": series }));
            match Fenced::new(api, &self.fence).patch(&sent.name, &PatchParams::default(), &patch).await {
                Ok(_) => return Ok(()),
                // The first event expired (the API server keeps them an hour): a new one starts over.
                Err(failed) if failed.status() == Some(404) => {}
                Err(failed) => return Err(failed),
            }
        }
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.reporter.controller),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(note.action.into()),
            reason: Some(note.reason.clone()),
            note: Some(note.note.clone()),
            type_: Some(format!("{:?}", note.kind)),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone()),
            ..K8sEvent::default()
        };
        let api: Api<K8sEvent> = scope::api(self.client.clone(), Some(&namespace));
        let created = Fenced::new(api, &self.fence).create(&PostParams::default(), &event).await?;
        self.series().started(key, Sent { namespace, name: created.name_any(), count: 1, last: now });
        Ok(())
    }
}

impl EventQueue {
    pub fn new(client: Client, fence: Fence, reporter: Reporter) -> Self {
        let (sender, receiver) = mpsc::channel::<(Note, ObjectReference)>(QUEUED);
        let publisher = std::sync::Arc::new(Publisher { client, fence, reporter, series: Mutex::default() });
        let queued = futures::stream::unfold(receiver, |mut r| async move { r.recv().await.map(|item| (item, r)) });
        let task = tokio::spawn(queued.for_each_concurrent(PUBLISHERS, move |(note, regarding)| {
            let publisher = publisher.clone();
            async move {
                if let Err(failed) = publisher.publish(&note, &regarding).await {
                    let object =
                        format!("{}/{}", regarding.namespace.unwrap_or_default(), regarding.name.unwrap_or_default());
                    tracing::warn!(object, "cannot record an event: {}", failed.message());
                }
            }
        }));
        EventQueue { sender: Mutex::new(Some(sender)), task: Mutex::new(Some(task)), dropping: AtomicBool::new(false) }
    }

    pub fn send(&self, note: Note, regarding: ObjectReference) {
        let sender = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sender) = sender.as_ref() else { return };
        match sender.try_send((note, regarding)) {
            Ok(()) => {
                if self.dropping.swap(false, Ordering::Relaxed) {
                    tracing::info!("events are recorded again");
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    tracing::warn!("{QUEUED} events are waiting to be sent; dropping more until they are");
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Sends what is queued and stops taking more: before `--once` exits, or the controller stops. Gives
    /// up after `within`, so that an API server that stopped answering cannot hold up the exit.
    pub async fn flush(&self, within: Duration) {
        drop(self.sender.lock().unwrap_or_else(|e| e.into_inner()).take());
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task
            && tokio::time::timeout(within, task).await.is_err()
        {
            tracing::warn!("gave up on events not sent within {}s", within.as_secs());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(name: &str, at: Timestamp) -> Sent {
        Sent { namespace: "ns".into(), name: name.into(), count: 1, last: at }
    }

    #[test]
    fn the_same_event_within_six_minutes_continues_its_series() {
        let mut series = Series::default();
        let t0 = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1000);
        assert!(series.continued(1, t0).is_none());
        series.started(1, sent("first", t0));
        let again = series.continued(1, t0 + SignedDuration::from_mins(5)).unwrap();
        assert_eq!((again.name.as_str(), again.count), ("first", 2));
        assert_eq!(series.continued(1, t0 + SignedDuration::from_mins(10)).unwrap().count, 3, "from the last one");
        assert!(series.continued(1, t0 + SignedDuration::from_mins(17)).is_none(), "too late");
    }

    #[test]
    fn at_most_so_many_series_are_kept() {
        let mut series = Series::default();
        let t0 = Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1000);
        for i in 0..(SERIES as u64 * 3) {
            series.started(i, sent("e", t0 + SignedDuration::from_millis(i as i64)));
        }
        assert!(series.by_key.len() <= SERIES);
        assert!(
            series.continued(SERIES as u64 * 3 - 1, t0 + SignedDuration::from_secs(60)).is_some(),
            "the newest stay"
        );
    }

    #[test]
    fn events_of_different_objects_or_words_are_different_series() {
        let regarding = |uid: &str| ObjectReference { uid: Some(uid.into()), ..ObjectReference::default() };
        let note =
            |reason: &str| Note { kind: Kind::Normal, reason: reason.into(), note: "n".into(), action: "Reconcile" };
        let key = Series::key(&note("A"), &regarding("u"));
        assert_eq!(key, Series::key(&note("A"), &regarding("u")));
        assert_ne!(key, Series::key(&note("B"), &regarding("u")));
        assert_ne!(key, Series::key(&note("A"), &regarding("v")));
    }
}
