//! One watch per resource, namespace, label and field selector for the whole process, however many
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
//! after the cache has taken it in, as its own watch would give it. The feed never waits for a reader:
//! it queues each reader's events in that reader's outbox, and a task of the reader's own sends them on
//! through a small bounded channel at the reader's pace, so one slow reader (a coordinator busy with a
//! request) holds up nothing but itself. A reader more than [`OUTBOX_LIMIT`] events behind has them
//! folded into which objects changed and which went (the deleted ones kept, the changed ones read from
//! the cache when they are sent), so copies of objects never pile up for it. One that joins late gets the
//! cache's content first as a complete list (`Init`, each object, `InitDone`), at once if the cache holds
//! a full list, or at the end of the list in progress. One that joins before the feed's first list has
//! begun reads that list as it comes (a coordinator acts on the first parents listed, not 9 s later at
//! 100,000); if it falls [`OUTBOX_LIMIT`] behind in it, it gets the list whole from the cache instead, as
//! a late one does, never folded, so every reader's first list ends with its `InitDone`. What a relist
//! finds gone reaches readers as deletions before its `InitDone`. A feed stops when its last reader goes.

use std::collections::{HashMap, VecDeque};
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
use tokio::sync::{Notify, mpsc};

use super::triggers::Outage;
use crate::cluster::scope;
use crate::controller::drive::cache::Cache;
use crate::controller::drive::place::{Place, place};
use crate::controller::serve::health::Health;

/// How many events may wait in a reader's channel that it has not taken yet.
const READER_BUFFER: usize = 256;

/// How many more may wait in its outbox before they are dropped for a complete list from the cache.
pub const OUTBOX_LIMIT: usize = 4096;

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
    fields: String,
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
    outbox: Arc<Outbox<K>>,
    /// The reader's end, to tell when it is gone.
    events: mpsc::Sender<Event<K>>,
    /// Joined during a list (or fell behind in its first): gets the whole cache at its end.
    waiting: bool,
}

/// The events on their way to one reader: queued by the feed, which never waits, and sent on by the
/// reader's own task (`forward`).
struct Outbox<K> {
    queued: Mutex<Queued<K>>,
    ready: Notify,
}

struct Queued<K> {
    events: VecDeque<Event<K>>,
    /// The reader has not been sent a complete list yet: it is never folded (which drops a list's end).
    first: bool,
    /// The reader is to get the whole cache as a list before the events queued.
    replay: bool,
    /// Once it fell [`OUTBOX_LIMIT`] events behind: per object, what it was last sent as deleted, and
    /// whether it changed since (its latest version is read from the cache when it is sent).
    behind: Option<HashMap<Place, (Option<K>, bool)>>,
}

/// Folds `event` into what a reader that fell behind is to be told.
fn fold<K: Fed>(behind: &mut HashMap<Place, (Option<K>, bool)>, event: Event<K>) {
    match event {
        watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
            behind.entry(place(object.meta())).or_insert((None, false)).1 = true;
        }
        watcher::Event::Delete(object) => {
            behind.insert(place(object.meta()), (Some(object), false));
        }
        // A relist's bounds: its content and what it found gone are folded in as changes.
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

impl<K: Fed> Outbox<K> {
    fn new() -> Self {
        let queued = Queued { events: VecDeque::new(), first: true, replay: false, behind: None };
        Outbox { queued: Mutex::new(queued), ready: Notify::new() }
    }

    fn queued(&self) -> std::sync::MutexGuard<'_, Queued<K>> {
        self.queued.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `events`; past [`OUTBOX_LIMIT`], folds them (and the ones after, until the reader has
    /// caught up) into which objects changed and which went. A reader not sent a complete list yet is
    /// not folded: its queue is dropped, and false returned, for it to be sent the cache whole.
    fn push(&self, events: impl IntoIterator<Item = Event<K>>) -> bool {
        {
            let mut queued = self.queued();
            let Queued { events: waiting, first, behind, .. } = &mut *queued;
            match behind {
                Some(behind) => events.into_iter().for_each(|event| fold(behind, event)),
                None => {
                    waiting.extend(events);
                    if waiting.len() > OUTBOX_LIMIT {
                        if *first {
                            waiting.clear();
                            return false;
                        }
                        let mut folded = HashMap::new();
                        waiting.drain(..).for_each(|event| fold(&mut folded, event));
                        *behind = Some(folded);
                    }
                }
            }
        }
        self.ready.notify_one();
        true
    }

    /// The reader was sent a complete list.
    fn listed(&self) {
        self.queued().first = false;
    }

    /// The reader is to get the whole cache as a list, and then what comes after.
    fn replay(&self) {
        {
            let mut queued = self.queued();
            queued.events.clear();
            queued.replay = true;
        }
        self.ready.notify_one();
    }
}

/// What a reader's task sends next.
enum Next<K> {
    Replay,
    Behind(HashMap<Place, (Option<K>, bool)>),
    Event(Event<K>),
    Nothing,
}

/// Sends a reader what its outbox holds, at the reader's pace, until the reader goes.
async fn forward<K: Fed>(outbox: Arc<Outbox<K>>, cache: Cache<K>, events: mpsc::Sender<Event<K>>) {
    loop {
        let next = {
            let mut queued = outbox.queued();
            match (queued.replay, queued.behind.take()) {
                (true, behind) => {
                    queued.replay = false;
                    queued.behind = behind;
                    Next::Replay
                }
                (false, Some(behind)) => Next::Behind(behind),
                (false, None) => queued.events.pop_front().map_or(Next::Nothing, Next::Event),
            }
        };
        let sent = match next {
            Next::Replay => {
                let sent = replay(&cache, &events).await;
                outbox.listed();
                sent
            }
            Next::Behind(behind) => catch_up(&cache, &events, behind).await,
            Next::Event(event) => {
                let done = matches!(event, watcher::Event::InitDone);
                let sent = events.send(event).await.is_ok();
                if done {
                    outbox.listed();
                }
                sent
            }
            Next::Nothing => tokio::select! {
                () = outbox.ready.notified() => true,
                () = events.closed() => false,
            },
        };
        if !sent {
            return;
        }
    }
}

/// Tells a reader that fell behind what it missed: each object that went, and each that changed as the
/// cache holds it now. False when the reader is gone.
async fn catch_up<K: Fed>(
    cache: &Cache<K>,
    events: &mpsc::Sender<Event<K>>,
    behind: HashMap<Place, (Option<K>, bool)>,
) -> bool {
    for (at, (deleted, changed)) in behind {
        if let Some(object) = deleted
            && events.send(watcher::Event::Delete(object)).await.is_err()
        {
            return false;
        }
        if changed
            && let Some(object) = cache.get(&at)
            && events.send(watcher::Event::Apply(object)).await.is_err()
        {
            return false;
        }
    }
    true
}

/// Sends the cache as a complete list: `Init`, each object, `InitDone`. False when the reader is gone.
async fn replay<K: Fed>(cache: &Cache<K>, events: &mpsc::Sender<Event<K>>) -> bool {
    if events.send(watcher::Event::Init).await.is_err() {
        return false;
    }
    for place in cache.places() {
        if let Some(object) = cache.get(&place)
            && events.send(watcher::Event::InitApply(object)).await.is_err()
        {
            return false;
        }
    }
    events.send(watcher::Event::InitDone).await.is_ok()
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
    fn join(&mut self, events: mpsc::Sender<Event<K>>) {
        let outbox = Arc::new(Outbox::new());
        tokio::spawn(forward(outbox.clone(), self.cache.clone(), events.clone()));
        // Before the first list has begun, a reader reads it as it comes; after the first, it is sent the
        // cache now; during one, at its end.
        let reader = Reader { outbox, events, waiting: self.listing };
        if self.listed && !self.listing {
            reader.outbox.replay();
        }
        self.readers.push(reader);
    }

    /// Takes one event into the cache, then queues it (and, at the end of a relist, the objects found
    /// gone) for every reader, dropping the readers gone. An object older than the one held is not
    /// handed on. Returns, at the end of a relist, the objects it did not bring that only the API server
    /// can say are gone (`Cache::listed`).
    fn take(&mut self, event: Event<K>) -> Vec<K> {
        let mut events = Vec::new();
        let mut unsure = Vec::new();
        let newer = match &event {
            watcher::Event::Init => {
                self.cache.listing();
                self.listing = true;
                true
            }
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                crate::controller::stages::reached("received", object.meta());
                self.cache.apply(object)
            }
            watcher::Event::Delete(object) => self.cache.delete(object),
            watcher::Event::InitDone => {
                let (gone, kept) = self.cache.listed();
                events.extend(gone.into_iter().map(watcher::Event::Delete));
                unsure = kept;
                self.listing = false;
                self.listed = true;
                true
            }
        };
        if !newer {
            return unsure;
        }
        let done = matches!(event, watcher::Event::InitDone);
        events.push(event);
        self.readers.retain(|reader| !reader.events.is_closed());
        for reader in &mut self.readers {
            match reader.waiting {
                true if done => {
                    reader.waiting = false;
                    reader.outbox.replay();
                }
                true => {}
                false => {
                    if !reader.outbox.push(events.iter().cloned()) {
                        // It fell behind in its first list: it gets the cache whole at the list's end (now,
                        // if this was the end).
                        match self.listing {
                            true => reader.waiting = true,
                            false => reader.outbox.replay(),
                        }
                    }
                }
            }
        }
        unsure
    }
}

/// Reads again the objects a relist did not bring but that are newer than anything it did: each one
/// the API server no longer has comes back as deleted, each it has as it is now.
async fn check<K: Fed>(client: Client, ar: ApiResource, unsure: Vec<K>, found: mpsc::UnboundedSender<Event<K>>) {
    for object in unsure {
        let meta = object.meta();
        let api = scope::discovered::<K>(client.clone(), &ar, meta.namespace.as_deref());
        let name = meta.name.clone().unwrap_or_default();
        let event = match crate::controller::engine::request::bounded(api.get_opt(&name)).await {
            Ok(None) => watcher::Event::Delete(object),
            Ok(Some(mut fresh)) => {
                fresh.trim();
                watcher::Event::Apply(fresh)
            }
            Err(failed) => {
                tracing::warn!("cannot read {} {name} again after a relist: {}", ar.kind, failed.message());
                continue;
            }
        };
        if found.send(event).is_err() {
            return;
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
        self.read(&self.objects, ar, namespace, labels, "")
    }

    /// The same, of the objects that also have `fields` (a field selector, or empty).
    pub fn objects_with_fields(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
        fields: &str,
    ) -> (Cache<DynamicObject>, impl Stream<Item = Event<DynamicObject>> + Send + 'static) {
        self.read(&self.objects, ar, namespace, labels, fields)
    }

    /// The same for the objects' metadata only.
    pub fn metadata(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
    ) -> impl Stream<Item = Event<PartialObjectMeta<DynamicObject>>> + Send + 'static {
        self.read(&self.metadata, ar, namespace, labels, "").1
    }

    /// The same, of the objects that also have `fields` (a field selector, or empty).
    pub fn metadata_with_fields(
        &self,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
        fields: &str,
    ) -> impl Stream<Item = Event<PartialObjectMeta<DynamicObject>>> + Send + 'static {
        self.read(&self.metadata, ar, namespace, labels, fields).1
    }

    fn read<K: Fed>(
        &self,
        feeds: &Feeds<K>,
        ar: &ApiResource,
        namespace: Option<&str>,
        labels: &str,
        fields: &str,
    ) -> (Cache<K>, impl Stream<Item = Event<K>> + Send + 'static) {
        let key = Key {
            api_version: ar.api_version.clone(),
            plural: ar.plural.clone(),
            namespace: namespace.map(str::to_owned),
            labels: labels.to_owned(),
            fields: fields.to_owned(),
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
        if !key.fields.is_empty() {
            config = config.fields(&key.fields);
        }
        let what = format!("{}s{}", ar.kind, K::WHAT);
        let mut outage = Outage::new(what.clone(), &self.health);
        let (joins, mut joined) = mpsc::unbounded_channel();
        let mut running = Running { cache: cache.clone(), readers: Vec::new(), listed: false, listing: false };
        let (client, ar) = (self.client.clone(), ar.clone());
        let task = tokio::spawn(async move {
            let (found, mut checked) = mpsc::unbounded_channel();
            let mut streaming = true;
            loop {
                let config = match streaming {
                    true => config.clone().streaming_lists(),
                    false => config.clone(),
                };
                let mut events = watcher(api.clone(), config).default_backoff().modify(K::trim).boxed();
                loop {
                    tokio::select! {
                        Some(reader) = joined.recv() => running.join(reader),
                        Some(event) = checked.recv() => drop(running.take(event)),
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
                                let unsure = running.take(event);
                                if !unsure.is_empty() {
                                    tokio::spawn(check(client.clone(), ar.clone(), unsure, found.clone()));
                                }
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

    /// Lets the readers' tasks send what is queued.
    async fn settle() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_reader_reads_a_list_begun_after_it_joined_as_it_comes_and_one_under_way_whole_at_its_end() {
        let mut running = Running { cache: Cache::default(), readers: Vec::new(), listed: false, listing: false };
        let (early, mut early_events) = mpsc::channel(READER_BUFFER);
        running.join(early);
        running.take(watcher::Event::Init);
        running.take(watcher::Event::InitApply(object("a")));
        settle().await;
        assert_eq!(names(&mut early_events), ["init", "list a"], "joined before the list began: reads it as it comes");
        let (late, mut late_events) = mpsc::channel(READER_BUFFER);
        running.join(late);
        running.take(watcher::Event::InitApply(object("b")));
        running.take(watcher::Event::InitDone);
        // (The list is sent from the cache as it is then: a change taken in before would be in it too,
        // and come again as its own event.)
        settle().await;
        running.take(watcher::Event::Apply(object("c")));
        settle().await;
        // The early one joined before the list began and read it as it came; the late one joined during
        // it and got the cache at its end, in no order.
        assert_eq!(names(&mut early_events), ["list b", "done", "apply c"]);
        let mut seen = names(&mut late_events);
        seen[1..3].sort();
        assert_eq!(seen, ["init", "list a", "list b", "done", "apply c"]);

        // A reader that went away is dropped at the next event.
        drop(early_events);
        running.take(watcher::Event::Delete(object("c")));
        assert_eq!(running.readers.len(), 1);
        settle().await;
        assert_eq!(names(&mut late_events), ["delete c"]);

        // A relist: what it does not bring reaches readers as deleted, before its end.
        running.take(watcher::Event::Init);
        running.take(watcher::Event::InitApply(object("b")));
        running.take(watcher::Event::InitDone);
        settle().await;
        assert_eq!(names(&mut late_events), ["init", "list b", "delete a", "done"]);
        assert_eq!(running.cache.len(), 1);

        // A reader joining now gets the cache at once.
        let (third, mut third_events) = mpsc::channel(READER_BUFFER);
        running.join(third);
        settle().await;
        assert_eq!(names(&mut third_events), ["init", "list b", "done"]);
    }

    #[tokio::test]
    async fn a_reader_behind_in_its_first_list_gets_it_whole_from_the_cache_never_folded() {
        let mut running = Running { cache: Cache::default(), readers: Vec::new(), listed: false, listing: false };
        let (stuck, mut stuck_events) = mpsc::channel(READER_BUFFER);
        running.join(stuck);
        running.take(watcher::Event::Init);
        let count = READER_BUFFER + OUTBOX_LIMIT + 100;
        for i in 0..count {
            running.take(watcher::Event::InitApply(object(&format!("o{i}"))));
        }
        assert!(running.readers[0].waiting, "behind in its first list: it waits for the list's end");
        running.take(watcher::Event::InitDone);
        running.take(watcher::Event::Apply(object("late")));
        let mut seen = Vec::new();
        while let Ok(Some(event)) =
            tokio::time::timeout(std::time::Duration::from_millis(200), stuck_events.recv()).await
        {
            seen.push(event);
        }
        // What it read before it fell behind, then the whole list from the cache, and what came after.
        let done = seen.iter().rposition(|e| matches!(e, watcher::Event::InitDone)).expect("its list's end");
        let restart = seen[..done].iter().rposition(|e| matches!(e, watcher::Event::Init)).unwrap();
        let listed: std::collections::HashSet<String> = seen[restart..done]
            .iter()
            .filter_map(|e| match e {
                watcher::Event::InitApply(o) => Some(o.name_any()),
                _ => None,
            })
            .collect();
        // (The cache is sent as it is then: the change taken in after the list's end is in it too.)
        assert_eq!(listed.iter().filter(|n| n.starts_with('o')).count(), count, "every object in the list it was sent");
        assert!(seen[done + 1..].iter().all(|e| matches!(e, watcher::Event::Apply(o) if o.name_any() == "late")));
        assert!(seen.iter().all(|e| !matches!(e, watcher::Event::Apply(o) if o.name_any() != "late")), "not folded");

        // Once it had its first list, falling behind folds as before.
        for i in 0..count {
            running.take(watcher::Event::Apply(object(&format!("o{}", i % 50))));
        }
        assert!(!running.readers[0].waiting);
    }

    #[tokio::test]
    async fn a_reader_that_does_not_read_holds_up_no_other_and_catches_up_from_the_cache() {
        let mut running = Running { cache: Cache::default(), readers: Vec::new(), listed: false, listing: false };
        let (stuck, mut stuck_events) = mpsc::channel(READER_BUFFER);
        let (brisk, mut brisk_events) = mpsc::channel(READER_BUFFER);
        running.join(stuck);
        running.join(brisk);
        running.take(watcher::Event::Init);
        running.take(watcher::Event::InitDone);
        // Far more changes than the stuck reader's channel and outbox hold: the feed never waits.
        let changes = READER_BUFFER + OUTBOX_LIMIT + 100;
        let mut brisk_seen = Vec::new();
        for i in 0..changes {
            running.take(watcher::Event::Apply(object(&format!("o{}", i % 50))));
            if i % 100 == 0 {
                settle().await;
                brisk_seen.extend(names(&mut brisk_events));
            }
        }
        settle().await;
        brisk_seen.extend(names(&mut brisk_events));
        assert_eq!(brisk_seen.iter().filter(|e| e.starts_with("apply")).count(), changes, "every change, in time");
        // The stuck reader, once it reads, gets what its channel held, then each object it fell behind for
        // once, as it is now, and what went as deleted.
        running.take(watcher::Event::Delete(object("o7")));
        let mut stuck_seen = Vec::new();
        for _ in 0..20 {
            stuck_seen.extend(names(&mut stuck_events));
            settle().await;
        }
        assert!(stuck_seen.len() < changes, "{} events: the ones it fell behind for were folded", stuck_seen.len());
        // (The one event after the channel's is the one its task held, waiting for room, when it fell behind.)
        let after_channel: Vec<&String> = stuck_seen[READER_BUFFER + 1..].iter().collect();
        let distinct: std::collections::HashSet<&&String> = after_channel.iter().collect();
        assert_eq!(after_channel.len(), distinct.len(), "nothing twice: {after_channel:?}");
        assert!(after_channel.iter().any(|e| *e == "delete o7") && !after_channel.iter().any(|e| *e == "apply o7"));
        assert_eq!(after_channel.iter().filter(|e| e.starts_with("apply")).count(), 49, "{after_channel:?}");
    }

    fn at(name: &str, version: &str) -> DynamicObject {
        let mut object = object(name);
        object.metadata.resource_version = Some(version.into());
        object
    }

    #[tokio::test]
    async fn a_relist_from_a_lagging_api_server_takes_nothing_back() {
        let mut running = Running { cache: Cache::default(), readers: Vec::new(), listed: false, listing: false };
        let (reader, mut events) = mpsc::channel(READER_BUFFER);
        running.join(reader);
        for event in [watcher::Event::Init, watcher::Event::InitApply(at("a", "5")), watcher::Event::InitDone] {
            running.take(event);
        }
        settle().await;
        running.take(watcher::Event::Apply(at("a", "10")));
        running.take(watcher::Event::Apply(at("b", "12")));
        settle().await;
        assert_eq!(names(&mut events), ["init", "list a", "done", "apply a", "apply b"]);
        // The relist brings a as it was before, and not b (made after the list's version): neither goes
        // back, b is to be read again, and the watch after it replaying a's old change hands on nothing.
        assert!(running.take(watcher::Event::Init).is_empty());
        assert!(running.take(watcher::Event::InitApply(at("a", "5"))).is_empty());
        let unsure = running.take(watcher::Event::InitDone);
        assert_eq!(unsure.iter().map(|o| o.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["b"]);
        running.take(watcher::Event::Apply(at("a", "10")));
        running.take(watcher::Event::Delete(at("b", "11")));
        settle().await;
        assert_eq!(names(&mut events), ["init", "done", "apply a"]);
        assert_eq!(running.cache.len(), 2);
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
