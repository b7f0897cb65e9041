//! How the watch driver names an object in its caches, queue and indexes: namespace and name, small. A
//! kube `ObjectRef<DynamicObject>` carries a copy of the type (five strings) in every key; with one key
//! per object in several maps that was a large part of the memory of 100,000 objects. Namespaces are
//! shared: a cluster has few, and each is kept once.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// An object's namespace (empty when cluster-scoped) and name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Place {
    pub namespace: Arc<str>,
    pub name: Box<str>,
}

impl Place {
    pub fn new(namespace: &str, name: &str) -> Self {
        Place { namespace: namespace_of(namespace), name: name.into() }
    }
}

/// Where the object `meta` describes is.
pub fn place(meta: &ObjectMeta) -> Place {
    Place::new(meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.namespace {
            "" => write!(f, "{}", self.name),
            ns => write!(f, "{ns}/{}", self.name),
        }
    }
}

/// The one copy of a namespace's name. Namespaces no object is in any more are let go of as new ones come
/// (when the set has doubled since it was last cleaned).
fn namespace_of(namespace: &str) -> Arc<str> {
    static NAMESPACES: Mutex<(Option<HashSet<Arc<str>>>, usize)> = Mutex::new((None, 64));
    let mut guard = NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
    let (namespaces, limit) = &mut *guard;
    let namespaces = namespaces.get_or_insert_with(HashSet::new);
    if let Some(shared) = namespaces.get(namespace) {
        return shared.clone();
    }
    if namespaces.len() >= *limit {
        namespaces.retain(|shared| Arc::strong_count(shared) > 1);
        *limit = (namespaces.len() * 2).max(64);
    }
    let shared: Arc<str> = namespace.into();
    namespaces.insert(shared.clone());
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_kept_once() {
        let (a, b) = (Place::new("ns", "a"), Place::new("ns", "b"));
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert_eq!(a.to_string(), "ns/a");
        assert_eq!(Place::new("", "c").to_string(), "c");
    }
}
