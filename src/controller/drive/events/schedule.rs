//! Schedules: one timer per distinct crontab text, as shell-operator keeps one cron entry per text. At
//! each tick every schedule binding written with that text, in a hook whose schedules are on, adds a run
//! at the tail of its queue.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use jiff::Zoned;
use tokio::sync::watch;

use super::Shared;
use super::queue::Task;
use crate::controller::rules::shell::context::{Pending, What};
use crate::controller::rules::shell::cron::Crontab;

/// A schedule binding: its hook, and its place among the hook's schedules.
type Binding = (usize, usize);

/// Ticks every crontab until `stop`.
pub async fn tick(shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let mut by_text: BTreeMap<&str, (&Crontab, Vec<Binding>)> = BTreeMap::new();
    for (h, hook) in shared.hooks.iter().enumerate() {
        for (s, schedule) in hook.loaded.config.schedules.iter().enumerate() {
            by_text.entry(schedule.crontab.as_str()).or_insert_with(|| (&schedule.parsed, Vec::new())).1.push((h, s));
        }
    }
    let timers = by_text.into_values().map(|(crontab, bindings)| {
        let (shared, mut stop) = (shared.clone(), stop.clone());
        let crontab = crontab.clone();
        async move {
            // Counting starts when the first hook written with this crontab has its schedules on (an
            // `@every` counts from then), as shell-operator adds the cron entry then.
            loop {
                let enabled = shared.schedules_on.notified();
                tokio::pin!(enabled);
                enabled.as_mut().enable();
                if bindings.iter().any(|&(h, _)| shared.hooks[h].schedules_on.load(Ordering::Relaxed)) {
                    break;
                }
                tokio::select! {
                    () = enabled => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
            loop {
                let Some(next) = crontab.next(&Zoned::now()) else { return };
                // Until the wall clock has reached the tick: a timer may end a moment early by it.
                loop {
                    let wait = Zoned::now().duration_until(&next);
                    if wait.is_negative() || wait.is_zero() {
                        break;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(wait.unsigned_abs()) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
                for &(h, s) in &bindings {
                    fire(&shared, h, s);
                }
            }
        }
    });
    futures::future::join_all(timers).await;
}

fn fire(shared: &Shared, h: usize, s: usize) {
    let hook = &shared.hooks[h];
    if !hook.schedules_on.load(Ordering::Relaxed) {
        return;
    }
    let config = &hook.loaded.config;
    let schedule = &config.schedules[s];
    let v0 = config.version == crate::controller::rules::shell::config::ConfigVersion::V0;
    shared.queues[&schedule.queue].push(Task::Run {
        hook: h,
        event: "Schedule",
        allow_failure: schedule.allow_failure,
        contexts: vec![Pending {
            binding: schedule.name.clone(),
            what: What::Schedule,
            group: schedule.group.clone(),
            snapshots: schedule.include_snapshots.clone(),
            v0,
        }],
        unlock: Vec::new(),
    });
}
