//! Running the controller: resolves the parent type, picks the sync (the built-in one for Samples, a hook
//! for any resource given one, observe mode for anything else), and runs the driver inside what goes
//! around it: shutdown within the timeout, leader election, health, metrics and the request totals.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use tokio::sync::watch;

use super::crd::serves_samples;
use super::define;
use super::drive::observe;
use super::drive::poll::Poll;
use super::drive::watch::Watch;
use super::engine::{Context, Definition};
use super::leader::Election;
use super::serve::health::Health;
use super::serve::metrics::Metrics;
use super::serve::metrics_access::MetricsAccess;
use super::serve::{Secure, serve_health, serve_metrics, tls};
use super::settings::{Driver, Serve, Settings, Source};
use super::sync::{Shape, Syncer};
use crate::cluster::client::Connection;
use crate::cluster::read::Target;
use crate::cluster::resolve::{Gvr, Resolved, UnknownResource, resolve_gvr};

const STATS_EVERY: Duration = Duration::from_secs(60);
/// How many not-Ready parents `--once` names in its error.
const NAMED: usize = 5;

pub async fn run(conn: &Connection, settings: Settings) -> Result<()> {
    let Settings { source, namespace, driver, concurrency, once, election, serve, shutdown_timeout } = settings;
    let driver_name = match driver {
        Driver::Watch { .. } => "watch",
        Driver::Poll { .. } => "poll",
    };
    // Everything is resolved and checked before anything is served or written.
    let definitions = match source {
        Source::Manifests(paths) => define::from_manifests(conn, &paths).await?,
        Source::Flags { gvr, hook } => {
            let resolved = resolve_parent(conn, &gvr).await?;
            match hook {
                Some(hook) => vec![define::hooked(conn, resolved, &hook).await?],
                None if serves_samples(&gvr) => vec![define::built_in(resolved)],
                None => {
                    let (_, health) = start_serving(conn, &serve).await?;
                    let stop = stop_on_signal();
                    let namespace = namespace.filter(|_| resolved.namespaced);
                    let target = Target { resolved, namespace };
                    let resource = target.resolved.qualified_plural();
                    tracing::info!(
                        driver = driver_name,
                        resource,
                        "observing {resource} ({driver_name} driver); nothing is written"
                    );
                    health.synced();
                    let result = match driver {
                        Driver::Watch { .. } => observe::watch(conn, target, stop).await,
                        Driver::Poll { interval, .. } => observe::poll(conn, &target, interval, once, stop).await,
                    };
                    tracing::info!("requests sent: {}", conn.requests.snapshot());
                    return result;
                }
            }
        }
    };
    let (metrics, health) = start_serving(conn, &serve).await?;
    health.expect(definitions.len());
    let stop = stop_on_signal();
    let mut controllers = Vec::new();
    for definition in definitions {
        let namespace = namespace.clone().filter(|_| definition.family.parent.namespaced);
        let scope = namespace.as_deref().map_or("all namespaces".to_owned(), |ns| format!("namespace {ns}"));
        tracing::info!(
            driver = driver_name,
            namespace = namespace.as_deref(),
            controller = definition.name,
            "reconciling {} in {scope} ({driver_name} driver)",
            describe(&definition)
        );
        let ctx = Arc::new(Context::new(conn.client.clone(), definition, metrics.clone(), health.clone()));
        controllers.push((ctx, namespace));
    }
    let reconciling = Reconciling { controllers, driver, concurrency, once };
    let result = match election {
        Some(election) => lead_then_reconcile(conn, election, reconciling, stop, shutdown_timeout).await,
        None => {
            metrics.leader.set(1);
            drain_within(reconciling.run(stop.clone()), stop, shutdown_timeout).await
        }
    };
    tracing::info!("requests sent: {}", conn.requests.snapshot());
    result
}

/// The parent type, through discovery; the Sample CRD missing is said as such.
async fn resolve_parent(conn: &Connection, gvr: &Gvr) -> Result<Resolved> {
    match resolve_gvr(&conn.client, gvr).await {
        // Another version of Samples (example.com/v9/samples) is a resource the server lacks, not a missing CRD.
        Err(err)
            if serves_samples(gvr) && gvr.version == "v1alpha1" && err.downcast_ref::<UnknownResource>().is_some() =>
        {
            Err(anyhow!(
                "the Sample CRD (samples.example.com, v1alpha1) is not installed in this cluster; install it with \
                 `samplectl install-crd`"
            ))
        }
        other => other,
    }
}

/// Starts `/healthz`, `/readyz` and `/metrics` where asked, and the `--stats` line.
async fn start_serving(conn: &Connection, serve: &Serve) -> Result<(Arc<Metrics>, Arc<Health>)> {
    let metrics = Arc::new(Metrics::new(conn.requests.clone()));
    let health = Arc::new(Health::new(serve.patience, conn.answered.clone()));
    if let Some(addr) = serve.health {
        serve_health(addr, health.clone()).await?;
    }
    if let Some(to) = &serve.metrics {
        let secure = match &to.secure {
            Some(cert_dir) => Some(Secure {
                tls: tls::server_config(cert_dir.as_deref())?,
                access: Arc::new(MetricsAccess::new(conn.client.clone())),
            }),
            None => None,
        };
        serve_metrics(to.addr, metrics.clone(), secure).await?;
    }
    if serve.stats {
        let requests = conn.requests.clone();
        tokio::spawn(async move {
            let mut last = requests.snapshot();
            loop {
                tokio::time::sleep(STATS_EVERY).await;
                let now = requests.snapshot();
                tracing::info!("last minute: {}", now.since(&last));
                last = now;
            }
        });
    }
    Ok((metrics, health))
}

/// Turns true on SIGTERM or Ctrl-C.
fn stop_on_signal() -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        crate::signal::shutdown_signal().await;
        tracing::info!("stopping: finishing the work in flight");
        let _ = stop_tx.send(true);
    });
    stop
}

/// "Samples", "deployments.apps with hook ./sync (children: configmaps)", or "decorating
/// clusterroles.rbac.authorization.k8s.io with hook http://... (attachments: configmaps)".
fn describe(definition: &Definition) -> String {
    match &definition.sync {
        Syncer::Sample => "Samples".to_owned(),
        Syncer::Hook(hooks) => {
            let children: Vec<String> = definition.family.children.iter().map(Resolved::qualified_plural).collect();
            let (verb, kind) = match hooks.shape {
                Shape::Composite => ("", "children"),
                Shape::Decorator => ("decorating ", "attachments"),
            };
            format!(
                "{verb}{} with hook {} ({kind}: {})",
                definition.family.parent.qualified_plural(),
                hooks.sync.target,
                if children.is_empty() { "none".to_owned() } else { children.join(", ") }
            )
        }
    }
}

/// The controllers, each with the namespace it reconciles, and how they are driven.
struct Reconciling {
    controllers: Vec<(Arc<Context>, Option<String>)>,
    driver: Driver,
    concurrency: u16,
    once: bool,
}

impl Reconciling {
    /// Runs every controller's driver until `stop`, or with `once` until each parent was reconciled
    /// once; then sends the Events still queued. With `once`, a parent not Ready fails the run.
    async fn run(self, stop: watch::Receiver<bool>) -> Result<()> {
        let Reconciling { controllers, driver, concurrency, once } = self;
        let runs = controllers.into_iter().map(|(ctx, namespace)| {
            let stop = stop.clone();
            async move {
                let not_ready = match driver {
                    Driver::Watch { resync } => {
                        let resync = ctx.resync.unwrap_or(resync);
                        let watch = Watch { ctx: ctx.clone(), namespace, concurrency, resync };
                        watch.run(once, stop).await.map_err(anyhow::Error::from)
                    }
                    Driver::Poll { interval, resync } => {
                        let (concurrency, resync) = (usize::from(concurrency), ctx.resync.unwrap_or(resync));
                        let poll = Poll { ctx: ctx.clone(), namespace, interval, concurrency, resync };
                        poll.run(once, stop).await.map(|pass| pass.map(|pass| pass.not_ready))
                    }
                };
                ctx.flush_events().await;
                not_ready.map(|parents| match parents {
                    Some(parents) if !parents.is_empty() => {
                        Some(not_ready_message(&ctx.family.parent.ar.kind, &parents))
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

/// Runs `work` to its end; once `stop` turns true (SIGTERM), gives it `grace` to finish what is in flight
/// and then drops it, which aborts every reconcile still running, so that stopping can never hang.
async fn drain_within(
    work: impl Future<Output = Result<()>>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) -> Result<()> {
    tokio::pin!(work);
    tokio::select! {
        result = &mut work => return result,
        _ = stop.wait_for(|s| *s) => {}
    }
    match tokio::time::timeout(grace, work).await {
        Ok(result) => result,
        Err(_) => bail!(
            "the work in flight did not finish within --shutdown-timeout ({}s); abandoned it",
            grace.as_secs_f64()
        ),
    }
}

/// Waits for the lease, reconciles while holding it, and stops at once if it is lost: the work in flight
/// is aborted, not finished, since another replica may already lead, and the exit status is 1, as
/// controller-runtime's, so the pod restarts as a fresh standby. On SIGTERM it finishes (within
/// the shutdown timeout), then releases the lease so a standby takes over without waiting for it to expire.
async fn lead_then_reconcile(
    conn: &Connection,
    election: Election,
    reconciling: Reconciling,
    mut stop: watch::Receiver<bool>,
    shutdown_timeout: Duration,
) -> Result<()> {
    let (name, lease_namespace, identity) =
        (election.name.clone(), election.namespace.clone(), election.identity.clone());
    let ctx = reconciling.controllers.first().map(|(ctx, _)| ctx.clone()).ok_or_else(|| anyhow!("no controller"))?;
    let mut candidate = election.start(conn.client.clone(), ctx.health.clone())?;
    ctx.health.standby.store(true, Ordering::Relaxed);
    tracing::info!("waiting for the lease {lease_namespace}/{name} as {identity}");
    while !*candidate.leading.borrow_and_update() {
        tokio::select! {
            changed = candidate.leading.changed() => if changed.is_err() { bail!("leader election stopped") },
            _ = stop.wait_for(|s| *s) => {
                candidate.release().await;
                return Ok(());
            }
        }
    }
    ctx.health.standby.store(false, Ordering::Relaxed);
    ctx.metrics.leader.set(1);
    tracing::info!("leading as {identity}");

    let mut leading = candidate.leading.clone();
    let work = drain_within(reconciling.run(stop.clone()), stop, shutdown_timeout);
    let result = tokio::select! {
        result = work => result,
        _ = leading.wait_for(|l| !*l) => {
            tracing::warn!("lost the leader lease; abandoning the work in flight");
            Err(anyhow!("lost the leader lease; stopped reconciling"))
        }
    };
    ctx.metrics.leader.set(0);
    candidate.release().await;
    result
}
