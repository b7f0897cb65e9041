//! The controllers a shard member runs, as its coordinator follows them: fixed from the start (the flags,
//! `-f`), or changing while the member runs as `--from-cluster` starts and stops controller objects,
//! or shell-operator's `kubernetes` bindings as their hooks start them. Every member runs every
//! controller and serves only its share of each one's parents; the coordinator labels the parents of
//! whichever controllers the set holds now. A controller API plugs into the ring by saying what its
//! parents are (`rules::shard::Shares`) and by selecting its member's label in its own watches.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use tokio::sync::watch;

use crate::controller::engine::Context;
pub use crate::controller::rules::shard::Shares;

impl Shares for Context {
    fn resource(&self) -> &ApiResource {
        &self.definition.family.parent.ar
    }
    fn takes(&self, meta: &ObjectMeta) -> bool {
        Context::takes(self, meta)
    }
    fn needs_annotations(&self) -> bool {
        self.selects_by_annotations()
    }
    fn adopts(&self) -> bool {
        true
    }
}

/// A controller, with the namespace it reconciles (all when `None`).
pub type Controller = (Arc<dyn Shares>, Option<String>);

/// Engine contexts as the ring's controllers.
pub fn of_contexts(contexts: &[(Arc<Context>, Option<String>)]) -> Vec<Controller> {
    contexts.iter().map(|(ctx, namespace)| (ctx.clone() as Arc<dyn Shares>, namespace.clone())).collect()
}

/// The controllers now, by an id of their own (never used twice in a process).
pub type Set = BTreeMap<u64, Controller>;

/// A set of controllers that can change, and be followed.
#[derive(Clone)]
pub struct Controllers {
    set: Arc<watch::Sender<Set>>,
    next: Arc<AtomicU64>,
}

impl Default for Controllers {
    fn default() -> Self {
        Controllers { set: Arc::new(watch::Sender::new(Set::new())), next: Arc::new(AtomicU64::new(0)) }
    }
}

impl Controllers {
    /// A set holding these controllers.
    pub fn of(controllers: &[Controller]) -> Self {
        let set = Controllers::default();
        set.add(controllers);
        set
    }

    /// Adds these controllers; their ids, to remove them by.
    pub fn add(&self, controllers: &[Controller]) -> Vec<u64> {
        let ids: Vec<u64> = controllers.iter().map(|_| self.next.fetch_add(1, Ordering::Relaxed)).collect();
        self.set.send_modify(|set| set.extend(ids.iter().copied().zip(controllers.iter().cloned())));
        ids
    }

    pub fn remove(&self, ids: &[u64]) {
        // Every id removed, not only up to the first one found.
        self.set.send_if_modified(|set| {
            ids.iter().map(|id| set.remove(id).is_some()).filter(|removed| *removed).count() > 0
        });
    }

    /// The set now, and each change to it.
    pub fn follow(&self) -> watch::Receiver<Set> {
        self.set.subscribe()
    }
}
