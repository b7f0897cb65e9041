//! Which cached children each parent controls, kept in step with the child stores: updated on each watch
//! event after its store has applied it, rebuilt from the store after each relist. A reconcile reads its
//! parent's children through it, without a request.

use std::collections::{BTreeSet, HashMap};

use super::ParentRef;
use crate::controller::rules::children::ChildKey;

/// Which cached children each parent (by uid) controls, kept in step with the child stores: updated
/// on each watch event after its store has applied it, rebuilt from the store after each relist.
#[derive(Default)]
pub struct Owners {
    pub owner_of: HashMap<ChildKey, (String, ParentRef)>,
    pub children_of: HashMap<String, BTreeSet<ChildKey>>,
}

impl Owners {
    /// Records `key`'s controller (or none); returns the parent that controlled it before, if another.
    pub fn set(&mut self, key: &ChildKey, owner: Option<(String, ParentRef)>) -> Option<ParentRef> {
        let before = self.owner_of.remove(key);
        if let Some((uid, _)) = &before
            && let Some(keys) = self.children_of.get_mut(uid)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.children_of.remove(uid);
            }
        }
        if let Some((uid, parent)) = owner {
            self.children_of.entry(uid.clone()).or_default().insert(key.clone());
            self.owner_of.insert(key.clone(), (uid.clone(), parent));
            if before.as_ref().is_some_and(|(old, _)| *old == uid) {
                return None;
            }
        }
        before.map(|(_, parent)| parent)
    }

    pub fn clear_kind(&mut self, kind: usize) {
        let keys: Vec<ChildKey> = self.owner_of.keys().filter(|k| k.kind == kind).cloned().collect();
        for key in keys {
            self.set(&key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    use kube::runtime::reflector::ObjectRef;

    use super::*;

    fn parent(name: &str) -> ParentRef {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        ObjectRef::<DynamicObject>::new_with(name, ar).within("ns")
    }

    fn key(kind: usize, name: &str) -> ChildKey {
        ChildKey { kind, namespace: "ns".into(), name: name.into() }
    }

    #[test]
    fn a_child_changing_hands_names_its_former_parent() {
        let mut owners = Owners::default();
        assert_eq!(owners.set(&key(0, "c"), Some(("a".into(), parent("a")))), None);
        assert_eq!(owners.set(&key(0, "c"), Some(("a".into(), parent("a")))), None, "the same parent again");
        assert_eq!(owners.set(&key(0, "c"), Some(("b".into(), parent("b")))), Some(parent("a")));
        assert!(!owners.children_of.contains_key("a"));
        assert_eq!(owners.set(&key(0, "c"), None), Some(parent("b")));
        assert!(owners.owner_of.is_empty() && owners.children_of.is_empty());
    }

    #[test]
    fn a_relist_clears_one_kind_only() {
        let mut owners = Owners::default();
        owners.set(&key(0, "c"), Some(("a".into(), parent("a"))));
        owners.set(&key(1, "d"), Some(("a".into(), parent("a"))));
        owners.clear_kind(0);
        assert_eq!(owners.children_of["a"], BTreeSet::from([key(1, "d")]));
    }
}
