//! One reconcile of one parent, shared by both drivers and by every kind of sync: take the finalizer's
//! step, ask the sync what the parent wants, then make the world match with the safe writes that never
//! take over an object that is not the parent's (`children`), a status written only when it changes
//! (`status`), and an Event when something changed or failed (`events`), all within a deadline. It
//! decides nothing about when to run: that is the drivers' job. What it remembers between reconciles
//! lives in small stores: retry timing (`backoff`), the objects in a parent's way (`conflicts`) and the
//! statuses it wrote (`written`).

pub mod adopting;
pub mod backoff;
mod children;
pub mod conflicts;
mod decorate;
pub mod events;
pub mod fence;
mod finalizer;
mod handover;
pub mod memory;
pub mod related;
pub mod request;
mod revisions;
mod status;
mod strays;
mod take_in;
pub mod written;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, TypeMeta};
use kube::{Client, Resource};
use serde_json::Value;

use super::rules::children::{Adoption, ChildKey, Family, Marks, Observed, Update, controlled_by, desired_children};
use super::rules::decorate::made_by;
use super::rules::finalizer::{self as finalizer_rules, Facts, Finalizer, Step, gc_finalizing};
use super::rules::graph::instance as graph_instance;
use super::rules::next::{Done, FINALIZE_RECHECK, Outcome, outcome};
use super::rules::selector::ParentSelector;
use super::rules::shard::Member;
use super::rules::status::{Readiness, StatusPlan, plan as status_plan};
use super::serve::Serving;
use super::serve::health::Health;
use super::serve::metrics::Metrics;
use super::sync::{Answer, Inputs, Shape, Syncer};
use crate::cluster::scope;
use adopting::{Adopting, Serves};
use events::{EventQueue, Kind, Note, Reporter};
use fence::Fence;
pub use handover::{LOOK_AHEAD, Looked};
use memory::Memory;
use related::Related;
use request::{Failed, Fenced, Gate};
pub use revisions::Rolling;

/// How long one parent's writes (a few requests) may take before the reconcile counts as failed; a
/// hook's own time comes on top.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
#[derive(Debug, thiserror::Error)]
#[error("{object}: {action}: {message}")]
pub struct ReconcileError {
    pub object: String,
    pub action: String,
    /// What went wrong, as a person reads it (kubectl's wording for server errors).
    pub message: String,
}

/// What writing and deleting one parent's children came to.
#[derive(Default)]
struct Applied {
    wrote: bool,
    /// What the status's `Ready` must say about the children: a conflict, a failed write.
    problem: Option<Readiness>,
    /// The objects in the way of its children.
    conflicts: HashSet<ChildKey>,
    /// The first failure, which fails the reconcile once the status has said what it could.
    failure: Option<ReconcileError>,
    /// The first failure as Go's client says it (the API server's message alone): what kro's conditions
    /// quote.
    refusal: Option<String>,
}

/// One controller: its name, the parent and child types, what syncs a parent, its finalizer, which
/// parents it takes, and how often it looks at each again without a change.
pub struct Definition {
    /// How logs and metrics name it: `samples`, `hook`, or a controller object's name.
    pub name: String,
    pub family: Family,
    pub sync: Syncer,
    pub finalizer: Finalizer,
    /// Only the parents this takes in.
    pub selector: ParentSelector,
    /// Overrides the driver's resync (`resyncPeriodSeconds`).
    pub resync: Option<Duration>,
    /// What is done to a child of each type that differs from what its parent wants; in place for a type
    /// not listed.
    pub updates: Vec<Update>,
    /// Which orphans a parent adopts; none when `None`.
    pub adoption: Option<Adoption>,
    /// Child types that roll, one child at a time, with ControllerRevisions.
    pub rolling: Option<Rolling>,
    /// A change to a parent's status alone does not sync it (metacontroller's `ignoreStatusChanges`).
    pub ignore_status_changes: bool,
}

/// Who this process writes as: its shard member (only the parents labelled for it are its), and the
/// fence its Lease keeps (the default one, never closed, without leader election or a ring).
#[derive(Debug, Clone, Default)]
pub struct Writer {
    pub member: Option<Member>,
    pub fence: Fence,
    /// In a shard ring: the adoption records as read, and what the member's contexts share.
    pub adopting: Option<Adopting>,
}

impl Gate for Writer {
    /// Whether a write may be sent now: this process's Lease was renewed in time, and, for an
    /// adopter's context, the records it serves by were read within a renew deadline.
    fn open(&self) -> bool {
        self.fence.open() && self.adopting.as_ref().is_none_or(|a| !a.adopter || a.fresh())
    }
}

/// What every reconcile of one controller needs: its definition (held whole), the client, who it writes
/// as, where it reports, what it remembers of each parent, and its Event queue.
pub struct Context {
    pub definition: Arc<Definition>,
    client: Client,
    writer: Writer,
    serving: Serving,
    memory: Memory,
    events: EventQueue,
    lookups: Arc<take_in::Lookups>,
    /// This controller's driver has seen all its parents once (for /readyz).
    listed: AtomicBool,
    /// The driver's caches of the children are not complete yet, and a reconcile looks for the parent's
    /// children itself: an adopter's, which lists a silent member's parents before their children so
    /// that the changed ones can be served as soon as the record comes (`handover::looks_first`).
    children_partial: AtomicBool,
}

pub fn key(object: &DynamicObject) -> String {
    match object.metadata.namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", object.metadata.name.as_deref().unwrap_or_default()),
        None => object.metadata.name.clone().unwrap_or_default(),
    }
}

pub fn uid(object: &DynamicObject) -> String {
    object.metadata.uid.clone().unwrap_or_default()
}

/// A parent's namespace (empty when cluster-scoped) and name.
fn place(parent: &DynamicObject) -> (String, String) {
    (parent.metadata.namespace.clone().unwrap_or_default(), parent.metadata.name.clone().unwrap_or_default())
}

/// When an object was made, in RFC 3339 (now for one not stored yet).
fn created(meta: &ObjectMeta) -> String {
    meta.creation_timestamp.as_ref().map_or_else(now, |t| t.0.to_string())
}

/// Now, in RFC 3339 to the second, as conditions are stamped.
pub fn now() -> String {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH).to_string()
}

/// When a parent another context of this member is reconciling is looked at again.
const CLAIMED_RETRY: Duration = Duration::from_millis(200);

/// When a parent whose copy was read before this process's own last write to it is looked at again, at
/// the latest: the watch driver brings it back as soon as its copy of the write arrives
/// (`Memory::seen`); this is for a copy that never comes (a poll driver's tick, a lost event).
const CAUGHT_UP_RETRY: Duration = Duration::from_millis(200);

fn ignored(resync_after: Option<Duration>) -> Done {
    Done { outcome: Outcome::Ignored, resync_after, wrote: false }
}

fn failure(object: &str, action: &str, failed: Failed) -> ReconcileError {
    ReconcileError { object: object.to_owned(), action: action.to_owned(), message: failed.message() }
}

impl Context {
    pub fn new(client: Client, definition: Definition, writer: Writer, serving: &Serving) -> Self {
        Self::with(client, Arc::new(definition), writer, serving)
    }

    fn with(client: Client, definition: Arc<Definition>, writer: Writer, serving: &Serving) -> Self {
        let reporter =
            Reporter { controller: "samplectl".into(), instance: hostname().unwrap_or_else(|| "samplectl".into()) };
        let memory = Memory::new(Related::new(definition.sync.version()));
        let events = EventQueue::new(client.clone(), writer.fence.clone(), reporter);
        let lookups = take_in::Lookups::new(client.clone(), definition.clone());
        let (listed, children_partial) = (AtomicBool::new(false), AtomicBool::new(false));
        Context {
            definition,
            client,
            writer,
            serving: serving.clone(),
            memory,
            events,
            lookups,
            listed,
            children_partial,
        }
    }

    /// A context of the same controller serving, under the gone incarnation `label`, the parents the
    /// adoption records give this member (`adopting`); none outside a shard ring.
    pub fn adopter(&self, label: &str) -> Option<Context> {
        let (member, adopting) = (self.writer.member.as_ref()?, self.writer.adopting.as_ref()?);
        let member = Member { incarnation: label.to_owned(), ..member.clone() };
        let writer =
            Writer { member: Some(member), fence: self.writer.fence.clone(), adopting: Some(adopting.for_adopter()) };
        let ctx = Context::with(self.client.clone(), self.definition.clone(), writer, &self.serving);
        // Its lists say nothing of the controller's readiness (/readyz counts the member's own).
        ctx.listed.store(true, Ordering::Relaxed);
        Some(ctx)
    }

    /// Whether this adopter's context serves `parent` now (the records as read, `Adopting::serves`);
    /// `None` in any other context.
    fn serves(&self, parent: &DynamicObject) -> Option<Serves> {
        let adopting = self.writer.adopting.as_ref().filter(|a| a.adopter)?;
        let label = self.writer.member.as_ref().map(|m| m.incarnation.as_str()).unwrap_or_default();
        Some(adopting.serves(label, &uid(parent), parent.metadata.resource_version.as_deref()))
    }

    /// How this member serves gone incarnations' parents, in a shard ring.
    pub fn adopting(&self) -> Option<&Adopting> {
        self.writer.adopting.as_ref()
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn metrics(&self) -> &Metrics {
        &self.serving.metrics
    }

    pub fn health(&self) -> &Health {
        &self.serving.health
    }

    /// This replica's place in a shard ring, if it has one.
    pub fn member(&self) -> Option<&Member> {
        self.writer.member.as_ref()
    }

    /// What is remembered of each parent between reconciles.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    pub fn sync(&self) -> &Syncer {
        &self.definition.sync
    }

    /// The driver has seen every parent: the first time, /readyz counts this controller as synced.
    pub fn listed(&self) {
        if !self.listed.swap(true, Ordering::Relaxed) {
            self.serving.health.synced();
        }
    }

    /// Whether the driver's caches hold every child of its parents (true unless a driver says otherwise);
    /// while they do not, each reconcile looks for its parent's children whatever member they name.
    /// Returns whether they did not before.
    pub fn children_complete(&self, complete: bool) -> bool {
        self.children_partial.swap(!complete, Ordering::Relaxed)
    }

    /// Whether the driver has seen every parent once.
    pub fn has_listed(&self) -> bool {
        self.listed.load(Ordering::Relaxed)
    }

    /// The label selector of the parents this replica reconciles: all of them, or in a shard ring the
    /// ones labelled for its member.
    pub fn parent_labels(&self) -> String {
        self.writer.member.as_ref().map(Member::selector).unwrap_or_default()
    }

    /// The label selector of the children this replica's drivers follow: the ones samplectl manages (a
    /// graph's say kro), and in a shard ring only those labelled for its member.
    pub fn child_labels(&self) -> String {
        let managed = self.definition.family.managed_selector();
        match &self.writer.member {
            Some(member) => format!("{managed},{}", member.selector()),
            None => managed,
        }
    }

    /// Whether this controller takes the parent `meta` describes: its selectors select it, or it still
    /// carries this controller's finalizer (a parent no longer selected has it taken off).
    pub fn takes(&self, meta: &ObjectMeta) -> bool {
        self.definition.selector.matches(meta)
            || (self.definition.finalizer.enabled
                && meta.finalizers.iter().flatten().any(|f| *f == self.definition.finalizer.name))
    }

    /// Whether telling which parents this controller takes needs their annotations.
    pub fn selects_by_annotations(&self) -> bool {
        self.definition.selector.annotations.is_some()
    }

    fn event(&self, parent: &DynamicObject, kind: Kind, reason: &str, note: String) {
        let note = Note { kind, reason: reason.into(), note, action: "Reconcile" };
        self.events.send(note, parent.object_ref(&self.definition.family.parent.ar));
    }

    /// Sends the events still queued; called once reconciling has stopped.
    pub async fn flush_events(&self) {
        self.events.flush(Duration::from_secs(5)).await;
    }

    /// Makes the world match one parent, writing only what differs, within [`RECONCILE_TIMEOUT`] (plus the
    /// hook's own timeout). `children` are the parent's children as a driver holds them (from a list or a
    /// watch cache, so perhaps behind the API server); when they say nothing needs writing, no request is
    /// made. `looked`: the look a driver had made ahead for `parent` (`look`), with its claim.
    pub async fn reconcile(
        &self,
        parent: &DynamicObject,
        children: Observed,
        looked: Option<Looked>,
    ) -> Result<Done, ReconcileError> {
        let (claimed, found, looked_since) = match looked.and_then(|looked| looked.of(parent)) {
            Some((claim, found, since)) => (claim, Some(found), Some(since)),
            None => (None, None, None),
        };
        if let Some(member) = &self.writer.member {
            // Whatever a driver's cache says, a parent not labelled for this member is not its to write.
            // Whatever a driver's copy says, a parent this process handed over since that copy was read
            // is no longer its to write.
            if !member.marked(&parent.metadata) || self.released_since(parent) {
                return Ok(Done { outcome: Outcome::Ignored, resync_after: None, wrote: false });
            }
        }
        // Decided from a copy that predates this process's own last write, a reconcile would undo or
        // miss what that write changed: looked at again once the driver has caught up.
        if self.memory.behind_own_write(&uid(parent), parent.metadata.resource_version.as_deref(), true) {
            return Ok(ignored(Some(CAUGHT_UP_RETRY)));
        }
        // One reconcile of a parent at a time in a member, whichever of its contexts holds it.
        let _claim = match &self.writer.adopting {
            Some(adopting) => {
                // Asked again after a look made ahead: the records may have changed while it waited.
                match self.serves(parent) {
                    None | Some(Serves::Yes) => {}
                    // Read again within a retry period, or the coordinator relabels it meanwhile.
                    Some(Serves::Stale) => return Ok(ignored(Some(adopting.fresh_for / 4))),
                    Some(Serves::NotOurs | Serves::Behind) => return Ok(ignored(None)),
                }
                match claimed {
                    // Held since before the look made ahead.
                    Some(claim) => Some(claim),
                    None => match adopting.claim(&uid(parent), parent.metadata.resource_version.as_deref()) {
                        Some(claim) => Some(claim),
                        None => return Ok(ignored(Some(CLAIMED_RETRY))),
                    },
                }
            }
            None => None,
        };
        // An adopter serves a parent its gone member was handing over too: the coordinator labels it for
        // the adopter, and drains it from there if the ring wants it elsewhere.
        if let Some(member) = &self.writer.member
            && !self.writer.adopting.as_ref().is_some_and(|a| a.adopter)
            && let Some(to) = member.drained_to(&parent.metadata)
        {
            return self.hand_over(member, parent, &children, to).await;
        }
        let started = std::time::Instant::now();
        self.serving.metrics.in_flight.inc();
        let deadline = RECONCILE_TIMEOUT + self.definition.sync.timeout();
        let looked = AtomicBool::new(false);
        let reconcile = async {
            let (children, all) = self.take_in(parent, children, found).await?;
            looked.store(all, Ordering::Relaxed);
            self.reconcile_once(parent, children).await
        };
        let result = match tokio::time::timeout(deadline, reconcile).await {
            Ok(result) => result,
            Err(_) => Err(ReconcileError {
                object: key(parent),
                action: "reconciling".into(),
                message: format!("did not finish within {}s", deadline.as_secs()),
            }),
        };
        self.serving.metrics.in_flight.dec();
        if result.is_ok() && looked.load(Ordering::Relaxed) {
            self.taken_in(parent, looked_since.unwrap_or(started));
        }
        let label = match &result {
            Ok(Done { outcome: Outcome::Ready, .. }) => "ready",
            Ok(Done { outcome: Outcome::NotReady(_) | Outcome::Conflict(_), .. }) => "not_ready",
            Ok(Done { outcome: Outcome::Deleting | Outcome::Finalizing, .. }) => "deleting",
            Ok(Done { outcome: Outcome::Ignored, .. }) => "ignored",
            Err(_) => "error",
        };
        self.serving.metrics.reconciled(&self.definition.name, label, started.elapsed());
        result
    }

    /// Writes through this context's writer, unless this process's fence is closed (its Lease not
    /// renewed within the renew deadline): checked right before each request goes, so that a reconcile
    /// which was frozen or stuck sends nothing once another process may own what it writes.
    fn fenced<K>(&self, api: &Api<K>) -> Fenced<'_, K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        Fenced::new(api.clone(), &self.writer)
    }

    fn child_api(&self, kind: usize, namespace: &str) -> Api<DynamicObject> {
        let child = &self.definition.family.children[kind];
        let namespace = (child.namespaced && !namespace.is_empty()).then_some(namespace);
        scope::dynamic(self.client.clone(), &child.ar, namespace)
    }

    fn parent_api(&self, parent: &DynamicObject) -> Api<DynamicObject> {
        scope::dynamic(self.client.clone(), &self.definition.family.parent.ar, parent.metadata.namespace.as_deref())
    }

    async fn reconcile_once(&self, parent: &DynamicObject, observed: Observed) -> Result<Done, ReconcileError> {
        let object = key(parent);
        let stop = |wrote| Ok(Done { outcome: Outcome::Deleting, resync_after: None, wrote });

        let mut parent = Cow::Borrowed(parent);
        // A list's items come without their type (a built-in kind's do); a hook reads it on the object.
        if parent.types.is_none() {
            let ar = &self.definition.family.parent.ar;
            parent.to_mut().types = Some(TypeMeta { api_version: ar.api_version.clone(), kind: ar.kind.clone() });
        }
        let mut wrote = false;
        let facts = Facts {
            finalize: self.definition.finalizer.enabled,
            carries: finalizer_rules::carries(parent.metadata.finalizers.as_deref(), &self.definition.finalizer.name),
            deleting: parent.metadata.deletion_timestamp.is_some(),
            selected: self.definition.selector.matches(&parent.metadata),
        };
        let step = finalizer_rules::step(facts);
        match step {
            Step::Ignore => return Ok(Done { outcome: Outcome::Ignored, resync_after: None, wrote: false }),
            Step::Stop => return stop(false),
            Step::AddThenSync => {
                let added =
                    self.add_finalizer(&parent).await.map_err(|f| failure(&object, "adding its finalizer", f))?;
                parent = Cow::Owned(added);
                wrote = true;
            }
            Step::RemoveThenSync | Step::RemoveThenStop => {
                self.remove_finalizer(&parent).await.map_err(|f| failure(&object, "removing its finalizer", f))?;
                if step == Step::RemoveThenStop {
                    return stop(true);
                }
                wrote = true;
            }
            Step::Sync | Step::Finalize => {}
        }
        let finalizing = step == Step::Finalize;

        // Only what the driver's copy shows. Nothing samplectl wrote is remembered on top of it: such a
        // memory goes stale when the driver sees the write and a later change (a child taken over) before
        // the write's answer is back, and then hides that change. A copy that is behind costs at most a
        // refused create or update and one GET.
        let parent_uid = uid(&parent);
        let mut children = observed;
        let decorator = self.definition.sync.shape() == Shape::Decorator;
        // A decorator's attachments are the ones it made: another decorator's of the same object are not.
        children.retain(|_, child| {
            controlled_by(&child.metadata, &parent_uid)
                && (!decorator || made_by(&child.metadata, &self.definition.name))
        });
        self.definition.family.typed(&mut children);

        let related = self.related_objects(&parent).await?;
        let (answer, desired) = match &self.definition.rolling {
            Some(rolling) => {
                let (answer, desired, recorded) =
                    self.sync_rolling(rolling, &parent, &children, &related, finalizing).await?;
                wrote |= recorded;
                (answer, desired)
            }
            None => {
                let inputs = Inputs { parent: &parent, children: &children, related: &related, finalizing };
                let answer = self.definition.sync.call(&self.definition.family, inputs, &now()).await;
                crate::controller::stages::reached("synced", &parent.metadata);
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(problem) => return Err(self.sync_failed(&parent, problem)),
                };
                let desired = self.desired_children(&parent, &answer)?.into_iter().collect();
                (answer, desired)
            }
        };
        // While the garbage collector deletes a parent in the foreground (or orphans its children), the
        // children are its business: the hook is still asked, but nothing is written for them.
        let applied = match gc_finalizing(&parent.metadata) {
            true => Applied::default(),
            false => self.apply_children(&parent, &children, &desired).await,
        };
        wrote |= applied.wrote;
        self.memory.conflicts.set(&parent_uid, place(&parent), applied.conflicts.clone());

        let shape = self.definition.sync.shape();
        if shape != Shape::Composite {
            wrote |= self
                .decorate(&parent, &answer)
                .await
                .map_err(|f| failure(&object, "writing its labels and annotations", f))?;
        }
        let has_status = self.definition.family.parent.subresources.iter().any(|s| s == "status");
        let current = parent.data.get("status");
        let (plan, problem) = match (shape, applied.refusal.as_ref(), &applied.problem) {
            // kro's status, written whole as the graph decided it, and kro's when a child could not be
            // written (an object the API server refused, or one another holds).
            (Shape::Graph, refusal, problem) => {
                let failed = refusal.or(problem.as_ref().map(|p| &p.message));
                let answered = match failed {
                    Some(error) => {
                        let (generation, made) =
                            (parent.metadata.generation.unwrap_or_default(), created(&parent.metadata));
                        let failed = |status| graph_instance::apply_failed(status, error, (generation, &made), &now());
                        answer.status.clone().map(failed)
                    }
                    None => answer.status.clone(),
                };
                (StatusPlan::Write { answered, observed_generation: false }, None)
            }
            (_, _, problem) => (
                status_plan(decorator, has_status, answer.status.clone(), current, problem.is_some()),
                problem.as_ref(),
            ),
        };
        let status = match plan {
            StatusPlan::Write { answered, observed_generation } => {
                self.write_status(&parent, answered, problem, observed_generation).await
            }
            StatusPlan::Keep => Ok((current.cloned().unwrap_or(Value::Null), false)),
        };
        // The hook says cleaning up is done: the finalizer goes, whatever a child or the status could not
        // be written (a namespace being deleted refuses every create), or the parent would never go.
        if finalizing && answer.finalized {
            for problem in
                applied.failure.iter().map(ToString::to_string).chain(status.as_ref().err().map(|f| f.message()))
            {
                tracing::warn!("{object}: finalized although {problem}");
            }
            self.remove_finalizer(&parent).await.map_err(|f| failure(&object, "removing its finalizer", f))?;
            tracing::info!(
                namespace = parent.metadata.namespace.as_deref(),
                name = parent.metadata.name.as_deref(),
                outcome = "finalized",
                "{object}: finalized"
            );
            return stop(true);
        }
        let (status, status_written) = status.map_err(|f| failure(&object, "writing its status", f))?;
        wrote |= status_written;
        if let Some(failure) = applied.failure {
            return Err(failure);
        }
        if finalizing {
            let resync_after = Some(answer.resync_after.unwrap_or(FINALIZE_RECHECK));
            return Ok(Done { outcome: Outcome::Finalizing, resync_after, wrote });
        }
        let outcome = outcome(&status, !applied.conflicts.is_empty());
        Ok(Done { outcome, resync_after: answer.resync_after, wrote })
    }

    /// The children the sync answered, checked and marked (`rules::children::desired_children`); an
    /// answer refused is the sync failing.
    fn desired_children(
        &self,
        parent: &DynamicObject,
        answer: &Answer,
    ) -> Result<Vec<(ChildKey, Value)>, ReconcileError> {
        let marks = Marks {
            controller_uid: self.definition.adoption == Some(Adoption::ControllerUid),
            member: self.writer.member.as_ref(),
            decorator: (self.sync().shape() == Shape::Decorator).then_some(self.definition.name.as_str()),
        };
        desired_children(&self.definition.family, parent, &answer.children, marks)
            .map_err(|refused| self.sync_failed(parent, format!("{} {refused}", self.sync().name())))
    }

    /// The sync could not be used: nothing is changed for this parent; a log line, a Warning event, and
    /// the driver's backoff.
    fn sync_failed(&self, parent: &DynamicObject, message: String) -> ReconcileError {
        // metacontroller's reason and words, which its users' scripts look for.
        self.event(parent, Kind::Warning, "SyncError", format!("Sync error: {message}"));
        ReconcileError { object: key(parent), action: "syncing".into(), message }
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
        self.event(parent, Kind::Normal, &reason, format!("{kind} {} {word}", child.name));
    }
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
