//! A hook's `kubernetes` binding, followed as shell-operator follows it: the kind found through
//! discovery, then one shared watch (the hub's) per namespace and per `nameSelector` name, with the
//! label and field selectors; namespaces picked by labels are followed as they come and go (a namespace
//! that stops matching takes its objects out of the snapshot without events). Each object is kept as its
//! checksum (of the jqFilter's result, or of the object), its filter result, and the object itself
//! unless `keepFullObjectsInMemory: false`. A change becomes an event only when the checksum changes;
//! a deletion always does. The first list of each watch makes no events; until the binding's
//! Synchronization run has succeeded, its events are held, those held when it starts are dropped (the
//! run sees their objects), and those held after are queued once it is over.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DynamicObject, ResourceExt};
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::Shared;
use super::jq_worker;
use super::queue::Task;
use super::share::{Gone, Held, Seen, Share};
use crate::cluster::resolve::Resolved;
use crate::controller::rules::shell::config::{Kubernetes, Namespaces, WatchEvent};
use crate::controller::rules::shell::context::{ObjectKey, Pending, SnapshotItem, What, sort};

/// How long a binding's first lists may take before its start fails and is tried again.
const LIST_LIMIT: Duration = Duration::from_secs(60);

/// One binding's objects and the watches that keep them.
pub struct Monitor {
    hook: usize,
    binding: usize,
    resolved: Resolved,
    state: Mutex<State>,
    /// The watches, stopped when the monitor goes.
    feeds: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

struct State {
    entries: BTreeMap<ObjectKey, Entry>,
    /// A jqFilter that failed on an object of a first list: the binding cannot start.
    list_error: Option<String>,
    /// `Some` while events are held for the Synchronization run.
    held: Option<Vec<Task>>,
}

struct Entry {
    checksum: u64,
    /// The object's JSON, when objects are kept.
    object: Option<Arc<str>>,
    filter_result: Option<serde_json::Value>,
    /// The watch it came from: a namespace's objects leave with it.
    feed: Arc<str>,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        for feed in self.feeds.get_mut().unwrap_or_else(|e| e.into_inner()).values() {
            feed.abort();
        }
    }
}

impl Monitor {
    fn binding<'a>(&self, shared: &'a Shared) -> &'a Kubernetes {
        &shared.hooks[self.hook].loaded.config.kubernetes[self.binding]
    }

    /// The kind of this binding's objects.
    pub fn kind(&self) -> &str {
        &self.resolved.ar.kind
    }

    /// An object of this binding, as the ring's share knows it.
    pub fn held(&self, key: &ObjectKey) -> Held {
        Held::of(&self.resolved.ar, &key.namespace, &key.name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The binding's objects now, sorted as shell-operator sorts them; in a shard ring, without those
    /// the member is letting go of.
    pub fn snapshot(&self, share: Option<&Share>) -> Vec<SnapshotItem> {
        let state = self.lock();
        let mut items: Vec<SnapshotItem> = state
            .entries
            .iter()
            .filter(|(key, _)| share.is_none_or(|share| !share.leaving(&self.held(key))))
            .map(|(key, entry)| SnapshotItem {
                key: key.clone(),
                object: entry.object.as_deref().and_then(|json| serde_json::from_str(json).ok()),
                filter_result: entry.filter_result.clone(),
            })
            .collect();
        drop(state);
        sort(&mut items);
        items
    }

    /// The Synchronization run starts: what was held is in the snapshot it reads.
    pub fn synchronizing(&self) {
        if let Some(held) = self.lock().held.as_mut() {
            held.clear();
        }
    }

    /// The Synchronization run is over (or skipped): events flow to the binding's queue from now on.
    pub fn open(&self, shared: &Shared) {
        // Under the lock: an event arriving meanwhile must queue behind the held ones, not before them.
        let mut state = self.lock();
        let queue = &shared.queues[&self.binding(shared).queue];
        for task in state.held.take().unwrap_or_default() {
            queue.push(task);
        }
    }
}

/// Starts the binding `binding` of `hook`: resolves its kind, starts its watches and waits for their
/// first lists. Events are held until `Monitor::open`.
pub async fn start(shared: &Arc<Shared>, hook: usize, binding: usize) -> Result<Arc<Monitor>, String> {
    let config = &shared.hooks[hook].loaded.config.kubernetes[binding];
    let resolved = shared.resolve(config.api_version.as_deref(), &config.kind).await?.ok_or_else(|| {
        format!(
            "{}: Cannot get GroupVersionResource info for apiVersion '{}' kind '{}' from api-server. Possibly CRD \
                 is not created before informers are started. Error was: the server has no resource of that kind",
            config.debug_name,
            config.api_version.as_deref().unwrap_or_default(),
            config.kind
        )
    })?;
    let monitor = Arc::new(Monitor {
        hook,
        binding,
        resolved,
        state: Mutex::new(State { entries: BTreeMap::new(), list_error: None, held: Some(Vec::new()) }),
        feeds: Mutex::default(),
    });
    if let Some(share) = &shared.share {
        let labels = config.labels.as_ref().map(|l| l.to_query()).unwrap_or_default();
        let fields = config.fields.clone().unwrap_or_default();
        let namespaces: Vec<Option<&str>> = match (&config.namespaces, monitor.resolved.namespaced) {
            (Namespaces::Named(names), true) => names.iter().map(|n| Some(n.as_str())).collect(),
            _ => vec![None],
        };
        for namespace in namespaces {
            share.join(&monitor.resolved.ar, namespace, &labels, &fields, &config.names);
        }
    }
    let (listed_tx, mut listed) = mpsc::unbounded_channel::<()>();
    let mut waiting = 0;
    match (&config.namespaces, monitor.resolved.namespaced) {
        (Namespaces::Labelled(selector), true) => {
            let namespaces = shared.resolve(Some("v1"), "Namespace").await?.ok_or("the server has no namespaces")?;
            let (_, events) = shared.hub.objects(&namespaces.ar, None, &selector.to_query());
            let (first_tx, mut first) = mpsc::unbounded_channel::<Vec<String>>();
            let task = tokio::spawn(follow_namespaces(shared.clone(), Arc::downgrade(&monitor), events, first_tx));
            monitor.feeds.lock().unwrap_or_else(|e| e.into_inner()).insert(String::new(), task.abort_handle());
            let names = tokio::time::timeout(LIST_LIMIT, first.recv())
                .await
                .map_err(|_| format!("the namespaces were not listed within {}s", LIST_LIMIT.as_secs()))?
                .ok_or("the namespace watch stopped")?;
            for namespace in names {
                waiting += watch_namespace(shared, &monitor, Some(&namespace), Some(listed_tx.clone()));
            }
        }
        (Namespaces::Named(names), true) => {
            for namespace in names {
                waiting += watch_namespace(shared, &monitor, Some(namespace), Some(listed_tx.clone()));
            }
        }
        _ => waiting += watch_namespace(shared, &monitor, None, Some(listed_tx.clone())),
    }
    drop(listed_tx);
    let deadline = tokio::time::Instant::now() + LIST_LIMIT;
    for _ in 0..waiting {
        match tokio::time::timeout_at(deadline, listed.recv()).await {
            Ok(Some(())) => {}
            _ => {
                return Err(format!(
                    "{} were not listed within {}s (why the list failed, if it did, is logged before this)",
                    monitor.resolved.qualified_plural(),
                    LIST_LIMIT.as_secs()
                ));
            }
        }
    }
    if let Some(err) = monitor.lock().list_error.take() {
        return Err(err);
    }
    Ok(monitor)
}

/// Starts the watches of one namespace (`None`: all, or a cluster-scoped kind), one per name when the
/// binding names objects; each says on `listed` when its first list is in. Returns how many.
fn watch_namespace(
    shared: &Arc<Shared>,
    monitor: &Arc<Monitor>,
    namespace: Option<&str>,
    listed: Option<mpsc::UnboundedSender<()>>,
) -> usize {
    let config = monitor.binding(shared);
    let mut labels = config.labels.as_ref().map(|l| l.to_query()).unwrap_or_default();
    if let Some(share) = &shared.share {
        labels = share.selector(&labels);
    }
    let by_name: Vec<Option<&String>> =
        if config.names.is_empty() { vec![None] } else { config.names.iter().map(Some).collect() };
    let mut started = 0;
    for name in by_name {
        let fields = [name.map(|n| format!("metadata.name={n}")), config.fields.clone()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(",");
        let feed: Arc<str> = format!("{}/{}", namespace.unwrap_or_default(), name.map_or("", |n| n.as_str())).into();
        let (_, events) = shared.hub.objects_with_fields(&monitor.resolved.ar, namespace, &labels, &fields);
        let task = tokio::spawn(follow(shared.clone(), Arc::downgrade(monitor), feed.clone(), events, listed.clone()));
        monitor.feeds.lock().unwrap_or_else(|e| e.into_inner()).insert(feed.to_string(), task.abort_handle());
        started += 1;
    }
    started
}

/// Stops a namespace's watches and forgets its objects, without events.
fn forget_namespace(monitor: &Monitor, namespace: &str) {
    let prefix = format!("{namespace}/");
    monitor.feeds.lock().unwrap_or_else(|e| e.into_inner()).retain(|feed, task| {
        let ours = feed.starts_with(&prefix);
        if ours {
            task.abort();
        }
        !ours
    });
    monitor.lock().entries.retain(|_, entry| !entry.feed.starts_with(&prefix));
}

/// Follows the namespaces a binding's `namespace.labelSelector` picks: their names at the end of the
/// first list on `first`, then watches started and stopped as they come and go.
async fn follow_namespaces(
    shared: Arc<Shared>,
    monitor: std::sync::Weak<Monitor>,
    mut events: impl futures::Stream<Item = watcher::Event<DynamicObject>> + Unpin,
    first: mpsc::UnboundedSender<Vec<String>>,
) {
    let mut initial = Some(Vec::new());
    let mut watched: std::collections::HashSet<String> = Default::default();
    while let Some(event) = events.next().await {
        let Some(monitor) = monitor.upgrade() else { return };
        match event {
            watcher::Event::InitApply(ns) | watcher::Event::Apply(ns) => {
                let name = ns.name_any();
                match initial.as_mut() {
                    Some(names) => names.push(name),
                    None if watched.insert(name.clone()) => {
                        tracing::info!(namespace = name.as_str(), "got ns, create dynamic watches");
                        watch_namespace(&shared, &monitor, Some(&name), None);
                    }
                    None => {}
                }
            }
            watcher::Event::Delete(ns) => {
                let name = ns.name_any();
                if let Some(names) = initial.as_mut() {
                    names.retain(|n| *n != name);
                } else if watched.remove(&name) {
                    tracing::info!(namespace = name.as_str(), "deleted ns, stop dynamic watches");
                    forget_namespace(&monitor, &name);
                }
            }
            watcher::Event::InitDone => {
                if let Some(names) = initial.take() {
                    watched.extend(names.iter().cloned());
                    let _ = first.send(names);
                }
            }
            watcher::Event::Init => {}
        }
    }
}

/// Follows one watch of a binding: its first list fills the snapshot quietly, then each change is
/// checked against the object's checksum and, if it is an event the binding asked for, queued (or held).
async fn follow(
    shared: Arc<Shared>,
    monitor: std::sync::Weak<Monitor>,
    feed: Arc<str>,
    mut events: impl futures::Stream<Item = watcher::Event<DynamicObject>> + Unpin,
    listed: Option<mpsc::UnboundedSender<()>>,
) {
    let mut first_list = true;
    while let Some(event) = events.next().await {
        let Some(monitor) = monitor.upgrade() else { return };
        match event {
            watcher::Event::Init => {}
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                changed(&shared, &monitor, &feed, object, first_list).await;
            }
            watcher::Event::Delete(object) => deleted(&shared, &monitor, object),
            watcher::Event::InitDone => {
                if first_list {
                    first_list = false;
                    if let Some(listed) = &listed {
                        let _ = listed.send(());
                    }
                }
            }
        }
    }
}

fn key_of(monitor: &Monitor, object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        namespace: object.namespace().unwrap_or_default(),
        kind: object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_else(|| monitor.resolved.ar.kind.clone()),
        name: object.name_any(),
    }
}

async fn changed(shared: &Shared, monitor: &Monitor, feed: &Arc<str>, mut object: DynamicObject, quiet: bool) {
    let config = monitor.binding(shared);
    if object.types.is_none() {
        object.types = Some(kube::api::TypeMeta {
            api_version: monitor.resolved.ar.api_version.clone(),
            kind: monitor.resolved.ar.kind.clone(),
        });
    }
    let key = key_of(monitor, &object);
    // An object on its way to another member makes no event, and its entry is left as the hooks last
    // saw it (out of the snapshots meanwhile): if the move is called off, a change made meanwhile is
    // still an event then.
    let back = match &shared.share {
        Some(share) => match share.seen(&monitor.held(&key), &monitor.resolved.ar, &object.metadata) {
            Seen::Ours => false,
            Seen::Back => true,
            Seen::Leaving | Seen::Stale => return,
        },
        None => false,
    };
    let json = match serde_json::to_string(&object) {
        Ok(json) => json,
        Err(err) => return tracing::error!("cannot write {} {} as JSON: {err}", key.kind, key.name),
    };
    // A first list that already failed is retried whole: the rest of it is not worth a filter's time.
    if quiet && monitor.lock().list_error.is_some() {
        return;
    }
    let filter_result = match &config.jq {
        Some(jq) => match jq_worker::apply(jq, &json).await {
            Ok(result) => Some(result),
            Err(err) => {
                let err = format!("apply filter for '{}/{}': {err}", config.debug_name, key.name);
                if quiet {
                    // A first list the filter cannot read: the binding's start fails and is retried.
                    monitor.lock().list_error.get_or_insert(err);
                    return;
                }
                return tracing::error!(
                    hook = shared.hooks[monitor.hook].loaded.name.as_str(),
                    binding = config.name.as_str(),
                    "{err}"
                );
            }
        },
        None => None,
    };
    let checksum = checksum(filter_result.as_deref().unwrap_or(&json));
    let filter_value = filter_result.as_deref().and_then(|text| serde_json::from_str(text).ok());
    let object_json: Option<Arc<str>> = config.keep_full_objects.then(|| Arc::from(json.as_str()));
    let entry =
        Entry { checksum, object: object_json.clone(), filter_result: filter_value.clone(), feed: feed.clone() };
    let mut state = monitor.lock();
    let before = state.entries.insert(key.clone(), entry).map(|e| e.checksum);
    let event = match before {
        _ if quiet => return,
        None => WatchEvent::Added,
        Some(sum) if sum != checksum || back => WatchEvent::Modified,
        Some(_) => return,
    };
    let object = object_json.and_then(|json| serde_json::from_str(&json).ok());
    queue_event(shared, monitor, &mut state, event, key, object, filter_value);
}

fn deleted(shared: &Arc<Shared>, monitor: &Arc<Monitor>, object: DynamicObject) {
    let config = monitor.binding(shared);
    let key = key_of(monitor, &object);
    let Some(entry) = monitor.lock().entries.remove(&key) else { return };
    let object = config.keep_full_objects.then(|| serde_json::to_value(&object).ok()).flatten();
    let held = monitor.held(&key);
    match &shared.share {
        // Said as a move-out says itself: looked at before the hooks hear of it.
        Some(share) if share.leaving(&held) => {
            let (shared, monitor, share) = (shared.clone(), monitor.clone(), share.clone());
            tokio::spawn(async move {
                if share.look(&shared.client, &monitor.resolved.ar, &held).await == Gone::Deleted {
                    let mut state = monitor.lock();
                    // Unless it came back to this member meanwhile: its Added is the last word then.
                    if !state.entries.contains_key(&key) {
                        queue_event(
                            &shared,
                            &monitor,
                            &mut state,
                            WatchEvent::Deleted,
                            key,
                            object,
                            entry.filter_result,
                        );
                    }
                }
            });
        }
        _ => {
            let mut state = monitor.lock();
            queue_event(shared, monitor, &mut state, WatchEvent::Deleted, key, object, entry.filter_result);
        }
    }
}

fn queue_event(
    shared: &Shared,
    monitor: &Monitor,
    state: &mut State,
    event: WatchEvent,
    key: ObjectKey,
    object: Option<serde_json::Value>,
    filter_result: Option<serde_json::Value>,
) {
    let config = monitor.binding(shared);
    if !config.events.contains(&event) {
        return;
    }
    let task = Task::Run {
        hook: monitor.hook,
        event: "Kubernetes",
        allow_failure: config.allow_failure,
        contexts: vec![Pending {
            binding: config.name.clone(),
            what: What::Event { event, object, filter_result: config.jq.as_ref().and(filter_result), key },
            group: config.group.clone(),
            snapshots: config.include_snapshots.clone(),
            v0: config.v0,
        }],
        unlock: Vec::new(),
    };
    match state.held.as_mut() {
        Some(held) => held.push(task),
        None => shared.queues[&config.queue].push(task),
    }
}

fn checksum(text: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish()
}
