//! Objects kept small, for both drivers (one per shared watch; the poll driver's objects read whole
//! between ticks): each object as the JSON the server sent (without what its reader trims), not as a
//! tree of JSON values. A `DynamicObject`'s tree costs several times its text (a
//! map node per object in it, a heap string per key and value), and at 100,000 objects that difference
//! is most of a controller's memory. An object is parsed again only when a reconcile or a reader needs
//! it, which costs microseconds.
//!
//! A (re)list does not build a second store beside the first (kube's reflector does, until the list
//! ends): each listed object replaces its old copy at once and is marked with the list's number, and at
//! the end of the list the objects it did not bring (deleted while the watch was away) are swept out. So
//! a relist never holds two copies of the world, and an object is in the store as soon as it is listed.
//!
//! The store never goes back in time. Behind several API servers, a list or a watch may come from one
//! whose cache lags the one seen before (lists are streamed at `resourceVersion=0`, "any version"), so
//! versions are compared (as integers, which every etcd-backed API server's are; versions that are not
//! are taken as they come): an older copy of an object than the one held is not taken in, a deletion
//! older than the copy held (of an object since made again) is ignored, and at the end of a relist an
//! object it did not bring but that is newer than anything it brought is not swept as gone on its word
//! alone (`listed` returns it to be checked).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::drive::place::{Place, place};

/// The objects of one feed, shared by the feed (which writes) and its readers.
pub struct Cache<K> {
    inner: Arc<RwLock<Inner>>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Cache { inner: self.inner.clone(), _kind: std::marker::PhantomData }
    }
}

#[derive(Default)]
struct Inner {
    objects: HashMap<Place, Entry>,
    /// The number of the list in progress or last done.
    list: u32,
    /// The newest version the list in progress brought.
    newest: u64,
}

struct Entry {
    /// The list that last brought or changed it.
    list: u32,
    /// Its resourceVersion, hashed (8 bytes, where the string would take a heap block of its own).
    version: u64,
    /// Its resourceVersion as a number, to tell older from newer (0 when it is not one).
    order: u64,
    json: Box<[u8]>,
}

fn version_print(version: Option<&str>) -> u64 {
    let mut hasher = DefaultHasher::new();
    version.hash(&mut hasher);
    hasher.finish()
}

/// A resourceVersion as a number, or 0 when it is not one (then nothing is compared).
fn order_of(version: Option<&str>) -> u64 {
    version.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Whether a copy at `order` is older than one held at `held`.
fn older(order: u64, held: u64) -> bool {
    order != 0 && held != 0 && order < held
}

impl<K> Default for Cache<K> {
    fn default() -> Self {
        Cache { inner: Arc::default(), _kind: std::marker::PhantomData }
    }
}

impl<K> Cache<K>
where
    K: Resource + Serialize + DeserializeOwned,
{
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn parse(entry: &Entry) -> Option<K> {
        match serde_json::from_slice(&entry.json) {
            Ok(object) => Some(object),
            Err(err) => {
                // Cannot happen: the text was written from such an object.
                tracing::error!("a cached object does not parse again: {err}");
                None
            }
        }
    }

    /// The object at `place`, if the watch has it.
    pub fn get(&self, place: &Place) -> Option<K> {
        self.read().objects.get(place).and_then(Self::parse)
    }

    /// Where every object is.
    pub fn places(&self) -> Vec<Place> {
        self.read().objects.keys().cloned().collect()
    }

    /// Whether the object at `place` is held at `version`.
    pub fn has_version(&self, place: &Place, version: Option<&str>) -> bool {
        self.read().objects.get(place).is_some_and(|entry| entry.version == version_print(version))
    }

    /// The version of the object at `place` (hashed), if held.
    pub fn version(&self, place: &Place) -> Option<u64> {
        self.read().objects.get(place).map(|entry| entry.version)
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().objects.is_empty()
    }

    /// Forgets the objects `keep` does not name.
    pub fn retain(&self, keep: impl Fn(&Place) -> bool) {
        let mut inner = self.write();
        inner.objects.retain(|place, _| keep(place));
        if inner.objects.capacity() > 2 * inner.objects.len() + 64 {
            inner.objects.shrink_to_fit();
        }
    }

    /// A (re)list begins.
    pub fn listing(&self) {
        let mut inner = self.write();
        inner.list = inner.list.wrapping_add(1);
        inner.newest = 0;
    }

    /// `object` was listed, added or changed. False when the copy held is newer: it stays (and counts
    /// as listed), and this one is not to be handed on.
    pub fn apply(&self, object: &K) -> bool {
        let Ok(json) = serde_json::to_vec(object) else { return false };
        let meta = object.meta();
        let (version, order) =
            (version_print(meta.resource_version.as_deref()), order_of(meta.resource_version.as_deref()));
        let mut inner = self.write();
        let list = inner.list;
        inner.newest = inner.newest.max(order);
        let at = place(meta);
        if let Some(held) = inner.objects.get_mut(&at)
            && older(order, held.order)
        {
            held.list = list;
            return false;
        }
        inner.objects.insert(at, Entry { list, version, order, json: json.into_boxed_slice() });
        true
    }

    /// `object` was deleted. False when the copy held is newer than the deletion (the object was made
    /// again since): it stays, and the deletion is not to be handed on.
    pub fn delete(&self, object: &K) -> bool {
        let meta = object.meta();
        let mut inner = self.write();
        let at = place(meta);
        if inner.objects.get(&at).is_some_and(|held| older(order_of(meta.resource_version.as_deref()), held.order)) {
            return false;
        }
        inner.objects.remove(&at);
        true
    }

    /// A (re)list is complete. Returns the objects it did not bring, now removed as gone, and those it
    /// did not bring but that are newer than anything it did, kept: the list may come from an API server
    /// behind the one that showed them, and only the server (read again) can say whether they are gone.
    pub fn listed(&self) -> (Vec<K>, Vec<K>) {
        let mut inner = self.write();
        let (list, newest) = (inner.list, inner.newest);
        let (mut gone, mut unsure) = (Vec::new(), Vec::new());
        inner.objects.retain(|_, entry| {
            if entry.list == list {
                return true;
            }
            if older(newest, entry.order) {
                unsure.extend(Self::parse(entry));
                return true;
            }
            gone.extend(Self::parse(entry));
            false
        });
        inner.objects.shrink_to_fit();
        (gone, unsure)
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{DynamicObject, ResourceExt};
    use kube::discovery::ApiResource;

    use super::*;

    fn object(name: &str, version: &str) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut object = DynamicObject::new(name, &ar).within("ns").data(serde_json::json!({"data": {"k": name}}));
        object.metadata.resource_version = Some(version.into());
        object
    }

    #[test]
    fn a_relist_replaces_in_place_and_sweeps_what_it_did_not_bring() {
        let cache = Cache::<DynamicObject>::default();
        cache.listing();
        cache.apply(&object("a", "1"));
        cache.apply(&object("b", "1"));
        assert!(cache.listed().0.is_empty());
        cache.apply(&object("c", "2"));
        cache.delete(&object("c", "3"));

        cache.listing();
        cache.apply(&object("a", "4"));
        // During the relist, what it has not reached yet is still there.
        assert_eq!(cache.len(), 2);
        let (gone, unsure) = cache.listed();
        let gone: Vec<String> = gone.iter().map(|o| o.name_any()).collect();
        assert_eq!(gone, ["b"]);
        assert!(unsure.is_empty());
        let a = cache.get(&Place::new("ns", "a")).expect("kept");
        assert_eq!(a.resource_version().as_deref(), Some("4"));
        assert_eq!(a.data["data"]["k"], "a");
        assert_eq!(cache.places(), [Place::new("ns", "a")]);
        assert!(cache.has_version(&Place::new("ns", "a"), Some("4")));
        assert!(!cache.has_version(&Place::new("ns", "a"), Some("1")), "an older version");
        assert!(!cache.has_version(&Place::new("ns", "b"), Some("1")), "gone");
        assert_eq!(cache.version(&Place::new("ns", "a")), Some(version_print(Some("4"))));
        assert_eq!(cache.version(&Place::new("ns", "b")), None);
        cache.retain(|place| &*place.name != "a");
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_store_never_goes_back_to_an_older_version() {
        let cache = Cache::<DynamicObject>::default();
        cache.listing();
        assert!(cache.apply(&object("a", "10")) && cache.apply(&object("b", "12")) && cache.apply(&object("c", "14")));
        cache.listed();
        // A watch (or a list) from an API server that lags: the older copy is not taken in.
        assert!(!cache.apply(&object("a", "9")));
        assert!(cache.has_version(&Place::new("ns", "a"), Some("10")));
        // A deletion older than the copy held (the object was made again since) is ignored.
        assert!(!cache.delete(&object("b", "11")));
        assert!(cache.delete(&object("b", "13")));
        // A relist from a lagging server: what it brings older stays as held and counts as listed; what
        // it does not bring but is newer than anything it brought is kept, to be checked; the rest is gone.
        cache.apply(&object("d", "20"));
        cache.listing();
        assert!(!cache.apply(&object("a", "8")));
        let (gone, unsure) = cache.listed();
        let names = |objects: Vec<DynamicObject>| objects.iter().map(|o| o.name_any()).collect::<Vec<_>>();
        let mut unsure = names(unsure);
        unsure.sort();
        assert_eq!((names(gone), unsure), (Vec::<String>::new(), vec!["c".to_owned(), "d".to_owned()]));
        assert_eq!(cache.len(), 3);
        // Versions that are not numbers are not compared.
        assert!(cache.apply(&object("a", "x")) && cache.apply(&object("a", "7")));
    }
}
