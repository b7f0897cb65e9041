//! metacontroller's rolling updates, decided without a cluster. A parent's rollout history is a set of
//! ControllerRevisions: each holds the parent's revision fields (`parentPatch`, by default its `spec`)
//! and claims, by group, kind and name, the children still made from it. The sync hook is asked once per
//! revision (the parent with that revision's fields), each child is written as the revision claiming it
//! wants, and one child at a time moves to the latest revision, in the order the latest answer lists
//! them, and only while every child already on the latest revision passes its type's status checks. The
//! parent's `Updated` condition says where the rollout stands.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};

use super::children::{ChildKey, Observed, satisfies};
use super::go_json;

/// The condition a rollout reports in the parent's status.
pub const UPDATED: &str = "Updated";
/// Labels metacontroller puts on every ControllerRevision, so that parent types never share them.
pub const API_GROUP_LABEL: &str = "metacontroller.k8s.io/apiGroup";
pub const RESOURCE_LABEL: &str = "metacontroller.k8s.io/resource";

/// One status check of a rolling child type: its condition `type_` must be there, with this status and
/// reason when they are given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionCheck {
    pub type_: String,
    pub status: Option<String>,
    pub reason: Option<String>,
}

/// A child type that rolls: in place (`RollingInPlace`) or by recreating (`RollingRecreate`), one child
/// at a time, gated by `checks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollingType {
    pub in_place: bool,
    pub checks: Vec<ConditionCheck>,
}

/// A controller's rolling child types: by index of child type, with their API group and kind (a claim's
/// terms), and which parent fields make a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// `(child type index, API group, kind, how it rolls)`.
    pub types: Vec<(usize, String, String, RollingType)>,
    /// `revisionHistory.fieldPaths`, `spec` when none are given.
    pub field_paths: Vec<String>,
}

/// The children of one group and kind a revision claims (a ControllerRevision's `children` item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub api_group: String,
    pub kind: String,
    pub names: Vec<String>,
}

impl Claims {
    pub fn to_value(list: &[Claims]) -> Value {
        list.iter().map(|c| json!({"apiGroup": c.api_group, "kind": c.kind, "names": c.names})).collect()
    }

    /// A ControllerRevision's `children`; items that are not of the expected shape are dropped.
    pub fn from_value(value: &Value) -> Vec<Claims> {
        let text = |item: &Value, field: &str| item[field].as_str().unwrap_or_default().to_owned();
        value
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| Claims {
                api_group: text(item, "apiGroup"),
                kind: text(item, "kind"),
                names: item["names"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect(),
            })
            .collect()
    }
}

/// One revision during a sync: the children it claims and the children its sync answer wants.
#[derive(Debug, Clone, Default)]
pub struct Revision {
    pub claims: Vec<Claims>,
    pub desired: BTreeMap<ChildKey, Value>,
}

impl Revision {
    fn count(&self) -> usize {
        self.claims.iter().map(|c| c.names.len()).sum()
    }

    fn add(&mut self, api_group: &str, kind: &str, name: &str) {
        let index = match self.claims.iter().position(|c| c.api_group == api_group && c.kind == kind) {
            Some(index) => index,
            None => {
                self.claims.push(Claims { api_group: api_group.into(), kind: kind.into(), names: Vec::new() });
                self.claims.len() - 1
            }
        };
        let names = &mut self.claims[index].names;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }

    fn remove(&mut self, api_group: &str, kind: &str, name: &str) {
        for claims in self.claims.iter_mut().filter(|c| c.api_group == api_group && c.kind == kind) {
            claims.names.retain(|n| n != name);
        }
    }
}

/// Where a rollout stands: the `Updated` condition's status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub done: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Rollout {
    fn rolling(&self, api_group: &str, kind: &str) -> Option<(usize, &RollingType)> {
        self.types.iter().find(|(_, g, k, _)| g == api_group && k == kind).map(|(index, _, _, how)| (*index, how))
    }

    fn names_of(&self, index: usize) -> Option<(&str, &str)> {
        self.types.iter().find(|(i, ..)| *i == index).map(|(_, g, k, _)| (g.as_str(), k.as_str()))
    }

    /// Moves the rollout one step on. `revisions[0]` is the latest (the parent as it is); the others are
    /// older, in any order. Claims of types that no longer roll and of children the latest no longer
    /// wants are dropped; children nobody claims go to the latest; a child already as the latest wants
    /// moves at once; then the first child (in `order`, the latest answer's order) not on the latest
    /// moves, if every child on the latest passes its checks. `observed` holds the parent's children,
    /// in `namespace`; `latest_name` names the latest ControllerRevision for the message.
    pub fn step(
        &self,
        revisions: &mut [Revision],
        order: &[ChildKey],
        observed: &Observed,
        namespace: &str,
        latest_name: &str,
    ) -> Standing {
        let mut claimed = self.sync_claims(revisions);
        let key =
            |index: usize, name: &str| ChildKey { kind: index, namespace: namespace.to_owned(), name: name.into() };

        let wanted: Vec<ChildKey> = revisions[0].desired.keys().cloned().collect();
        for child in wanted {
            let Some((group, kind)) = self.names_of(child.kind) else { continue };
            let (group, kind) = (group.to_owned(), kind.to_owned());
            match claimed.get(&(child.kind, child.name.clone())).copied() {
                None => {
                    revisions[0].add(&group, &kind, &child.name);
                    claimed.insert((child.kind, child.name.clone()), 0);
                }
                Some(0) => {}
                Some(owner) => {
                    // Already as the latest wants: it moves now, not one step at a time.
                    let Some(seen) = observed.get(&key(child.kind, &child.name)) else { continue };
                    if is_updated(seen, &revisions[0].desired[&child]) {
                        revisions[0].add(&group, &kind, &child.name);
                        revisions[owner].remove(&group, &kind, &child.name);
                        claimed.insert((child.kind, child.name.clone()), 0);
                    }
                }
            }
        }

        for child in order {
            let Some((group, kind)) = self.names_of(child.kind) else { continue };
            if claimed.get(&(child.kind, child.name.clone())) == Some(&0) {
                continue;
            }
            if let Err(waiting) = self.may_go_on(&revisions[0], observed, namespace) {
                return Standing { done: false, reason: "RolloutWaiting", message: waiting };
            }
            let (group, kind) = (group.to_owned(), kind.to_owned());
            revisions[0].add(&group, &kind, &child.name);
            for older in &mut revisions[1..] {
                older.remove(&group, &kind, &child.name);
            }
            return Standing {
                done: false,
                reason: "RolloutProgressing",
                message: format!("updating {kind} {}", child.name),
            };
        }
        Standing {
            done: true,
            reason: "OnLatestRevision",
            message: format!("latest ControllerRevision: {latest_name}"),
        }
    }

    /// Keeps in each revision only the claims on rolling types, of children the latest revision wants,
    /// and not already claimed by a revision before it (the latest comes first, so it wins). Says which
    /// revision claims each child, by child type index and name.
    fn sync_claims(&self, revisions: &mut [Revision]) -> HashMap<(usize, String), usize> {
        let mut claimed = HashMap::new();
        let wanted: Vec<(usize, String)> = revisions[0].desired.keys().map(|k| (k.kind, k.name.clone())).collect();
        for (position, revision) in revisions.iter_mut().enumerate() {
            let mut kept = Vec::new();
            for mut claims in std::mem::take(&mut revision.claims) {
                let Some((index, _)) = self.rolling(&claims.api_group, &claims.kind) else { continue };
                claims.names.retain(|name| {
                    let key = (index, name.clone());
                    let keep = wanted.contains(&key) && !claimed.contains_key(&key);
                    if keep {
                        claimed.insert(key, position);
                    }
                    keep
                });
                if !claims.names.is_empty() {
                    kept.push(claims);
                }
            }
            revision.claims = kept;
        }
        claimed
    }

    /// Whether the rollout may move another child: every child the latest revision claims is there, as
    /// the latest wants it, has seen its latest spec (in place, where it says), and passes its checks.
    fn may_go_on(&self, latest: &Revision, observed: &Observed, namespace: &str) -> Result<(), String> {
        for claims in &latest.claims {
            let Some((index, how)) = self.rolling(&claims.api_group, &claims.kind) else { continue };
            let kind = &claims.kind;
            for name in &claims.names {
                let key = ChildKey { kind: index, namespace: namespace.to_owned(), name: name.clone() };
                let Some(child) = observed.get(&key) else { return Err(format!("missing child {kind} {name}")) };
                let Some(desired) = latest.desired.get(&key) else { continue };
                if !is_updated(child, desired) {
                    return Err(format!("child {kind} {name} is not updated yet"));
                }
                if how.in_place {
                    // Only where the child's controller reports it: not every one does.
                    let observed_generation = child.data["status"]["observedGeneration"].as_i64().unwrap_or(0);
                    if observed_generation > 0 && observed_generation < child.metadata.generation.unwrap_or(0) {
                        return Err(format!(
                            "child {kind} {name} with RollingInPlace update strategy hasn't observed latest spec"
                        ));
                    }
                }
                check(&how.checks, &child.data["status"])
                    .map_err(|why| format!("child {kind} {name} failed status check: {why}"))?;
            }
        }
        Ok(())
    }
}

fn is_updated(child: &kube::api::DynamicObject, desired: &Value) -> bool {
    let existing = serde_json::to_value(child).unwrap_or(Value::Null);
    let mut desired = desired.clone();
    if let Some(fields) = desired.as_object_mut() {
        fields.remove("apiVersion");
        fields.remove("kind");
    }
    satisfies(&existing, &desired)
}

/// Whether a child's `status` passes the checks, with metacontroller's words for the first that fails.
fn check(checks: &[ConditionCheck], status: &Value) -> Result<(), String> {
    for wanted in checks {
        let found = status["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == wanted.type_.as_str());
        let Some(found) = found else { return Err(format!("required condition type missing: {:?}", wanted.type_)) };
        let field = |name: &str| found[name].as_str().unwrap_or_default().to_owned();
        if let Some(status) = &wanted.status
            && field("status") != *status
        {
            return Err(format!("{:?} condition status is {:?} (want {status:?})", wanted.type_, field("status")));
        }
        if let Some(reason) = &wanted.reason
            && field("reason") != *reason
        {
            return Err(format!("{:?} condition reason is {:?} (want {reason:?})", wanted.type_, field("reason")));
        }
    }
    Ok(())
}

/// The children to write: each as the revision claiming it wants it (the latest's answer, with the
/// children older revisions still claim as those revisions answered them). A child the latest no
/// longer wants is not written at all.
pub fn merged(revisions: &[Revision], rollout: &Rollout, namespace: &str) -> BTreeMap<ChildKey, Value> {
    let mut desired = revisions[0].desired.clone();
    for older in &revisions[1..] {
        for claims in &older.claims {
            let Some((index, _)) = rollout.rolling(&claims.api_group, &claims.kind) else { continue };
            for name in &claims.names {
                let key = ChildKey { kind: index, namespace: namespace.to_owned(), name: name.clone() };
                if let (Some(slot), Some(body)) = (desired.get_mut(&key), older.desired.get(&key)) {
                    *slot = body.clone();
                }
            }
        }
    }
    desired
}

/// Whether an older revision still claims any child: one that claims none is deleted.
pub fn still_claims(revision: &Revision) -> bool {
    revision.count() > 0
}

/// Sets the `Updated` condition in `status` (made an object if it is not one), replacing one of that
/// type the hook answered.
pub fn set_updated(status: &mut Value, standing: &Standing) {
    if !status.is_object() {
        *status = json!({});
    }
    let mut condition = json!({"type": UPDATED, "status": if standing.done { "True" } else { "False" }});
    condition["reason"] = standing.reason.into();
    if !standing.message.is_empty() {
        condition["message"] = standing.message.clone().into();
    }
    let conditions = &mut status["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("made an array above");
    match list.iter_mut().find(|c| c["type"] == UPDATED) {
        Some(slot) => *slot = condition,
        None => list.push(condition),
    }
}

/// The parent's revision fields, as a ControllerRevision's `parentPatch` holds them: each of `paths`
/// (dotted) that the parent has, at its place.
pub fn patch_of(parent: &Value, paths: &[String]) -> Value {
    let mut patch = Value::Object(Map::new());
    for path in paths {
        let parts: Vec<&str> = path.split('.').collect();
        if let Some(value) = lookup(parent, &parts) {
            place(&mut patch, &parts, value.clone());
        }
    }
    patch
}

/// The parent as revision `patch` had it: each of `paths` the patch has replaces the parent's.
pub fn apply_patch(parent: &mut Value, patch: &Value, paths: &[String]) {
    for path in paths {
        let parts: Vec<&str> = path.split('.').collect();
        if let Some(value) = lookup(patch, &parts) {
            place(parent, &parts, value.clone());
        }
    }
}

fn lookup<'a>(value: &'a Value, parts: &[&str]) -> Option<&'a Value> {
    parts.iter().try_fold(value, |at, part| at.as_object()?.get(*part))
}

fn place(value: &mut Value, parts: &[&str], leaf: Value) {
    let Some((last, path)) = parts.split_last() else { return };
    let mut at = value;
    for part in path {
        if !at.get(*part).is_some_and(Value::is_object) {
            at[*part] = json!({});
        }
        at = &mut at[*part];
    }
    if at.is_object() {
        at[*last] = leaf;
    }
}

/// A ControllerRevision's name, as metacontroller makes it: `<plural>.<group, or core>-<sha1 of the
/// parent's uid and the patch as Go writes JSON>`, the prefix cut to fit 253 characters.
pub fn revision_name(plural: &str, group: &str, parent_uid: &str, patch: &Value) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let mut prefix = format!("{plural}.{group}");
    prefix.truncate(253 - 41);
    let mut hasher = Sha1::new();
    hasher.update(parent_uid.as_bytes());
    hasher.update(go_json(patch).as_bytes());
    let digest: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{digest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;

    fn rollout() -> Rollout {
        let checks = vec![ConditionCheck { type_: "Ready".into(), status: Some("True".into()), reason: None }];
        Rollout {
            types: vec![(0, String::new(), "ConfigMap".into(), RollingType { in_place: true, checks })],
            field_paths: vec!["spec".into()],
        }
    }

    fn key(name: &str) -> ChildKey {
        ChildKey { kind: 0, namespace: "ns".into(), name: name.into() }
    }

    fn want(value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"v": value}})
    }

    fn seen(value: &str, ready: bool) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "generation": 1},
            "data": {"v": value},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    fn revision(value: &str, claims: &[&str]) -> Revision {
        Revision {
            claims: match claims.is_empty() {
                true => vec![],
                false => vec![Claims {
                    api_group: String::new(),
                    kind: "ConfigMap".into(),
                    names: claims.iter().map(|n| n.to_string()).collect(),
                }],
            },
            desired: ["a", "b"].iter().map(|n| (key(n), want(value))).collect(),
        }
    }

    #[test]
    fn a_first_sync_puts_every_child_on_the_latest() {
        let mut revisions = vec![revision("new", &[])];
        let standing = rollout().step(&mut revisions, &[key("a"), key("b")], &Observed::new(), "ns", "r1");
        assert!(standing.done, "{standing:?}");
        assert_eq!(revisions[0].claims[0].names, ["a", "b"]);
        assert_eq!(standing.message, "latest ControllerRevision: r1");
    }

    #[test]
    fn children_move_one_at_a_time_and_only_when_the_moved_ones_pass() {
        let rollout = rollout();
        let order = [key("a"), key("b")];
        let mut observed: Observed = [(key("a"), seen("old", true)), (key("b"), seen("old", true))].into();
        let mut revisions = vec![revision("new", &[]), revision("old", &["a", "b"])];
        let standing = rollout.step(&mut revisions, &order, &observed, "ns", "r2");
        assert_eq!((standing.reason, standing.message.as_str()), ("RolloutProgressing", "updating ConfigMap a"));
        assert_eq!(revisions[0].claims[0].names, ["a"]);
        assert_eq!(revisions[1].claims[0].names, ["b"]);
        // `a` is written as the latest wants, so only `b` is still the old revision's.
        let written = merged(&revisions, &rollout, "ns");
        assert_eq!((written[&key("a")].clone(), written[&key("b")].clone()), (want("new"), want("old")));

        // `a` updated but not Ready yet: the rollout waits.
        observed.insert(key("a"), seen("new", false));
        let standing = rollout.step(&mut revisions, &order, &observed, "ns", "r2");
        assert_eq!(standing.reason, "RolloutWaiting");
        assert_eq!(
            standing.message,
            r#"child ConfigMap a failed status check: "Ready" condition status is "False" (want "True")"#
        );
        assert_eq!(revisions[1].claims[0].names, ["b"]);

        observed.insert(key("a"), seen("new", true));
        let standing = rollout.step(&mut revisions, &order, &observed, "ns", "r2");
        assert_eq!(standing.message, "updating ConfigMap b");
        assert!(!still_claims(&revisions[1]));
        observed.insert(key("b"), seen("new", true));
        assert!(rollout.step(&mut revisions, &order, &observed, "ns", "r2").done);
    }

    #[test]
    fn a_child_already_as_the_latest_wants_moves_at_once() {
        let observed: Observed = [(key("a"), seen("new", true)), (key("b"), seen("new", true))].into();
        let mut revisions = vec![revision("new", &[]), revision("old", &["a", "b"])];
        let standing = rollout().step(&mut revisions, &[key("a"), key("b")], &observed, "ns", "r");
        assert!(standing.done);
        assert!(!still_claims(&revisions[1]));
    }

    #[test]
    fn a_missing_or_unobserved_generation_holds_the_rollout() {
        let rollout = rollout();
        let mut revisions = vec![revision("new", &["a"]), revision("old", &["b"])];
        let standing = rollout.step(&mut revisions, &[key("a"), key("b")], &Observed::new(), "ns", "r");
        assert_eq!(standing.message, "missing child ConfigMap a");
        let mut behind = seen("new", true);
        behind.metadata.generation = Some(3);
        behind.data["status"]["observedGeneration"] = 2.into();
        let observed: Observed = [(key("a"), behind)].into();
        let standing = rollout.step(&mut revisions, &[key("a"), key("b")], &observed, "ns", "r");
        assert!(standing.message.ends_with("hasn't observed latest spec"), "{standing:?}");
    }

    #[test]
    fn claims_on_unwanted_children_and_other_types_are_dropped_and_the_latest_wins() {
        let mut revisions = vec![revision("new", &["a"]), revision("old", &["a", "gone"])];
        revisions[1].claims.push(Claims {
            api_group: "apps".into(),
            kind: "Deployment".into(),
            names: vec!["d".into()],
        });
        let claimed = rollout().sync_claims(&mut revisions);
        assert_eq!(claimed[&(0, "a".to_string())], 0);
        assert!(revisions[1].claims.is_empty());
    }

    #[test]
    fn the_updated_condition_replaces_the_hooks_own() {
        let mut status = json!({"conditions": [{"type": "Updated", "status": "Unknown"}, {"type": "Ready"}]});
        let standing =
            Standing { done: true, reason: "OnLatestRevision", message: "latest ControllerRevision: r".into() };
        set_updated(&mut status, &standing);
        assert_eq!(status["conditions"][0]["status"], "True");
        assert_eq!(status["conditions"].as_array().unwrap().len(), 2);
        let mut none = Value::Null;
        set_updated(&mut none, &standing);
        assert_eq!(none["conditions"][0]["reason"], "OnLatestRevision");
    }

    #[test]
    fn patches_take_and_put_back_the_revision_fields() {
        let parent = json!({"spec": {"template": {"x": 1}, "replicas": 3}, "status": {}});
        let paths = vec!["spec.template".to_string(), "spec.absent".to_string()];
        let patch = patch_of(&parent, &paths);
        assert_eq!(patch, json!({"spec": {"template": {"x": 1}}}));
        let mut now = json!({"spec": {"template": {"x": 2}, "replicas": 5}});
        apply_patch(&mut now, &patch, &paths);
        assert_eq!(now, json!({"spec": {"template": {"x": 1}, "replicas": 5}}));
    }

    #[test]
    fn names_are_metacontrollers() {
        // sha1("uid-1" + `{"spec":{"a":"<b>"}}` as Go escapes it), computed independently with sha1sum.
        let name = revision_name("catsets", "", "uid-1", &json!({"spec": {"a": "<b>"}}));
        assert_eq!(name, format!("catsets.core-{}", EXPECTED));
        assert_eq!(go_json(&json!({"b": 1, "a": "&"})), r#"{"a":"\u0026","b":1}"#);
    }

    const EXPECTED: &str = "a6ab524f537ba98421f27bc48e068bd4a8347530";
}
