//! One watch per resource, namespace and label selector for the whole process, however many
//! controllers read it (as metacontroller shares its informers): two controllers with ConfigMap
//! children in one namespace share one watch and one cache of them, two decorators of one type share
//! the watch of that type, two customize hooks asking for Secrets share one watch of Secrets. Whole
//! objects (`objects`) and metadata (`metadata`, kept without annotations and managed fields: readers
//! only match names, owners and labels) are separate feeds. Each reader gets every event after the
//! shared store has applied it, as its own watch would give it; one that joins late gets the store's
//! content first as a complete list (`Init`, each object, `InitDone`), at once if the store holds a full
//! list, or at the end of the list in progress. A feed stops when its last reader goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use futures::{Stream, StreamExt, stream};
use kube::Client;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, api::ObjectMeta};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::triggers::Outage;
use crate::cluster::scope;
use crate::controller::serve::health::Health;

/// What a feed carries: whole objects or their metadata, of a type discovery resolved.
pub trait Fed:
    Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>
    + Clone
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

/// One running watch, its store and its readers; the watch is stopped when the feed is dropped.
struct Feed<K: Fed> {
    store: Store<K>,
    state: Arc<Mutex<State<K>>>,
    task: tokio::task::AbortHandle,
}

impl<K: Fed> Drop for Feed<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State<K> {
    /// The store has held a complete list at least once.
    listed: bool,
    /// A (re)list is in progress.
    listing: bool,
    readers: Vec<Reader<K>>,
}

impl<K> Default for State<K> {
    fn default() -> Self {
        State { listed: false, listing: false, readers: Vec::new() }
    }
}

struct Reader<K> {
    events: mpsc::UnboundedSender<Event<K>>,
    /// Joined during a list: gets the whole store at its end.
    waiting: bool,
}

impl<K: Fed> State<K> {
    fn replay(store: &Store<K>, reader: &Reader<K>) {
        let _ = reader.events.send(watcher::Event::Init);
        for object in store.state() {
            let _ = reader.events.send(watcher::Event::InitApply((*object).clone()));
        }
        let _ = reader.events.send(watcher::Event::InitDone);
    }

    /// Hands one event (already applied to `store`) to every reader, and drops the readers gone.
    fn dispatch(&mut self, store: &Store<K>, event: &Event<K>) {
        match event {
            watcher::Event::Init => self.listing = true,
            watcher::Event::InitDone => {
                self.listing = false;
                self.listed = true;
            }
            _ => {}
        }
        self.readers.retain_mut(|reader| {
            if reader.waiting {
                if matches!(event, watcher::Event::InitDone) {
                    reader.waiting = false;
                    State::replay(store, reader);
                }
                return !reader.events.is_closed();
            }
            reader.events.send(event.clone()).is_ok()
        });
    }
}

impl Hub {
    pub fn new(client: Client, health: Arc<Health>) -> Self {
        Hub { client, health, objects: Mutex::default(), metadata: Mutex::default() }
    }

    /// The objects of `ar` in `namespace` (all when `None`) with `labels` (a label selector, or empty):
    /// the shared store, and this reader's events. The watch's failures are the feed's to report (once,
    /// to the log and the probes), not each reader's.
    pub fn objects(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
    ) -> (Store<DynamicObject>, impl Stream<Item = Event<DynamicObject>> + Send + 'static) {
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
    ) -> (Store<K>, impl Stream<Item = Event<K>> + Send + 'static) {
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
        let (sender, receiver) = mpsc::unbounded_channel();
        {
            let mut state = feed.state.lock().unwrap_or_else(|e| e.into_inner());
            let reader = Reader { events: sender, waiting: state.listing || !state.listed };
            if !reader.waiting {
                State::replay(&feed.store, &reader);
            }
            state.readers.push(reader);
        }
        let store = feed.store.clone();
        // The reader holds the feed: the watch runs as long as someone reads it.
        let events = stream::unfold((receiver, feed), |(mut receiver, feed)| async move {
            let event = receiver.recv().await?;
            Some((event, (receiver, feed)))
        });
        (store, events.boxed())
    }

    fn start<K: Fed>(&self, ar: &ApiResource, key: &Key) -> Feed<K> {
        let writer = Writer::new(ar.clone());
        let store = writer.as_reader();
        let api = scope::discovered::<K>(self.client.clone(), ar, key.namespace.as_deref());
        let mut config = watcher::Config::default();
        if !key.labels.is_empty() {
            config = config.labels(&key.labels);
        }
        let state = Arc::new(Mutex::new(State::default()));
        let (shared, reader) = (state.clone(), store.clone());
        let mut outage = Outage::new(format!("{}s{}", ar.kind, K::WHAT), &self.health);
        let mut events = watcher(api, config).default_backoff().modify(K::trim).reflect(writer).boxed();
        let task = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    Err(err) => outage.failed(&err),
                    Ok(event) => {
                        if matches!(event, watcher::Event::InitDone) {
                            outage.listed();
                        }
                        shared.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&reader, &event);
                    }
                }
            }
        });
        Feed { store, state, task: task.abort_handle() }
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

    fn names(events: &mut mpsc::UnboundedReceiver<Event<DynamicObject>>) -> Vec<String> {
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

    /// Feeds `event` through a store and the state, as the feed's task does.
    fn feed(writer: &mut Writer<DynamicObject>, state: &mut State<DynamicObject>, event: Event<DynamicObject>) {
        writer.apply_watcher_event(&event);
        state.dispatch(&writer.as_reader(), &event);
    }

    #[test]
    fn a_reader_joining_during_a_list_gets_the_whole_store_at_its_end_and_then_every_event() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut writer = Writer::new(ar);
        let mut state = State::default();
        let (early, mut early_events) = mpsc::unbounded_channel();
        state.readers.push(Reader { events: early, waiting: false });
        feed(&mut writer, &mut state, watcher::Event::Init);
        feed(&mut writer, &mut state, watcher::Event::InitApply(object("a")));
        let (late, mut late_events) = mpsc::unbounded_channel();
        state.readers.push(Reader { events: late, waiting: true });
        feed(&mut writer, &mut state, watcher::Event::InitApply(object("b")));
        feed(&mut writer, &mut state, watcher::Event::InitDone);
        feed(&mut writer, &mut state, watcher::Event::Apply(object("c")));
        assert_eq!(names(&mut early_events), ["init", "list a", "list b", "done", "apply c"]);
        let mut late_seen = names(&mut late_events);
        late_seen[1..3].sort();
        assert_eq!(late_seen, ["init", "list a", "list b", "done", "apply c"]);

        // A reader that went away is dropped at the next event.
        drop(early_events);
        feed(&mut writer, &mut state, watcher::Event::Delete(object("c")));
        assert_eq!(state.readers.len(), 1);
        assert_eq!(names(&mut late_events), ["delete c"]);
    }
}
