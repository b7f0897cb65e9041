//! `samplectl reconcile`: the flags, split into the controller's settings.

use anyhow::Result;

use crate::cli::ReconcileArgs;
use crate::cluster::client::Connection;
use crate::controller::engine::fence::Fence;
use crate::controller::leader::{Election, default_identity, identity_of};
use crate::controller::run::run as run_controller;
use crate::controller::settings::{Driver, HookSettings, MetricsServe, Serve, Settings, Sharding, Source};

pub async fn run(conn: &Connection, namespace: Option<&str>, args: &ReconcileArgs) -> Result<()> {
    crate::limits::set(crate::limits::Limits {
        max_connections: args.max_connections as usize,
        webhook_runs_in_flight: args.webhook_runs_in_flight as usize,
        cel_cost_limit: args.cel_cost_limit,
        jq_timeout: args.jq_timeout,
    });
    let driver = match args.watch {
        true => Driver::Watch { resync: args.resync },
        false => Driver::Poll { interval: args.interval, resync: args.resync },
    };
    let election = args.leader_elect.then(|| Election {
        annotation: None,
        name: args.leader_election_id.clone(),
        namespace: args.leader_election_namespace.clone().unwrap_or_else(|| conn.default_namespace.clone()),
        identity: args.leader_election_identity.as_deref().map_or_else(default_identity, identity_of),
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
        labels: Default::default(),
        fence: Fence::closed(),
        stand_again: false,
    });
    let sharding = args.member().map(|member| Sharding {
        member,
        lease_namespace: args.leader_election_namespace.clone().unwrap_or_else(|| conn.default_namespace.clone()),
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    });
    let serve = Serve {
        health: args.health_addr,
        metrics: args
            .metrics_addr
            .map(|addr| MetricsServe { addr, secure: args.metrics_secure.then(|| args.metrics_cert_dir.clone()) }),
        patience: args.lease_duration,
        stats: args.stats,
    };
    let source = match args.filenames.is_empty() {
        _ if let Some(dir) = &args.hooks_dir => Source::HooksDir {
            dir: dir.clone(),
            tmp_dir: args.tmp_dir.clone(),
            // shell-operator's --namespace is samplectl's -n; SHELL_OPERATOR_NAMESPACE as there.
            webhooks: Box::new(
                args.webhooks.settings(
                    namespace
                        .map(str::to_owned)
                        .or_else(|| std::env::var("SHELL_OPERATOR_NAMESPACE").ok().filter(|ns| !ns.is_empty()))
                        .unwrap_or_else(|| conn.default_namespace.clone()),
                ),
            ),
        },
        _ if args.from_cluster => Source::Cluster { selector: args.target_label_selector.clone() },
        false => Source::Manifests(args.filenames.clone()),
        true => Source::Flags {
            gvr: args.gvr.clone(),
            hook: args.hook_target().map(|target| {
                Box::new(HookSettings {
                    target: target.clone(),
                    timeout: args.hook_timeout,
                    processes: usize::from(args.hook_processes.unwrap_or(args.concurrency)),
                    children: args.children.clone(),
                    finalize: args.finalize,
                })
            }),
        },
    };
    let settings = Settings {
        source,
        namespace: namespace.map(str::to_owned),
        driver,
        concurrency: args.concurrency,
        once: args.once,
        election,
        sharding,
        serve,
        shutdown_timeout: args.shutdown_timeout,
        kro_features: args.feature_gates.unwrap_or_default(),
    };
    run_controller(conn, settings).await
}
