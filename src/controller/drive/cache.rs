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
}

struct Entry {
    /// The list that last brought or changed it.
    list: u32,
    /// Its resourceVersion, hashed (8 bytes, where the string would take a heap block of its own).
    version: u64,
    json: Box<[u8]>,
}

fn version_print(version: Option<&str>) -> u64 {
    let mut hasher = DefaultHasher::new();
    version.hash(&mut hasher);
    hasher.finish()
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
    pub fn holds(&self, place: &Place, version: Option<&str>) -> bool {
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
    }

    /// `object` was listed, added or changed.
    pub fn apply(&self, object: &K) {
        let Ok(json) = serde_json::to_vec(object) else { return };
        let version = version_print(object.meta().resource_version.as_deref());
        let mut inner = self.write();
        let list = inner.list;
        inner.objects.insert(place(object.meta()), Entry { list, version, json: json.into_boxed_slice() });
    }

    /// `object` was deleted.
    pub fn delete(&self, object: &K) {
        self.write().objects.remove(&place(object.meta()));
    }

    /// A (re)list is complete: the objects it did not bring are gone, and are returned.
    pub fn listed(&self) -> Vec<K> {
        let mut inner = self.write();
        let list = inner.list;
        let mut gone = Vec::new();
        inner.objects.retain(|_, entry| {
            let kept = entry.list == list;
            if !kept {
                gone.extend(Self::parse(entry));
            }
            kept
        });
        inner.objects.shrink_to_fit();
        gone
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
        assert!(cache.listed().is_empty());
        cache.apply(&object("c", "2"));
        cache.delete(&object("c", "3"));

        cache.listing();
        cache.apply(&object("a", "4"));
        // During the relist, what it has not reached yet is still there.
        assert_eq!(cache.len(), 2);
        let gone: Vec<String> = cache.listed().iter().map(|o| o.name_any()).collect();
        assert_eq!(gone, ["b"]);
        let a = cache.get(&Place::new("ns", "a")).expect("kept");
        assert_eq!(a.resource_version().as_deref(), Some("4"));
        assert_eq!(a.data["data"]["k"], "a");
        assert_eq!(cache.places(), [Place::new("ns", "a")]);
        assert!(cache.holds(&Place::new("ns", "a"), Some("4")));
        assert!(!cache.holds(&Place::new("ns", "a"), Some("1")), "an older version");
        assert!(!cache.holds(&Place::new("ns", "b"), Some("1")), "gone");
        assert_eq!(cache.version(&Place::new("ns", "a")), Some(version_print(Some("4"))));
        assert_eq!(cache.version(&Place::new("ns", "b")), None);
        cache.retain(|place| &*place.name != "a");
        assert_eq!(cache.len(), 0);
    }
}
