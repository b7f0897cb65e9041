//! Which parents are blocked, and by which objects: a parent whose child's name is taken by an object that
//! is not its own. The engine reads those objects first on the parent's next look (one GET each, instead
//! of a create bound to fail), and the watch driver brings a parent back when an object in its way
//! changes or goes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::controller::rules::children::ChildKey;

/// A parent's namespace (empty when cluster-scoped) and name.
pub type NamespacedName = (String, String);

/// Per parent (by uid): where it is, and the objects in the way of its children.
#[derive(Debug, Default)]
pub struct Conflicts {
    blocked: Mutex<HashMap<String, (NamespacedName, HashSet<ChildKey>)>>,
}

impl Conflicts {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, (NamespacedName, HashSet<ChildKey>)>) -> T) -> T {
        f(&mut self.blocked.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// `key` was found in the way of the parent `uid` (a create of it was refused).
    pub fn note(&self, uid: &str, place: NamespacedName, key: &ChildKey) {
        self.with(|blocked| {
            blocked.entry(uid.to_owned()).or_insert_with(|| (place, HashSet::new())).1.insert(key.clone())
        });
    }

    /// After a reconcile: exactly `keys` are in the parent's way (none: it is not blocked).
    pub fn set(&self, uid: &str, place: NamespacedName, keys: HashSet<ChildKey>) {
        self.with(|blocked| match keys.is_empty() {
            true => blocked.remove(uid),
            false => blocked.insert(uid.to_owned(), (place, keys)),
        });
    }

    /// The objects last found in the way of the parent `uid`.
    pub fn of(&self, uid: &str) -> HashSet<ChildKey> {
        self.with(|blocked| blocked.get(uid).map(|(_, keys)| keys.clone()).unwrap_or_default())
    }

    /// The parents last found blocked by the object `key`.
    pub fn blocked_by(&self, key: &ChildKey) -> Vec<NamespacedName> {
        self.with(|blocked| {
            blocked.values().filter(|(_, keys)| keys.contains(key)).map(|(place, _)| place.clone()).collect()
        })
    }

    /// The parent is gone.
    pub fn forget(&self, uid: &str) {
        self.with(|blocked| blocked.remove(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ChildKey {
        ChildKey { kind: 0, namespace: "ns".into(), name: name.into() }
    }

    #[test]
    fn blocked_parents_are_found_by_what_blocks_them_until_set_free() {
        let conflicts = Conflicts::default();
        let place = ("ns".to_owned(), "a".to_owned());
        conflicts.note("uid-a", place.clone(), &key("x"));
        conflicts.note("uid-a", place.clone(), &key("y"));
        conflicts.note("uid-b", ("ns".into(), "b".into()), &key("x"));
        assert_eq!(conflicts.of("uid-a"), HashSet::from([key("x"), key("y")]));
        let mut by_x = conflicts.blocked_by(&key("x"));
        by_x.sort();
        assert_eq!(by_x, [place.clone(), ("ns".into(), "b".into())]);

        conflicts.set("uid-a", place.clone(), HashSet::from([key("y")]));
        assert_eq!(conflicts.blocked_by(&key("x")), [("ns".to_owned(), "b".to_owned())]);
        conflicts.set("uid-a", place, HashSet::new());
        assert!(conflicts.of("uid-a").is_empty() && conflicts.blocked_by(&key("y")).is_empty());
        conflicts.forget("uid-b");
        assert!(conflicts.blocked_by(&key("x")).is_empty());
    }
}
