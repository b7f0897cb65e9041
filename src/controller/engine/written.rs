//! The status last written for each parent (by uid), as digests. The watch driver can be handed the
//! version a status was computed from again before its cache sees the write, and a schema may prune what
//! was written; either way the same status is not written twice (`rules::status::needs_write` decides).
//! A memory is dropped once the parent shows the whole write, so after a burst only the parents whose
//! schema prunes their status keep one.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::controller::rules::status::{Written, needs_write};

#[derive(Debug, Default)]
pub struct WrittenStatuses {
    by_parent: Mutex<HashMap<String, Written>>,
}

impl WrittenStatuses {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Written>) -> T) -> T {
        f(&mut self.by_parent.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether `desired` must be written to the parent `uid` at `version` whose status is `current`. A
    /// memory that no longer explains the parent's status is dropped.
    pub fn needs_write(&self, uid: &str, desired: &Value, current: &Value, version: &str) -> bool {
        self.with(|by_parent| {
            let last = by_parent.get(uid);
            let write = needs_write(desired, current, version, last);
            if write || last.is_some_and(|w| !w.still_needed(current)) {
                by_parent.remove(uid);
            }
            write
        })
    }

    pub fn remember(&self, uid: &str, written: Written) {
        self.with(|by_parent| by_parent.insert(uid.to_owned(), written));
    }

    /// The parent is gone.
    pub fn forget(&self, uid: &str) {
        self.with(|by_parent| by_parent.remove(uid));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_write_is_remembered_until_it_no_longer_explains_the_parent() {
        let store = WrittenStatuses::default();
        let want = json!({"n": 2});
        assert!(store.needs_write("u", &want, &json!({"n": 1}), "5"));
        store.remember("u", Written::new("5".into(), &want, &want));
        assert!(!store.needs_write("u", &want, &json!({"n": 1}), "5"), "the same version handed again");
        assert!(store.needs_write("u", &want, &json!({"n": 1}), "7"), "someone changed it back");
        assert!(store.needs_write("u", &want, &json!({"n": 1}), "5"), "and the memory is gone");
        store.remember("u", Written::new("8".into(), &want, &want));
        store.forget("u");
        assert!(store.needs_write("u", &want, &json!({"n": 1}), "8"));

        store.remember("u", Written::new("9".into(), &want, &want));
        assert!(!store.needs_write("u", &want, &want, "10"), "the parent shows it");
        assert!(store.with(|by_parent| by_parent.is_empty()), "and nothing is left to explain");
    }
}
