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
use crate::controller::rules::shell::context::{self, Pending, What};
use crate::controller::rules::shell::{metrics, patch, webhook};
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
        {
            let mut tasks = self.lock();
            let hook = match &task {
                Task::Run { hook, contexts, .. } if contexts.first().is_some_and(context::combinable) => Some(*hook),
                _ => None,
            };
            tasks.push_back(task);
            if let Some(hook) = hook {
                compact(&mut tasks, hook);
            }
        }
        self.ready.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Task>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hook of the run at the head, if a run is there.
    fn head_run(&self) -> Option<usize> {
        match self.lock().front() {
            Some(Task::Run { hook, .. }) => Some(*hook),
            _ => None,
        }
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

    /// Keeps, in every run waiting, only the contexts `keep` says to keep (with their run's hook).
    pub fn retain_contexts(&self, keep: impl Fn(usize, &Pending) -> bool) {
        for task in self.lock().iter_mut() {
            if let Task::Run { hook, contexts, .. } = task {
                contexts.retain(|c| keep(*hook, c));
            }
        }
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

/// How many runs of one hook may wait in a queue before they are merged into one, as shell-operator
/// merges them: a flood of events becomes one run, not a backlog of thousands.
const COMPACT_AT: usize = 100;

fn mergeable(task: &Task, of: usize) -> bool {
    matches!(task, Task::Run { hook, contexts, .. } if *hook == of && contexts.first().is_some_and(context::combinable))
}

/// Once [`COMPACT_AT`] runs of `hook` wait, wherever they are in the queue, merges them all into the
/// first: every ungrouped context in order, then one (the last) per group.
fn compact(tasks: &mut VecDeque<Task>, hook: usize) {
    if tasks.iter().filter(|t| mergeable(t, hook)).count() < COMPACT_AT {
        return;
    }
    let mut all = Vec::new();
    let mut unlocks = Vec::new();
    let mut kept = VecDeque::with_capacity(tasks.len());
    // Where the first of them stays, to take every context in.
    let mut first = None;
    for task in tasks.drain(..) {
        match task {
            Task::Run { hook: h, contexts, unlock, event, allow_failure }
                if h == hook && contexts.first().is_some_and(context::combinable) =>
            {
                all.extend(contexts);
                unlocks.extend(unlock);
                if first.is_none() {
                    first = Some(kept.len());
                    kept.push_back(Task::Run { hook, event, allow_failure, contexts: Vec::new(), unlock: Vec::new() });
                }
            }
            other => kept.push_back(other),
        }
    }
    let merged = context::compact_all(all);
    tracing::debug!(
        hook,
        "{COMPACT_AT} or more runs of one hook waiting: merged into one with {} contexts",
        merged.len()
    );
    if let Some(Task::Run { contexts, unlock, .. }) = first.and_then(|at| kept.get_mut(at)) {
        *contexts = merged;
        *unlock = unlocks;
    }
    *tasks = kept;
}

/// Runs `queue`'s tasks until `stop`, finishing the one in progress.
pub async fn work(shared: Arc<Shared>, queue: Arc<Queue>, mut stop: watch::Receiver<bool>) {
    let mut failures: u32 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        // A hook's rate limit is waited for before its run takes in the runs behind it, as
        // shell-operator waits, so that what queued during the wait goes into this run.
        if let Some(limiter) = queue.head_run().and_then(|hook| shared.hooks[hook].limiter.as_ref()) {
            tokio::select! {
                () = limiter.wait() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
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
                shared.schedules_on.notify_waiters();
                tracing::debug!(hook = shared.hooks[hook].loaded.name.as_str(), "schedules of the hook on");
            }
            Task::Run { hook, event, allow_failure, contexts, unlock } => {
                let started = std::time::Instant::now();
                let result = run(&shared, &queue.name, hook, event, &contexts, &unlock).await.map(drop);
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
                        // Retried as it was, less the events of objects let go of meanwhile.
                        let mut contexts = contexts;
                        if let Some(share) = &shared.share {
                            contexts.retain(|c| !shared.leaving(share, hook, c));
                        }
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

/// One run of `hook` (its rate limit waited for by the caller): the hook run with `contexts`, then its
/// patch file and metrics applied. Gives what it answered in a webhook's response file.
pub(super) async fn run(
    shared: &Shared,
    queue: &str,
    index: usize,
    event: &'static str,
    contexts: &[Pending],
    unlock: &[(usize, usize)],
) -> Result<webhook::Answer, String> {
    // In a shard ring: held from before any object is read until the run's writes are sent, so that an
    // object is let go of only once no run that may have read it is under way; and the events of an
    // object being let go of are left to its next member.
    let _using = shared.share.as_ref().map(|share| share.enter());
    let kept: Vec<Pending>;
    let contexts = match &shared.share {
        Some(share) if contexts.iter().any(|c| shared.leaving(share, index, c)) => {
            kept = contexts.iter().filter(|c| !shared.leaving(share, index, c)).cloned().collect();
            &kept[..]
        }
        _ => contexts,
    };
    let Some(first) = contexts.first() else { return Ok(webhook::Answer::Nothing) };
    let hook = &shared.hooks[index];
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
    // The files are read and checked before anything is applied, so that a bad one fails the run
    // before its patches are sent (a retry would send them again).
    let metrics = metrics::parse(&outputs.metrics)?;
    for dropped in &metrics.dropped {
        tracing::warn!(hook = labels.hook.as_str(), "$METRICS_PATH: {dropped}");
    }
    // A webhook's response file too, so that a bad one fails the run before its patches go.
    let answer = match &first.what {
        What::Admission { .. } => webhook::Answer::Admission(webhook::admission_answer(&outputs.admission)?),
        What::Conversion { .. } => webhook::Answer::Conversion(webhook::conversion_answer(&outputs.conversion)?),
        _ => webhook::Answer::Nothing,
    };
    let operations = patch::parse(&outputs.patches).map_err(|err| format!("$KUBERNETES_PATCH_PATH: {err}"))?;
    if !operations.is_empty() {
        super::patch::apply(shared, operations).await?;
    }
    if !metrics.operations.is_empty() {
        let mut series = shared.metrics.hooks.lock().unwrap_or_else(|e| e.into_inner());
        for problem in series.apply(&labels.hook, &metrics.operations) {
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
    Ok(answer)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::rules::shell::context::What;

    fn run(hook: usize, binding: &str) -> Task {
        let context =
            Pending { binding: binding.into(), what: What::Schedule, group: None, snapshots: vec![], v0: false };
        Task::Run { hook, event: "Schedule", allow_failure: false, contexts: vec![context], unlock: vec![] }
    }

    fn shape(queue: &Queue) -> Vec<(usize, usize)> {
        queue
            .lock()
            .iter()
            .map(|t| match t {
                Task::Run { hook, contexts, .. } => (*hook, contexts.len()),
                _ => (usize::MAX, 0),
            })
            .collect()
    }

    #[test]
    fn runs_of_a_hook_behind_the_head_are_taken_in_and_a_flood_is_merged() {
        let queue = Queue::new("main".into());
        for binding in ["a", "b"] {
            queue.push(run(0, binding));
        }
        queue.push(run(1, "c"));
        queue.push(run(0, "d"));
        let Some(Task::Run { contexts, .. }) = queue.take_head() else { panic!() };
        assert_eq!(contexts.iter().map(|c| c.binding.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(shape(&queue), [(1, 1), (0, 1)]);

        // Hook 0's 100th waiting run merges all of them into its first, wherever they are.
        for i in 0..99 {
            queue.push(run(0, &format!("e{i}")));
            if i % 10 == 0 {
                queue.push(run(1, "f"));
            }
        }
        let shape = shape(&queue);
        assert_eq!(shape.iter().filter(|(h, _)| *h == 0).collect::<Vec<_>>(), [&(0, 100)]);
        assert_eq!(shape.iter().filter(|(h, _)| *h == 1).count(), 11);
        assert_eq!(shape[1], (0, 100));
    }
}
