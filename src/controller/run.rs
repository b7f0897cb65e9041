//! Running the controller: resolves the parent type, picks the sync (the built-in one for Samples, a hook
//! for any resource given one, observe mode for anything else), and runs the driver inside what goes
//! around it: shutdown within the timeout, leader election, health, metrics and the request totals.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use tokio::sync::watch;

use super::crd::serves_samples;
use super::define;
use super::define::hooks_dir;
use super::drive::events::share::Share;
use super::drive::events::{self as hooks, Hooks};
use super::drive::observe;
use super::drive::watch::hub::Hub;
use super::engine::adopting::Adopting;
use super::engine::fence::Fence;
use super::engine::{Definition, Writer};
use super::fleet::{Fleet, Graphs};
use super::leader::{Candidate, Election};
use super::reconciling::{Driving, Reconciling};
use super::rules::adoption::{ANNOTATION, Published};
use super::rules::shard::RING_LABEL;
use super::serve::health::Health;
use super::serve::metrics::Metrics;
use super::serve::metrics_access::MetricsAccess;
use super::serve::{Secure, Serving, serve_health, serve_metrics, tls};
use super::settings::{Driver, Serve, Settings, Sharding, Source};
use super::shard::controllers::{Controllers, of_contexts};
use super::shard::coordinator::{Coordinator, HURRY, Members};
use super::shard::renewals::Renewals;
use crate::cluster::client::Connection;
use crate::cluster::read::Target;
use crate::cluster::resolve::{Gvr, Resolved, UnknownResource, resolve_gvr};

const STATS_EVERY: Duration = Duration::from_secs(60);

pub async fn run(conn: &Connection, settings: Settings) -> Result<()> {
    let Settings {
        source,
        namespace,
        driver,
        concurrency,
        once,
        election,
        sharding,
        serve,
        shutdown_timeout,
        kro_features,
    } = settings;
    let driving = Driving { driver, concurrency, once };
    // A shard member's adoption records, as its lists of the ring's Leases show them.
    let records = watch::channel(Published::default()).0;
    // Everything is resolved and checked before anything is served or written.
    let plan = match source {
        Source::Cluster { selector } => {
            let (writer, ring, graphs) = match &sharding {
                Some(sharding) => {
                    let coordinating = Coordinating::default();
                    let graphs = Graphs {
                        writer: Writer { member: None, fence: coordinating.fence.clone(), adopting: None },
                        coordinating: coordinating.now.subscribe(),
                    };
                    (member_writer(sharding, &records), Some(Controllers::default()), Some((graphs, coordinating)))
                }
                None => (
                    Writer {
                        member: None,
                        fence: election.as_ref().map(|e| e.fence.clone()).unwrap_or_default(),
                        adopting: None,
                    },
                    None,
                    None,
                ),
            };
            let (graphs, coordinating) = graphs.unzip();
            let fleet = Fleet { selector, namespace: namespace.clone(), driving, writer, kro_features, ring, graphs };
            Plan::Fleet(Box::new(fleet), coordinating.unwrap_or_default())
        }
        Source::HooksDir { dir, tmp_dir, webhooks } => {
            let hooks = hooks_dir::load(&dir).await?;
            let (fence, share, ring) = match &sharding {
                Some(sharding) => {
                    hooks_dir::check_shardable(&hooks)?;
                    let ring = Controllers::default();
                    let joining = ring.clone();
                    let join = Box::new(move |shares, namespace| drop(joining.add(&[(shares, namespace)])));
                    let share = Arc::new(Share::new(sharding.member.clone(), join));
                    (Fence::closed(), Some(share), Some(ring))
                }
                None => (election.as_ref().map(|e| e.fence.clone()).unwrap_or_default(), None, None),
            };
            Plan::Hooks(Hooks { hooks, tmp_dir: make_tmp_dir(tmp_dir)?, webhooks, fence, share }, ring)
        }
        Source::Manifests(paths) => Plan::Fixed(define::from_manifests(conn, &paths, kro_features).await?),
        Source::Flags { gvr, hook } => {
            let resolved = resolve_parent(conn, &gvr).await?;
            match hook {
                Some(hook) => Plan::Fixed(vec![define::hooked(conn, resolved, &hook).await?]),
                None if serves_samples(&gvr) => Plan::Fixed(vec![define::built_in(resolved)]),
                None if sharding.is_some() => {
                    bail!("--shard-ring shares a controller's parents; {} have no controller here", gvr.resource)
                }
                None => {
                    Plan::Observe(Target { namespace: namespace.clone().filter(|_| resolved.namespaced), resolved })
                }
            }
        }
    };
    let serving = start_serving(conn, &serve).await?;
    let stop = stop_on_signal();
    let result = match plan {
        Plan::Observe(target) => observe(conn, target, driving, &serving, stop).await,
        Plan::Fleet(fleet, coordinating) => match (sharding, fleet.ring.clone()) {
            (Some(sharding), Some(controllers)) => {
                let hub = Arc::new(Hub::new(conn.client.clone(), serving.health.clone()));
                let fence = fleet.writer.fence.clone();
                let member = Membership { sharding, fence, hub, controllers, records, coordinating };
                shard_then_reconcile(conn, member, Work::Fleet(fleet), &serving, stop, shutdown_timeout).await
            }
            _ => lead_or_run(conn, election, Work::Fleet(fleet), &serving, stop, shutdown_timeout).await,
        },
        Plan::Hooks(hooks, ring) => {
            serving.health.synced();
            let fence = hooks.fence.clone();
            // The webhooks are served by every replica, a standby too, from the start.
            let ready = hooks.serve(conn, &serving, stop.clone()).await?;
            match (sharding, ring) {
                (Some(sharding), Some(controllers)) => {
                    let hub = Arc::new(Hub::new(conn.client.clone(), serving.health.clone()));
                    let coordinating = Coordinating::default();
                    let member = Membership { sharding, fence, hub, controllers, records, coordinating };
                    shard_then_reconcile(conn, member, Work::Hooks(ready), &serving, stop, shutdown_timeout).await
                }
                _ => lead_or_run(conn, election, Work::Hooks(ready), &serving, stop, shutdown_timeout).await,
            }
        }
        Plan::Fixed(definitions) => {
            serving.health.expect(definitions.len());
            let hub = Arc::new(Hub::new(conn.client.clone(), serving.health.clone()));
            let writer = match (&sharding, &election) {
                (Some(sharding), _) => member_writer(sharding, &records),
                (None, Some(election)) => Writer { member: None, fence: election.fence.clone(), adopting: None },
                (None, None) => Writer::default(),
            };
            let reconciling =
                Reconciling::new(conn, definitions, namespace.as_deref(), driving, &writer, &serving, &hub);
            match sharding {
                Some(sharding) => {
                    let controllers = Controllers::of(&of_contexts(&reconciling.controllers));
                    let coordinating = Coordinating::default();
                    let member = Membership { sharding, fence: writer.fence, hub, controllers, records, coordinating };
                    shard_then_reconcile(conn, member, Work::Fixed(reconciling), &serving, stop, shutdown_timeout).await
                }
                None => lead_or_run(conn, election, Work::Fixed(reconciling), &serving, stop, shutdown_timeout).await,
            }
        }
    };
    tracing::info!("requests sent: {}", conn.requests.snapshot());
    result
}

/// What a process runs, decided before anything is served or written.
enum Plan {
    /// A resource with no sync: its changes reported, nothing written.
    Observe(Target),
    /// Controllers fixed at the start, from the flags or manifests.
    Fixed(Vec<Definition>),
    /// The cluster's controller objects (in a ring, with whether this member coordinates it).
    Fleet(Box<Fleet>, Coordinating),
    /// shell-operator's hooks, and in a shard ring the set their kubernetes bindings join.
    Hooks(Hooks, Option<Controllers>),
}

/// shell-operator's temporary directory, private to this user (`process::private`): made if missing
/// (its parent must exist, as there), a fresh one under the system's when given empty.
fn make_tmp_dir(dir: std::path::PathBuf) -> Result<std::path::PathBuf> {
    use crate::process::private;
    if dir.as_os_str().is_empty() {
        return private::fresh_directory(&std::env::temp_dir(), "shell-operator")
            .map_err(|err| anyhow!("--tmp-dir: {err}"));
    }
    // Absolute: each hook runs from its own directory, and reads these paths from there.
    let dir = std::path::absolute(&dir).map_err(|err| anyhow!("--tmp-dir: {}: {err}", dir.display()))?;
    private::directory(&dir).map_err(|err| anyhow!("--tmp-dir: {err}"))?;
    Ok(dir)
}

/// Observe mode: reports what changes in `target`, with either driver, and writes nothing.
async fn observe(
    conn: &Connection,
    target: Target,
    driving: Driving,
    serving: &Serving,
    stop: watch::Receiver<bool>,
) -> Result<()> {
    let (driver_name, resource) = (driving.name(), target.resolved.qualified_plural());
    tracing::info!(driver = driver_name, resource, "observing {resource} ({driver_name} driver); nothing is written");
    serving.health.synced();
    match driving.driver {
        Driver::Watch { .. } => observe::watch(conn, target, stop).await,
        Driver::Poll { interval, .. } => observe::poll(conn, &target, interval, driving.once, stop).await,
    }
}

/// What controllers a process runs under an election: fixed at start, or the cluster's controller objects.
enum Work {
    Fixed(Reconciling),
    Fleet(Box<Fleet>),
    Hooks(hooks::Ready),
}

impl Work {
    async fn run(self, conn: &Connection, serving: &Serving, stop: watch::Receiver<bool>) -> Result<()> {
        match self {
            Work::Fixed(reconciling) => reconciling.run(stop).await,
            Work::Fleet(fleet) => fleet.run(conn, serving, stop).await,
            Work::Hooks(ready) => ready.run(stop).await,
        }
    }
}

/// A shard member's part: the ring's settings, the fence its Lease keeps, and the watches its
/// controllers share (which the coordinator reads too).
struct Membership {
    sharding: Sharding,
    fence: Fence,
    hub: Arc<Hub>,
    /// The controllers whose parents the ring shares, as they are now.
    controllers: Controllers,
    /// The adoption records, as the member's lists of the ring's Leases show them.
    records: watch::Sender<Published>,
    /// Whether this member coordinates the ring now, and the fence of its coordinator's Lease: what is
    /// written once for all members (a ResourceGraphDefinition's own objects) is written by it.
    coordinating: Coordinating,
}

/// Whether a member coordinates its ring, told to whoever writes what the coordinator alone writes.
#[derive(Clone)]
struct Coordinating {
    fence: Fence,
    now: Arc<watch::Sender<bool>>,
}

impl Default for Coordinating {
    fn default() -> Self {
        Coordinating { fence: Fence::closed(), now: Arc::new(watch::channel(false).0) }
    }
}

/// A shard member's writer: its member label, a fence closed until its Lease is held, and the adoption
/// records it serves gone members' parents by.
fn member_writer(sharding: &Sharding, records: &watch::Sender<Published>) -> Writer {
    let adopting = Adopting::new(records.subscribe(), sharding.renew_deadline, sharding.member.incarnation.clone());
    Writer { member: Some(sharding.member.clone()), fence: Fence::closed(), adopting: Some(adopting) }
}

/// Runs `work`, under the leader election when one is asked for.
async fn lead_or_run(
    conn: &Connection,
    election: Option<Election>,
    work: Work,
    serving: &Serving,
    stop: watch::Receiver<bool>,
    shutdown_timeout: Duration,
) -> Result<()> {
    match election {
        Some(election) => lead_then_reconcile(conn, election, work, serving, stop, shutdown_timeout).await,
        None => {
            serving.metrics.leader.set(1);
            drain_within(work.run(conn, serving, stop.clone()), stop, shutdown_timeout).await
        }
    }
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
async fn start_serving(conn: &Connection, serve: &Serve) -> Result<Serving> {
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
    Ok(Serving { metrics, health })
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

/// Waits, as a standby (so `/readyz` says), until `candidate` holds its Lease (true) or `stop` turns
/// true (false).
async fn wait_to_hold(
    candidate: &mut Candidate,
    health: &Health,
    stop: &mut watch::Receiver<bool>,
    what: &str,
) -> Result<bool> {
    health.standby.store(true, Ordering::Relaxed);
    while !*candidate.leading.borrow_and_update() {
        tokio::select! {
            changed = candidate.leading.changed() => if changed.is_err() { bail!("{what} stopped") },
            _ = stop.wait_for(|s| *s) => return Ok(false),
        }
    }
    health.standby.store(false, Ordering::Relaxed);
    Ok(true)
}

/// Waits for the lease, reconciles while holding it, and stops at once if it is lost: the work in flight
/// is aborted, not finished, since another replica may already lead, and the exit status is 1, as
/// controller-runtime's, so the pod restarts as a fresh standby. On SIGTERM it finishes (within
/// the shutdown timeout), then releases the lease so a standby takes over without waiting for it to expire.
async fn lead_then_reconcile(
    conn: &Connection,
    election: Election,
    work: Work,
    serving: &Serving,
    mut stop: watch::Receiver<bool>,
    shutdown_timeout: Duration,
) -> Result<()> {
    let Serving { metrics, health } = serving;
    let (name, lease_namespace, identity) =
        (election.name.clone(), election.namespace.clone(), election.identity.clone());
    let mut candidate = election.start(conn.client.clone(), health.clone())?;
    tracing::info!("waiting for the lease {lease_namespace}/{name} as {identity}");
    if !wait_to_hold(&mut candidate, health, &mut stop, "leader election").await? {
        candidate.release().await;
        return Ok(());
    }
    metrics.leader.set(1);
    tracing::info!("leading as {identity}");

    let mut leading = candidate.leading.clone();
    let work = drain_within(work.run(conn, serving, stop.clone()), stop, shutdown_timeout);
    let result = tokio::select! {
        result = work => result,
        _ = leading.wait_for(|l| !*l) => {
            tracing::warn!("lost the leader lease; abandoning the work in flight");
            Err(anyhow!("lost the leader lease; stopped reconciling"))
        }
    };
    metrics.leader.set(0);
    candidate.release().await;
    result
}

/// Joins the shard ring: holds this member's Lease, stands for the ring's coordinator, and reconciles
/// the parents labelled for this member while it holds its Lease. Losing it is handled as a leader
/// handles losing its lease: the work in flight is aborted and the exit status is 1 (the coordinator
/// moves this member's parents once the Lease has run out). On SIGTERM the work in flight finishes, and
/// then the Lease is released, so that the coordinator moves this member's parents at once.
async fn shard_then_reconcile(
    conn: &Connection,
    Membership { sharding, fence, hub, controllers, records, coordinating }: Membership,
    work: Work,
    serving: &Serving,
    mut stop: watch::Receiver<bool>,
    shutdown_timeout: Duration,
) -> Result<()> {
    let Serving { metrics, health } = serving;
    let Sharding { member, lease_namespace, lease_duration, renew_deadline, retry_period } = sharding;
    // Both Leases are held as this incarnation, each with a fence of its own: the member's fences its
    // reconciles, the coordinator's its label writes.
    let lease = |name: String, labels: BTreeMap<String, String>, fence: Fence, stand_again: bool| Election {
        annotation: None,
        name,
        namespace: lease_namespace.clone(),
        identity: member.incarnation.clone(),
        lease_duration,
        renew_deadline,
        retry_period,
        labels,
        fence,
        stand_again,
    };
    let ring_label = BTreeMap::from([(RING_LABEL.to_owned(), member.ring.clone())]);
    let mut membership =
        lease(member.lease(), ring_label.clone(), fence, false).start(conn.client.clone(), health.clone())?;
    tracing::info!(
        ring = member.ring,
        "waiting for the Lease {lease_namespace}/{} as {}",
        member.lease(),
        member.incarnation
    );
    if !wait_to_hold(&mut membership, health, &mut stop, "the shard member's Lease").await? {
        membership.release().await;
        return Ok(());
    }
    metrics.leader.set(1);
    tracing::info!(
        ring = member.ring,
        "member {} of the shard ring {} as {}",
        member.name,
        member.ring,
        member.incarnation
    );

    let coordinator_fence = coordinating.fence.clone();
    let publish = watch::channel(None).0;
    let coordinator = Coordinator {
        client: conn.client.clone(),
        hub: hub.clone(),
        ring: member.ring.clone(),
        lease_namespace: lease_namespace.clone(),
        lease_duration,
        renew_deadline,
        retry_period,
        controllers,
        fence: coordinator_fence.clone(),
        records,
        publish: publish.clone(),
        renewals: Renewals::follow(conn.client.clone(), &lease_namespace, &member.ring),
    };
    let (stop_coordinating, stopping) = watch::channel(false);
    // The coordinator's Lease carries the ring's label too, so that one list of the ring's Leases also
    // reads the adoption records on it.
    let candidacy = Election {
        annotation: Some((ANNOTATION.to_owned(), publish.subscribe())),
        ..lease(member.ring.clone(), ring_label, coordinator_fence.clone(), true)
    }
    .start(conn.client.clone(), health.clone())?;
    let coordination = tokio::spawn(coordinate(coordinator, candidacy, coordinating.now, stopping));

    let mut holding = membership.leading.clone();
    let work = drain_within(work.run(conn, serving, stop.clone()), stop, shutdown_timeout);
    let result = tokio::select! {
        result = work => result,
        _ = holding.wait_for(|held| !*held) => {
            tracing::warn!("lost this member's shard Lease; abandoning the work in flight");
            Err(anyhow!("lost this member's shard Lease; stopped reconciling"))
        }
    };
    metrics.leader.set(0);
    let _ = stop_coordinating.send(true);
    let _ = coordination.await;
    // Only now that nothing is written any more: the coordinator hands this member's parents on at once.
    membership.release().await;
    result
}

/// Coordinates the ring whenever this replica holds the coordinator's Lease, until `stop`; the rest of
/// the time it follows the ring's Leases, so that it can take over knowing how long each has been silent.
async fn coordinate(
    coordinator: Coordinator,
    mut candidacy: Candidate,
    coordinating: Arc<watch::Sender<bool>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut members = Members::new(coordinator.lease_duration, tokio::time::Instant::now());
    let mut tick = tokio::time::interval(coordinator.retry_period / HURRY);
    let mut last_list = None;
    'standby: loop {
        loop {
            tokio::select! {
                _ = tick.tick() => if coordinator.list_due(&mut last_list) {
                    // A failure here is the coordinator's to report, once it coordinates.
                    let _ = coordinator.observe(&mut members).await;
                },
                held = async { candidacy.leading.wait_for(|held| *held).await.is_ok() } => match held {
                    true => break,
                    false => return,
                },
                () = async { drop(stop.wait_for(|s| *s).await) } => break 'standby,
            }
        }
        tracing::info!(ring = coordinator.ring, "coordinating the shard ring {}", coordinator.ring);
        coordinating.send_replace(true);
        let (stop_run, run_stopped) = watch::channel(false);
        let mut leading = candidacy.leading.clone();
        tokio::select! {
            () = coordinator.run(&mut members, candidacy.term(), run_stopped) => {}
            () = async { drop(leading.wait_for(|held| !*held).await) } => {
                tracing::warn!(ring = coordinator.ring, "lost the coordinator's Lease; no longer coordinating");
            }
            () = async { drop(stop.wait_for(|s| *s).await) } => {
                let _ = stop_run.send(true);
                coordinating.send_replace(false);
                break;
            }
        }
        coordinating.send_replace(false);
        drop(stop_run);
    }
    candidacy.release().await;
}
