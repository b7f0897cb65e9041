//! The next write for one desired child, decided from the copy of it in hand (`next_write`), and
//! whether a refused write is worth reading the object again for (`look_again`). The engine sends what
//! this decides and, when the API server refuses it, reads the object and asks again, a bounded number
//! of times (`engine/children.rs`). Every write that touches an existing object carries its uid and
//! resourceVersion, so an object that changed hands since it was read is never taken.

use kube::api::DynamicObject;
use serde_json::Value;

use super::children::{CONTROLLER_UID, ChildAction, MANAGED_BY_LABEL, Update, action};
use super::selector::LabelSelector;
use super::shard::{DOMAIN, PARENT_LABEL};

/// What to send for one child next.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildWrite {
    /// Nothing (more): it is as wanted, being deleted, or left as it is by `OnDelete`.
    Leave,
    /// An object of that name that is not the parent's: left alone, and said.
    Refuse,
    /// A POST of the desired child: refused if the name is taken meanwhile.
    Create,
    /// An orphan the parent's selector takes: this merge patch makes it the parent's, once the parent is
    /// read again from the API server and found still there.
    Adopt(Value),
    /// A child the parent controls but samplectl's watches cannot see (made by metacontroller, or
    /// adopted): this merge patch labels it first, so that the update strategy then judges only what
    /// the sync wants changed.
    Label(Value),
    /// A child that differs, under `Recreate`: deleted if a server-side dry run of this body shows a
    /// difference the server would keep (a value it normalises must not recreate it for ever).
    Recreate(Value),
    /// A child that differs: this body applied in place.
    Apply(Value),
}

/// The next write for the desired child `desired`, given the object of its name as last read (`seen`),
/// the parent's uid, the parent's selector when it may adopt orphans, and the child type's update
/// strategy.
pub fn next_write(
    seen: Option<&DynamicObject>,
    desired: &Value,
    parent_uid: &str,
    adopt: Option<&LabelSelector>,
    update: Update,
) -> ChildWrite {
    let Some(existing) = seen else { return ChildWrite::Create };
    if existing.metadata.deletion_timestamp.is_some() {
        return ChildWrite::Leave;
    }
    let with_preconditions = || {
        let mut body = desired.clone();
        body["metadata"]["uid"] = existing.metadata.uid.clone().into();
        body["metadata"]["resourceVersion"] = existing.metadata.resource_version.clone().into();
        body
    };
    match action(seen, desired, parent_uid, adopt) {
        ChildAction::None => ChildWrite::Leave,
        ChildAction::Create => ChildWrite::Create,
        ChildAction::Conflict => ChildWrite::Refuse,
        ChildAction::Adopt => claim(existing, desired, true).map_or(ChildWrite::Leave, ChildWrite::Adopt),
        ChildAction::Update if !labelled(existing, desired) => {
            claim(existing, desired, false).map_or(ChildWrite::Leave, ChildWrite::Label)
        }
        ChildAction::Update => match update {
            Update::OnDelete => ChildWrite::Leave,
            Update::Recreate => ChildWrite::Recreate(with_preconditions()),
            Update::InPlace => ChildWrite::Apply(with_preconditions()),
        },
    }
}

/// Whether a write the API server refused with `status` is worth reading the object again for: a
/// create's 409 (the name was taken), or a write to an existing object refused because it is not the
/// version read (409), is gone (404) or was replaced by one with another uid (422).
pub fn look_again(write: &ChildWrite, status: Option<u16>) -> bool {
    match write {
        ChildWrite::Create => status == Some(409),
        ChildWrite::Adopt(_) | ChildWrite::Label(_) | ChildWrite::Recreate(_) | ChildWrite::Apply(_) => {
            matches!(status, Some(404 | 409 | 422))
        }
        ChildWrite::Leave | ChildWrite::Refuse => false,
    }
}

/// Whether `existing` carries the labels samplectl marks the children it manages with (and the
/// `controller-uid` one, when the sync's child has it).
fn labelled(existing: &DynamicObject, desired: &Value) -> bool {
    let labels = existing.metadata.labels.as_ref();
    marks(desired).all(|key| match desired["metadata"]["labels"][key].as_str() {
        Some(want) => labels.and_then(|l| l.get(key)).map(String::as_str) == Some(want),
        None => true,
    })
}

/// The keys of the labels samplectl marks its children with: its own, the `controller-uid` one, and
/// in a shard ring the member's and the parent's uid.
fn marks(desired: &Value) -> impl Iterator<Item = &str> {
    let shard = desired["metadata"]["labels"].as_object().into_iter().flat_map(|labels| labels.keys());
    let shard =
        shard.map(String::as_str).filter(|key| key.strip_prefix(DOMAIN).is_some_and(|rest| rest.starts_with('/')));
    [MANAGED_BY_LABEL, CONTROLLER_UID, PARENT_LABEL].into_iter().chain(shard)
}

/// The merge patch that marks `existing` as the parent's: samplectl's labels (so its watches see the
/// child) and, with `adopt`, the parent's controller reference beside the owners it has. Only if it is
/// still the object read (its uid and resourceVersion, both required), so an object that changed hands
/// in between is never taken. `None` when the object read has no uid or resourceVersion to hold it to.
fn claim(existing: &DynamicObject, desired: &Value, adopt: bool) -> Option<Value> {
    let (uid, version) = (existing.metadata.uid.as_ref()?, existing.metadata.resource_version.as_ref()?);
    let mut labels = serde_json::Map::new();
    for key in marks(desired) {
        if let Some(value) = desired["metadata"]["labels"].get(key) {
            labels.insert(key.to_owned(), value.clone());
        }
    }
    let mut metadata = serde_json::json!({"uid": uid, "resourceVersion": version, "labels": labels});
    if adopt {
        let mut owners: Vec<Value> = existing
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect();
        let ours = desired["metadata"]["ownerReferences"].as_array().into_iter().flatten();
        owners.extend(ours.filter(|r| r["controller"] == true).cloned());
        metadata["ownerReferences"] = owners.into();
    }
    Some(serde_json::json!({ "metadata": metadata }))
}

/// After a child is created (a POST, so that a name taken meanwhile is refused rather than taken), the
/// fields samplectl wrote are owned by its "Update" entry, which its later server-side applies do not
/// replace: a list item or a key it then stops wanting would stay for ever, or clash with the new one (a
/// Service port changed is two unnamed ports). This JSON patch turns that entry into its "Apply" entry,
/// as `kubectl apply --server-side` upgrades a client-side object, guarded by the created
/// resourceVersion. `None` when there is nothing to turn.
pub fn owned_as_applied(created: &DynamicObject, manager: &str) -> Option<Value> {
    let fields = created.metadata.managed_fields.as_ref()?;
    let mut entries = serde_json::to_value(fields).ok()?;
    let mut turned = false;
    for entry in entries.as_array_mut()? {
        let ours = entry["manager"] == manager
            && entry["operation"] == "Update"
            && entry.get("subresource").is_none_or(|s| s.as_str().is_none_or(str::is_empty));
        if ours {
            entry["operation"] = "Apply".into();
            if let Some(fields) = entry.as_object_mut() {
                fields.remove("time");
            }
            turned = true;
        }
    }
    turned.then(|| {
        serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": created.metadata.resource_version},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ])
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PARENT: &str = "uid-p";

    fn desired() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "c", "namespace": "ns",
                "labels": {MANAGED_BY_LABEL: "samplectl", "shard.samplectl.io/ring": "m1_abc"},
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Widget", "name": "p",
                                     "uid": PARENT, "controller": true, "blockOwnerDeletion": true}],
            },
            "data": {"k": "wanted"},
        })
    }

    /// The object of the child's name as read: `owner` its controller (if any), `labels`, `data`.
    fn seen(owner: Option<&str>, labels: Value, data: &str) -> DynamicObject {
        let owners: Vec<Value> = owner
            .map(|uid| {
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "name": "p", "uid": uid,
                       "controller": true, "blockOwnerDeletion": true})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c", "resourceVersion": "7",
                         "labels": labels, "ownerReferences": owners},
            "data": {"k": data},
        }))
        .unwrap()
    }

    fn ours(data: &str) -> DynamicObject {
        seen(Some(PARENT), desired()["metadata"]["labels"].clone(), data)
    }

    fn selector() -> LabelSelector {
        serde_json::from_value(json!({"matchLabels": {"app": "a"}})).unwrap()
    }

    #[test]
    fn a_missing_child_is_created_and_one_as_wanted_left() {
        assert_eq!(next_write(None, &desired(), PARENT, None, Update::InPlace), ChildWrite::Create);
        assert_eq!(next_write(Some(&ours("wanted")), &desired(), PARENT, None, Update::InPlace), ChildWrite::Leave);
        let mut going = ours("stale");
        going.metadata.deletion_timestamp = serde_json::from_value(json!("2026-11-26T10:00:00Z")).unwrap();
        assert_eq!(next_write(Some(&going), &desired(), PARENT, None, Update::InPlace), ChildWrite::Leave);
    }

    #[test]
    fn a_differing_child_is_written_as_its_strategy_says_and_only_as_read() {
        let stale = ours("stale");
        let ChildWrite::Apply(body) = next_write(Some(&stale), &desired(), PARENT, None, Update::InPlace) else {
            panic!("an update in place")
        };
        assert_eq!((&body["metadata"]["uid"], &body["metadata"]["resourceVersion"]), (&json!("uid-c"), &json!("7")));
        assert_eq!(body["data"]["k"], "wanted");
        let recreate = next_write(Some(&stale), &desired(), PARENT, None, Update::Recreate);
        assert!(matches!(recreate, ChildWrite::Recreate(ref b) if b["metadata"]["resourceVersion"] == "7"));
        assert_eq!(next_write(Some(&stale), &desired(), PARENT, None, Update::OnDelete), ChildWrite::Leave);
    }

    #[test]
    fn someone_else_s_object_is_refused_and_an_orphan_adopted_only_when_selected() {
        let foreign = seen(Some("uid-other"), json!({"app": "a"}), "theirs");
        assert_eq!(
            next_write(Some(&foreign), &desired(), PARENT, Some(&selector()), Update::InPlace),
            ChildWrite::Refuse
        );
        let orphan = seen(None, json!({"app": "a"}), "theirs");
        assert_eq!(next_write(Some(&orphan), &desired(), PARENT, None, Update::InPlace), ChildWrite::Refuse);
        let ChildWrite::Adopt(patch) =
            next_write(Some(&orphan), &desired(), PARENT, Some(&selector()), Update::InPlace)
        else {
            panic!("an adoption")
        };
        let metadata = &patch["metadata"];
        assert_eq!((&metadata["uid"], &metadata["resourceVersion"]), (&json!("uid-c"), &json!("7")));
        assert_eq!(metadata["ownerReferences"][0]["uid"], PARENT);
        assert_eq!(metadata["labels"][MANAGED_BY_LABEL], "samplectl");
        assert_eq!(metadata["labels"]["shard.samplectl.io/ring"], "m1_abc", "a ring's label comes with it");
        assert!(patch.get("data").is_none(), "the adoption writes nothing of the sync's");
    }

    #[test]
    fn a_controlled_child_without_the_labels_is_labelled_before_anything_else() {
        let unlabelled = seen(Some(PARENT), json!({"app": "a"}), "stale");
        let ChildWrite::Label(patch) = next_write(Some(&unlabelled), &desired(), PARENT, None, Update::OnDelete) else {
            panic!("labelled first, whatever the strategy")
        };
        assert_eq!(patch["metadata"]["labels"][MANAGED_BY_LABEL], "samplectl");
        assert!(patch["metadata"].get("ownerReferences").is_none(), "already the parent's");
        let mut unread = unlabelled;
        unread.metadata.resource_version = None;
        assert_eq!(
            next_write(Some(&unread), &desired(), PARENT, None, Update::InPlace),
            ChildWrite::Leave,
            "nothing to hold the patch to"
        );
    }

    #[test]
    fn only_a_refusal_that_a_fresh_read_can_change_is_looked_at_again() {
        assert!(look_again(&ChildWrite::Create, Some(409)));
        assert!(!look_again(&ChildWrite::Create, Some(404)));
        assert!(!look_again(&ChildWrite::Create, Some(403)));
        for write in [ChildWrite::Apply(json!({})), ChildWrite::Adopt(json!({})), ChildWrite::Label(json!({}))] {
            for status in [404, 409, 422] {
                assert!(look_again(&write, Some(status)), "{write:?} {status}");
            }
            assert!(!look_again(&write, Some(500)) && !look_again(&write, None));
        }
    }
}

#[cfg(test)]
mod applied_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_created_childs_fields_become_samplectls_applied_ones() {
        let created: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "resourceVersion": "7", "managedFields": [
                {"manager": "samplectl", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}},
            ]},
        }))
        .unwrap();
        let patch = owned_as_applied(&created, "samplectl").unwrap();
        assert_eq!(patch[0], json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}));
        let entries = &patch[1]["value"];
        assert_eq!(entries[0]["operation"], "Apply");
        assert!(entries[0].get("time").is_none());
        assert_eq!(entries[1]["operation"], "Update", "another manager's entry is left as it is");
        assert!(owned_as_applied(&created, "someone-else").is_none());
    }
}
