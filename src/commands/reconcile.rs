//! `samplectl reconcile`: the flags, as the controller's settings.

use anyhow::Result;

use crate::cli::ReconcileArgs;
use crate::cluster::client::Connection;
use crate::controller::run::{HookSettings, Settings, run as run_controller};

pub async fn run(conn: &Connection, namespace: Option<&str>, args: &ReconcileArgs) -> Result<()> {
    let settings = Settings {
        gvr: args.gvr.clone(),
        namespace: namespace.map(str::to_owned),
        watch: args.watch,
        interval: args.interval,
        concurrency: args.concurrency,
        resync: args.resync,
        once: args.once,
        stats: args.stats,
        leader_elect: args.leader_elect,
        leader_election_id: args.leader_election_id.clone(),
        leader_election_namespace: args.leader_election_namespace.clone(),
        leader_election_identity: args.leader_election_identity.clone(),
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
        shutdown_timeout: args.shutdown_timeout,
        health_addr: args.health_addr,
        metrics_addr: args.metrics_addr,
        metrics_secure: args.metrics_secure,
        metrics_cert_dir: args.metrics_cert_dir.clone(),
        hook: args.hook_target().map(|target| HookSettings {
            target: target.clone(),
            timeout: args.hook_timeout,
            children: args.children.clone(),
            finalize: args.finalize,
        }),
    };
    run_controller(conn, &settings).await
}
