//! The children of the parents a member takes in (`handover.rs`), looked for many parents to a list.
//!
//! Taking a parent in lists the children labelled with its uid, whatever member they name. The API server
//! answers a label-selected list by going through every object of the kind in the namespace (its cache
//! has no index on labels), so a list per parent cost it N^2 over a member's start or its share of a burst:
//! at 100,000 Samples over three members the ConfigMap lists kept it so busy that after 50 minutes they
//! still took over 10 s and 28,000 Samples had no ConfigMap yet. The parents waiting at the same
//! time are now looked for with one list, `uid in (a, b, ...)`, of up to [`BATCH`] uids. A parent alone
//! has its own list at once, as before; under load the lists grow instead of multiplying. A parent always
//! waits for a list that starts after it asked, so the list sees every child written before it was taken
//! in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::api::{DynamicObject, ListParams};
use tokio::sync::oneshot;

use super::Definition;
use super::request::bounded;
use crate::cluster::scope;
use crate::controller::rules::shard::PARENT_LABEL;

/// The most parents one list asks for: about 4 KiB of uids in its URL.
pub const BATCH: usize = 100;

/// A child found, with the index of its kind among the controller's children.
pub type Found = (usize, DynamicObject);
/// A look that failed: what was being done, and the API server's words.
pub type Failure = (String, String);
type Reply = oneshot::Sender<Result<Vec<Found>, Failure>>;

/// The parents waiting for a look, by namespace (empty for cluster-scoped parents).
pub struct Lookups {
    client: Client,
    definition: Arc<Definition>,
    waiting: Mutex<HashMap<String, Vec<(String, Reply)>>>,
}

impl Lookups {
    pub fn new(client: Client, definition: Arc<Definition>) -> Arc<Self> {
        Arc::new(Lookups { client, definition, waiting: Mutex::default() })
    }

    /// Every child labelled with `uid`, the parent's, in `namespace` (all of them for a cluster-scoped
    /// parent), from a list that starts after this call.
    pub async fn children_of(self: &Arc<Self>, namespace: &str, uid: &str) -> Result<Vec<Found>, Failure> {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            // An entry is there for as long as a task drains it.
            let first = !waiting.contains_key(namespace);
            waiting.entry(namespace.to_owned()).or_default().push((uid.to_owned(), reply));
            first
        };
        // One task per namespace drains its queue, so that a reconcile given up (its deadline) strands
        // nobody else's look.
        if first {
            tokio::spawn(self.clone().drain(namespace.to_owned()));
        }
        answer.await.unwrap_or_else(|_| Err(("looking for its children".into(), "the look was dropped".into())))
    }

    async fn drain(self: Arc<Self>, namespace: String) {
        loop {
            // The entry stays while a list is out: whoever asks meanwhile waits for the next one.
            let batch: Vec<(String, Reply)> = {
                let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                let Some(queue) = waiting.get_mut(&namespace) else { return };
                if queue.is_empty() {
                    waiting.remove(&namespace);
                    return;
                }
                let taken = queue.len().min(BATCH);
                queue.drain(..taken).collect()
            };
            let mut uids: Vec<&str> = batch.iter().map(|(uid, _)| uid.as_str()).collect();
            uids.sort_unstable();
            uids.dedup();
            match self.list(&namespace, &uids).await {
                Ok(found) => {
                    let mut by_parent: HashMap<String, Vec<Found>> = HashMap::new();
                    for (kind, child) in found {
                        let parent = child.metadata.labels.as_ref().and_then(|l| l.get(PARENT_LABEL)).cloned();
                        by_parent.entry(parent.unwrap_or_default()).or_default().push((kind, child));
                    }
                    for (uid, reply) in batch {
                        let _ = reply.send(Ok(by_parent.get(&uid).cloned().unwrap_or_default()));
                    }
                }
                Err(failure) => {
                    for (_, reply) in batch {
                        let _ = reply.send(Err(failure.clone()));
                    }
                }
            }
        }
    }

    async fn list(&self, namespace: &str, uids: &[&str]) -> Result<Vec<Found>, Failure> {
        let family = &self.definition.family;
        let selector = format!("{},{PARENT_LABEL} in ({})", family.managed_selector(), uids.join(","));
        let mut found = Vec::new();
        for (kind, child) in family.children.iter().enumerate() {
            let namespace = (child.namespaced && !namespace.is_empty()).then_some(namespace);
            let api = scope::dynamic(self.client.clone(), &child.ar, namespace);
            let listed = bounded(api.list(&ListParams::default().labels(&selector)))
                .await
                .map_err(|failed| (format!("looking for its {}", child.ar.plural), failed.message()))?;
            found.extend(listed.items.into_iter().map(|item| (kind, item)));
        }
        Ok(found)
    }
}
