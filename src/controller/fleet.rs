//! `--from-cluster`: the controllers are the CompositeController and DecoratorController objects stored
//! in the cluster, followed as metacontroller's own Deployment follows them, and the
//! ResourceGraphDefinitions, followed as kro follows them (all with the `--target-label-selector`
//! labels). Each object is started when it appears, restarted when its spec changes (its generation
//! moves) and stopped when it goes; one that cannot run (a resource the server does not serve, a field
//! samplectl refuses, a parent type another CompositeController already reconciles) is said in a
//! warning and tried again every [`RETRY`] or when it changes, while the others run. Whichever of these
//! APIs the cluster serves is followed; one installed later is picked up when its CRD appears, seen by
//! a watch of that CRD (which costs nothing while nothing changes), or within [`RETRY`] when this
//! process may not watch CRDs or may not list the kind.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, TypeMeta};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::define::api::{API_VERSION, COMPOSITE, DECORATOR};
use super::define::from_object;
use super::define::graph::{self as rgd, Outcome, Role};
use super::define::load::from_value;
use super::drive::watch::hub::Hub;
use super::engine::{Context, Definition, Writer};
use super::reconciling::{Driving, Reconciling};
use super::rules::graph::rgd::Features;
use super::serve::Serving;
use super::shard::controllers::{Controllers, of_contexts};
use crate::cluster::client::Connection;
use crate::cluster::resolve::{Gvr, Resolved, UnknownResource, resolve_gvr};
use crate::cluster::scope;

/// How often a controller object that could not be run is tried again.
pub const RETRY: Duration = Duration::from_secs(30);

pub struct Fleet {
    /// Only the controller objects with these labels.
    pub selector: Option<String>,
    pub namespace: Option<String>,
    pub driving: Driving,
    /// The fence of the leader election it runs under, if any.
    pub writer: Writer,
    /// kro's feature gates, for its ResourceGraphDefinitions.
    pub kro_features: Features,
    /// With `--shard-ring`: the controllers whose parents the ring shares, kept as controller objects
    /// start and stop (the writer names this member).
    pub ring: Option<Controllers>,
    /// With `--shard-ring`: who writes the ResourceGraphDefinitions' own objects.
    pub graphs: Option<Graphs>,
}

/// In a shard ring, the member that coordinates writes what belongs to a ResourceGraphDefinition itself
/// (its finalizer and status, its instance CRD, its GraphRevisions), once for all members, fenced by the
/// coordinator's Lease; every member runs its instances, shared as any parents.
pub struct Graphs {
    /// The coordinator's writer: its fence is the coordinator's Lease.
    pub writer: Writer,
    /// Whether this member coordinates now.
    pub coordinating: watch::Receiver<bool>,
}

/// A controller object, as kind and name.
type Key = (&'static str, String);

/// One controller object being run.
struct Running {
    /// Its uid, generation and whether it is being deleted: a new one restarts it.
    version: Version,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
    contexts: Vec<Arc<Context>>,
    /// Their ids in the ring's controllers.
    in_ring: Vec<u64>,
}

/// What the fleet holds while it runs.
struct State<'a> {
    conn: &'a Connection,
    fleet: &'a Fleet,
    serving: &'a Serving,
    /// One set of watches for every controller object run.
    hub: Arc<Hub>,
    running: HashMap<Key, Running>,
    /// Objects that could not be run, with their version, to try again.
    failed: HashMap<Key, (Version, DynamicObject)>,
    /// Why each of them could not, as last logged with its version: a retry that fails the same way is
    /// not logged again (every 30 s for ever, otherwise).
    said: HashMap<Key, (Version, String)>,
    /// Objects being made into definitions, each in a task of its own (an RGD may wait half a minute
    /// for its CRD), so that one slow or broken object never holds up the others: the version asked
    /// for, and the tasks.
    defining: HashMap<Key, Version>,
    defined: JoinSet<Defined>,
    tasks: HashMap<Key, tokio::task::AbortHandle>,
    /// The API each kind followed is read through.
    apis: HashMap<&'static str, Api<DynamicObject>>,
    /// In a ring, the RGDs as last seen: started again when this member starts or stops coordinating,
    /// which decides whether it writes their own objects.
    graphs: HashMap<Key, DynamicObject>,
}

/// What making one object into definitions came to.
type Defined = (Key, Version, DynamicObject, Result<Option<Vec<Definition>>>);

type Version = (String, i64, bool);

fn version(object: &DynamicObject) -> Version {
    (
        object.metadata.uid.clone().unwrap_or_default(),
        object.metadata.generation.unwrap_or_default(),
        object.metadata.deletion_timestamp.is_some(),
    )
}

/// The kinds of stored controller objects followed: kind, API version, plural.
const KINDS: [(&str, &str, &str); 3] = [
    (COMPOSITE, API_VERSION, "compositecontrollers"),
    (DECORATOR, API_VERSION, "decoratorcontrollers"),
    (rgd::KIND, rgd::API_VERSION, rgd::PLURAL),
];

/// The name of the CRD that serves `kind`.
fn crd_name(kind: &str) -> String {
    let (_, api_version, plural) = KINDS.iter().find(|(k, _, _)| *k == kind).copied().unwrap_or(KINDS[0]);
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    format!("{plural}.{group}")
}

/// Whether a kind's CRD changed, or its watch failed.
type Installs = futures::stream::SelectAll<futures::stream::BoxStream<'static, (&'static str, bool)>>;

/// Watches the metadata of `kind`'s CRD: each change is a moment to look for the kind again; `false`
/// says the watch failed (this process may not watch CRDs), and the kind is then looked for every
/// [`RETRY`].
fn watch_install(conn: &Connection, kind: &'static str, installs: &mut Installs) {
    let crds = scope::cluster_metadata::<CustomResourceDefinition>(conn.client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={}", crd_name(kind)));
    let changes = watcher(crds, config).default_backoff().filter_map(move |event| {
        futures::future::ready(match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::InitApply(_)) => Some((kind, true)),
            Ok(_) => None,
            Err(_) => Some((kind, false)),
        })
    });
    installs.push(changes.boxed());
}

fn api_version_of(kind: &str) -> &'static str {
    KINDS.iter().find(|(k, _, _)| *k == kind).map_or(API_VERSION, |(_, v, _)| v)
}

impl State<'_> {
    /// Runs `object` as it is now, unless it already runs (or is being started) at this version: the old
    /// version stops, and the new one is made into definitions in a task of its own (`finish` starts it).
    async fn upsert(&mut self, kind: &'static str, mut object: DynamicObject) {
        let key = (kind, object.metadata.name.clone().unwrap_or_default());
        let now = version(&object);
        if kind == rgd::KIND && self.fleet.graphs.is_some() {
            self.graphs.insert(key.clone(), object.clone());
        }
        if self.running.get(&key).is_some_and(|r| r.version == now) || self.defining.get(&key) == Some(&now) {
            return;
        }
        self.stop(&key).await;
        // A list's items come without their type.
        object.types = Some(TypeMeta { api_version: api_version_of(kind).into(), kind: kind.into() });
        // /readyz waits for it as for a controller already started.
        self.serving.health.expect_more(1);
        self.defining.insert(key.clone(), now.clone());
        let writer = match &self.fleet.graphs {
            Some(graphs) if kind == rgd::KIND && *graphs.coordinating.borrow() => graphs.writer.clone(),
            _ => self.fleet.writer.clone(),
        };
        let (conn, features) = (self.conn.clone(), self.fleet.kro_features);
        let api = self.apis[kind].clone();
        let key_for_task = key.clone();
        let task = self.defined.spawn(async move {
            let result = define(&conn, (&writer, features), (kind, &api), &object).await;
            (key, now, object, result)
        });
        self.tasks.insert(key_for_task, task);
    }

    /// Starts what `upsert` defined, unless it was stopped or asked for again at another version since.
    fn finish(&mut self, (key, version, object, result): Defined) {
        self.serving.health.synced();
        if self.defining.get(&key) != Some(&version) {
            return;
        }
        self.defining.remove(&key);
        self.tasks.remove(&key);
        let result = result.and_then(|definitions| self.one_composite_per_parent(&key, definitions));
        match result {
            Ok(None) => {
                self.failed.remove(&key);
                self.said.remove(&key);
            }
            Ok(Some(definitions)) => {
                self.failed.remove(&key);
                self.said.remove(&key);
                let (stop, stopped) = watch::channel(false);
                let reconciling = Reconciling::new(
                    self.conn,
                    definitions,
                    self.fleet.namespace.as_deref(),
                    self.fleet.driving,
                    &self.fleet.writer,
                    self.serving,
                    &self.hub,
                );
                let contexts: Vec<Arc<Context>> = reconciling.controllers.iter().map(|(c, _)| c.clone()).collect();
                self.serving.health.expect_more(contexts.len());
                let in_ring = self
                    .fleet
                    .ring
                    .as_ref()
                    .map(|ring| ring.add(&of_contexts(&reconciling.controllers)))
                    .unwrap_or_default();
                let task = tokio::spawn(reconciling.run(stopped));
                self.running.insert(key, Running { version, stop, task, contexts, in_ring });
            }
            Err(err) => {
                let text = format!("{err:#}");
                let said = (version.clone(), text.clone());
                match self.said.get(&key) == Some(&said) {
                    true => tracing::debug!(controller = key.1, "{text}; still"),
                    false => tracing::warn!(
                        controller = key.1,
                        "{text}; trying again in {}s or when it changes",
                        RETRY.as_secs()
                    ),
                }
                self.said.insert(key.clone(), said);
                self.failed.insert(key, (version, object));
            }
        }
    }

    /// A CompositeController whose parent type another one already reconciles is refused.
    fn one_composite_per_parent(
        &self,
        key: &Key,
        definitions: Option<Vec<Definition>>,
    ) -> Result<Option<Vec<Definition>>> {
        let Some(definitions) = definitions else { return Ok(None) };
        if key.0 != COMPOSITE {
            return Ok(Some(definitions));
        }
        let (parent, selector) = (&definitions[0].family.parent, &definitions[0].selector);
        // Side by side only when no parent can be taken by both (as metacontroller's webhook-auth
        // example runs two, one for `auth: valid` parents and one for `auth: invalid`).
        let taken = self.running.iter().find(|((k, _), r)| {
            *k == COMPOSITE
                && r.contexts.iter().any(|c| {
                    same_type(&c.definition.family.parent, parent) && !c.definition.selector.disjoint(selector)
                })
        });
        if let Some(((_, other), _)) = taken {
            bail!(
                "cannot run {} {:?}: CompositeController {other:?} already reconciles {}; two CompositeControllers \
                 of one parent type must have label selectors that no parent can satisfy both",
                key.0,
                key.1,
                parent.qualified_plural()
            );
        }
        Ok(Some(definitions))
    }

    /// Stops the controller object `key` runs, if it runs, and waits for its work in flight.
    async fn stop(&mut self, key: &Key) {
        self.failed.remove(key);
        self.defining.remove(key);
        // A definition under way is of no use now; ended, so that it cannot be taken for a later one
        // of the same version (an RGD started again when coordination changes hands).
        if let Some(task) = self.tasks.remove(key) {
            task.abort();
        }
        let Some(running) = self.running.remove(key) else { return };
        if let Some(ring) = &self.fleet.ring {
            ring.remove(&running.in_ring);
        }
        let _ = running.stop.send(true);
        match running.task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(controller = key.1, "{err:#}"),
            Err(err) => tracing::warn!(controller = key.1, "stopped abruptly: {err}"),
        }
        // One stopped before it saw all its parents no longer holds /readyz back.
        for ctx in running.contexts {
            ctx.listed();
        }
        tracing::info!(controller = key.1, "stopped {} {:?}", key.0, key.1);
    }
}

/// The definitions `object` runs; `None` for an RGD being deleted, which runs nothing.
/// `api` is the API `object` was read through (an RGD's status is written through it).
async fn define(
    conn: &Connection,
    (writer, features): (&Writer, Features),
    (kind, api): (&'static str, &Api<DynamicObject>),
    object: &DynamicObject,
) -> Result<Option<Vec<Definition>>> {
    if kind == rgd::KIND {
        // In a ring, the writer for an RGD's own objects is the coordinator's, given only to the member
        // that coordinates; the others follow (see `Graphs`).
        let role = match writer.member.is_some() {
            true => Role::Follow,
            false => Role::Write(writer),
        };
        return match rgd::define(conn, api, object, (role, features)).await {
            Ok(Outcome::Run(definition)) => Ok(Some(vec![*definition])),
            Ok(Outcome::Deleted) => Ok(None),
            Err(why) => Err(anyhow!(
                "cannot run ResourceGraphDefinition {:?}: {why}",
                object.metadata.name.as_deref().unwrap_or_default()
            )),
        };
    }
    let parsed = from_value(serde_json::to_value(object)?)?;
    Ok(Some(from_object(conn, &parsed, features).await?))
}

fn same_type(a: &Resolved, b: &Resolved) -> bool {
    a.ar.api_version == b.ar.api_version && a.ar.kind == b.ar.kind
}

/// Which kinds of stored controller objects this process can follow now.
struct Served {
    /// The API of each kind the cluster serves and this process may list.
    apis: Vec<(&'static str, Api<DynamicObject>)>,
    /// The kinds it cannot (yet): not installed, or not allowed.
    missing: Vec<&'static str>,
    /// The API server's refusal of the first kind not allowed, in kubectl's words.
    refused: Option<String>,
    /// The kinds installed but not allowed: no CRD change says when they are, so looked for every
    /// [`RETRY`].
    forbidden: Vec<&'static str>,
}

/// The kinds among `kinds` this process can follow now.
async fn served_apis(conn: &Connection, kinds: &[&'static str]) -> Result<Served> {
    let mut served = Vec::new();
    let mut missing = Vec::new();
    let mut refused = None;
    let mut forbidden = Vec::new();
    for (kind, api_version, plural) in KINDS.iter().filter(|(k, _, _)| kinds.contains(k)) {
        let gvr = Gvr::parse(&format!("{api_version}/{plural}")).map_err(anyhow::Error::msg)?;
        let Some(resolved) = resolved_or_none(conn, &gvr).await? else {
            missing.push(*kind);
            continue;
        };
        let api: Api<DynamicObject> = scope::dynamic(conn.client.clone(), &resolved.ar, None);
        // Served but not this process's to read (its role names only some of the APIs): not followed,
        // as if not installed, rather than holding back the others.
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Err(err) if crate::error::status_code(&err) == Some(403) => {
                let why = crate::error::describe(&err);
                tracing::warn!("not following {kind} objects: {why}; trying again every {}s", RETRY.as_secs());
                refused.get_or_insert(why);
                missing.push(*kind);
                forbidden.push(*kind);
            }
            Err(err) => {
                // Not a refusal: its watch lists them again, with its own retries.
                tracing::warn!("cannot list {kind} objects yet: {}", crate::error::describe(&err));
                served.push((*kind, api));
            }
            Ok(_) => served.push((*kind, api)),
        }
    }
    Ok(Served { apis: served, missing, refused, forbidden })
}

/// The resource `gvr` names, or `None` when the server does not serve it; other failures (the server out
/// of reach) are errors.
async fn resolved_or_none(conn: &Connection, gvr: &Gvr) -> Result<Option<Resolved>> {
    match resolve_gvr(&conn.client, gvr).await {
        Ok(resolved) => Ok(Some(resolved)),
        Err(err) if err.downcast_ref::<UnknownResource>().is_some() => Ok(None),
        Err(err) => Err(err),
    }
}

const NOTHING_INSTALLED: &str = "neither metacontroller's CRDs (compositecontrollers.metacontroller.k8s.io, \
     decoratorcontrollers.metacontroller.k8s.io) nor kro's (resourcegraphdefinitions.kro.run) are installed in this \
     cluster; install them with `samplectl install-crd --metacontroller` or `samplectl install-crd --kro`";

type Events = futures::stream::SelectAll<
    futures::stream::BoxStream<'static, (&'static str, Result<watcher::Event<DynamicObject>, watcher::Error>)>,
>;

impl Fleet {
    /// Runs the cluster's controller objects until `stop`; with `--once`, each parent of each once.
    pub async fn run(self, conn: &Connection, serving: &Serving, mut stop: watch::Receiver<bool>) -> Result<()> {
        let all: Vec<&'static str> = KINDS.iter().map(|(k, _, _)| *k).collect();
        let Served { apis, mut missing, refused, forbidden } = served_apis(conn, &all).await?;
        if apis.is_empty() {
            // Installed but not allowed is said as the API server says it, not as missing.
            bail!("{}", refused.as_deref().unwrap_or(NOTHING_INSTALLED));
        }
        if self.driving.once {
            return self.once(conn, &apis, serving, stop).await;
        }
        let config = match &self.selector {
            Some(selector) => watcher::Config::default().labels(selector),
            None => watcher::Config::default(),
        };
        let follow = |kind: &'static str, api: Api<DynamicObject>, events: &mut Events| {
            events.push(watcher(api, config.clone()).default_backoff().map(move |event| (kind, event)).boxed());
        };
        let mut events: Events = futures::stream::SelectAll::new();
        let mut expected = apis.len();
        let followed: HashMap<&'static str, Api<DynamicObject>> = apis.iter().cloned().collect();
        for (kind, api) in apis {
            follow(kind, api, &mut events);
        }
        let hub = Arc::new(Hub::new(conn.client.clone(), serving.health.clone()));
        let mut state = State {
            conn,
            fleet: &self,
            serving,
            hub,
            running: HashMap::new(),
            failed: HashMap::new(),
            said: HashMap::new(),
            defining: HashMap::new(),
            defined: JoinSet::new(),
            tasks: HashMap::new(),
            apis: followed,
            graphs: HashMap::new(),
        };
        let mut coordinating = self.graphs.as_ref().map(|g| g.coordinating.clone());
        let mut listing: HashMap<&'static str, HashSet<String>> = HashMap::new();
        let mut listed: HashSet<&'static str> = HashSet::new();
        // Kinds not installed wait for their CRD; those not allowed (or whose CRD cannot be watched) are
        // looked for at each retry.
        let mut installs: Installs = futures::stream::SelectAll::new();
        let mut polled: HashSet<&'static str> = forbidden.into_iter().collect();
        for kind in missing.iter().filter(|k| !polled.contains(*k)) {
            watch_install(conn, kind, &mut installs);
        }
        let take_up = |apis: Vec<(&'static str, Api<DynamicObject>)>,
                       state: &mut State<'_>,
                       events: &mut Events,
                       expected: &mut usize,
                       missing: &mut Vec<&'static str>| {
            for (kind, api) in apis {
                tracing::info!("{kind} objects are now served; following them");
                *expected += 1;
                state.apis.insert(kind, api.clone());
                follow(kind, api, events);
                missing.retain(|k| *k != kind);
            }
        };
        let mut retry = tokio::time::interval(RETRY);
        retry.tick().await;
        let mut cut = false;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                changed = async { coordinating.as_mut()?.changed().await.ok() }, if coordinating.is_some() => {
                    if changed.is_none() {
                        // Nobody tells any more (the member is stopping): nothing to follow.
                        coordinating = None;
                        continue;
                    }
                    let graphs: Vec<(Key, DynamicObject)> = state.graphs.drain().collect();
                    for (key, object) in graphs {
                        state.stop(&key).await;
                        state.upsert(key.0, object).await;
                    }
                }
                Some(defined) = state.defined.join_next(), if !state.defined.is_empty() => match defined {
                    Ok(defined) => state.finish(defined),
                    Err(err) if err.is_cancelled() => {}
                    Err(err) => tracing::warn!("making a controller object into a controller stopped abruptly: {err}"),
                },
                Some((kind, watched)) = installs.next(), if !installs.is_empty() => {
                    if watched && missing.contains(&kind) && let Ok(now) = served_apis(conn, &[kind]).await {
                        take_up(now.apis, &mut state, &mut events, &mut expected, &mut missing);
                    }
                    // A watch that failed, a CRD there but its kind not served (yet, or not to this
                    // process), or a look that failed: no later change need come, so the retry looks.
                    if missing.contains(&kind) {
                        polled.insert(kind);
                    }
                }
                _ = retry.tick() => {
                    let looked: Vec<&'static str> = missing.iter().copied().filter(|k| polled.contains(k)).collect();
                    if !looked.is_empty() && let Ok(now) = served_apis(conn, &looked).await {
                        take_up(now.apis, &mut state, &mut events, &mut expected, &mut missing);
                    }
                    let failed: Vec<(Key, DynamicObject)> =
                        state.failed.iter().map(|(k, (_, o))| (k.clone(), o.clone())).collect();
                    for ((kind, _), object) in failed {
                        state.upsert(kind, object).await;
                    }
                }
                Some((kind, event)) = events.next() => match event {
                    Ok(watcher::Event::Init) => {
                        listing.insert(kind, HashSet::new());
                    }
                    Ok(watcher::Event::InitApply(object)) => {
                        listing.entry(kind).or_default().insert(object.metadata.name.clone().unwrap_or_default());
                        state.upsert(kind, object).await;
                    }
                    Ok(watcher::Event::InitDone) => {
                        if std::mem::take(&mut cut) {
                            tracing::info!("the watch of the controller objects is back");
                        }
                        let seen = listing.remove(kind).unwrap_or_default();
                        let gone: Vec<Key> = state
                            .running
                            .keys()
                            .chain(state.failed.keys())
                            .chain(state.defining.keys())
                            .filter(|(k, name)| *k == kind && !seen.contains(name))
                            .cloned()
                            .collect();
                        for key in gone {
                            state.said.remove(&key);
                            state.graphs.remove(&key);
                            state.stop(&key).await;
                        }
                        // /readyz: every kind served at the start listed, and (counted as each starts) every
                        // controller synced.
                        if listed.insert(kind) && listed.len() == expected {
                            serving.health.synced();
                        }
                    }
                    Ok(watcher::Event::Apply(object)) => state.upsert(kind, object).await,
                    Ok(watcher::Event::Delete(object)) => {
                        let key = (kind, object.metadata.name.clone().unwrap_or_default());
                        state.said.remove(&key);
                        state.graphs.remove(&key);
                        state.stop(&key).await;
                    }
                    Err(err) => {
                        if !std::mem::replace(&mut cut, true) {
                            tracing::warn!("the watch of the controller objects was cut ({err}); reconnecting");
                        }
                    }
                },
            }
        }
        let keys: Vec<Key> = state.running.keys().cloned().collect();
        for key in keys {
            state.stop(&key).await;
        }
        Ok(())
    }

    /// `--once`: every controller object listed now, each parent of each reconciled once. One that cannot
    /// run fails the run, after the others ran.
    async fn once(
        &self,
        conn: &Connection,
        apis: &[(&'static str, Api<DynamicObject>)],
        serving: &Serving,
        stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut params = ListParams::default();
        if let Some(selector) = &self.selector {
            params = params.labels(selector);
        }
        let mut definitions = Vec::new();
        let mut problems = Vec::new();
        for (kind, api) in apis {
            for mut object in api.list(&params).await?.items {
                object.types = Some(TypeMeta { api_version: api_version_of(kind).into(), kind: (*kind).into() });
                match define(conn, (&self.writer, self.kro_features), (kind, api), &object).await {
                    Ok(defined) => definitions.extend(defined.into_iter().flatten()),
                    Err(err) => problems.push(format!("{err:#}")),
                }
            }
        }
        serving.health.expect(definitions.len());
        let hub = Arc::new(Hub::new(conn.client.clone(), serving.health.clone()));
        let reconciling =
            Reconciling::new(conn, definitions, self.namespace.as_deref(), self.driving, &self.writer, serving, &hub);
        if let Err(err) = reconciling.run(stop).await {
            problems.push(format!("{err:#}"));
        }
        match problems.is_empty() {
            true => Ok(()),
            false => bail!("{}", problems.join("\n")),
        }
    }
}
