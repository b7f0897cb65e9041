//! A set of controllers run together: each definition made a [`Context`] (announced in the log), and
//! every one of them driven by the chosen driver until told to stop, or with `--once` until each parent
//! was reconciled once. Used for the controllers given on the command line or in manifests, and for
//! each controller object `--from-cluster` follows.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Result, bail};
use tokio::sync::watch;

use super::drive::poll::Poll;
use super::drive::watch::Watch;
use super::drive::watch::hub::Hub;
use super::engine::{Context, Definition, Writer};
use super::serve::Serving;
use super::settings::Driver;
use super::sync::{Shape, Syncer};
use crate::cluster::client::Connection;
use crate::cluster::resolve::Resolved;

/// How many not-Ready parents `--once` names in its error.
const NAMED: usize = 5;

/// How controllers are driven: the same for every controller of a process.
#[derive(Debug, Clone, Copy)]
pub struct Driving {
    pub driver: Driver,
    pub concurrency: u16,
    pub once: bool,
}

impl Driving {
    pub fn name(&self) -> &'static str {
        match self.driver {
            Driver::Watch { .. } => "watch",
            Driver::Poll { .. } => "poll",
        }
    }
}

/// The controllers, each with the namespace it reconciles, and how they are driven.
pub struct Reconciling {
    pub controllers: Vec<(Arc<Context>, Option<String>)>,
    driving: Driving,
    /// The watches the controllers share (of parents and children with the watch driver, of children
    /// with the poll driver).
    hub: Arc<Hub>,
}

impl Reconciling {
    /// Each definition made a controller reconciling `namespace` (all of them for a cluster-scoped
    /// parent, or when `None`), announced in the log.
    pub fn new(
        conn: &Connection,
        definitions: Vec<Definition>,
        namespace: Option<&str>,
        driving: Driving,
        writer: &Writer,
        serving: &Serving,
        hub: &Arc<Hub>,
    ) -> Self {
        let driver_name = driving.name();
        let mut controllers = Vec::new();
        for definition in definitions {
            let namespace = namespace.map(str::to_owned).filter(|_| definition.family.parent.namespaced);
            let scope = namespace.as_deref().map_or("all namespaces".to_owned(), |ns| format!("namespace {ns}"));
            tracing::info!(
                driver = driver_name,
                namespace = namespace.as_deref(),
                controller = definition.name,
                "reconciling {} in {scope} ({driver_name} driver)",
                describe(&definition)
            );
            let ctx = Arc::new(Context::new(conn.client.clone(), definition, writer.clone(), serving));
            controllers.push((ctx, namespace));
        }
        Reconciling { controllers, driving, hub: hub.clone() }
    }

    /// Runs every controller's driver until `stop`, or with `once` until each parent was reconciled
    /// once; then sends the Events still queued. With `once`, a parent not Ready fails the run.
    pub async fn run(self, stop: watch::Receiver<bool>) -> Result<()> {
        let Reconciling { controllers, driving: Driving { driver, concurrency, once }, hub } = self;
        let runs = controllers.into_iter().map(|(ctx, namespace)| {
            let (stop, hub) = (stop.clone(), hub.clone());
            async move {
                // The adopter's drivers stop with the controller's own, however it ends.
                let (own_done, own_ended) = watch::channel(false);
                let adopting =
                    adopt(ctx.clone(), hub.clone(), namespace.clone(), driver, concurrency, [stop.clone(), own_ended]);
                let own = async {
                    let result = drive(ctx.clone(), hub, namespace, driver, concurrency, once, stop).await;
                    let _ = own_done.send(true);
                    result
                };
                let (not_ready, ()) = futures::join!(own, adopting);
                ctx.flush_events().await;
                not_ready.map(|parents| match parents {
                    Some(parents) if !parents.is_empty() => {
                        Some(not_ready_message(&ctx.definition.family.parent.ar.kind, &parents))
                    }
                    _ => None,
                })
            }
        });
        let mut problems = Vec::new();
        for result in futures::future::join_all(runs).await {
            problems.extend(result?);
        }
        match problems.is_empty() {
            true => Ok(()),
            false => bail!("{}", problems.join("\n")),
        }
    }
}

/// Drives `ctx`'s parents in `namespace` until `stop` (or, with `once`, until each was reconciled
/// once); the parents not Ready, with `once`.
async fn drive(
    ctx: Arc<Context>,
    hub: Arc<Hub>,
    namespace: Option<String>,
    driver: Driver,
    concurrency: u16,
    once: bool,
    stop: watch::Receiver<bool>,
) -> Result<Option<Vec<String>>> {
    match driver {
        Driver::Watch { resync } => {
            let resync = ctx.definition.resync.unwrap_or(resync);
            let watch = Watch { ctx, hub, namespace, concurrency, resync };
            watch.run(once, stop).await.map_err(anyhow::Error::from)
        }
        Driver::Poll { interval, resync } => {
            let (concurrency, resync) = (usize::from(concurrency), ctx.definition.resync.unwrap_or(resync));
            let poll = Poll { ctx, hub, namespace, interval, concurrency, resync };
            poll.run(once, stop).await.map(|pass| pass.map(|pass| pass.not_ready))
        }
    }
}

/// In a shard ring, serves the parents of gone members that the adoption records give this member
/// (`engine::adopting`) until `stop`: a context of the controller, and a driver, for each gone label
/// the records lead to this member from, started when a record first does and stopped once the
/// records no longer do (the coordinator retires a record once no parent carries its label).
async fn adopt(
    ctx: Arc<Context>,
    hub: Arc<Hub>,
    namespace: Option<String>,
    driver: Driver,
    concurrency: u16,
    [mut stop, mut own_ended]: [watch::Receiver<bool>; 2],
) {
    let Some(adopting) = ctx.adopting().filter(|a| !a.adopter).cloned() else { return };
    let mut records = adopting.records.clone();
    let mut running: HashMap<String, (watch::Sender<bool>, tokio::task::JoinHandle<()>)> = HashMap::new();
    let plural = &ctx.definition.family.parent.ar.plural;
    loop {
        // The labels the records lead to this member from, and those of members silent (three renewals
        // missed, or a renew deadline): their watch is started before a record can name them, so that it
        // has listed them by the time one does (nothing of theirs is reconciled before).
        let wanted = {
            let published = records.borrow_and_update();
            let mut wanted = published.adoptions.reaching(&adopting.own);
            wanted.extend(published.silent.iter().filter(|s| **s != adopting.own).cloned());
            wanted
        };
        if wanted.is_empty() {
            adopting.forget_adopted();
        }
        running.retain(|label, (stop, _)| {
            let keep = wanted.contains(label);
            if !keep {
                tracing::info!(controller = ctx.definition.name, "no {plural} of {label} to serve");
                let _ = stop.send(true);
            }
            keep
        });
        for label in wanted {
            if running.contains_key(&label) {
                continue;
            }
            let Some(adopter) = ctx.adopter(&label) else { continue };
            tracing::info!(
                controller = ctx.definition.name,
                "ready to serve the {plural} of {label}, which is silent or gone, that the ring gives this member"
            );
            let (stop_one, stopped) = watch::channel(false);
            let adopter = Arc::new(adopter);
            let run = drive(adopter.clone(), hub.clone(), namespace.clone(), driver, concurrency, false, stopped);
            let task = tokio::spawn(async move {
                if let Err(err) = run.await {
                    tracing::warn!("serving a gone member's parents stopped: {}", crate::error::describe_any(&err));
                }
                adopter.flush_events().await;
            });
            running.insert(label, (stop_one, task));
        }
        tokio::select! {
            changed = records.changed() => if changed.is_err() { break },
            _ = stop.wait_for(|s| *s) => break,
            _ = own_ended.wait_for(|s| *s) => break,
        }
    }
    for (_, (stop, task)) in running {
        let _ = stop.send(true);
        let _ = task.await;
    }
}

/// "Samples", "deployments.apps with hook ./sync (children: configmaps)", or "decorating
/// clusterroles.rbac.authorization.k8s.io with hook http://... (attachments: configmaps)".
fn describe(definition: &Definition) -> String {
    match &definition.sync {
        Syncer::Sample => "Samples".to_owned(),
        Syncer::Hook(hooks) => {
            let children: Vec<String> = definition.family.children.iter().map(Resolved::qualified_plural).collect();
            let (verb, kind) = match hooks.shape {
                Shape::Composite | Shape::Graph => ("", "children"),
                Shape::Decorator => ("decorating ", "attachments"),
            };
            format!(
                "{verb}{} with hook {} ({kind}: {})",
                definition.family.parent.qualified_plural(),
                hooks.sync.target,
                if children.is_empty() { "none".to_owned() } else { children.join(", ") }
            )
        }
        Syncer::Graph(graph) => {
            let children: Vec<String> = definition.family.children.iter().map(Resolved::qualified_plural).collect();
            format!(
                "{} with {} (children: {})",
                definition.family.parent.qualified_plural(),
                graph.name(),
                if children.is_empty() { "none".to_owned() } else { children.join(", ") }
            )
        }
    }
}

/// `--once` found parents that are not Ready: says how many, and names a few with their reasons.
fn not_ready_message(kind: &str, parents: &[String]) -> String {
    let mut sorted = parents.to_vec();
    sorted.sort();
    let (count, verb) = match sorted.len() {
        1 => (format!("1 {kind}"), "is"),
        n => (format!("{n} {kind}s"), "are"),
    };
    let mut named = sorted.iter().take(NAMED).cloned().collect::<Vec<_>>().join(", ");
    if sorted.len() > NAMED {
        named.push_str(&format!(" and {} more", sorted.len() - NAMED));
    }
    format!("{count} {verb} not Ready: {named}")
}
