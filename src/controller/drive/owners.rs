//! Which cached children each parent controls, kept in step with the child caches: updated on each
//! watch event after its cache has taken it in (a relist's objects included, and what it found gone). A
//! reconcile reads its parent's children through it, without a request. Parents are named by place, not
//! uid: a parent deleted and made again under the same name finds its predecessor's children here too,
//! and the engine keeps only those controlled by its own uid.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;

use crate::controller::drive::cache::Cache;
use crate::controller::drive::place::{Place, place};
use crate::controller::rules::children::{ChildKey, Family, Observed, controller_of};

/// The parent that controls the object `meta` describes, if one of the parent's type does.
fn owner(meta: &ObjectMeta, family: &Family) -> Option<Place> {
    let controller = controller_of(meta, &family.parent)?;
    let namespace = match family.parent.namespaced {
        // Owned by label, a child may live in another namespace than its parent's, which the label names.
        true => controller.namespace.or(meta.namespace.as_deref()).unwrap_or_default(),
        false => "",
    };
    Some(Place::new(namespace, controller.name))
}

/// A cached child: its type (the index in the controller's child types) and place.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Child {
    pub kind: usize,
    pub place: Place,
}

/// Which cached children each parent controls.
#[derive(Default)]
pub struct Owners {
    owner_of: HashMap<Child, Place>,
    children_of: HashMap<Place, Vec<Child>>,
}

impl Owners {
    /// Records `child`'s controller (or none); returns the parent that controlled it before, if another.
    pub fn set(&mut self, child: &Child, owner: Option<Place>) -> Option<Place> {
        let before = self.owner_of.remove(child);
        if let Some(parent) = &before
            && let Some(children) = self.children_of.get_mut(parent)
        {
            children.retain(|c| c != child);
            if children.is_empty() {
                self.children_of.remove(parent);
            }
        }
        if let Some(parent) = owner {
            self.children_of.entry(parent.clone()).or_default().push(child.clone());
            self.owner_of.insert(child.clone(), parent.clone());
            if before.as_ref() == Some(&parent) {
                return None;
            }
        }
        before
    }

    /// The children `parent` controls.
    pub fn children_of(&self, parent: &Place) -> &[Child] {
        self.children_of.get(parent).map_or(&[], Vec::as_slice)
    }
}

/// Takes in a child of type `kind` as a watch or a list shows it (`gone` once deleted): returns the
/// parent its metadata names as controller, and the one that controlled it before, if another.
pub fn take_in(
    owners: &Mutex<Owners>,
    family: &Family,
    kind: usize,
    meta: &ObjectMeta,
    gone: bool,
) -> (Option<Place>, Option<Place>) {
    let controller = owner(meta, family);
    let child = Child { kind, place: place(meta) };
    let before = owners.lock().unwrap_or_else(|e| e.into_inner()).set(&child, controller.clone().filter(|_| !gone));
    (controller, before)
}

/// The children `parent` controls, whole, read from their caches (`caches[kind]` for child type `kind`).
pub fn observed(owners: &Mutex<Owners>, caches: &[Cache<DynamicObject>], parent: &Place) -> Observed {
    let children: Vec<Child> = owners.lock().unwrap_or_else(|e| e.into_inner()).children_of(parent).to_vec();
    children
        .into_iter()
        .filter_map(|Child { kind, place }| {
            let child = caches[kind].get(&place)?;
            let key = ChildKey { kind, namespace: place.namespace.to_string(), name: place.name.to_string() };
            Some((key, child))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(name: &str) -> Place {
        Place::new("ns", name)
    }

    fn child(kind: usize, name: &str) -> Child {
        Child { kind, place: Place::new("ns", name) }
    }

    #[test]
    fn a_child_changing_hands_names_its_former_parent() {
        let mut owners = Owners::default();
        assert_eq!(owners.set(&child(0, "c"), Some(parent("a"))), None);
        assert_eq!(owners.set(&child(0, "c"), Some(parent("a"))), None, "the same parent again");
        assert_eq!(owners.children_of(&parent("a")), [child(0, "c")]);
        assert_eq!(owners.set(&child(0, "c"), Some(parent("b"))), Some(parent("a")));
        assert!(owners.children_of(&parent("a")).is_empty());
        owners.set(&child(1, "c"), Some(parent("b")));
        assert_eq!(owners.children_of(&parent("b")), [child(0, "c"), child(1, "c")]);
        assert_eq!(owners.set(&child(0, "c"), None), Some(parent("b")));
        assert_eq!(owners.set(&child(1, "c"), None), Some(parent("b")));
        assert!(owners.owner_of.is_empty() && owners.children_of.is_empty());
    }
}
