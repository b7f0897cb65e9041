//! The controller: one reconcile function for a Sample, shared by the two drivers (`poll`, the original
//! list-every-second loop done right, and `watch`, kube-runtime's Controller), plus `observe` for any
//! other resource, which only reports what changed.

pub mod events;
pub mod observe;
pub mod poll;
pub mod sample;
pub mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use events::EventQueue;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::Value;

use crate::health::Health;
use crate::metrics::Metrics;
use crate::resource::Resolved;
use sample::{ChildAction, Readiness, desired_status, plan};

pub const FIELD_MANAGER: &str = "samplectl";

/// How one reconcile of a Sample ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ready,
    NotReady,
    /// Being deleted: garbage collection removes its ConfigMap, nothing to do.
    Deleting,
}

#[derive(Debug, thiserror::Error)]
#[error("{action} for {object}: {source}")]
pub struct ReconcileError {
    pub object: String,
    pub action: &'static str,
    #[source]
    pub source: kube::Error,
}

/// What every reconcile needs: the client, the discovered Sample resource, the event recorder, and the
/// per-object failure counts behind the backoff.
pub struct Context {
    pub client: Client,
    pub samples: Resolved,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    events: EventQueue,
    failures: Mutex<HashMap<String, u32>>,
    /// The status last written for each Sample (by uid), and the resourceVersion of the Sample it was
    /// computed from. The watch driver can be handed that same, now stale, version again before its cache
    /// sees the write; this keeps it from writing the same status twice.
    written: Mutex<HashMap<String, (String, Value)>>,
}

/// Exponential per-object backoff: 1s, 2s, 4s ... capped at 5 minutes.
pub fn backoff_delay(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

fn key(sample: &DynamicObject) -> String {
    format!(
        "{}/{}",
        sample.metadata.namespace.as_deref().unwrap_or_default(),
        sample.metadata.name.as_deref().unwrap_or_default()
    )
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
            events: EventQueue::new(recorder),
            failures: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a failure of `sample` and says how long to wait before trying it again.
    pub fn failed(&self, sample: &DynamicObject) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(sample.metadata.uid.clone().unwrap_or_default()).or_default();
        *n += 1;
        backoff_delay(*n)
    }

    fn succeeded(&self, sample: &DynamicObject) {
        let uid = sample.metadata.uid.as_deref().unwrap_or_default();
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
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

    /// Makes the world match one Sample, writing only what differs. `child` is the copy of its ConfigMap
    /// a driver holds (from a list or a watch cache, so perhaps behind the API server). When that copy
    /// says nothing needs writing, no request is made; when it is missing or says a write is due, the
    /// ConfigMap is read from the API server first and decides, because a ConfigMap of that name may exist
    /// without samplectl's label (and must be left alone) or the copy may predate samplectl's own write.
    pub async fn reconcile(
        &self,
        sample: &DynamicObject,
        child: Option<&ConfigMap>,
    ) -> Result<Outcome, ReconcileError> {
        let started = std::time::Instant::now();
        self.metrics.in_flight.inc();
        let result = self.reconcile_once(sample, child).await;
        self.metrics.in_flight.dec();
        let label = match &result {
            Ok(Outcome::Ready) => "ready",
            Ok(Outcome::NotReady) => "not_ready",
            Ok(Outcome::Deleting) => "deleting",
            Err(_) => "error",
        };
        self.metrics.reconciled(label, started.elapsed());
        result
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
        let fail = |action, source| ReconcileError { object: object.clone(), action, source };
        let configmaps: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let mut plan = plan(sample, &self.samples.ar, child);
        if !matches!(plan.child, ChildAction::None | ChildAction::Invalid) {
            let live = configmaps.get_opt(name).await.map_err(|e| fail("reading its ConfigMap", e))?;
            plan = sample::plan(sample, &self.samples.ar, live.as_ref());
        }
        let mut readiness = plan.readiness;
        let mut failure = None;
        if let ChildAction::Create(body) | ChildAction::Update(body) = &plan.child {
            let created = matches!(plan.child, ChildAction::Create(_));
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match configmaps.patch(name, &params, &Patch::Apply(body)).await {
                Ok(_) => {
                    let (word, reason) =
                        if created { ("created", "ConfigMapCreated") } else { ("updated", "ConfigMapUpdated") };
                    tracing::info!(namespace = ns, name, outcome = word, "{object}: configmap {word}");
                    self.event(sample, EventType::Normal, reason, format!("ConfigMap {name} {word}"));
                }
                Err(err) => {
                    readiness = Readiness::not_ready(
                        "ApplyFailed",
                        format!("cannot apply ConfigMap {name}: {}", api_message(&err)),
                    );
                    failure = Some(fail("applying its ConfigMap", err));
                }
            }
        }

        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH).to_string();
        let uid = sample.metadata.uid.clone().unwrap_or_default();
        let version = sample.metadata.resource_version.clone().unwrap_or_default();
        let status = desired_status(sample, &self.samples.ar, &readiness, &now).filter(|body| {
            let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            written.get(&uid).is_none_or(|(v, status)| *v != version || *status != body["status"])
        });
        if let Some(body) = status {
            let samples: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &self.samples.ar);
            let params = PatchParams::apply(FIELD_MANAGER).force();
            samples
                .patch_status(name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| fail("writing its status", e))?;
            let written = (version, body["status"].clone());
            self.written.lock().unwrap_or_else(|e| e.into_inner()).insert(uid, written);
            let status = if readiness.ready { "True" } else { "False" };
            tracing::info!(
                namespace = ns,
                name,
                outcome = "status",
                ready = readiness.ready,
                reason = readiness.reason.as_str(),
                "{object}: status Ready={status} ({})",
                readiness.reason
            );
            if !readiness.ready {
                self.event(sample, EventType::Warning, &readiness.reason, readiness.message.clone());
            }
        }
        if let Some(failure) = failure {
            return Err(failure);
        }
        self.succeeded(sample);
        Ok(if readiness.ready { Outcome::Ready } else { Outcome::NotReady })
    }
}

fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

fn hostname() -> Option<String> {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=10).map(|n| backoff_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 256]);
        assert!(backoff_delay(100) <= Duration::from_secs(300));
    }
}
