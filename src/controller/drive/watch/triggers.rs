//! The one adaptor from a watch to parent triggers, used by the parents' watch and every child watch:
//! the end of each (re)list and each applied or deleted object go to the watch's own rule for which
//! parents that concerns. The events arrive after the watch's cache has taken them in, so a trigger never
//! runs ahead of the cache. `Outage` reports a watch's failures (for the hub's feeds, once per feed).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

use super::Triggers;
use super::queue::Lane;
use crate::controller::drive::place::Place;
use crate::controller::serve::health::Health;

/// What a watch saw.
pub enum Seen<K> {
    Applied(K),
    Deleted(K),
    /// An object of a (re)list still in progress (already in the cache).
    Listing(K),
    /// A (re)list is complete: the cache holds exactly what the server has.
    Listed,
}

/// The parents `on` names for each thing the watch `events` sees, as one stream of batches: those named
/// at the end of a (re)list in the sweep lane, the others in the change lane.
pub fn triggers<K, S>(events: S, mut on: impl FnMut(Seen<K>) -> Vec<Place> + Send + 'static) -> Triggers
where
    S: Stream<Item = watcher::Event<K>> + Send + 'static,
    K: Send + 'static,
{
    events
        .filter_map(move |event| {
            let (triggers, lane) = match event {
                watcher::Event::Apply(object) => (on(Seen::Applied(object)), Lane::Change),
                watcher::Event::Delete(object) => (on(Seen::Deleted(object)), Lane::Change),
                watcher::Event::InitDone => (on(Seen::Listed), Lane::Sweep),
                watcher::Event::InitApply(object) => (on(Seen::Listing(object)), Lane::Change),
                watcher::Event::Init => (Vec::new(), Lane::Change),
            };
            futures::future::ready((!triggers.is_empty()).then_some((triggers, lane)))
        })
        .boxed()
}

/// Says, once per outage, that a watch was cut and is being reopened, and when it is back; the errors
/// between (every failed reconnect) go to the debug log. It also tells /healthz and /readyz when the API
/// server did not answer.
pub struct Outage {
    what: String,
    down: bool,
    health: Arc<Health>,
}

impl Outage {
    pub fn new(what: String, health: &Arc<Health>) -> Self {
        Outage { what, down: false, health: health.clone() }
    }

    pub fn failed(&mut self, err: &watcher::Error) {
        match err {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => self.health.failed(e),
            // An ERROR event (410 Expired, ...) is the server answering.
            watcher::Error::WatchError(_) => {}
            _ => self.health.unreachable(),
        }
        if !std::mem::replace(&mut self.down, true) {
            tracing::warn!("the watch of {} was cut ({}); reconnecting", self.what, watch_error(err));
        }
        tracing::debug!("watch of {}: {}", self.what, watch_error(err));
    }

    pub fn listed(&mut self) {
        if std::mem::replace(&mut self.down, false) {
            tracing::info!("the watch of {} is back, and every {} has been looked at again", self.what, self.what);
        }
    }
}

/// A watcher error in words, without kube's Debug dump of the underlying error.
fn watch_error(err: &watcher::Error) -> String {
    match err {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            crate::error::describe(e)
        }
        watcher::Error::WatchError(status) if status.code == 410 => "its resourceVersion expired".into(),
        watcher::Error::WatchError(status) => status.message.clone(),
        other => other.to_string(),
    }
}
