//! An accepted RGD's GraphRevisions (`internal.kro.run/v1alpha1`), as kro's RGD controller issues
//! them: an immutable snapshot of the spec, `<rgd>-r00001` and on, issued when the spec's hash
//! (`rules::graph::revision`) differs from the latest revision's, with kro's labels, the RGD as its
//! controller owner, and the status kro's GraphRevision controller writes once the graph compiles
//! (`GraphVerified`, `topologicalOrder`, `resources`); the oldest beyond five are deleted. samplectl
//! compiles the graph itself, so a revision is verified as soon as it is issued. On a cluster without
//! kro's GraphRevision CRD, or where this process may not list them, nothing is issued and revisions
//! are only counted in the RGD's status. Unlike kro, samplectl puts no finalizer on a revision: the
//! garbage collector removes them with their RGD.

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::cluster::client::Connection;
use crate::cluster::scope;
use crate::controller::engine::request::{Failed, Fenced};
use crate::controller::engine::{Writer, now};
use crate::controller::rules::graph::conditions::Conditions;
use crate::controller::rules::graph::revision;
use crate::controller::rules::graph::rgd::{self, Graph};

const NAME_LABEL: &str = "kro.run/resource-graph-definition-name";
const HASH_LABEL: &str = "kro.run/graph-revision-hash";

fn api(conn: &Connection) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("internal.kro.run", "v1alpha1", "GraphRevision");
    scope::dynamic(conn.client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "graphrevisions"), None)
}

fn describe(e: kube::Error) -> String {
    crate::error::describe(&e)
}

/// Issues a revision for `rgd` (its stored object) if its spec changed since the latest, brings the
/// latest's status up to date, and deletes the oldest beyond five. The revision serving now, or `None`
/// when the cluster has no GraphRevision API. `last_issued` is the RGD's `status.lastIssuedRevision`.
pub async fn revise(
    conn: &Connection,
    rgd: &DynamicObject,
    object: &Value,
    graph: &Graph,
    last_issued: i64,
    version: &str,
    writer: &Writer,
) -> Result<Option<i64>, String> {
    let name = rgd.metadata.name.clone().unwrap_or_default();
    let api = Fenced::new(api(conn), writer);
    let listed = match api.reads().list(&ListParams::default().labels(&format!("{NAME_LABEL}={name}"))).await {
        Ok(listed) => listed,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        // A role written before samplectl issued revisions: the RGD runs, its revisions only counted.
        Err(kube::Error::Api(status)) if status.code == 403 => {
            tracing::warn!(controller = name, "graph revisions are not issued: {}", status.message);
            return Ok(None);
        }
        Err(e) => return Err(format!("listing graph revisions: {}", describe(e))),
    };
    let hash = revision::spec_hash(&object["spec"]);
    let number = |gr: &DynamicObject| gr.data["spec"]["revision"].as_i64().unwrap_or_default();
    let latest = listed.items.iter().max_by_key(|gr| number(gr));
    let current = match latest {
        Some(gr) if gr.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL)) == Some(&hash) => gr.clone(),
        _ => {
            let next = last_issued.max(latest.map_or(0, number)) + 1;
            let issued = issue(&api, rgd, object, (&hash, version), next).await?;
            tracing::info!(
                controller = name,
                "issued graph revision {}",
                issued.metadata.name.as_deref().unwrap_or("")
            );
            issued
        }
    };
    verify(&api, &current, graph).await?;
    let mut all: Vec<(String, i64)> =
        listed.items.iter().map(|gr| (gr.metadata.name.clone().unwrap_or_default(), number(gr))).collect();
    if !all.iter().any(|(n, _)| Some(n) == current.metadata.name.as_ref()) {
        all.push((current.metadata.name.clone().unwrap_or_default(), number(&current)));
    }
    for old in revision::beyond_kept(all) {
        match api.delete(&old, &DeleteParams::default()).await {
            Ok(()) => {}
            Err(failed) if failed.status() == Some(404) => {}
            Err(failed @ Failed::Fenced) => return Err(failed.message()),
            Err(failed) => {
                tracing::warn!(controller = name, "cannot delete graph revision {old}: {}", failed.message())
            }
        }
    }
    Ok(Some(number(&current)))
}

async fn issue(
    api: &Fenced<'_, DynamicObject>,
    rgd: &DynamicObject,
    object: &Value,
    (hash, version): (&str, &str),
    number: i64,
) -> Result<DynamicObject, String> {
    let name = rgd.metadata.name.clone().unwrap_or_default();
    let gr_name = revision::name(&name, number);
    let gr = json!({
        "apiVersion": "internal.kro.run/v1alpha1",
        "kind": "GraphRevision",
        "metadata": {
            "name": gr_name,
            "labels": {
                "kro.run/owned": "true",
                "kro.run/kro-version": version,
                NAME_LABEL: name,
                HASH_LABEL: hash,
            },
            "ownerReferences": [{
                "apiVersion": "kro.run/v1alpha1",
                "kind": "ResourceGraphDefinition",
                "name": name,
                "uid": rgd.metadata.uid,
                "controller": true,
            }],
        },
        "spec": {
            "revision": number,
            "snapshot": {"name": name, "generation": rgd.metadata.generation.unwrap_or_default(), "spec": object["spec"]},
        },
    });
    let gr: DynamicObject = serde_json::from_value(gr).map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &gr).await {
        Ok(created) => Ok(created),
        // Issued already (by an earlier try that did not see its answer): that one stands.
        Err(failed) if failed.status() == Some(409) => api.reads().get(&gr_name).await.map_err(describe),
        Err(failed) => Err(format!("creating graph revision {gr_name:?}: {}", failed.message())),
    }
}

/// Writes what kro's GraphRevision controller writes once a revision compiles, unless it is there.
async fn verify(api: &Fenced<'_, DynamicObject>, gr: &DynamicObject, graph: &Graph) -> Result<(), String> {
    let generation = gr.metadata.generation.unwrap_or(1);
    let object = serde_json::to_value(gr).unwrap_or(Value::Null);
    let created = object["metadata"]["creationTimestamp"].as_str().map(str::to_owned).unwrap_or_else(now);
    let current = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::from_value(c.clone()).ok())
        .collect();
    let now = now();
    let mut conditions = Conditions::read(current, &["GraphVerified"], &[], (generation, false), &created, &now);
    conditions.set_true("GraphVerified", "Verified", "graph revision compiled and verified");
    let mut status = json!({"conditions": conditions.into_list(), "topologicalOrder": graph.order});
    let resources = rgd::resource_dependencies(graph);
    if !resources.is_empty() {
        status["resources"] = json!(resources);
    }
    if object["status"] == status {
        return Ok(());
    }
    let name = gr.metadata.name.clone().unwrap_or_default();
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await
        .map(drop)
        .map_err(|failed| format!("writing the status of graph revision {name:?}: {}", failed.message()))
}
