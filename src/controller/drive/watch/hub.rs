//! One watch per resource, namespace and label selector for the whole process, however many
//! controllers read it (as metacontroller shares its informers): two controllers with ConfigMap
//! children in one namespace share one watch and one cache of them, two decorators of one type share
//! the watch of that type, two customize hooks asking for Secrets share one watch of Secrets. Whole
//! objects (`objects`) and metadata (`metadata`, kept without annotations and managed fields: readers
//! only match names, owners and labels) are separate feeds.
//!
//! Each feed starts with a streaming list (a watch that first sends every object, then a bookmark saying
//! the list is complete: the API server's WatchList, on by default since Kubernetes 1.34), which never
//! holds a whole list in one response; an API server that refuses it is listed in pages instead, as
//! before. Objects go into the feed's compact [`Cache`] as they come, and each reader gets every event
//! after the cache has taken it in, as its own watch would give it, through a small bounded channel: a
//! reader that falls behind slows the feed down rather than letting copies of objects pile up. One that
//! joins late gets the cache's content first as a complete list (`Init`, each object, `InitDone`), at
//! once if the cache holds a full list, or at the end of the list in progress. What a relist finds gone
//! reaches readers as deletions before its `InitDone`. A feed stops when its last reader goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use futures::{Stream, StreamExt, stream};
use kube::Client;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, api::ObjectMeta};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::triggers::Outage;
use crate::cluster::scope;
use crate::controller::drive::cache::Cache;
use crate::controller::serve::health::Health;

/// How many events may wait for a reader that has not taken them yet.
const READER_BUFFER: usize = 256;

/// What a feed carries: whole objects or their metadata, of a type discovery resolved.
pub trait Fed:
    Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// How the watch is named in the log, after the kind's plural.
    const WHAT: &'static str;

    /// Drops what no reader looks at, before the object is stored.
    fn trim(&mut self);
}

impl Fed for DynamicObject {
    const WHAT: &'static str = "";

    fn trim(&mut self) {
        self.metadata.managed_fields = None;
    }
}

impl Fed for PartialObjectMeta<DynamicObject> {
    const WHAT: &'static str = " (metadata)";

    fn trim(&mut self) {
        let ObjectMeta { managed_fields, annotations, .. } = &mut self.metadata;
        (*managed_fields, *annotations) = (None, None);
    }
}

type Event<K> = watcher::Event<K>;
type Feeds<K> = Mutex<HashMap<Key, Weak<Feed<K>>>>;

/// The process's shared watches.
pub struct Hub {
    client: Client,
    health: Arc<Health>,
    objects: Feeds<DynamicObject>,
    metadata: Feeds<PartialObjectMeta<DynamicObject>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    api_version: String,
    plural: String,
    namespace: Option<String>,
    labels: String,
}

/// One running watch, its cache, and the way in for new readers; the watch is stopped when the feed is
/// dropped.
struct Feed<K: Fed> {
    cache: Cache<K>,
    joins: mpsc::UnboundedSender<mpsc::Sender<Event<K>>>,
    task: tokio::task::AbortHandle,
}

impl<K: Fed> Drop for Feed<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Reader<K> {
    events: mpsc::Sender<Event<K>>,
    /// Joined during a list: gets the whole cache at its end.
    waiting: bool,
}

/// Whether the API server refused a streaming list as a request it does not serve: before Kubernetes
/// 1.27, or with the WatchList feature turned off, `sendInitialEvents` is refused as invalid.
fn streaming_refused(err: &watcher::Error) -> bool {
    matches!(err, watcher::Error::WatchStartFailed(kube::Error::Api(status)) if status.code == 400 || status.code == 422)
}

/// One feed's watch, cache and readers, as its task runs them.
struct Running<K: Fed> {
    cache: Cache<K>,
    readers: Vec<Reader<K>>,
    /// The cache has held a complete list at least once.
    listed: bool,
    /// A (re)list is in progress.
    listing: bool,
}

impl<K: Fed> Running<K> {
    /// Sends `event` to the reader; false when the reader is gone.
    async fn send(reader: &Reader<K>, event: Event<K>) -> bool {
        reader.events.send(event).await.is_ok()
    }

    async fn replay(cache: &Cache<K>, reader: &Reader<K>) -> bool {
        if !Self::send(reader, watcher::Event::Init).await {
            return false;
        }
        for place in cache.places() {
            if let Some(object) = cache.get(&place)
                && !Self::send(reader, watcher::Event::InitApply(object)).await
            {
                return false;
            }
        }
        Self::send(reader, watcher::Event::InitDone).await
    }

    async fn join(&mut self, events: mpsc::Sender<Event<K>>) {
        let mut reader = Reader { events, waiting: self.listing || !self.listed };
        if !reader.waiting && !Self::replay(&self.cache, &reader).await {
            return;
        }
        reader.waiting = reader.waiting && !reader.events.is_closed();
        self.readers.push(reader);
    }

    /// Takes one event into the cache, then hands it (and, at the end of a relist, the objects found
    /// gone) to every reader, dropping the readers gone.
    async fn take(&mut self, event: Event<K>) {
        let mut events = Vec::new();
        match &event {
            watcher::Event::Init => {
                self.cache.listing();
                self.listing = true;
            }
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => self.cache.apply(object),
            watcher::Event::Delete(object) => self.cache.delete(object),
            watcher::Event::InitDone => {
                events.extend(self.cache.listed().into_iter().map(watcher::Event::Delete));
                self.listing = false;
                self.listed = true;
            }
        }
        let done = matches!(event, watcher::Event::InitDone);
        events.push(event);
        let mut gone = Vec::new();
        for (i, reader) in self.readers.iter_mut().enumerate() {
            let alive = match reader.waiting {
                true if done => {
                    reader.waiting = false;
                    Self::replay(&self.cache, reader).await
                }
                true => !reader.events.is_closed(),
                false => {
                    let mut alive = true;
                    for event in &events {
                        alive = alive && Self::send(reader, event.clone()).await;
                    }
                    alive
                }
            };
            if !alive {
                gone.push(i);
            }
        }
        for i in gone.into_iter().rev() {
            self.readers.swap_remove(i);
        }
    }
}

impl Hub {
    pub fn new(client: Client, health: Arc<Health>) -> Self {
        Hub { client, health, objects: Mutex::default(), metadata: Mutex::default() }
    }

    /// The objects of `ar` in `namespace` (all when `None`) with `labels` (a label selector, or empty):
    /// the shared cache, and this reader's events. The watch's failures are the feed's to report (once,
    /// to the log and the probes), not each reader's.
    pub fn objects(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
    ) -> (Cache<DynamicObject>, impl Stream<Item = Event<DynamicObject>> + Send + 'static) {
        self.read(&self.objects, ar, namespace, labels)
    }

    /// The same for the objects' metadata only.
    pub fn metadata(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
    ) -> impl Stream<Item = Event<PartialObjectMeta<DynamicObject>>> + Send + 'static {
        self.read(&self.metadata, ar, namespace, labels).1
    }

    fn read<K: Fed>(
        &self,
        feeds: &Feeds<K>,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
    ) -> (Cache<K>, impl Stream<Item = Event<K>> + Send + 'static) {
        let key = Key {
            api_version: ar.api_version.clone(),
            plural: ar.plural.clone(),
            namespace: namespace.map(str::to_owned),
            labels: labels.to_owned(),
        };
        let feed = {
            let mut feeds = feeds.lock().unwrap_or_else(|e| e.into_inner());
            feeds.retain(|_, feed| feed.strong_count() > 0);
            match feeds.get(&key).and_then(Weak::upgrade) {
                Some(feed) => feed,
                None => {
                    let feed = Arc::new(self.start(ar, &key));
                    feeds.insert(key, Arc::downgrade(&feed));
                    feed
                }
            }
        };
        let (sender, receiver) = mpsc::channel(READER_BUFFER);
        let _ = feed.joins.send(sender);
        let cache = feed.cache.clone();
        // The reader holds the feed: the watch runs as long as someone reads it.
        let events = stream::unfold((receiver, feed), |(mut receiver, feed)| async move {
            let event = receiver.recv().await?;
            Some((event, (receiver, feed)))
        });
        (cache, events.boxed())
    }

    fn start<K: Fed>(&self, ar: &ApiResource, key: &Key) -> Feed<K> {
        let cache = Cache::default();
        let api = scope::discovered::<K>(self.client.clone(), ar, key.namespace.as_deref());
        let mut config = watcher::Config::default();
        if !key.labels.is_empty() {
            config = config.labels(&key.labels);
        }
        let what = format!("{}s{}", ar.kind, K::WHAT);
        let mut outage = Outage::new(what.clone(), &self.health);
        let (joins, mut joined) = mpsc::unbounded_channel();
        let mut running = Running { cache: cache.clone(), readers: Vec::new(), listed: false, listing: false };
        let task = tokio::spawn(async move {
            let mut streaming = true;
            loop {
                let config = match streaming {
                    true => config.clone().streaming_lists(),
                    false => config.clone(),
                };
                let mut events = watcher(api.clone(), config).default_backoff().modify(K::trim).boxed();
                loop {
                    tokio::select! {
                        Some(reader) = joined.recv() => running.join(reader).await,
                        event = events.next() => match event {
                            None => return,
                            Some(Err(err)) if streaming && streaming_refused(&err) => {
                                tracing::info!("the API server does not stream lists of {what}; listing them in pages");
                                streaming = false;
                                break;
                            }
                            Some(Err(err)) => outage.failed(&err),
                            Some(Ok(event)) => {
                                if matches!(event, watcher::Event::InitDone) {
                                    outage.listed();
                                }
                                running.take(event).await;
                            }
                        },
                    }
                }
            }
        });
        Feed { cache, joins, task: task.abort_handle() }
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ResourceExt;

    use super::*;

    fn object(name: &str) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        DynamicObject::new(name, &ar).within("ns")
    }

    fn names(events: &mut mpsc::Receiver<Event<DynamicObject>>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            seen.push(match event {
                watcher::Event::Init => "init".to_owned(),
                watcher::Event::InitApply(o) => format!("list {}", o.name_any()),
                watcher::Event::InitDone => "done".to_owned(),
                watcher::Event::Apply(o) => format!("apply {}", o.name_any()),
                watcher::Event::Delete(o) => format!("delete {}", o.name_any()),
            });
        }
        seen
    }

    #[tokio::test]
    async fn a_reader_joining_during_a_list_gets_the_whole_cache_at_its_end_and_then_every_event() {
        let mut running = Running { cache: Cache::default(), readers: Vec::new(), listed: false, listing: false };
        let (early, mut early_events) = mpsc::channel(READER_BUFFER);
        running.join(early).await;
        running.take(watcher::Event::Init).await;
        running.take(watcher::Event::InitApply(object("a"))).await;
        let (late, mut late_events) = mpsc::channel(READER_BUFFER);
        running.join(late).await;
        running.take(watcher::Event::InitApply(object("b"))).await;
        running.take(watcher::Event::InitDone).await;
        running.take(watcher::Event::Apply(object("c"))).await;
        // Both joined before the first list was complete: each gets the cache at its end, in no order.
        for events in [&mut early_events, &mut late_events] {
            let mut seen = names(events);
            seen[1..3].sort();
            assert_eq!(seen, ["init", "list a", "list b", "done", "apply c"]);
        }

        // A reader that went away is dropped at the next event.
        drop(early_events);
        running.take(watcher::Event::Delete(object("c"))).await;
        assert_eq!(running.readers.len(), 1);
        assert_eq!(names(&mut late_events), ["delete c"]);

        // A relist: what it does not bring reaches readers as deleted, before its end.
        running.take(watcher::Event::Init).await;
        running.take(watcher::Event::InitApply(object("b"))).await;
        running.take(watcher::Event::InitDone).await;
        assert_eq!(names(&mut late_events), ["init", "list b", "delete a", "done"]);
        assert_eq!(running.cache.len(), 1);

        // A reader joining now gets the cache at once.
        let (third, mut third_events) = mpsc::channel(READER_BUFFER);
        running.join(third).await;
        assert_eq!(names(&mut third_events), ["init", "list b", "done"]);
    }

    #[test]
    fn only_a_refused_streaming_list_falls_back_to_pages() {
        let status = |code| {
            watcher::Error::WatchStartFailed(kube::Error::Api(
                kube::core::Status::failure("no", "Invalid").with_code(code).boxed(),
            ))
        };
        assert!(streaming_refused(&status(422)));
        assert!(streaming_refused(&status(400)));
        assert!(!streaming_refused(&status(403)), "forbidden is not unsupported");
        assert!(!streaming_refused(&status(503)));
    }
}
