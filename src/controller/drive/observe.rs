//! Observe-only mode, for any resource other than Samples: the original program's job done properly.
//! Each pass (poll) or event (watch) reports what was added, changed or removed since samplectl last
//! looked. Nothing is ever written to the cluster.

use std::collections::HashMap;
use std::time::Duration;

use kube::api::ListParams;
use tokio::sync::watch;

use crate::cluster::changes::{Change, diff};
use crate::cluster::client::Connection;
use crate::cluster::read::{Item, Page, ReadAs, Target, list_all};
use crate::cluster::stream::{ChangeStream, Selectors};

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
        match list_all(&conn.client, target, &ListParams::default().limit(500), ReadAs::Objects).await {
            Ok(Page { items, .. }) => {
                report(target, &diff(&known, &items));
                known = items.into_iter().map(|i| (i.uid.clone(), i)).collect();
            }
            Err(err) if once => return Err(err),
            Err(err) => tracing::warn!(
                "cannot list {}: {}",
                target.resolved.qualified_plural(),
                crate::error::describe_any(&err)
            ),
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

/// Reports every object once, then every change, through the same resilient change stream as
/// `samplectl watch`: nothing lost across restarts and `410 Gone`, nothing reported twice.
pub async fn watch(conn: &Connection, target: Target, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    let selectors = Selectors { page_size: Some(500), ..Selectors::default() };
    let mut changes = ChangeStream::new(conn.client.clone(), target, ReadAs::Objects, selectors);
    let work = async {
        let listed = changes.list().await?;
        let added: Vec<_> = listed.items.into_iter().map(|item| (Change::Added, item)).collect();
        report(changes.target(), &added);
        loop {
            let next = changes.next().await?;
            report(changes.target(), &next);
        }
    };
    tokio::select! {
        result = work => result,
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}
