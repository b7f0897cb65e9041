//! One named queue and its worker: strictly in order, one task at a time. A run at the head takes in
//! the runs of the same hook waiting right behind it (its contexts first, then theirs, each run of one
//! group's contexts cut to its last), unless it is a binding's first list; a run that fails goes back to
//! the head, as it was combined, and is combined again with what queued meanwhile before it is tried.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::Shared;
use crate::controller::rules::shell::context::{self, Pending};
use crate::controller::rules::shell::{metrics, patch};
use crate::controller::sync::shell_hook::{self, RunLabels};

pub enum Task {
    /// Run `hook` with `contexts`; once it is over, the events of the kubernetes bindings in `unlock`
    /// (hook, binding) flow (their Synchronization runs).
    Run { hook: usize, event: &'static str, allow_failure: bool, contexts: Vec<Pending>, unlock: Vec<(usize, usize)> },
    /// `hook`'s kubernetes bindings start: their watches, then their Synchronization runs next in `main`.
    EnableKubernetes { hook: usize },
    /// A binding's Synchronization run that is not to be run (`executeHookOnSynchronization: false`):
    /// its events flow from here on.
    Unlock { hook: usize, binding: usize },
    /// `hook`'s schedules add runs from now on.
    EnableSchedules { hook: usize },
}

pub struct Queue {
    pub name: String,
    tasks: Mutex<VecDeque<Task>>,
    ready: Notify,
}

impl Queue {
    pub fn new(name: String) -> Self {
        Queue { name, tasks: Mutex::default(), ready: Notify::new() }
    }

    pub fn push(&self, task: Task) {
        self.lock().push_back(task);
        self.ready.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Task>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The head, with the runs of its hook right behind it taken in.
    fn take_head(&self) -> Option<Task> {
        let mut tasks = self.lock();
        let mut head = tasks.pop_front()?;
        if let Task::Run { hook, contexts, unlock, .. } = &mut head
            && contexts.first().is_some_and(context::combinable)
        {
            let mut taken = 0;
            while let Some(Task::Run { hook: next, contexts: more, unlock: more_unlock, .. }) = tasks.front_mut()
                && *next == *hook
                && more.first().is_some_and(context::combinable)
            {
                contexts.append(more);
                unlock.append(more_unlock);
                tasks.pop_front();
                taken += 1;
            }
            if taken > 0 {
                let before = contexts.len();
                *contexts = context::compact(std::mem::take(contexts));
                tracing::debug!(
                    queue = self.name.as_str(),
                    "{} runs combined into one with {} contexts (of {before})",
                    taken + 1,
                    contexts.len()
                );
            }
        }
        Some(head)
    }

    fn put_back(&self, task: Task) {
        self.lock().push_front(task);
    }

    /// Puts `tasks` at the head, in their order.
    fn push_front(&self, tasks: Vec<Task>) {
        let mut queue = self.lock();
        for task in tasks.into_iter().rev() {
            queue.push_front(task);
        }
    }
}

/// Runs `queue`'s tasks until `stop`, finishing the one in progress.
pub async fn work(shared: Arc<Shared>, queue: Arc<Queue>, mut stop: watch::Receiver<bool>) {
    let mut failures: u32 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        let Some(task) = queue.take_head() else {
            tokio::select! {
                () = queue.ready.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            continue;
        };
        match task {
            Task::EnableKubernetes { hook } => match shared.enable_kubernetes(hook).await {
                Ok(next) => {
                    failures = 0;
                    queue.push_front(next);
                }
                Err(err) => {
                    failures += 1;
                    let delay = context::retry_delay(failures, jitter());
                    tracing::error!(
                        hook = shared.hooks[hook].loaded.name.as_str(),
                        "cannot start the kubernetes bindings of {}: {err}; tried again in {}",
                        shared.hooks[hook].loaded.name,
                        crate::duration::format(delay)
                    );
                    queue.put_back(Task::EnableKubernetes { hook });
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            },
            Task::Unlock { hook, binding } => shared.unlock(&[(hook, binding)]),
            Task::EnableSchedules { hook } => {
                shared.hooks[hook].schedules_on.store(true, Ordering::Relaxed);
                tracing::debug!(hook = shared.hooks[hook].loaded.name.as_str(), "schedules of the hook on");
            }
            Task::Run { hook, event, allow_failure, contexts, unlock } => {
                let started = std::time::Instant::now();
                let result = run(&shared, &queue.name, hook, event, &contexts, &unlock).await;
                let outcome = if result.is_ok() { "success" } else { "error" };
                shared.metrics.reconciled(&shared.hooks[hook].loaded.name, outcome, started.elapsed());
                match result {
                    Ok(()) => {
                        failures = 0;
                        shared.unlock(&unlock);
                    }
                    Err(err) if allow_failure => {
                        failures = 0;
                        shared.unlock(&unlock);
                        tracing::warn!(
                            hook = shared.hooks[hook].loaded.name.as_str(),
                            queue = queue.name.as_str(),
                            "Hook failed, but allowed to fail: {err}"
                        );
                    }
                    Err(err) => {
                        failures += 1;
                        let delay = context::retry_delay(failures, jitter());
                        tracing::error!(
                            hook = shared.hooks[hook].loaded.name.as_str(),
                            queue = queue.name.as_str(),
                            "{} FAILED: {err}; tried again in {}",
                            shared.hooks[hook].loaded.name,
                            crate::duration::format(delay)
                        );
                        queue.put_back(Task::Run { hook, event, allow_failure, contexts, unlock });
                        tokio::select! {
                            () = tokio::time::sleep(delay) => {}
                            _ = stop.wait_for(|s| *s) => return,
                        }
                    }
                }
            }
        }
    }
}

/// One run of `hook`, waiting for its rate limit first.
async fn run(
    shared: &Shared,
    queue: &str,
    index: usize,
    event: &'static str,
    contexts: &[Pending],
    unlock: &[(usize, usize)],
) -> Result<(), String> {
    let Some(first) = contexts.first() else { return Ok(()) };
    let hook = &shared.hooks[index];
    if let Some(limiter) = &hook.limiter {
        limiter.wait().await;
    }
    for &(h, b) in unlock {
        if let Some(monitor) = shared.monitor(h, b) {
            monitor.synchronizing();
        }
    }
    // Snapshots are read once per run, so that every context of the run sees the same objects.
    let mut read: std::collections::HashMap<String, Vec<crate::controller::rules::shell::context::SnapshotItem>> =
        Default::default();
    let mut snapshot = |name: &str| read.entry(name.to_owned()).or_insert_with(|| shared.snapshot(index, name)).clone();
    let rendered: Vec<serde_json::Value> = contexts.iter().map(|c| c.render(&mut snapshot)).collect();
    let labels =
        RunLabels { hook: hook.loaded.name.clone(), binding: first.binding.clone(), event, queue: queue.to_owned() };
    tracing::info!(
        hook = labels.hook.as_str(),
        binding = labels.binding.as_str(),
        queue,
        "Execute hook {} ({} {}, {} binding contexts)",
        labels.hook,
        event,
        labels.binding,
        rendered.len()
    );
    let outputs =
        match shell_hook::run(&hook.loaded.path, &shared.tmp_dir, &context::file_text(&rendered), &labels).await {
            Ok(outputs) => outputs,
            Err(failure) => {
                status_despite_failure(shared, &labels, &failure.patches).await;
                return Err(failure.message);
            }
        };
    let operations = patch::parse(&outputs.patches).map_err(|err| format!("$KUBERNETES_PATCH_PATH: {err}"))?;
    if !operations.is_empty() {
        super::patch::apply(shared, operations).await.map_err(|err| format!("kubernetes patch operations: {err}"))?;
    }
    let metric_operations = metrics::parse(&outputs.metrics).map_err(|err| format!("$METRICS_PATH: {err}"))?;
    if !metric_operations.is_empty() {
        let mut series = shared.metrics.hooks.lock().unwrap_or_else(|e| e.into_inner());
        for problem in series.apply(&labels.hook, &metric_operations) {
            tracing::warn!(hook = labels.hook.as_str(), "$METRICS_PATH: {problem}");
        }
    }
    tracing::info!(
        hook = labels.hook.as_str(),
        binding = labels.binding.as_str(),
        queue,
        "Hook executed successfully: {} ({} {})",
        labels.hook,
        labels.event,
        labels.binding
    );
    Ok(())
}

/// After a failed run, the status patches the hook marked `ignoreHookError` (as shell-operator documents
/// them; its code reads no output of a failed run). Nothing else of the file is applied.
async fn status_despite_failure(shared: &Shared, labels: &RunLabels, patches: &[u8]) {
    if patches.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let operations = match patch::parse(patches) {
        Ok(operations) => operations.into_iter().filter(|op| op.despite_failure()).collect::<Vec<_>>(),
        Err(err) => {
            return tracing::warn!(hook = labels.hook.as_str(), "$KUBERNETES_PATCH_PATH of a failed run: {err}");
        }
    };
    if operations.is_empty() {
        return;
    }
    if let Err(err) = super::patch::apply(shared, operations).await {
        tracing::warn!(hook = labels.hook.as_str(), "status patches of a failed run (ignoreHookError): {err}");
    }
}

/// 0 to 1 s, so that hooks failing together are not all retried at the same moment.
fn jitter() -> Duration {
    let mut byte = [0u8; 2];
    let _ = getrandom::fill(&mut byte);
    Duration::from_millis(u64::from(u16::from_le_bytes(byte)) % 1000)
}
