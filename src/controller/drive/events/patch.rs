//! A successful run's `$KUBERNETES_PATCH_PATH` operations, sent in order as shell-operator sends them,
//! each failure collected and the run failed if any. Every write goes through the process's fence
//! (`Fenced`) (under leader election, nothing is sent once the Lease may have passed to another), and the
//! writes that replace a whole object (CreateOrUpdate, JQPatch) carry the resourceVersion they read, and
//! are read again and retried on a conflict.

use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};

use super::Shared;
use super::jq_worker;
use crate::cluster::resolve::Resolved;
use crate::cluster::scope;
use crate::controller::engine::request::{Failed, Fenced, bounded};
use crate::controller::rules::FIELD_MANAGER;
use crate::controller::rules::shell::patch::{IfExists, Operation, What};

/// How often a replace that met a conflict reads the object again and tries once more.
const CONFLICT_RETRIES: usize = 5;
/// How long a foreground `Delete` waits for the object to go.
const DELETE_WAIT: Duration = Duration::from_secs(20);

/// Sends `operations` in order; every failure is reported, joined.
pub async fn apply(shared: &Shared, operations: Vec<Operation>) -> Result<(), String> {
    let mut failed = Vec::new();
    for operation in &operations {
        if let Err(err) = apply_one(shared, operation).await {
            shared.forget_kind(api_version(operation), &operation.kind);
            failed.push(format!("{}: {err}", operation.describe()));
        }
    }
    match failed.len() {
        0 => Ok(()),
        _ => Err(crate::controller::rules::shell::schema::joined(&failed)),
    }
}

fn api_version(operation: &Operation) -> Option<&str> {
    Some(operation.api_version.as_str()).filter(|v| !v.is_empty())
}

async fn resolve(shared: &Shared, operation: &Operation) -> Result<Resolved, String> {
    shared.resolve(api_version(operation), &operation.kind).await?.ok_or_else(|| {
        format!("apiVersion '{}', kind '{}' is not supported by cluster", operation.api_version, operation.kind)
    })
}

fn said(failed: &Failed) -> String {
    failed.message()
}

fn code(failed: &Failed) -> Option<u16> {
    match failed {
        Failed::Api(err) => crate::error::status_code(err),
        _ => None,
    }
}

async fn apply_one(shared: &Shared, operation: &Operation) -> Result<(), String> {
    let resolved = resolve(shared, operation).await?;
    let namespace = Some(operation.namespace.as_str()).filter(|ns| resolved.namespaced && !ns.is_empty());
    let api =
        Fenced::new(scope::discovered::<DynamicObject>(shared.client.clone(), &resolved.ar, namespace), &shared.fence);
    let subresource = operation.subresource.trim_start_matches('/');
    let name = operation.name.as_str();
    match &operation.what {
        What::Create { object, if_exists } => {
            let object: DynamicObject =
                serde_json::from_value(object.clone()).map_err(|err| format!("cannot read the object: {err}"))?;
            let post = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() };
            let created = api.create(&post, &object).await;
            match created {
                Ok(_) => Ok(()),
                Err(failed) if code(&failed) == Some(409) && *if_exists == IfExists::Ignore => Ok(()),
                Err(failed) if code(&failed) == Some(409) && *if_exists == IfExists::Update => {
                    for _ in 0..CONFLICT_RETRIES {
                        let live = bounded(api.reads().get(name)).await.map_err(|f| said(&f))?;
                        let mut replacement = object.clone();
                        replacement.metadata.resource_version = live.metadata.resource_version;
                        match api.replace(name, &post, &replacement).await {
                            Ok(_) => return Ok(()),
                            Err(failed) if code(&failed) == Some(409) => continue,
                            Err(failed) => return Err(said(&failed)),
                        }
                    }
                    Err("the object kept changing while it was replaced".into())
                }
                Err(failed) => Err(said(&failed)),
            }
        }
        What::Delete { propagation } => {
            let params = DeleteParams {
                propagation_policy: Some(match *propagation {
                    "Foreground" => kube::api::PropagationPolicy::Foreground,
                    "Background" => kube::api::PropagationPolicy::Background,
                    _ => kube::api::PropagationPolicy::Orphan,
                }),
                ..Default::default()
            };
            match api.delete(name, &params).await {
                Err(failed) if code(&failed) == Some(404) => return Ok(()),
                Err(failed) => return Err(said(&failed)),
                Ok(_) => {}
            }
            if *propagation != "Foreground" {
                return Ok(());
            }
            // A foreground deletion is over when the object is gone.
            let deadline = tokio::time::Instant::now() + DELETE_WAIT;
            while tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match bounded(api.reads().get_opt(name)).await {
                    Ok(None) => return Ok(()),
                    Ok(Some(_)) => {}
                    Err(failed) => return Err(said(&failed)),
                }
            }
            Err(format!("still there {}s after its deletion", DELETE_WAIT.as_secs()))
        }
        What::JqPatch(jq) => {
            let post = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() };
            for _ in 0..CONFLICT_RETRIES {
                let live = match bounded(api.reads().get(name)).await {
                    Err(failed) if code(&failed) == Some(404) && operation.ignore_missing_object => return Ok(()),
                    Err(failed) => return Err(said(&failed)),
                    Ok(live) => live,
                };
                let before = serde_json::to_value(&live).map_err(|err| err.to_string())?;
                let after = jq_worker::apply(jq, &before.to_string())
                    .await
                    .and_then(|text| {
                        serde_json::from_str(&text).map_err(|err| format!("jqFilter gave what is not JSON: {err}"))
                    })
                    .map_err(|err| format!("failed to apply jqFilter: {err}"))?;
                if after == before {
                    return Ok(());
                }
                // The filtered object keeps the resourceVersion it was read at: a change since is a conflict.
                let replaced = match subresource {
                    "" => {
                        let object: DynamicObject = serde_json::from_value(after)
                            .map_err(|err| format!("the filter's result is not an object: {err}"))?;
                        api.replace(name, &post, &object).await.map(drop)
                    }
                    sub => api.replace_subresource(sub, name, &post, &after).await.map(drop),
                };
                match replaced {
                    Ok(()) => return Ok(()),
                    Err(failed) if code(&failed) == Some(409) => continue,
                    Err(failed) => return Err(said(&failed)),
                }
            }
            Err("the object kept changing while it was filtered".into())
        }
        What::MergePatch(patch) | What::JsonPatch(patch) => {
            let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() };
            let patch = match &operation.what {
                What::JsonPatch(_) => Patch::Json::<serde_json::Value>(
                    serde_json::from_value(patch.clone())
                        .map_err(|err| format!("cannot read the JSON patch: {err}"))?,
                ),
                _ => Patch::Merge(patch.clone()),
            };
            let sent = match subresource {
                "" => api.patch(name, &params, &patch).await.map(drop),
                sub => api.patch_subresource(sub, name, &params, &patch).await.map(drop),
            };
            match sent {
                Err(failed) if code(&failed) == Some(404) && operation.ignore_missing_object => Ok(()),
                other => other.map_err(|f| said(&f)),
            }
        }
    }
}
