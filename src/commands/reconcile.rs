//! `samplectl reconcile`: picks the driver (poll or watch) and the mode (controller for Samples, observe
//! for anything else), wires up shutdown and the request totals.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use tokio::sync::watch;

use crate::cli::ReconcileArgs;
use crate::client::Connection;
use crate::fetch::Target;
use crate::reconcile::poll::Poll;
use crate::reconcile::watch::Watch;
use crate::reconcile::{Context, observe};
use crate::resource::{Gvr, UnknownResource, resolve_gvr};

#[derive(Debug, thiserror::Error)]
#[error(
    "the Sample CRD (samples.example.com, v1alpha1) is not installed in this cluster; install it with `samplectl install-crd`"
)]
pub struct CrdMissing;

#[derive(Debug, thiserror::Error)]
#[error("{0} of the Samples are not Ready")]
pub struct NotAllReady(usize);

const STATS_EVERY: Duration = Duration::from_secs(60);

pub async fn run(conn: &Connection, namespace: Option<&str>, args: &ReconcileArgs) -> Result<()> {
    let gvr = Gvr::parse(&args.gvr)?;
    let is_samples = gvr.group == "example.com" && gvr.resource == "samples";
    let resolved = match resolve_gvr(&conn.client, &gvr, &args.gvr).await {
        Err(err) if is_samples && err.downcast_ref::<UnknownResource>().is_some() => return Err(CrdMissing.into()),
        other => other?,
    };
    let namespace = namespace.filter(|_| resolved.namespaced).map(str::to_owned);

    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        crate::commands::watch::shutdown_signal().await;
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
    let result = if is_samples {
        let scope = namespace.as_deref().map_or("all namespaces".to_owned(), |ns| format!("namespace {ns}"));
        tracing::info!(driver, namespace = namespace.as_deref(), "reconciling Samples in {scope} ({driver} driver)");
        let ctx = Arc::new(Context::new(conn.client.clone(), resolved));
        let not_ready = if args.watch {
            let watch = Watch { ctx, namespace, concurrency: args.concurrency, resync: args.resync };
            watch.run(args.once, stop).await?
        } else {
            let poll = Poll { ctx, namespace, interval: args.interval, concurrency: usize::from(args.concurrency) };
            poll.run(args.once, stop).await?.map(|pass| pass.not_ready)
        };
        match not_ready {
            Some(n) if n > 0 => Err(NotAllReady(n).into()),
            _ => Ok(()),
        }
    } else {
        let target = Target { resolved, namespace };
        let resource = target.resolved.qualified_plural();
        tracing::info!(driver, resource, "observing {resource} ({driver} driver); nothing is written");
        if args.watch {
            if args.once {
                bail!("--once with --watch applies to Samples only; use --once without --watch to observe once");
            }
            observe::watch(conn, &target, stop).await
        } else {
            observe::poll(conn, &target, args.interval, args.once, stop).await
        }
    };
    tracing::info!("requests sent: {}", conn.requests.snapshot());
    result
}
