//! Running the controller: picks the driver (poll or watch) and the sync (the built-in one for Samples, a
//! hook for any resource given one, observe mode for anything else), and wires up shutdown, leader
//! election, health, metrics and the request totals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, bail};
use tokio::sync::watch;

use super::children::Family;
use super::crd::serves_samples;
use super::engine::{Context, Syncer};
use super::health::{Health, Secure, serve_health, serve_metrics};
use super::hook::{Hook, Target as HookTarget};
use super::leader::{Election, default_identity};
use super::metrics::Metrics;
use super::metrics_access::MetricsAccess;
use super::observe;
use super::poll::Poll;
use super::watch::Watch;
use crate::cluster::client::Connection;
use crate::cluster::read::Target;
use crate::cluster::resolve::{Gvr, Resolved, UnknownResource, resolve_gvr};

/// How the controller runs: what `samplectl reconcile`'s flags say, already checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub gvr: Gvr,
    /// The namespace to reconcile; `None` for all of them.
    pub namespace: Option<String>,
    pub watch: bool,
    pub interval: Duration,
    pub concurrency: u16,
    pub resync: Duration,
    pub once: bool,
    pub stats: bool,
    pub leader_elect: bool,
    pub leader_election_id: String,
    pub leader_election_namespace: Option<String>,
    pub leader_election_identity: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub shutdown_timeout: Duration,
    pub health_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    pub metrics_secure: bool,
    pub metrics_cert_dir: Option<PathBuf>,
    /// A hook to sync with, in place of observing (or of the built-in sync, for Samples).
    pub hook: Option<HookSettings>,
}

/// `--hook` or `--hook-url`, and what goes with it.
#[derive(Debug, Clone)]
pub struct HookSettings {
    pub target: HookTarget,
    pub timeout: Duration,
    /// The child types it may manage (`--child`).
    pub children: Vec<Gvr>,
    /// `--finalize`: a finalizer on each parent, and the hook called with `finalizing: true` on deletion.
    pub finalize: bool,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "the Sample CRD (samples.example.com, v1alpha1) is not installed in this cluster; install it with `samplectl install-crd`"
)]
pub struct CrdMissing;

/// `--once` found parents that are not Ready: says how many, and names a few with their reasons.
#[derive(Debug, thiserror::Error)]
#[error("{}", not_ready_message(.0, .1))]
pub struct NotAllReady(String, Vec<String>);

const NAMED: usize = 5;

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

/// A hook's parent type whose CRD has no status subresource: writing status would change the generation
/// on every write and sync forever (metacontroller refuses these too).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0} has no status subresource: writing a hook's status to it would bump its generation and loop; add \
     `subresources: {{status: {{}}}}` to its CRD's version"
)]
pub struct NoStatusSubresource(String);

#[derive(Debug, thiserror::Error)]
#[error("lost the leader lease; stopped reconciling")]
pub struct LeaseLost;

#[derive(Debug, thiserror::Error)]
#[error("the work in flight did not finish within --shutdown-timeout ({0}s); abandoned it")]
pub struct DrainTimedOut(f64);

const STATS_EVERY: Duration = Duration::from_secs(60);

pub async fn run(conn: &Connection, args: &Settings) -> Result<()> {
    let gvr = &args.gvr;
    let is_samples = serves_samples(gvr);
    let resolved = match resolve_gvr(&conn.client, gvr).await {
        // Another version of Samples (example.com/v9/samples) is a resource the server lacks, not a missing CRD.
        Err(err) if is_samples && gvr.version == "v1alpha1" && err.downcast_ref::<UnknownResource>().is_some() => {
            return Err(CrdMissing.into());
        }
        other => other?,
    };
    let namespace = args.namespace.clone().filter(|_| resolved.namespaced);

    let metrics = Arc::new(Metrics::new(conn.requests.clone()));
    let health = Arc::new(Health::new(args.lease_duration, conn.answered.clone()));
    if let Some(addr) = args.health_addr {
        serve_health(addr, health.clone()).await?;
    }
    if let Some(addr) = args.metrics_addr {
        let secure = match args.metrics_secure {
            true => Some(Secure {
                tls: super::tls::server_config(args.metrics_cert_dir.as_deref())?,
                access: Arc::new(MetricsAccess::new(conn.client.clone())),
            }),
            false => None,
        };
        serve_metrics(addr, metrics.clone(), secure).await?;
    }

    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        crate::signal::shutdown_signal().await;
        tracing::info!("stopping: finishing the work in flight");
        let _ = stop_tx.send(true);
    });
    if args.stats {
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

    let driver = if args.watch { "watch" } else { "poll" };
    let scope = namespace.as_deref().map_or("all namespaces".to_owned(), |ns| format!("namespace {ns}"));
    let sync = match &args.hook {
        Some(hook) => Some(hooked(conn, resolved.clone(), hook).await?),
        None if is_samples => Some(built_in(resolved.clone())),
        None => None,
    };
    let result = if let Some((family, sync, finalize)) = sync {
        let what = match &sync {
            Syncer::Sample => "Samples".to_owned(),
            Syncer::Hook(hook) => {
                let children: Vec<String> = family.children.iter().map(Resolved::qualified_plural).collect();
                format!(
                    "{} with hook {} (children: {})",
                    family.parent.qualified_plural(),
                    hook.target,
                    if children.is_empty() { "none".to_owned() } else { children.join(", ") }
                )
            }
        };
        tracing::info!(driver, namespace = namespace.as_deref(), "reconciling {what} in {scope} ({driver} driver)");
        let ctx = Arc::new(Context::new(conn.client.clone(), family, sync, finalize, metrics.clone(), health.clone()));
        if args.leader_elect {
            lead_then_reconcile(conn, ctx, namespace, args, stop).await
        } else {
            metrics.leader.set(1);
            drain_within(reconcile_parents(ctx, namespace, args, stop.clone()), stop, args.shutdown_timeout).await
        }
    } else {
        let target = Target { resolved, namespace };
        let resource = target.resolved.qualified_plural();
        tracing::info!(driver, resource, "observing {resource} ({driver} driver); nothing is written");
        health.synced.store(true, Ordering::Relaxed);
        if args.watch {
            observe::watch(conn, target, stop).await
        } else {
            observe::poll(conn, &target, args.interval, args.once, stop).await
        }
    };
    tracing::info!("requests sent: {}", conn.requests.snapshot());
    result
}

/// The Sample controller: the built-in sync, with ConfigMaps as its one child type (a core type, known
/// without asking discovery).
fn built_in(samples: Resolved) -> (Family, Syncer, bool) {
    let configmaps = Resolved {
        ar: kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        namespaced: true,
        verbs: Vec::new(),
        subresources: Vec::new(),
    };
    (Family { parent: samples, children: vec![configmaps] }, Syncer::Sample, false)
}

/// A hook's controller: its child types resolved, and refused when they cannot work with the parent.
async fn hooked(conn: &Connection, parent: Resolved, hook: &HookSettings) -> Result<(Family, Syncer, bool)> {
    let mut children: Vec<Resolved> = Vec::new();
    for gvr in &hook.children {
        let child = resolve_gvr(&conn.client, gvr).await?;
        if !children.iter().any(|c| c.ar.api_version == child.ar.api_version && c.ar.kind == child.ar.kind) {
            children.push(child);
        }
    }
    let family = Family { parent, children };
    if let Some(why) = family.mismatch() {
        bail!("cannot reconcile with these child types: {why}");
    }
    if !family.parent.subresources.iter().any(|s| s == "status") {
        return Err(NoStatusSubresource(family.parent.qualified_plural()).into());
    }
    let hook_sync = Hook::new(hook.target.clone(), hook.timeout)?;
    Ok((family, Syncer::Hook(Box::new(hook_sync)), hook.finalize))
}

async fn reconcile_parents(
    ctx: Arc<Context>,
    namespace: Option<String>,
    args: &Settings,
    stop: watch::Receiver<bool>,
) -> Result<()> {
    let not_ready = if args.watch {
        let watch = Watch { ctx: ctx.clone(), namespace, concurrency: args.concurrency, resync: args.resync };
        watch.run(args.once, stop).await.map_err(anyhow::Error::from)
    } else {
        let poll = Poll {
            ctx: ctx.clone(),
            namespace,
            interval: args.interval,
            concurrency: usize::from(args.concurrency),
            resync: args.resync,
        };
        poll.run(args.once, stop).await.map(|pass| pass.map(|pass| pass.not_ready))
    };
    ctx.flush_events().await;
    match not_ready? {
        Some(parents) if !parents.is_empty() => Err(NotAllReady(ctx.family.parent.ar.kind.clone(), parents).into()),
        _ => Ok(()),
    }
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
        Err(_) => Err(DrainTimedOut(grace.as_secs_f64()).into()),
    }
}

/// Waits for the lease, reconciles while holding it, and stops at once if it is lost: the work in flight
/// is aborted, not finished, since another replica may already lead, and the exit status is 1, as
/// controller-runtime's, so the pod restarts as a fresh standby. On SIGTERM it finishes (within
/// --shutdown-timeout), then releases the lease so a standby takes over without waiting for it to expire.
async fn lead_then_reconcile(
    conn: &Connection,
    ctx: Arc<Context>,
    namespace: Option<String>,
    args: &Settings,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let election = Election {
        name: args.leader_election_id.clone(),
        namespace: args.leader_election_namespace.clone().unwrap_or_else(|| conn.default_namespace.clone()),
        identity: args.leader_election_identity.clone().unwrap_or_else(default_identity),
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    let (name, lease_namespace, identity) =
        (election.name.clone(), election.namespace.clone(), election.identity.clone());
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
    let work = drain_within(reconcile_parents(ctx.clone(), namespace, args, stop.clone()), stop, args.shutdown_timeout);
    let result = tokio::select! {
        result = work => result,
        _ = leading.wait_for(|l| !*l) => {
            tracing::warn!("lost the leader lease; abandoning the work in flight");
            Err(LeaseLost.into())
        }
    };
    ctx.metrics.leader.set(0);
    candidate.release().await;
    result
}
