//! What changed between two views of a collection: the vocabulary of `watch` output and of observe mode,
//! and the difference a relist makes against what was seen before.

use std::collections::{HashMap, HashSet};

use super::read::Item;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

impl Change {
    pub fn word(self) -> &'static str {
        match self {
            Change::Added => "ADDED",
            Change::Modified => "MODIFIED",
            Change::Deleted => "DELETED",
        }
    }
}

/// What a relist means for someone who saw `known`: new objects were ADDED, objects whose
/// resourceVersion moved were MODIFIED, objects no longer listed were DELETED (shown as last seen).
/// Objects that did not change produce nothing.
pub fn diff(known: &HashMap<String, Item>, listed: &[Item]) -> Vec<(Change, Item)> {
    let mut changes = Vec::new();
    for item in listed {
        match known.get(&item.uid) {
            None => changes.push((Change::Added, item.clone())),
            Some(old) if old.resource_version != item.resource_version => {
                changes.push((Change::Modified, item.clone()))
            }
            Some(_) => {}
        }
    }
    let listed_uids: HashSet<&str> = listed.iter().map(|i| i.uid.as_str()).collect();
    let mut gone: Vec<&Item> = known.values().filter(|i| !listed_uids.contains(i.uid.as_str())).collect();
    gone.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    changes.extend(gone.into_iter().map(|i| (Change::Deleted, i.clone())));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(uid: &str, name: &str, rv: &str) -> Item {
        Item {
            uid: uid.into(),
            resource_version: rv.into(),
            namespace: Some("ns".into()),
            name: name.into(),
            labels: Default::default(),
            creation_timestamp: None,
            cells: None,
            object: None,
        }
    }

    fn known(items: &[Item]) -> HashMap<String, Item> {
        items.iter().map(|i| (i.uid.clone(), i.clone())).collect()
    }

    fn summary(changes: &[(Change, Item)]) -> Vec<(&'static str, String)> {
        changes.iter().map(|(c, i)| (c.word(), i.name.clone())).collect()
    }

    #[test]
    fn relist_prints_only_real_differences() {
        let before = known(&[item("1", "same", "10"), item("2", "edited", "11"), item("3", "gone", "12")]);
        let listed = [item("1", "same", "10"), item("2", "edited", "15"), item("4", "new", "16")];
        assert_eq!(
            summary(&diff(&before, &listed)),
            [("MODIFIED", "edited".to_owned()), ("ADDED", "new".to_owned()), ("DELETED", "gone".to_owned())]
        );
        assert!(diff(&known(&listed), &listed).is_empty(), "nothing changed, nothing printed");
    }

    #[test]
    fn a_recreated_object_is_a_delete_and_an_add() {
        let before = known(&[item("1", "cm", "10")]);
        let listed = [item("9", "cm", "20")];
        assert_eq!(summary(&diff(&before, &listed)), [("ADDED", "cm".to_owned()), ("DELETED", "cm".to_owned())]);
    }
}
