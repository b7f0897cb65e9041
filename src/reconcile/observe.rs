//! Observe-only mode, for any resource other than Samples: the original program's job done properly.
//! Each pass (poll) or event (watch) reports what was added, changed or removed since samplectl last
//! looked. Nothing is ever written to the cluster.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::changes::{Change, diff};
use crate::client::Connection;
use crate::fetch::{Item, Page, Shape, Target, list_all, object_item};

fn report(target: &Target, changes: &[(Change, Item)]) {
    for (change, item) in changes {
        let verb = match change {
            Change::Added => "added",
            Change::Modified => "changed",
            Change::Deleted => "removed",
        };
        let object = match &item.namespace {
            Some(ns) => format!("{ns}/{}", item.name),
            None => item.name.clone(),
        };
        let kind = target.resolved.qualified_plural();
        tracing::info!(
            namespace = item.namespace.as_deref(),
            name = item.name,
            outcome = verb,
            "{kind} {object}: {verb}"
        );
    }
}

pub async fn poll(
    conn: &Connection,
    target: &Target,
    interval: Duration,
    once: bool,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut known = HashMap::new();
    loop {
        let started = tokio::time::Instant::now();
        match list_all(&conn.client, target, &ListParams::default().limit(500), Shape::Objects).await {
            Ok(Page { items, .. }) => {
                report(target, &diff(&known, &items));
                known = items.into_iter().map(|i| (i.uid.clone(), i)).collect();
            }
            Err(err) if once => return Err(err),
            Err(err) => tracing::warn!("cannot list {}: {err:#}", target.resolved.qualified_plural()),
        }
        if once {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep_until(started + interval) => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
    }
}

pub async fn watch(conn: &Connection, target: &Target, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    let api = match &target.namespace {
        Some(ns) => kube::Api::<DynamicObject>::namespaced_with(conn.client.clone(), ns, &target.resolved.ar),
        None => kube::Api::<DynamicObject>::all_with(conn.client.clone(), &target.resolved.ar),
    };
    let item = |object: DynamicObject| object_item(serde_json::to_value(object).unwrap_or_default(), &target.resolved);
    let mut known: HashMap<String, Item> = HashMap::new();
    let mut relisted: Vec<Item> = Vec::new();
    let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        match event {
            None => return Ok(()),
            Some(Err(err)) => tracing::warn!("watch of {}: {err}", target.resolved.qualified_plural()),
            Some(Ok(Event::Init)) => relisted.clear(),
            Some(Ok(Event::InitApply(object))) => relisted.push(item(object)),
            Some(Ok(Event::InitDone)) => {
                report(target, &diff(&known, &relisted));
                known = relisted.drain(..).map(|i| (i.uid.clone(), i)).collect();
            }
            Some(Ok(Event::Apply(object))) => {
                let item = item(object);
                let change = match known.get(&item.uid) {
                    None => Some(Change::Added),
                    Some(old) if old.resource_version != item.resource_version => Some(Change::Modified),
                    Some(_) => None,
                };
                if let Some(change) = change {
                    report(target, &[(change, item.clone())]);
                    known.insert(item.uid.clone(), item);
                }
            }
            Some(Ok(Event::Delete(object))) => {
                let item = item(object);
                known.remove(&item.uid);
                report(target, &[(Change::Deleted, item)]);
            }
        }
    }
}
