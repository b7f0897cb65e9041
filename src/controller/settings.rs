//! How the controller runs, split once at the top into the parts that each piece of it reads: the
//! driver, concurrency, an optional election, what to serve, the sync, and the shutdown timeout.
//! `commands::reconcile` builds it from the command line; `run` hands each part to the code that uses it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::leader::Election;
use super::rules::graph::rgd::Features;
use super::rules::shard::Member;
use super::sync::hook::Address;
use crate::cluster::resolve::Gvr;

#[derive(Debug, Clone)]
pub struct Settings {
    /// Which controllers to run.
    pub source: Source,
    /// The namespace to reconcile; `None` for all of them.
    pub namespace: Option<String>,
    pub driver: Driver,
    /// Reconciles at the same time.
    pub concurrency: u16,
    /// Each parent once, then exit (1 if one is not Ready).
    pub once: bool,
    /// `--leader-elect`: reconcile only while holding this Lease.
    pub election: Option<Election>,
    /// `--shard-ring`: reconcile the parents labelled for this replica's member of the ring.
    pub sharding: Option<Sharding>,
    pub serve: Serve,
    /// How long the work in flight may take to finish once stopping.
    pub shutdown_timeout: Duration,
    /// kro's feature gates for ResourceGraphDefinitions (`--feature-gates`).
    pub kro_features: Features,
}

/// A replica's part in a shard ring: its member, and where and how its Leases are held (the same
/// timings as leader election).
#[derive(Debug, Clone)]
pub struct Sharding {
    pub member: Member,
    pub lease_namespace: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Where the controllers come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--gvr`: the Sample controller, or a hook's controller with `--hook` or `--hook-url`, or else
    /// observe mode.
    Flags {
        gvr: Gvr,
        /// A hook to sync with, in place of observing (or of the built-in sync, for Samples).
        hook: Option<Box<HookSettings>>,
    },
    /// `-f`: every CompositeController and DecoratorController in these manifests (a file, a directory,
    /// or `-`).
    Manifests(Vec<PathBuf>),
    /// `--from-cluster`: every controller object stored in the cluster (with these labels), followed as
    /// they change.
    Cluster { selector: Option<String> },
    /// `--hooks-dir`: shell-operator's hooks in this directory, their run files in `tmp_dir`.
    HooksDir { dir: PathBuf, tmp_dir: PathBuf, webhooks: Box<WebhookSettings> },
}

/// Where shell-operator's webhooks are served and how they are registered.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// The namespace of the Services.
    pub namespace: String,
    /// The Validating/MutatingWebhookConfigurations are `<this>-hooks`.
    pub configuration_name: String,
    pub admission: WebhookEndpoint,
    pub conversion: WebhookEndpoint,
}

/// One webhook server: its TLS material, where it listens, and how the API server reaches it.
#[derive(Debug, Clone)]
pub struct WebhookEndpoint {
    pub service: String,
    /// A base URL registered instead of the Service.
    pub url: Option<String>,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA bundle registered for the API server to check `cert` with.
    pub ca: PathBuf,
    /// When any is given, clients must show a certificate one of them signed.
    pub client_cas: Vec<PathBuf>,
    pub listen: (String, u16),
}

/// When parents are reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// List everything every `interval`; a parent whose inputs did not change is synced again after `resync`.
    Poll { interval: Duration, resync: Duration },
    /// Follow every change; each parent is synced again after `resync`.
    Watch { resync: Duration },
}

/// What the controller serves and reports besides reconciling.
#[derive(Debug, Clone)]
pub struct Serve {
    /// `/healthz` and `/readyz`.
    pub health: Option<SocketAddr>,
    /// `/metrics`.
    pub metrics: Option<MetricsServe>,
    /// How long the API server (or the Lease) may be out of reach before `/healthz` fails: the lease
    /// duration, after which a standby would take over anyway.
    pub patience: Duration,
    /// A `last minute: ...` line of request counts every minute (`--stats`).
    pub stats: bool,
}

#[derive(Debug, Clone)]
pub struct MetricsServe {
    pub addr: SocketAddr,
    /// `--metrics-secure`: over TLS, to callers allowed to get /metrics; with the certificate in this
    /// directory, or a self-signed one.
    pub secure: Option<Option<PathBuf>>,
}

/// `--hook`, `--hook-url` or `--hook-process`, and what goes with it.
#[derive(Debug, Clone)]
pub struct HookSettings {
    pub target: Address,
    pub timeout: Duration,
    /// With `--hook-process`, how many of its processes may run at once.
    pub processes: usize,
    /// The child types it may manage (`--child`).
    pub children: Vec<Gvr>,
    /// `--finalize`: a finalizer on each parent, and the hook called with `finalizing: true` on deletion.
    pub finalize: bool,
}
