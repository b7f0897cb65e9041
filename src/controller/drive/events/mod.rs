//! The driver of shell-operator's hooks: binding contexts queued and run in named FIFO queues, as
//! shell-operator runs them. `main` starts with every `onStartup` run (lowest order first), then, hook
//! by hook in path order, the task that turns the hook's schedules on. Each queue has one worker that
//! runs its head to success: a run that fails stays at the head and is tried again after
//! `rules::shell::context::retry_delay` (holding its queue) unless its binding may fail; runs of the
//! same hook waiting right behind it are taken into it (`queue.rs`). Schedules (`schedule.rs`) add
//! their runs at the tail of their binding's queue. A hook's `settings` rate-limit its runs. Admission
//! and conversion webhooks are served before anything runs (`webhook.rs`), their runs outside the queues.

pub mod jq_worker;
mod kube;
mod limiter;
mod patch;
mod queue;
mod schedule;
pub mod share;
mod webhook;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use tokio::sync::watch;

use self::kube::Monitor;
use self::limiter::Limiter;
use self::queue::{Queue, Task};
use crate::cluster::client::Connection;
use crate::controller::define::hooks_dir::ShellHook;
use crate::controller::drive::watch::hub::Hub;
use crate::controller::engine::fence::Fence;
use crate::controller::rules::shell::config::ConfigVersion;
use crate::controller::rules::shell::context::{Pending, SnapshotItem, What};
use crate::controller::serve::Serving;

/// A loaded hooks directory, ready to run.
pub struct Hooks {
    pub hooks: Vec<ShellHook>,
    /// Where each run's files are written.
    pub tmp_dir: PathBuf,
    /// Checked before each write of a patch file: closed once a Lease held for them may have passed on.
    pub fence: Fence,
    /// Where the webhooks are served and how they are registered.
    pub webhooks: Box<crate::controller::settings::WebhookSettings>,
    /// In a shard ring: the member's share of the kubernetes bindings' objects.
    pub share: Option<Arc<share::Share>>,
}

/// What the queues' workers share.
struct Shared {
    hooks: Vec<Hook>,
    tmp_dir: PathBuf,
    queues: HashMap<String, Arc<Queue>>,
    client: ::kube::Client,
    hub: Arc<Hub>,
    fence: Fence,
    /// Set once this process runs the hooks (it holds the Lease, or none is asked for): only then are
    /// there snapshots for a webhook's run.
    running: std::sync::atomic::AtomicBool,
    /// Told whenever a hook's schedules are turned on.
    schedules_on: tokio::sync::Notify,
    metrics: Arc<crate::controller::serve::metrics::Metrics>,
    /// Kinds found through discovery, by apiVersion (empty: any) and the name a hook gave: a patch file
    /// of many operations asks discovery once, not once per operation. Misses are not kept.
    kinds: std::sync::Mutex<HashMap<(String, String), crate::cluster::resolve::Resolved>>,
    /// The running kubernetes bindings, by hook and binding.
    monitors: std::sync::Mutex<HashMap<(usize, usize), Arc<Monitor>>>,
    /// In a shard ring: the member's share of the bindings' objects.
    share: Option<Arc<share::Share>>,
}

struct Hook {
    loaded: ShellHook,
    limiter: Option<Limiter>,
    /// Set by the hook's turn in `main`: its schedules add runs from then on.
    schedules_on: std::sync::atomic::AtomicBool,
}

/// Hooks whose webhooks are served, ready to run once this process may (holding the Lease, if one is
/// asked for).
pub struct Ready {
    shared: Arc<Shared>,
    webhooks: Box<crate::controller::settings::WebhookSettings>,
}

impl Hooks {
    /// Starts the webhook servers the hooks need, which answer reviews until `stop`, on a standby too.
    pub async fn serve(self, conn: &Connection, serving: &Serving, stop: watch::Receiver<bool>) -> Result<Ready> {
        let Hooks { hooks, tmp_dir, fence, webhooks, share } = self;
        let mut names: BTreeSet<String> = BTreeSet::from(["main".to_owned()]);
        for hook in &hooks {
            names.extend(hook.config.schedules.iter().map(|s| s.queue.clone()));
            names.extend(hook.config.kubernetes.iter().map(|k| k.queue.clone()));
        }
        let queues = names.into_iter().map(|name| (name.clone(), Arc::new(Queue::new(name)))).collect();
        let hooks: Vec<Hook> = hooks
            .into_iter()
            .map(|loaded| Hook {
                limiter: loaded.config.settings.map(Limiter::new),
                loaded,
                schedules_on: Default::default(),
            })
            .collect();
        let hub = Arc::new(Hub::new(conn.client.clone(), serving.health.clone()));
        let shared = Arc::new(Shared {
            hooks,
            tmp_dir,
            queues,
            client: conn.client.clone(),
            hub,
            fence,
            running: Default::default(),
            schedules_on: tokio::sync::Notify::new(),
            metrics: serving.metrics.clone(),
            kinds: Default::default(),
            monitors: Default::default(),
            share,
        });
        if let Some(share) = &shared.share {
            let weak = Arc::downgrade(&shared);
            share.on_release(Box::new(move |released| {
                if let Some(shared) = weak.upgrade() {
                    shared.strip(released);
                }
            }));
        }
        webhook::serve(&shared, &webhooks, stop).await?;
        Ok(Ready { shared, webhooks })
    }
}

impl Ready {
    /// Registers the webhooks, then runs the hooks until `stop`; then lets the runs in flight finish
    /// (the caller bounds how long).
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> Result<()> {
        let Ready { shared, webhooks } = self;
        shared.running.store(true, std::sync::atomic::Ordering::Relaxed);
        webhook::register(&shared, &webhooks).await?;
        let (stop_workers, workers_stop) = watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        shared.queue_start_up();
        for queue in shared.queues.values() {
            tasks.spawn(queue::work(shared.clone(), queue.clone(), workers_stop.clone()));
        }
        tasks.spawn(schedule::tick(shared.clone(), workers_stop.clone()));
        if let Some(share) = shared.share.clone() {
            let (client, fence, mut stop) = (shared.client.clone(), shared.fence.clone(), workers_stop);
            tasks.spawn(async move {
                tokio::select! {
                    () = share.release(client, fence) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
        }
        tracing::info!(
            hooks = shared.hooks.len(),
            queues = shared.queues.len(),
            "running {} hooks",
            shared.hooks.len()
        );
        let _ = stop.wait_for(|s| *s).await;
        // Each worker finishes the run it is in, then stops; a run cut short by the caller's deadline is
        // stopped with every process it started.
        let _ = stop_workers.send(true);
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

impl Shared {
    /// `main`'s first tasks: the onStartup runs in order (ties in path order), then each hook's turn to
    /// start its schedules.
    fn queue_start_up(&self) {
        let main = &self.queues["main"];
        let mut starting: Vec<(usize, f64)> =
            self.hooks.iter().enumerate().filter_map(|(i, h)| h.loaded.config.on_startup.map(|o| (i, o))).collect();
        starting.sort_by(|a, b| a.1.total_cmp(&b.1));
        for (hook, _) in starting {
            let v0 = self.hooks[hook].loaded.config.version == ConfigVersion::V0;
            main.push(Task::Run {
                hook,
                event: "OnStartup",
                allow_failure: false,
                contexts: vec![Pending {
                    binding: "onStartup".into(),
                    what: What::OnStartup,
                    group: None,
                    snapshots: Vec::new(),
                    v0,
                }],
                unlock: Vec::new(),
            });
        }
        for (hook, loaded) in self.hooks.iter().enumerate() {
            if !loaded.loaded.config.kubernetes.is_empty() {
                main.push(Task::EnableKubernetes { hook });
            }
            if !loaded.loaded.config.schedules.is_empty() {
                main.push(Task::EnableSchedules { hook });
            }
        }
    }

    /// Starts `hook`'s kubernetes bindings, in config order, and gives the tasks that come next in
    /// `main`: each binding's Synchronization run (or its events let through, where it has none).
    /// On a failure the bindings started are stopped, to be started afresh on the retry.
    async fn enable_kubernetes(self: &Arc<Self>, hook: usize) -> Result<Vec<Task>, String> {
        let config = &self.hooks[hook].loaded.config;
        let mut started = Vec::new();
        for (binding, k) in config.kubernetes.iter().enumerate() {
            let monitor = kube::start(self, hook, binding)
                .await
                .map_err(|err| format!("kubernetes binding {:?} ({}): {err}", k.name, k.kind))?;
            started.push((binding, monitor));
        }
        let mut next = Vec::new();
        let mut monitors = self.monitors.lock().unwrap_or_else(|e| e.into_inner());
        for (binding, monitor) in started {
            monitors.insert((hook, binding), monitor);
            let k = &config.kubernetes[binding];
            tracing::info!(
                hook = self.hooks[hook].loaded.name.as_str(),
                binding = k.name.as_str(),
                "Enable kubernetes binding {} for hook {}",
                k.name,
                self.hooks[hook].loaded.name
            );
            if k.v0 || !k.execute_on_synchronization {
                next.push(Task::Unlock { hook, binding });
                continue;
            }
            next.push(Task::Run {
                hook,
                event: "Kubernetes",
                allow_failure: k.allow_failure,
                contexts: vec![Pending {
                    binding: k.name.clone(),
                    what: What::Synchronization,
                    group: k.group.clone(),
                    snapshots: k.include_snapshots.clone(),
                    v0: false,
                }],
                unlock: vec![(hook, binding)],
            });
        }
        Ok(next)
    }

    /// The resource a hook names by `kind` (in `api_version`, if given), as shell-operator finds it;
    /// `None` if discovery has none.
    async fn resolve(
        &self,
        api_version: Option<&str>,
        kind: &str,
    ) -> Result<Option<crate::cluster::resolve::Resolved>, String> {
        let key = (api_version.unwrap_or_default().to_owned(), kind.to_owned());
        if let Some(found) = self.kinds.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(Some(found.clone()));
        }
        let found = crate::cluster::resolve::resolve_loose_kind(&self.client, api_version, kind)
            .await
            .map_err(|err| crate::error::describe_any(&err))?;
        if let Some(found) = &found {
            self.kinds.lock().unwrap_or_else(|e| e.into_inner()).insert(key, found.clone());
        }
        Ok(found)
    }

    /// Forgets what `resolve` found for `kind`, after a request to it failed: the resource may have
    /// changed (a CRD deleted or made again).
    fn forget_kind(&self, api_version: Option<&str>, kind: &str) {
        let key = (api_version.unwrap_or_default().to_owned(), kind.to_owned());
        self.kinds.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    }

    fn monitor(&self, hook: usize, binding: usize) -> Option<Arc<Monitor>> {
        self.monitors.lock().unwrap_or_else(|e| e.into_inner()).get(&(hook, binding)).cloned()
    }

    /// Lets the events of these bindings flow to their queues.
    fn unlock(&self, bindings: &[(usize, usize)]) {
        for &(hook, binding) in bindings {
            if let Some(monitor) = self.monitor(hook, binding) {
                monitor.open(self);
                let (name, k) = (&self.hooks[hook].loaded.name, &self.hooks[hook].loaded.config.kubernetes[binding]);
                tracing::info!(
                    hook = name.as_str(),
                    binding = k.name.as_str(),
                    "Unlock kubernetes.Event tasks of {name} {}",
                    k.name
                );
            }
        }
    }

    /// The object `context` (of a run of `hook`) is an event of, when it is one that is left to the next
    /// member once its object is let go of: not a deletion (the look after its `DELETED` found it
    /// deleted), nor a grouped context (it carries no object, only the group's snapshots, which leave
    /// the object out already).
    fn event_object(&self, hook: usize, context: &Pending) -> Option<share::Held> {
        let What::Event { event, key, .. } = &context.what else { return None };
        if *event == crate::controller::rules::shell::config::WatchEvent::Deleted || context.group.is_some() {
            return None;
        }
        // Bindings may share a name (an unnamed one is "kubernetes"): the one of the object's kind.
        let bindings = &self.hooks[hook].loaded.config.kubernetes;
        bindings.iter().enumerate().filter(|(_, k)| k.name == context.binding).find_map(|(binding, _)| {
            let monitor = self.monitor(hook, binding)?;
            (monitor.kind() == key.kind).then(|| monitor.held(key))
        })
    }

    /// Whether `context` is an event of an object the member is letting go of.
    fn leaving(&self, share: &share::Share, hook: usize, context: &Pending) -> bool {
        self.event_object(hook, context).is_some_and(|held| share.leaving(&held))
    }

    /// Takes the events of objects let go of (`released`) out of every queue: what was queued for
    /// them is the next member's to run, and a run held at a queue's head by a failing hook must not
    /// run them later.
    fn strip(&self, released: &std::collections::HashSet<share::Held>) {
        for queue in self.queues.values() {
            queue.retain_contexts(|hook, context| {
                self.event_object(hook, context).is_none_or(|held| !released.contains(&held))
            });
        }
    }

    /// The objects of `hook`'s kubernetes binding `name` now; none if it is not running yet.
    fn snapshot(&self, hook: usize, name: &str) -> Vec<SnapshotItem> {
        let Some(binding) = self.hooks[hook].loaded.config.kubernetes.iter().position(|k| k.name == name) else {
            return Vec::new();
        };
        self.monitor(hook, binding).map(|m| m.snapshot(self.share.as_deref())).unwrap_or_default()
    }
}
