//! One reconcile of a Sample, shared by both drivers: make the world match what `sample` plans, with
//! the safe writes (create-if-absent, preconditioned updates) that never take over a ConfigMap that is
//! not the Sample's, a status written only when it changes, and an Event when something changed or
//! failed. It decides nothing about when to run: that is the drivers' job.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::Value;

use super::backoff::Backoff;
use super::events::EventQueue;
use super::health::Health;
use super::metrics::Metrics;
use super::sample::{ChildAction, Readiness, desired_status, plan};
use crate::cluster::resolve::Resolved;
use crate::cluster::scope;

pub const FIELD_MANAGER: &str = "samplectl";

/// How long one request may take. kube sets no read timeout, so without this a request on a half-open
/// connection (or to a frozen API server) would never end and would hold its concurrency slot for good.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one Sample's reconcile (a few requests) may take before it counts as failed.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);

/// How one reconcile of a Sample ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ready,
    /// Not Ready because of the Sample itself, not a failure to retry: the status says why, and this is
    /// the reason it gives.
    NotReady(String),
    /// Not Ready because a ConfigMap of its name is someone else's; nothing will change that but a
    /// change to that ConfigMap, which the watch driver hears of and the poll driver checks with backoff.
    Conflict,
    /// Being deleted: garbage collection removes its ConfigMap, nothing to do.
    Deleting,
}

#[derive(Debug, thiserror::Error)]
#[error("{object}: {action}: {message}")]
pub struct ReconcileError {
    pub object: String,
    pub action: &'static str,
    /// What went wrong, as a person reads it (kubectl's wording for server errors).
    pub message: String,
}

/// What every reconcile needs: the client, the discovered Sample resource, the event recorder, and the
/// per-object retry store both drivers back off by.
pub struct Context {
    pub client: Client,
    pub samples: Resolved,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub backoff: Backoff,
    events: EventQueue,
    /// The status last written for each Sample (by uid), and the resourceVersion of the Sample it was
    /// computed from. The watch driver can be handed that same, now stale, version again before its cache
    /// sees the write; this keeps it from writing the same status twice.
    written: Mutex<HashMap<String, (String, Value)>>,
    /// The ConfigMap samplectl last wrote for each Sample (by uid), until the driver's copy of the
    /// ConfigMaps has seen it: a Sample reconciled again in between then needs no request to know its
    /// ConfigMap is there and current.
    children_written: Mutex<HashMap<String, ConfigMap>>,
    /// Samples (by uid) last found blocked by someone else's ConfigMap, which no driver's copy holds: the
    /// next look reads that ConfigMap first, one GET, instead of a create bound to fail with 409 and a GET.
    conflicted: Mutex<HashSet<String>>,
}

pub(super) fn key(sample: &DynamicObject) -> String {
    format!(
        "{}/{}",
        sample.metadata.namespace.as_deref().unwrap_or_default(),
        sample.metadata.name.as_deref().unwrap_or_default()
    )
}

pub(super) fn uid(sample: &DynamicObject) -> String {
    sample.metadata.uid.clone().unwrap_or_default()
}

/// Runs one request with [`REQUEST_TIMEOUT`], and words its failure for a person.
pub(super) async fn bounded<T>(request: impl Future<Output = kube::Result<T>>) -> Result<T, Failed> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(Failed::Api(err)),
        Err(_) => Err(Failed::TimedOut),
    }
}

/// A request that did not succeed.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub(super) enum Failed {
    Api(kube::Error),
    TimedOut,
}

impl Failed {
    /// For /healthz: no answer, or a 5xx (a 4xx is the server refusing, not being away).
    pub(super) fn out_of_reach(&self) -> bool {
        match self {
            Failed::Api(err) => super::health::out_of_reach(err),
            Failed::TimedOut => true,
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            Failed::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    fn message(&self) -> String {
        match self {
            Failed::Api(err) => crate::error::describe(err),
            Failed::TimedOut => format!("the API server did not answer within {}s", REQUEST_TIMEOUT.as_secs()),
        }
    }
}

/// What writing the child came to.
enum ChildOutcome {
    Unchanged,
    Created,
    Updated,
    /// A ConfigMap of that name is not this Sample's: the readiness to report.
    Conflict(Readiness),
}

/// Compares two statuses as written, leaving out `lastTransitionTime`: two reconciles of the same Sample
/// version a second apart compute different times for the same transition.
fn same_status(a: &Value, b: &Value) -> bool {
    let strip = |status: &Value| {
        let mut status = status.clone();
        for condition in status["conditions"].as_array_mut().into_iter().flatten() {
            if let Some(condition) = condition.as_object_mut() {
                condition.remove("lastTransitionTime");
            }
        }
        status
    };
    strip(a) == strip(b)
}

impl Context {
    pub fn new(client: Client, samples: Resolved, metrics: Arc<Metrics>, health: Arc<Health>) -> Self {
        let reporter = Reporter { controller: "samplectl".into(), instance: hostname() };
        let recorder = Recorder::new(client.clone(), reporter);
        Context {
            client,
            samples,
            metrics,
            health,
            backoff: Backoff::default(),
            events: EventQueue::new(recorder),
            written: Mutex::new(HashMap::new()),
            children_written: Mutex::new(HashMap::new()),
            conflicted: Mutex::new(HashSet::new()),
        }
    }

    /// Counts a failure of `sample` and says how long to wait before trying it again.
    pub fn failed(&self, sample: &DynamicObject) -> Duration {
        self.backoff.failed(&uid(sample))
    }

    /// The driver's copy of the ConfigMaps has seen a change to the child of the Sample with this uid (or
    /// has been relisted, for `None`): from now on that copy is at least as new as what samplectl wrote.
    pub fn child_seen(&self, sample_uid: Option<&str>) {
        let mut written = self.children_written.lock().unwrap_or_else(|e| e.into_inner());
        match sample_uid {
            Some(uid) => {
                written.remove(uid);
            }
            None => written.clear(),
        }
    }

    /// The Sample with this uid is gone: forget what was written for it.
    pub fn sample_gone(&self, sample_uid: &str) {
        self.child_seen(Some(sample_uid));
        self.written.lock().unwrap_or_else(|e| e.into_inner()).remove(sample_uid);
        self.backoff.clear(sample_uid);
        self.conflicted.lock().unwrap_or_else(|e| e.into_inner()).remove(sample_uid);
    }

    /// Forgets everything remembered about the Samples, for a driver that has just listed them afresh.
    pub fn relisted(&self) {
        self.child_seen(None);
        self.written.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn event(&self, sample: &DynamicObject, type_: EventType, reason: &str, note: String) {
        let event =
            Event { type_, reason: reason.into(), note: Some(note), action: "Reconcile".into(), secondary: None };
        self.events.send(event, sample.object_ref(&self.samples.ar));
    }

    /// Sends the events still queued; called once reconciling has stopped.
    pub async fn flush_events(&self) {
        self.events.flush(Duration::from_secs(5)).await;
    }

    /// Makes the world match one Sample, writing only what differs, within [`RECONCILE_TIMEOUT`].
    /// `child` is the copy of its ConfigMap a driver holds (from a list or a watch cache, so perhaps
    /// behind the API server); when it says nothing needs writing, no request is made.
    pub async fn reconcile(
        &self,
        sample: &DynamicObject,
        child: Option<&ConfigMap>,
    ) -> Result<Outcome, ReconcileError> {
        let started = std::time::Instant::now();
        self.metrics.in_flight.inc();
        let result = match tokio::time::timeout(RECONCILE_TIMEOUT, self.reconcile_once(sample, child)).await {
            Ok(result) => result,
            Err(_) => Err(ReconcileError {
                object: key(sample),
                action: "reconciling",
                message: format!("did not finish within {}s", RECONCILE_TIMEOUT.as_secs()),
            }),
        };
        self.metrics.in_flight.dec();
        let label = match &result {
            Ok(Outcome::Ready) => "ready",
            Ok(Outcome::NotReady(_) | Outcome::Conflict) => "not_ready",
            Ok(Outcome::Deleting) => "deleting",
            Err(_) => "error",
        };
        self.metrics.reconciled(label, started.elapsed());
        result
    }

    /// Writes the child so that no interleaving can take over a ConfigMap that is not this Sample's: a
    /// missing one is created with a POST, which fails if the name was taken in the meantime, and an
    /// existing one is written only with its uid and resourceVersion as a precondition, so that a
    /// ConfigMap which changed hands (or just changed) since it was read is never written. Either failure
    /// sends samplectl back to the API server for the ConfigMap as it is, and the plan is made again.
    async fn write_child(
        &self,
        sample: &DynamicObject,
        configmaps: &Api<ConfigMap>,
        child: Option<ConfigMap>,
    ) -> Result<ChildOutcome, (&'static str, Failed)> {
        let name = sample.metadata.name.as_deref().unwrap_or_default();
        let mut seen = child;
        // The copy in hand, then the live object at most twice: a ConfigMap that changes under every
        // attempt is left to the retry backoff rather than fought over.
        for attempt in 0..3 {
            let planned = plan(sample, &self.samples.ar, seen.as_ref());
            let creating = matches!(planned.child, ChildAction::Create(_));
            let result = match planned.child {
                ChildAction::None | ChildAction::Invalid => return Ok(ChildOutcome::Unchanged),
                ChildAction::Conflict => return Ok(ChildOutcome::Conflict(planned.readiness)),
                ChildAction::Create(body) => {
                    let cm: ConfigMap = serde_json::from_value(body).expect("the desired ConfigMap is a ConfigMap");
                    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
                    bounded(configmaps.create(&params, &cm)).await.map(|cm| (cm, ChildOutcome::Created))
                }
                ChildAction::Update(mut body) => {
                    let current = seen.as_ref().map(|cm| &cm.metadata);
                    body["metadata"]["uid"] = current.and_then(|m| m.uid.clone()).into();
                    body["metadata"]["resourceVersion"] = current.and_then(|m| m.resource_version.clone()).into();
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    bounded(configmaps.patch(name, &params, &Patch::Apply(&body)))
                        .await
                        .map(|cm| (cm, ChildOutcome::Updated))
                }
            };
            match result {
                Ok((mut written, outcome)) => {
                    written.metadata.managed_fields = None;
                    let mut children = self.children_written.lock().unwrap_or_else(|e| e.into_inner());
                    children.insert(uid(sample), written);
                    return Ok(outcome);
                }
                // A create's 409: the name was taken. An update's 409: the ConfigMap is not the version
                // read, or is gone (uid mismatch); its 422: replaced by one with another uid (immutable).
                // Either way, look again, unless out of tries.
                Err(failed)
                    if attempt < 2
                        && (failed.status() == Some(409)
                            || (!creating && matches!(failed.status(), Some(404 | 422)))) =>
                {
                    self.child_seen(Some(&uid(sample)));
                    seen = bounded(configmaps.get_opt(name)).await.map_err(|f| ("reading its ConfigMap", f))?;
                }
                Err(failed) => return Err(("writing its ConfigMap", failed)),
            }
        }
        unreachable!("the last attempt returns")
    }

    async fn reconcile_once(
        &self,
        sample: &DynamicObject,
        child: Option<&ConfigMap>,
    ) -> Result<Outcome, ReconcileError> {
        if sample.metadata.deletion_timestamp.is_some() {
            return Ok(Outcome::Deleting);
        }
        let object = key(sample);
        let ns = sample.metadata.namespace.as_deref().unwrap_or_default();
        let name = sample.metadata.name.as_deref().unwrap_or_default();
        let uid = uid(sample);
        let configmaps: Api<ConfigMap> = scope::api(self.client.clone(), Some(ns));
        let remembered = self.children_written.lock().unwrap_or_else(|e| e.into_inner()).get(&uid).cloned();
        let known_conflict = self.conflicted.lock().unwrap_or_else(|e| e.into_inner()).contains(&uid);
        let child =
            match (child, remembered) {
                (Some(child), _) => Some(child.clone()),
                (None, Some(written)) => Some(written),
                (None, None) if known_conflict => bounded(configmaps.get_opt(name)).await.map_err(|f| {
                    ReconcileError { object: object.clone(), action: "reading its ConfigMap", message: f.message() }
                })?,
                (None, None) => None,
            };
        let mut readiness = plan(sample, &self.samples.ar, child.as_ref()).readiness;
        let mut failure = None;
        let mut conflict = false;
        let written = self.write_child(sample, &configmaps, child).await;
        {
            let mut conflicted = self.conflicted.lock().unwrap_or_else(|e| e.into_inner());
            match written {
                Ok(ChildOutcome::Conflict(_)) => conflicted.insert(uid.clone()),
                _ => conflicted.remove(&uid),
            };
        }
        match written {
            Ok(ChildOutcome::Unchanged) => {}
            Ok(outcome @ (ChildOutcome::Created | ChildOutcome::Updated)) => {
                let (word, reason) = match outcome {
                    ChildOutcome::Created => ("created", "ConfigMapCreated"),
                    _ => ("updated", "ConfigMapUpdated"),
                };
                tracing::info!(namespace = ns, name, outcome = word, "{object}: configmap {word}");
                self.event(sample, EventType::Normal, reason, format!("ConfigMap {name} {word}"));
            }
            Ok(ChildOutcome::Conflict(why)) => {
                readiness = why;
                conflict = true;
            }
            Err((action, failed)) => {
                let message = failed.message();
                readiness = Readiness::not_ready("ApplyFailed", format!("cannot write ConfigMap {name}: {message}"));
                failure = Some(ReconcileError { object: object.clone(), action, message });
            }
        }

        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH).to_string();
        let version = sample.metadata.resource_version.clone().unwrap_or_default();
        let status = desired_status(sample, &self.samples.ar, &readiness, &now).filter(|body| {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            match written.get(&uid) {
                Some((v, status)) if *v == version => !same_status(status, &body["status"]),
                // A newer version of the Sample has been seen: what was written for an older one is moot.
                Some(_) => {
                    written.remove(&uid);
                    true
                }
                None => true,
            }
        });
        if let Some(body) = status {
            let samples = scope::dynamic(self.client.clone(), &self.samples.ar, Some(ns));
            let params = PatchParams::apply(FIELD_MANAGER).force();
            bounded(samples.patch_status(name, &params, &Patch::Apply(&body))).await.map_err(|f| ReconcileError {
                object: object.clone(),
                action: "writing its status",
                message: f.message(),
            })?;
            let written = (version, body["status"].clone());
            self.written.lock().unwrap_or_else(|e| e.into_inner()).insert(uid.clone(), written);
            let status = if readiness.ready { "True" } else { "False" };
            tracing::info!(
                namespace = ns,
                name,
                outcome = "status",
                ready = readiness.ready,
                reason = readiness.reason.as_str(),
                "{object}: status Ready={status} ({}: {})",
                readiness.reason,
                readiness.message
            );
            if !readiness.ready {
                self.event(sample, EventType::Warning, &readiness.reason, readiness.message.clone());
            }
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        self.backoff.recovered(&uid);
        Ok(match (readiness.ready, conflict) {
            (true, _) => Outcome::Ready,
            (false, true) => Outcome::Conflict,
            (false, false) => Outcome::NotReady(readiness.reason),
        })
    }
}

fn hostname() -> Option<String> {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|h| !h.is_empty())
}
