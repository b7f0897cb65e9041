//! A ResourceGraphDefinition made into a running controller, as kro's RGD controller does it: its
//! finalizer, the graph read and checked (`rules::graph::rgd`), every type it names resolved through
//! discovery, the instance CRD created once and updated only when it differs, and the RGD's status
//! (kro's conditions, `state`, `topologicalOrder`, `resources`) written whenever it changes. What comes
//! out is an engine `Definition` for the instances, with the graph as its sync. An RGD being deleted
//! loses its finalizer and runs nothing; its CRD and instances stay, as kro leaves them by default.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::revisions;
use crate::cluster::client::Connection;
use crate::cluster::openapi;
use crate::cluster::resolve::{Gvr, Resolved, Unserved, resolve_gvr, resolve_kind};
use crate::cluster::scope;
use crate::controller::engine::request::{Failed, Fenced, bounded};
use crate::controller::engine::{Definition, Writer, now};
use crate::controller::rules::children::{Family, Update};
use crate::controller::rules::finalizer::Finalizer;
use crate::controller::rules::graph::check;
use crate::controller::rules::graph::compat;
use crate::controller::rules::graph::conditions::{Condition, Conditions};
use crate::controller::rules::graph::instance::{FINALIZER, Origin};
use crate::controller::rules::graph::rgd::{self, Features, Graph, Source};
use crate::controller::rules::selector::ParentSelector;
use crate::controller::sync::Syncer;
use crate::controller::sync::graph::{ExternalType, GraphSync};

pub const API_VERSION: &str = "kro.run/v1alpha1";
pub const KIND: &str = "ResourceGraphDefinition";
pub const PLURAL: &str = "resourcegraphdefinitions";
const DEPENDENTS: &[&str] = &["GraphRevisionsResolved", "GraphAccepted", "KindReady", "ControllerReady"];
/// How many times, and how far apart, the published schemas are read for a kind discovery serves.
const SCHEMA_TRIES: u32 = 10;
const SCHEMA_WAIT: Duration = Duration::from_millis(500);
/// How long a new or changed instance CRD may take to be Established.
const ESTABLISH_LIMIT: Duration = Duration::from_secs(30);

/// What kro's version label says on what samplectl writes for an RGD.
pub fn version_label() -> String {
    format!("samplectl-{}", env!("CARGO_PKG_VERSION"))
}

/// What became of one RGD.
pub enum Outcome {
    /// Its instances are to be reconciled with this definition.
    Run(Box<Definition>),
    /// It is being deleted: its finalizer is gone and nothing runs.
    Deleted,
}

/// Who writes an RGD's own objects (its finalizer and status, its instance CRD, its GraphRevisions).
pub enum Role<'a> {
    /// This process, as this writer.
    Write(&'a Writer),
    /// Another (a shard ring's coordinator): this process reads them, waits for the CRD as the graph
    /// wants it, and runs the instances.
    Follow,
}

/// Runs one RGD as kro's RGD controller would, writing its finalizer, instance CRD and status (unless it
/// follows another writer). An error is what stops it (also written in its status, where it can be) and
/// is tried again by the caller. `api` is the API the RGD was read through.
pub async fn define(
    conn: &Connection,
    api: &Api<DynamicObject>,
    rgd: &DynamicObject,
    (role, features): (Role<'_>, Features),
) -> Result<Outcome, String> {
    let name = rgd.metadata.name.clone().unwrap_or_default();
    let writer = match role {
        Role::Write(writer) => writer,
        Role::Follow if rgd.metadata.deletion_timestamp.is_some() => return Ok(Outcome::Deleted),
        Role::Follow => {
            let object = serde_json::to_value(rgd).unwrap_or(Value::Null);
            let now = now();
            let mut conditions = Conditions::read(Vec::new(), DEPENDENTS, &[], (1, false), &now, &now);
            let built = run(conn, (rgd, &object, features), &mut conditions, (&mut 1, None), Crd::Wait).await;
            return built.map(|(_, definition)| Outcome::Run(Box::new(definition)));
        }
    };
    let api = Fenced::new(api.clone(), writer);
    if rgd.metadata.deletion_timestamp.is_some() {
        set_finalizer(&api, rgd, false).await?;
        return Ok(Outcome::Deleted);
    }
    let rgd = set_finalizer(&api, rgd, true).await?;

    let object = serde_json::to_value(&rgd).unwrap_or(Value::Null);
    let generation = rgd.metadata.generation.unwrap_or_default();
    let created = object["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_owned();
    let now = now();
    let current: Vec<Condition> = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::from_value(c.clone()).ok())
        .collect();
    let accepted_before =
        current.iter().any(|c| c.kind == "GraphAccepted" && c.status == "True" && c.observed_generation == generation);
    let mut conditions =
        Conditions::read(current, DEPENDENTS, &["ResourceGraphAccepted"], (generation, false), &created, &now);
    let last_revision = object["status"]["lastIssuedRevision"].as_i64().unwrap_or_default();
    let mut revision = if accepted_before { last_revision.max(1) } else { last_revision + 1 };

    let mut issued = false;
    let revisions = Some((writer, last_revision, &mut issued));
    let result =
        run(conn, (&rgd, &object, features), &mut conditions, (&mut revision, revisions), Crd::Write(writer)).await;
    let (order, resources) = match &result {
        Ok((graph, _)) => (Some(json!(graph.order)), Some(json!(rgd::resource_dependencies(graph)))),
        Err(_) => (object["status"].get("topologicalOrder").cloned(), object["status"].get("resources").cloned()),
    };
    let active = ["GraphAccepted", "KindReady", "ControllerReady"].iter().all(|k| conditions.is_true(k));
    let mut status = json!({
        "conditions": conditions.into_list(),
        "state": if active { "Active" } else { "Inactive" },
    });
    if let Some(order) = order {
        status["topologicalOrder"] = order;
    }
    if let Some(resources) = resources.filter(|r| r.as_array().is_some_and(|a| !a.is_empty())) {
        status["resources"] = resources;
    }
    // A revision issued stays issued whatever failed after it (the CRD, the controller).
    if result.is_ok() || issued {
        status["lastIssuedRevision"] = json!(revision);
    } else if last_revision > 0 {
        status["lastIssuedRevision"] = json!(last_revision);
    }
    if object["status"] != status {
        let patch = json!({"status": status});
        if let Err(failed) = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::warn!(
                controller = name,
                "cannot write the status of ResourceGraphDefinition {name:?}: {}",
                failed.message()
            );
            if matches!(failed, Failed::Fenced) {
                return Err(failed.message());
            }
        }
    }
    let (_, definition) = result?;
    Ok(Outcome::Run(Box::new(definition)))
}

/// The RGD with kro's finalizer added (`wanted`) or taken off, as it is after. The patch names the
/// version it was read at, so that a change made meanwhile is not lost; a copy older than the RGD's own
/// last write (a retry holds the object as first seen, before its finalizer and status were written) is
/// read again once. An RGD gone while its finalizer was being taken off needs nothing more.
async fn set_finalizer(
    api: &Fenced<'_, DynamicObject>,
    rgd: &DynamicObject,
    wanted: bool,
) -> Result<DynamicObject, String> {
    let name = rgd.metadata.name.clone().unwrap_or_default();
    let failed = |failed: &Failed| {
        let what = if wanted { "add" } else { "remove" };
        format!("cannot {what} the finalizer of ResourceGraphDefinition {name:?}: {}", failed.message())
    };
    let mut current = rgd.clone();
    for attempt in 0..2 {
        let finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if finalizers.iter().any(|f| f == FINALIZER) == wanted {
            return Ok(current);
        }
        let next: Vec<String> = match wanted {
            true => finalizers.iter().cloned().chain([FINALIZER.to_owned()]).collect(),
            false => finalizers.iter().filter(|f| *f != FINALIZER).cloned().collect(),
        };
        let patch = json!({"metadata": {"finalizers": next, "resourceVersion": current.metadata.resource_version}});
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(patched) => return Ok(patched),
            Err(conflict) if conflict.status() == Some(409) && attempt == 0 => {
                current = match bounded(api.reads().get_opt(&name)).await {
                    Ok(Some(fresh)) => fresh,
                    Ok(None) if !wanted => return Ok(current),
                    Ok(None) => return Err(format!("ResourceGraphDefinition {name:?} is gone")),
                    Err(e) => return Err(failed(&e)),
                };
            }
            Err(e) => return Err(failed(&e)),
        }
    }
    Err(format!("ResourceGraphDefinition {name:?} kept changing while its finalizer was written"))
}

/// An RGD read from a manifest (`reconcile -f`), which is in no cluster: its graph checked, its types
/// resolved and its instance CRD made, as for one stored, with no status or finalizer to write.
pub async fn from_manifest(conn: &Connection, rgd: &Value, features: Features) -> Result<Definition, String> {
    let object: DynamicObject = serde_json::from_value(rgd.clone()).map_err(|e| e.to_string())?;
    let now = now();
    let mut conditions = Conditions::read(Vec::new(), DEPENDENTS, &[], (1, false), &now, &now);
    // Read from a file, before any Lease: the fence that is never closed.
    let writer = Writer::default();
    let built = run(conn, (&object, rgd, features), &mut conditions, (&mut 1, None), Crd::Write(&writer)).await;
    built.map(|(_, definition)| definition)
}

/// Checks the graph's expressions against the types of what they read and write as kro does before
/// it accepts an RGD (`rules::graph::check`), and declares the instance's status fields with the types
/// kro infers (`rgd::type_status`), from the OpenAPI schemas of its resources. Without them (an API
/// server that publishes no OpenAPI v3) the graph is accepted unchecked and the fields stay open, as
/// they are before typing. The error is kro's refusal.
async fn check_types(conn: &Connection, graph: &mut Graph, types: &[(String, String, String)]) -> Result<(), String> {
    let wanted: Vec<(String, String)> =
        types.iter().map(|(_, api_version, kind)| (api_version.clone(), kind.clone())).collect();
    let mut tries = 0;
    let found = loop {
        let found = match openapi::kind_schemas(&conn.client, &wanted).await {
            Ok(found) if !found.published => {
                tracing::warn!(
                    "the expressions of kind {} are not type-checked and its status fields stay untyped: the server \
                     publishes no OpenAPI v3 schemas",
                    graph.api.kind,
                );
                return Ok(());
            }
            Ok(found) => found,
            // A document named by an index a moment old may be gone (the schemas changed meanwhile): the
            // index is read again.
            Err(e) => {
                tries += 1;
                if tries < SCHEMA_TRIES {
                    tokio::time::sleep(SCHEMA_WAIT).await;
                    continue;
                }
                return Err(format!("cannot read the published OpenAPI schemas: {}", crate::error::describe(&e)));
            }
        };
        let missing =
            types.iter().find(|(_, api_version, kind)| !found.kinds.contains_key(&(api_version.clone(), kind.clone())));
        let Some((id, api_version, kind)) = missing else { break found };
        // A CRD's schema is published a moment after discovery serves it; kro, which reads types from
        // the published schemas only, calls a kind without one not found.
        tries += 1;
        if tries < SCHEMA_TRIES {
            tokio::time::sleep(SCHEMA_WAIT).await;
            continue;
        }
        let missing = match found.documents.contains(api_version) {
            true => format!("cannot resolve group version kind \"{api_version}, Kind={kind}\""),
            false => format!("cannot resolve group version {api_version:?}"),
        };
        return Err(format!(
            "failed to build resource {id:?}: failed to get schema for resource {id}: {missing}: schema not found"
        ));
    };
    let by_id: HashMap<String, Value> = types
        .iter()
        .filter_map(|(id, api_version, kind)| {
            Some((id.clone(), found.kinds.get(&(api_version.clone(), kind.clone()))?.clone()))
        })
        .collect();
    let vars = check::check(graph, &by_id, &found.object_meta)?;
    rgd::type_status(graph, &vars);
    Ok(())
}

/// Everything after the finalizer: the graph, its types, the CRD, the definition; each step marks its
/// condition.
async fn run(
    conn: &Connection,
    (rgd, object, features): (&DynamicObject, &Value, Features),
    conditions: &mut Conditions<'_>,
    (revision, revisions): (&mut i64, Option<(&Writer, i64, &mut bool)>),
    crd: Crd<'_>,
) -> Result<(Graph, Definition), String> {
    let mut graph = match rgd::build_with(object, features) {
        Ok(graph) => graph,
        Err(why) => {
            conditions.set_false("GraphAccepted", "InvalidResourceGraph", &why);
            conditions.set_false("GraphRevisionsResolved", "Failed", &why);
            return Err(why);
        }
    };
    let mut children: Vec<Resolved> = Vec::new();
    let mut external = Vec::new();
    let mut cluster_scoped = BTreeSet::new();
    let mut plurals = BTreeMap::new();
    let mut read_types = Vec::new();
    for node in &graph.nodes {
        let resolved = match resolve_kind(&conn.client, &node.api_version, &node.kind).await {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(unserved)) => {
                // kro's words, from its schema resolver.
                let (what, api_version, kind) = (&node.id, &node.api_version, &node.kind);
                let missing = match unserved {
                    Unserved::GroupVersion => format!("cannot resolve group version {api_version:?}"),
                    Unserved::Kind => format!("cannot resolve group version kind \"{api_version}, Kind={kind}\""),
                };
                let why = format!(
                    "failed to build resource {what:?}: failed to get schema for resource {what}: {missing}: schema not found"
                );
                conditions.set_false("GraphAccepted", "InvalidResourceGraph", &why);
                return Err(why);
            }
            Err(e) => return Err(crate::error::describe_any(&e)),
        };
        if !resolved.namespaced {
            cluster_scoped.insert((resolved.ar.api_version.clone(), resolved.ar.kind.clone()));
        }
        plurals.insert((resolved.ar.api_version.clone(), resolved.ar.kind.clone()), resolved.ar.plural.clone());
        read_types.push((node.id.clone(), resolved.ar.api_version.clone(), resolved.ar.kind.clone()));
        match &node.source {
            Source::Template(_) => {
                if !children
                    .iter()
                    .any(|c| c.ar.api_version == resolved.ar.api_version && c.ar.kind == resolved.ar.kind)
                {
                    children.push(resolved);
                }
            }
            Source::External { .. } => external.push(ExternalType {
                id: node.id.clone(),
                api_version: resolved.ar.api_version.clone(),
                kind: resolved.ar.kind.clone(),
                plural: resolved.ar.plural.clone(),
                namespaced: resolved.namespaced,
            }),
        }
    }
    if let Err(why) = check_types(conn, &mut graph, &read_types).await {
        conditions.set_false("GraphAccepted", "InvalidResourceGraph", &why);
        conditions.set_false("GraphRevisionsResolved", "Failed", &why);
        return Err(why);
    }
    conditions.set_true("GraphAccepted", "Valid", "resource graph and schema are valid");
    // A stored RGD's snapshot is issued as kro's GraphRevision (`revisions`); one read from a file has none.
    if let Some((writer, last_issued, issued)) = revisions {
        match revisions::revise(conn, rgd, object, &graph, last_issued, &version_label(), writer).await {
            Ok(Some(number)) => {
                *revision = number;
                *issued = true;
            }
            Ok(None) => {}
            Err(why) => {
                conditions.set_false("GraphRevisionsResolved", "Failed", &why);
                return Err(why);
            }
        }
    }
    conditions.set_true("GraphRevisionsResolved", "Resolved", &format!("revision {revision} compiled and active"));

    let name = rgd.metadata.name.clone().unwrap_or_default();
    let uid = rgd.metadata.uid.clone().unwrap_or_default();
    let allow_breaking = rgd
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(compat::ALLOW_BREAKING_ANNOTATION))
        .is_some_and(|v| v == "true");
    if let Err(why) = ensure_crd(conn, &graph, (&name, &uid), allow_breaking, crd).await {
        conditions.set_false("KindReady", "Failed", &why);
        return Err(why);
    }
    conditions.set_true("KindReady", "Ready", &format!("kind {} has been accepted and ready", graph.api.kind));

    let gvr = Gvr::parse(&format!("{}/{}", graph.api.api_version(), graph.api.plural))?;
    let parent = match resolve_gvr(&conn.client, &gvr).await {
        Ok(parent) => parent,
        Err(e) => {
            let why = crate::error::describe_any(&e);
            conditions.set_false("ControllerReady", "FailedToStart", &why);
            return Err(why);
        }
    };
    let family = Family { parent, children, label_owned: true };
    if let Some(why) = family.mismatch() {
        conditions.set_false("ControllerReady", "FailedToStart", &why);
        return Err(why);
    }
    let origin = Origin { rgd_name: name.clone(), rgd_uid: uid, version: version_label(), cluster_scoped, plurals };
    let definition = Definition {
        name: name.clone(),
        family,
        sync: Syncer::Graph(Box::new(GraphSync { graph: graph.clone(), origin, external })),
        finalizer: Finalizer { name: FINALIZER.into(), enabled: true },
        selector: ParentSelector::default(),
        resync: None,
        updates: Vec::<Update>::new(),
        adoption: None,
        rolling: None,
        // kro looks at an instance again when its generation moves (or its suspension flips), not
        // when its status does; the status written here would otherwise start another reconcile.
        ignore_status_changes: true,
    };
    conditions.set_true("ControllerReady", "Running", "controller is running");
    Ok((graph, definition))
}

/// The instance CRD as the graph wants it, with kro's labels.
fn desired_crd(graph: &Graph, (rgd_name, rgd_uid): (&str, &str)) -> Value {
    let mut desired = graph.crd.clone();
    let labels = &mut desired["metadata"]["labels"];
    labels["kro.run/owned"] = json!("true");
    labels["kro.run/kro-version"] = json!(version_label());
    labels["kro.run/resource-graph-definition-id"] = json!(rgd_uid);
    labels["kro.run/resource-graph-definition-name"] = json!(rgd_name);
    desired
}

/// Whether an existing instance CRD must be written to be `desired` (as kro: only when its schema or
/// names change); refused, in kro's words, when kro does not own it, another RGD does, or the change
/// breaks stored instances unless `allow_breaking`.
fn stale(
    existing: &CustomResourceDefinition,
    desired: &Value,
    rgd_name: &str,
    allow_breaking: bool,
) -> Result<bool, String> {
    let crd_name = existing.metadata.name.clone().unwrap_or_default();
    let labels = existing.metadata.labels.as_ref();
    let owner = labels.and_then(|l| l.get("kro.run/resource-graph-definition-name"));
    if labels.and_then(|l| l.get("kro.run/owned")).is_none_or(|v| v != "true") {
        return Err(format!("failed to update CRD {crd_name}: CRD already exists and is not owned by KRO"));
    }
    if owner.is_some_and(|o| o != rgd_name) {
        return Err(format!(
            "failed to update CRD {crd_name}: CRD is owned by another ResourceGraphDefinition {}",
            owner.cloned().unwrap_or_default()
        ));
    }
    let current = serde_json::to_value(existing).unwrap_or(Value::Null);
    let report = compat::compare_versions(&current["spec"]["versions"], &desired["spec"]["versions"])
        .map_err(|e| format!("failed to check schema compatibility: {e}"))?;
    if !report.breaking.is_empty() && !allow_breaking {
        return Err(format!("cannot update CRD {crd_name}: breaking changes detected: {}", report.summary()));
    }
    Ok(report.has_changes() || current["spec"]["names"] != desired["spec"]["names"])
}

/// `None` when the instance CRD is as the graph wants it; else what is not yet.
async fn crd_as_wanted(
    conn: &Connection,
    graph: &Graph,
    rgd: (&str, &str),
    allow_breaking: bool,
) -> Result<Option<String>, String> {
    let crds: Api<CustomResourceDefinition> = scope::cluster(conn.client.clone());
    let crd_name = graph.api.crd_name();
    let existing = crds.get_opt(&crd_name).await.map_err(|e| crate::error::describe(&e))?;
    let Some(existing) = existing else { return Ok(Some(format!("CRD {crd_name} is not there yet"))) };
    match stale(&existing, &desired_crd(graph, rgd), rgd.0, allow_breaking)? {
        true => Ok(Some(format!("CRD {crd_name} is not as the graph wants it yet"))),
        false => Ok(None),
    }
}

/// What becomes of the instance CRD.
#[derive(Clone, Copy)]
enum Crd<'a> {
    /// Made or updated as the graph wants it, each write through the writer's fence.
    Write(&'a Writer),
    /// Waited for, as the graph wants it, for another process (a ring's coordinator) writes it.
    Wait,
}

/// Creates the instance CRD when it is missing; otherwise refuses one kro (or samplectl) does not own or
/// another RGD does, refuses a change that breaks stored instances unless `allow_breaking`
/// (`rules::graph::compat`), and updates it only when its schema or names change. Waits for it to be
/// Established. With `Crd::Wait`, writes nothing and waits (up to `ESTABLISH_LIMIT`) until the CRD is as
/// it would have written it.
async fn ensure_crd(
    conn: &Connection,
    graph: &Graph,
    (rgd_name, rgd_uid): (&str, &str),
    allow_breaking: bool,
    mode: Crd<'_>,
) -> Result<(), String> {
    let writer = match mode {
        Crd::Write(writer) => writer,
        Crd::Wait => {
            let deadline = tokio::time::Instant::now() + ESTABLISH_LIMIT;
            loop {
                match crd_as_wanted(conn, graph, (rgd_name, rgd_uid), allow_breaking).await {
                    Ok(None) => break,
                    Ok(Some(why)) | Err(why) if tokio::time::Instant::now() >= deadline => {
                        return Err(format!("waiting for the ring's coordinator to write the CRD: {why}"));
                    }
                    _ => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
            let crds: Api<CustomResourceDefinition> = scope::cluster(conn.client.clone());
            let crd_name = graph.api.crd_name();
            return crate::controller::crd::wait_established(crds, &crd_name, ESTABLISH_LIMIT)
                .await
                .map_err(|e| format!("CRD {crd_name} is not ready: {}", crate::error::describe_any(&e)));
        }
    };
    let crds = Fenced::new(scope::cluster::<CustomResourceDefinition>(conn.client.clone()), writer);
    let crd_name = graph.api.crd_name();
    let desired = desired_crd(graph, (rgd_name, rgd_uid));
    match bounded(crds.reads().get_opt(&crd_name)).await.map_err(|failed| failed.message())? {
        None => {
            let crd: CustomResourceDefinition =
                serde_json::from_value(desired).map_err(|e| format!("the CRD {crd_name} cannot be made: {e}"))?;
            crds.create(&PostParams::default(), &crd)
                .await
                .map_err(|failed| format!("failed to create CRD {crd_name}: {}", failed.message()))?;
            tracing::info!(controller = rgd_name, "created CustomResourceDefinition {crd_name}");
        }
        Some(existing) => {
            if stale(&existing, &desired, rgd_name, allow_breaking)? {
                // Only over the CRD as it was read and judged: a leader that stalled here after losing
                // its Lease must not put back an older graph over the next leader's (a 409 instead).
                let patch = json!({
                    "metadata": {"labels": desired["metadata"]["labels"], "resourceVersion": existing.metadata.resource_version},
                    "spec": desired["spec"],
                });
                crds.patch(&crd_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|failed| format!("failed to update CRD {crd_name}: {}", failed.message()))?;
                tracing::info!(controller = rgd_name, "updated CustomResourceDefinition {crd_name}");
            }
        }
    }
    crate::controller::crd::wait_established(crds.reads().clone(), &crd_name, ESTABLISH_LIMIT)
        .await
        .map_err(|e| format!("CRD {crd_name} is not ready: {}", crate::error::describe_any(&e)))
}
