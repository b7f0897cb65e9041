//! What counts as a change of a parent, for both drivers: any new version of it, or, with
//! metacontroller's `ignoreStatusChanges`, only a new generation, new labels or annotations, or the start
//! of its deletion, so that a status write (the controller's own among them) syncs nothing.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A value that differs between two versions of a parent exactly when the second is a change to sync.
pub fn parent_print(meta: &ObjectMeta, ignore_status_changes: bool) -> u64 {
    let mut hasher = DefaultHasher::new();
    match ignore_status_changes {
        false => meta.resource_version.hash(&mut hasher),
        true => {
            meta.generation.hash(&mut hasher);
            meta.labels.hash(&mut hasher);
            meta.annotations.hash(&mut hasher);
            meta.deletion_timestamp.is_some().hash(&mut hasher);
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(version: &str, generation: i64, label: &str) -> ObjectMeta {
        ObjectMeta {
            resource_version: Some(version.into()),
            generation: Some(generation),
            labels: Some([("a".to_owned(), label.to_owned())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_status_write_is_no_change_only_when_status_changes_are_ignored() {
        let (before, status_written) = (meta("1", 1, "x"), meta("2", 1, "x"));
        assert_ne!(parent_print(&before, false), parent_print(&status_written, false));
        assert_eq!(parent_print(&before, true), parent_print(&status_written, true));
        assert_ne!(parent_print(&before, true), parent_print(&meta("3", 2, "x"), true));
        assert_ne!(parent_print(&before, true), parent_print(&meta("3", 1, "y"), true));
        let mut deleting = meta("3", 1, "x");
        deleting.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_ne!(parent_print(&before, true), parent_print(&deleting, true));
    }
}
