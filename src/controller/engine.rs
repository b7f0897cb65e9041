//! One reconcile of one parent, shared by both drivers and by every kind of sync: ask the sync (the
//! built-in Sample sync or a hook) what the parent wants, then make the world match with the safe writes
//! that never take over an object that is not the parent's (create-if-absent, updates and deletes
//! preconditioned on the uid and resourceVersion read), a status written only when it changes, an Event
//! when something changed or failed, and, with a finalizer, a hook called until it says cleaning up is
//! done. It decides nothing about when to run: that is the drivers' job.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::{Value, json};

use super::backoff::Backoff;
use super::children::{ChildAction, ChildKey, Family, Observed, action, conflict_message, controlled_by};
use super::events::EventQueue;
use super::health::Health;
use super::hook::Hook;
use super::metrics::Metrics;
use super::status::{Readiness, same_status, set_ready, summary};
use super::sync::{Answer, controller_object, request};
use crate::cluster::scope;

pub const FIELD_MANAGER: &str = "samplectl";

/// How long one request may take. kube sets no read timeout, so without this a request on a half-open
/// connection (or to a frozen API server) would never end and would hold its concurrency slot for good.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one parent's writes (a few requests) may take before the reconcile counts as failed; a
/// hook's own time comes on top.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// While a hook has not yet said `finalized`, how soon it is asked again when it gave no resyncAfterSeconds.
pub const FINALIZE_RECHECK: Duration = Duration::from_secs(5);
/// The finalizer `--finalize` puts on each parent.
pub const FINALIZER: &str = "samplectl.io/finalizer";

/// What says what a parent wants.
pub enum Syncer {
    /// Samples: `sample::sync`.
    Sample,
    Hook(Box<Hook>),
}

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
}

/// An outcome, when the sync asked to be called again, and whether anything was written: a reconcile
/// that wrote nothing says its inputs already were what the parent wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub outcome: Outcome,
    pub resync_after: Option<Duration>,
    pub wrote: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{object}: {action}: {message}")]
pub struct ReconcileError {
    pub object: String,
    pub action: String,
    /// What went wrong, as a person reads it (kubectl's wording for server errors).
    pub message: String,
}

/// A parent (its namespace and name) and the objects in the way of its children.
type Blocked = ((String, String), HashSet<ChildKey>);

/// The status written for a parent: from which version of it, what was asked, and what the server kept
/// (which may differ: fields pruned by the schema, defaults added).
struct Written {
    from_version: String,
    desired: Value,
    stored: Value,
}

/// What every reconcile needs: the client, the parent and child types, the sync, the event recorder, and
/// the per-object retry store both drivers back off by.
pub struct Context {
    pub client: Client,
    pub family: Family,
    sync: Syncer,
    /// With `--finalize`: [`FINALIZER`] is put on each parent, so that the hook sees its deletion.
    pub finalize: bool,
    controller: Value,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub backoff: Backoff,
    events: EventQueue,
    /// The status last written for each parent (by uid). The watch driver can be handed the version a
    /// status was computed from again before its cache sees the write, and a schema may prune what was
    /// written; either way the same status is not written twice.
    written: Mutex<HashMap<String, Written>>,
    /// For each parent (by uid) last found blocked by someone else's object: its namespace and name, and
    /// the objects in the way. The next look reads those first, one GET each, instead of a create bound to
    /// fail; and the watch driver brings the parent back when one of them changes.
    conflicted: Mutex<HashMap<String, Blocked>>,
}

pub(super) fn key(object: &DynamicObject) -> String {
    match object.metadata.namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", object.metadata.name.as_deref().unwrap_or_default()),
        None => object.metadata.name.clone().unwrap_or_default(),
    }
}

pub(super) fn uid(object: &DynamicObject) -> String {
    object.metadata.uid.clone().unwrap_or_default()
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

/// What writing one child came to.
enum ChildOutcome {
    Unchanged,
    Created,
    Updated,
    /// An object of that name is not this parent's: why.
    Conflict(String),
}

fn now() -> String {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH).to_string()
}

impl Context {
    pub fn new(
        client: Client,
        family: Family,
        sync: Syncer,
        finalize: bool,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Self {
        let reporter = Reporter { controller: "samplectl".into(), instance: hostname() };
        let recorder = Recorder::new(client.clone(), reporter);
        let controller = controller_object(&family, "samplectl");
        Context {
            client,
            family,
            sync,
            finalize,
            controller,
            metrics,
            health,
            backoff: Backoff::default(),
            events: EventQueue::new(recorder),
            written: Mutex::new(HashMap::new()),
            conflicted: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a failure of `parent` and says how long to wait before trying it again.
    pub fn failed(&self, parent: &DynamicObject) -> Duration {
        self.backoff.failed(&uid(parent))
    }

    /// The parent with this uid is gone: forget what was written for it.
    pub fn parent_gone(&self, parent_uid: &str) {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
        self.backoff.clear(parent_uid);
        self.conflicted.lock().unwrap_or_else(|e| e.into_inner()).remove(parent_uid);
    }

    /// The parents (namespace, name) last found blocked by the object `key`.
    pub fn blocked_by(&self, key: &ChildKey) -> Vec<(String, String)> {
        let conflicted = self.conflicted.lock().unwrap_or_else(|e| e.into_inner());
        conflicted.values().filter(|(_, keys)| keys.contains(key)).map(|(parent, _)| parent.clone()).collect()
    }

    fn event(&self, parent: &DynamicObject, type_: EventType, reason: &str, note: String) {
        let event =
            Event { type_, reason: reason.into(), note: Some(note), action: "Reconcile".into(), secondary: None };
        self.events.send(event, parent.object_ref(&self.family.parent.ar));
    }

    /// Sends the events still queued; called once reconciling has stopped.
    pub async fn flush_events(&self) {
        self.events.flush(Duration::from_secs(5)).await;
    }

    fn hook_timeout(&self) -> Duration {
        match &self.sync {
            Syncer::Sample => Duration::ZERO,
            Syncer::Hook(hook) => hook.timeout,
        }
    }

    /// Makes the world match one parent, writing only what differs, within [`RECONCILE_TIMEOUT`] (plus the
    /// hook's own timeout). `children` are the parent's children as a driver holds them (from a list or a
    /// watch cache, so perhaps behind the API server); when they say nothing needs writing, no request is
    /// made.
    pub async fn reconcile(&self, parent: &DynamicObject, children: Observed) -> Result<Done, ReconcileError> {
        let started = std::time::Instant::now();
        self.metrics.in_flight.inc();
        let deadline = RECONCILE_TIMEOUT + self.hook_timeout();
        let result = match tokio::time::timeout(deadline, self.reconcile_once(parent, children)).await {
            Ok(result) => result,
            Err(_) => Err(ReconcileError {
                object: key(parent),
                action: "reconciling".into(),
                message: format!("did not finish within {}s", deadline.as_secs()),
            }),
        };
        self.metrics.in_flight.dec();
        let label = match &result {
            Ok(Done { outcome: Outcome::Ready, .. }) => "ready",
            Ok(Done { outcome: Outcome::NotReady(_) | Outcome::Conflict(_), .. }) => "not_ready",
            Ok(Done { outcome: Outcome::Deleting | Outcome::Finalizing, .. }) => "deleting",
            Err(_) => "error",
        };
        self.metrics.reconciled(label, started.elapsed());
        result
    }

    fn api(&self, kind: usize, namespace: &str) -> Api<DynamicObject> {
        let child = &self.family.children[kind];
        let namespace = (child.namespaced && !namespace.is_empty()).then_some(namespace);
        scope::dynamic(self.client.clone(), &child.ar, namespace)
    }

    fn parent_api(&self, parent: &DynamicObject) -> Api<DynamicObject> {
        scope::dynamic(self.client.clone(), &self.family.parent.ar, parent.metadata.namespace.as_deref())
    }

    /// Writes one child so that no interleaving can take over an object that is not this parent's: a
    /// missing one is created with a POST, which fails if the name was taken in the meantime, and an
    /// existing one is written only with its uid and resourceVersion as a precondition, so that an object
    /// which changed hands (or just changed) since it was read is never written. Either failure sends
    /// samplectl back to the API server for the object as it is, and the decision is made again.
    async fn write_child(
        &self,
        parent: &DynamicObject,
        key: &ChildKey,
        desired: &Value,
        seen: Option<DynamicObject>,
    ) -> Result<ChildOutcome, (String, Failed)> {
        let api = self.api(key.kind, &key.namespace);
        let parent_uid = uid(parent);
        let kind = &self.family.children[key.kind].ar.kind;
        let mut seen = seen;
        // The copy in hand, then the live object at most twice: an object that changes under every
        // attempt is left to the retry backoff rather than fought over.
        for attempt in 0..3 {
            let planned = action(seen.as_ref(), desired, &parent_uid);
            let result = match planned {
                ChildAction::None => return Ok(ChildOutcome::Unchanged),
                ChildAction::Conflict => {
                    let existing = seen.as_ref().expect("a conflict is with an object");
                    return Ok(ChildOutcome::Conflict(conflict_message(
                        &existing.metadata,
                        key,
                        kind,
                        parent,
                        &self.family,
                    )));
                }
                ChildAction::Create => {
                    let object: DynamicObject = serde_json::from_value(desired.clone())
                        .map_err(|err| (format!("writing its {kind}"), Failed::Api(kube::Error::SerdeError(err))))?;
                    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
                    bounded(api.create(&params, &object)).await.map(|o| (o, ChildOutcome::Created))
                }
                ChildAction::Update => {
                    let current = seen.as_ref().map(|o| &o.metadata);
                    let mut body = desired.clone();
                    body["metadata"]["uid"] = current.and_then(|m| m.uid.clone()).into();
                    body["metadata"]["resourceVersion"] = current.and_then(|m| m.resource_version.clone()).into();
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    bounded(api.patch(&key.name, &params, &Patch::Apply(&body)))
                        .await
                        .map(|o| (o, ChildOutcome::Updated))
                }
            };
            match result {
                Ok((_, outcome)) => return Ok(outcome),
                // A create's 409: the name was taken. An update's 409: the object is not the version read,
                // or is gone (uid mismatch); its 422: replaced by one with another uid (immutable). Either
                // way, look again, unless out of tries.
                Err(failed)
                    if attempt < 2
                        && (failed.status() == Some(409)
                            || (planned == ChildAction::Update && matches!(failed.status(), Some(404 | 422)))) =>
                {
                    if planned == ChildAction::Create {
                        self.note_conflict(parent, key);
                    }
                    seen = bounded(api.get_opt(&key.name)).await.map_err(|f| (format!("reading its {kind}"), f))?;
                }
                Err(failed) => return Err((format!("writing its {kind}"), failed)),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Deletes a child the parent controls and no longer wants, only as it was read: if it changed since
    /// (perhaps into someone else's), it is read again and deleted only if still the parent's.
    async fn delete_child(&self, parent_uid: &str, key: &ChildKey, seen: &DynamicObject) -> Result<bool, Failed> {
        let api = self.api(key.kind, &key.namespace);
        let mut seen = seen.clone();
        for attempt in 0..2 {
            if !controlled_by(&seen.metadata, parent_uid) {
                return Ok(false);
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: seen.metadata.uid.clone(),
                    resource_version: seen.metadata.resource_version.clone(),
                }),
                ..DeleteParams::background()
            };
            match bounded(api.delete(&key.name, &params)).await {
                Ok(_) => return Ok(true),
                Err(failed) if failed.status() == Some(404) => return Ok(false),
                Err(failed) if failed.status() == Some(409) && attempt == 0 => {
                    match bounded(api.get_opt(&key.name)).await? {
                        Some(fresh) if fresh.metadata.uid == seen.metadata.uid => seen = fresh,
                        _ => return Ok(false),
                    }
                }
                Err(failed) => return Err(failed),
            }
        }
        Ok(false)
    }

    fn note_conflict(&self, parent: &DynamicObject, key: &ChildKey) {
        let mut conflicted = self.conflicted.lock().unwrap_or_else(|e| e.into_inner());
        let place =
            (parent.metadata.namespace.clone().unwrap_or_default(), parent.metadata.name.clone().unwrap_or_default());
        conflicted.entry(uid(parent)).or_insert_with(|| (place, HashSet::new())).1.insert(key.clone());
    }

    async fn call_sync(&self, parent: &DynamicObject, children: &Observed, finalizing: bool) -> Result<Answer, String> {
        match &self.sync {
            Syncer::Sample => Ok(super::sample::sync(parent, children, &now())),
            Syncer::Hook(hook) => {
                let request = request(&self.controller, &self.family, parent, children, finalizing);
                hook.call(&key(parent), &request).await.map_err(|problem| format!("hook {} {problem}", hook.target))
            }
        }
    }

    /// The sync could not be used: nothing is changed for this parent; a log line, a Warning event, and
    /// the driver's backoff.
    fn sync_failed(&self, parent: &DynamicObject, message: String) -> ReconcileError {
        self.event(parent, EventType::Warning, "HookFailed", message.clone());
        ReconcileError { object: key(parent), action: "syncing".into(), message }
    }

    async fn reconcile_once(&self, parent: &DynamicObject, observed: Observed) -> Result<Done, ReconcileError> {
        let object = key(parent);
        let parent_uid = uid(parent);
        let fail = |action: &str, failed: Failed| ReconcileError {
            object: object.clone(),
            action: action.to_owned(),
            message: failed.message(),
        };

        let mut parent = std::borrow::Cow::Borrowed(parent);
        let mut wrote = false;
        let ours = has_finalizer(&parent, FINALIZER);
        let finalizing = match (self.finalize, parent.metadata.deletion_timestamp.is_some()) {
            (true, true) if ours => true,
            (true, true) => return Ok(Done { outcome: Outcome::Deleting, resync_after: None, wrote }),
            (true, false) if !ours => {
                let added = self.add_finalizer(&parent).await.map_err(|f| fail("adding its finalizer", f))?;
                parent = std::borrow::Cow::Owned(added);
                wrote = true;
                false
            }
            // Left by an earlier run with --finalize: without it, nothing would ever take it off again.
            (false, deleting) if ours => {
                self.remove_finalizer(&parent).await.map_err(|f| fail("removing its finalizer", f))?;
                wrote = true;
                if deleting {
                    return Ok(Done { outcome: Outcome::Deleting, resync_after: None, wrote });
                }
                false
            }
            (false, true) => return Ok(Done { outcome: Outcome::Deleting, resync_after: None, wrote }),
            _ => false,
        };

        // Only what the driver's copy shows. Nothing samplectl wrote is remembered on top of it: such a
        // memory goes stale when the driver sees the write and a later change (a child taken over) before
        // the write's answer is back, and then hides that change. A copy that is behind costs at most a
        // refused create or update and one GET.
        let mut children = observed;
        children.retain(|_, child| controlled_by(&child.metadata, &parent_uid));

        let answer = match self.call_sync(&parent, &children, finalizing).await {
            Ok(answer) => answer,
            Err(problem) => return Err(self.sync_failed(&parent, problem)),
        };
        let mut desired: BTreeMap<ChildKey, Value> = BTreeMap::new();
        for child in &answer.children {
            let (key, body) = self.family.own(&parent, child).map_err(|problem| {
                self.sync_failed(&parent, format!("{} answered a child samplectl refuses: {problem}", self.sync_name()))
            })?;
            if desired.insert(key.clone(), body).is_some() {
                let kind = &self.family.children[key.kind].ar.kind;
                return Err(self.sync_failed(&parent, format!("{} answered {kind} {key} twice", self.sync_name())));
            }
        }

        let known_conflicts =
            self.conflicted.lock().unwrap_or_else(|e| e.into_inner()).get(&parent_uid).map(|(_, keys)| keys.clone());
        let mut problem: Option<Readiness> = None;
        let mut conflicts = HashSet::new();
        let mut failure = None;
        for (key, body) in &desired {
            let kind = self.family.children[key.kind].ar.kind.clone();
            let mut seen = children.get(key).cloned();
            if seen.is_none() && known_conflicts.as_ref().is_some_and(|keys| keys.contains(key)) {
                match bounded(self.api(key.kind, &key.namespace).get_opt(&key.name)).await {
                    Ok(found) => seen = found,
                    Err(failed) => {
                        failure.get_or_insert(fail(&format!("reading its {kind}"), failed));
                        continue;
                    }
                }
            }
            match self.write_child(&parent, key, body, seen).await {
                Ok(ChildOutcome::Unchanged) => {}
                Ok(outcome @ (ChildOutcome::Created | ChildOutcome::Updated)) => {
                    let word = if matches!(outcome, ChildOutcome::Created) { "created" } else { "updated" };
                    wrote = true;
                    self.changed(&parent, &kind, key, word);
                }
                Ok(ChildOutcome::Conflict(why)) => {
                    conflicts.insert(key.clone());
                    problem.get_or_insert(Readiness::not_ready(&format!("{kind}Conflict"), why));
                }
                Err((action, failed)) => {
                    let message = failed.message();
                    // Named as a Sample's ConfigMap always was: by name, unless it lives elsewhere.
                    let name = match key.namespace == parent.metadata.namespace.clone().unwrap_or_default() {
                        true => key.name.clone(),
                        false => key.to_string(),
                    };
                    problem =
                        Some(Readiness::not_ready("ApplyFailed", format!("cannot write {kind} {name}: {message}")));
                    failure.get_or_insert(ReconcileError { object: object.clone(), action, message });
                }
            }
        }
        for (key, child) in &children {
            if desired.contains_key(key) {
                continue;
            }
            let kind = self.family.children[key.kind].ar.kind.clone();
            match self.delete_child(&parent_uid, key, child).await {
                Ok(true) => {
                    wrote = true;
                    self.changed(&parent, &kind, key, "deleted");
                }
                Ok(false) => {}
                Err(failed) => {
                    failure.get_or_insert(fail(&format!("deleting its {kind}"), failed));
                }
            }
        }
        {
            let mut conflicted = self.conflicted.lock().unwrap_or_else(|e| e.into_inner());
            if conflicts.is_empty() {
                conflicted.remove(&parent_uid);
            } else {
                let place = (
                    parent.metadata.namespace.clone().unwrap_or_default(),
                    parent.metadata.name.clone().unwrap_or_default(),
                );
                conflicted.insert(parent_uid.clone(), (place, conflicts.clone()));
            }
        }

        let (status, status_written) = self
            .write_status(&parent, answer.status.clone(), problem.as_ref())
            .await
            .map_err(|f| fail("writing its status", f))?;
        wrote |= status_written;
        if let Some(failure) = failure {
            return Err(failure);
        }
        self.backoff.recovered(&parent_uid);

        if finalizing {
            if answer.finalized {
                self.remove_finalizer(&parent).await.map_err(|f| fail("removing its finalizer", f))?;
                wrote = true;
                tracing::info!(
                    namespace = parent.metadata.namespace.as_deref(),
                    name = parent.metadata.name.as_deref(),
                    outcome = "finalized",
                    "{object}: finalized"
                );
                return Ok(Done { outcome: Outcome::Deleting, resync_after: None, wrote });
            }
            return Ok(Done {
                outcome: Outcome::Finalizing,
                resync_after: Some(answer.resync_after.unwrap_or(FINALIZE_RECHECK)),
                wrote,
            });
        }
        let outcome = match summary(&status) {
            Some(readiness) if !readiness.ready && !conflicts.is_empty() => Outcome::Conflict(readiness.reason),
            Some(readiness) if !readiness.ready => Outcome::NotReady(readiness.reason),
            _ => Outcome::Ready,
        };
        Ok(Done { outcome, resync_after: answer.resync_after, wrote })
    }

    fn sync_name(&self) -> String {
        match &self.sync {
            Syncer::Sample => "the Sample sync".into(),
            Syncer::Hook(hook) => format!("hook {}", hook.target),
        }
    }

    /// A child was created, updated or deleted: a log line and a Normal event.
    fn changed(&self, parent: &DynamicObject, kind: &str, child: &ChildKey, word: &str) {
        let object = key(parent);
        tracing::info!(
            namespace = parent.metadata.namespace.as_deref(),
            name = parent.metadata.name.as_deref(),
            child = child.to_string(),
            outcome = word,
            "{object}: {} {word}",
            if child.name == parent.metadata.name.as_deref().unwrap_or_default() {
                kind.to_lowercase()
            } else {
                format!("{} {}", kind.to_lowercase(), child.name)
            }
        );
        let reason = format!("{kind}{}", capitalized(word));
        self.event(parent, EventType::Normal, &reason, format!("{kind} {} {word}", child.name));
    }

    /// Writes the parent's status when it differs from what the parent holds: the sync's status with
    /// `observedGeneration`, and a problem with the children (a conflict, a failed write) in `Ready`.
    /// Returns the status the parent has now, and whether it was written.
    async fn write_status(
        &self,
        parent: &DynamicObject,
        answered: Option<Value>,
        problem: Option<&Readiness>,
    ) -> Result<(Value, bool), Failed> {
        let object = key(parent);
        let parent_uid = uid(parent);
        let generation = parent.metadata.generation.unwrap_or_default();
        let current = parent.data.get("status").cloned().unwrap_or(Value::Null);
        let mut status = answered.unwrap_or_else(|| json!({}));
        status["observedGeneration"] = generation.into();
        if let Some(problem) = problem {
            set_ready(&mut status, &current, problem, generation, &now());
        }
        let version = parent.metadata.resource_version.clone().unwrap_or_default();
        let unchanged = same_status(&status, &current) || {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            match written.get(&parent_uid) {
                Some(w)
                    if same_status(&w.desired, &status)
                        && (w.from_version == version || same_status(&w.stored, &current)) =>
                {
                    true
                }
                Some(_) => {
                    written.remove(&parent_uid);
                    false
                }
                None => false,
            }
        };
        if unchanged {
            return Ok((current, false));
        }
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        let api = self.parent_api(parent);
        let stored = match &self.sync {
            // The Sample CRD declares every field its status has: applied server-side, as always.
            Syncer::Sample => {
                let body = json!({
                    "apiVersion": self.family.parent.ar.api_version,
                    "kind": self.family.parent.ar.kind,
                    "metadata": { "name": parent.metadata.name, "namespace": parent.metadata.namespace },
                    "status": status,
                });
                let params = PatchParams::apply(FIELD_MANAGER).force();
                bounded(api.patch_status(name, &params, &Patch::Apply(&body))).await?
            }
            // A hook's status replaces the parent's whole, as metacontroller writes it. Server-side apply
            // would refuse a field the CRD's schema does not declare (`observedGeneration` in many); a
            // JSON patch has it pruned, as any update would. "add" replaces a status that is there.
            Syncer::Hook(_) => {
                let patch: json_patch::Patch =
                    serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
                        .expect("a well-formed JSON patch");
                let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
                bounded(api.patch_status(name, &params, &Patch::<()>::Json(patch))).await?
            }
        };
        let stored = stored.data.get("status").cloned().unwrap_or(Value::Null);
        let written = Written { from_version: version, desired: status.clone(), stored };
        self.written.lock().unwrap_or_else(|e| e.into_inner()).insert(parent_uid, written);
        let ns = parent.metadata.namespace.as_deref();
        match summary(&status) {
            Some(readiness) => {
                let flag = if readiness.ready { "True" } else { "False" };
                tracing::info!(
                    namespace = ns,
                    name,
                    outcome = "status",
                    ready = readiness.ready,
                    reason = readiness.reason.as_str(),
                    "{object}: status Ready={flag} ({}: {})",
                    readiness.reason,
                    readiness.message
                );
                if !readiness.ready {
                    self.event(parent, EventType::Warning, &readiness.reason, readiness.message.clone());
                }
            }
            None => tracing::info!(namespace = ns, name, outcome = "status", "{object}: status written"),
        }
        Ok((status, true))
    }

    /// Adds the finalizer, as a merge patch conditioned on the resourceVersion read, so that a concurrent
    /// change to the finalizers (another controller's) is never lost: a 409 is retried with backoff, from
    /// a fresh read.
    async fn add_finalizer(&self, parent: &DynamicObject) -> Result<DynamicObject, Failed> {
        let mut finalizers: Vec<String> = parent.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(FINALIZER.to_owned());
        let patch =
            json!({"metadata": {"resourceVersion": parent.metadata.resource_version, "finalizers": finalizers}});
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        let mut updated =
            bounded(self.parent_api(parent).patch(name, &PatchParams::default(), &Patch::Merge(&patch))).await?;
        updated.metadata.managed_fields = None;
        Ok(updated)
    }

    /// Removes the finalizer with a JSON patch that first tests it is still where it was read, so that
    /// whatever else happened to the parent since (a status written a moment ago, other finalizers
    /// added), only this entry goes; if it moved, the patch fails and is retried from a fresh read.
    async fn remove_finalizer(&self, parent: &DynamicObject) -> Result<(), Failed> {
        let Some(at) = parent.metadata.finalizers.iter().flatten().position(|f| f == FINALIZER) else {
            return Ok(());
        };
        let path = format!("/metadata/finalizers/{at}");
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": path, "value": FINALIZER},
            {"op": "remove", "path": path},
        ]))
        .expect("a well-formed JSON patch");
        let name = parent.metadata.name.as_deref().unwrap_or_default();
        match bounded(self.parent_api(parent).patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))).await {
            Ok(_) => Ok(()),
            // Already gone: the parent was deleted once the last finalizer went.
            Err(failed) if failed.status() == Some(404) => Ok(()),
            Err(failed) => Err(failed),
        }
    }
}

fn has_finalizer(parent: &DynamicObject, finalizer: &str) -> bool {
    parent.metadata.finalizers.iter().flatten().any(|f| f == finalizer)
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

fn hostname() -> Option<String> {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|h| !h.is_empty())
}
