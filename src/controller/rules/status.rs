//! A parent's status, decided without a cluster: the `Ready` condition (whose `lastTransitionTime` moves
//! only when its status flips), `observedGeneration`, whether a status needs writing at all, and how it
//! is written. Both the built-in Sample sync and the engine (which reports conflicts and failed writes in
//! `Ready`) use it, so a hook's parent and a Sample read the same way.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::FIELD_MANAGER;

pub const READY: &str = "Ready";

/// What the `Ready` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: String,
    pub message: String,
}

impl Readiness {
    pub fn ready(reason: &str, message: impl Into<String>) -> Self {
        Readiness { ready: true, reason: reason.into(), message: message.into() }
    }

    pub fn not_ready(reason: &str, message: impl Into<String>) -> Self {
        Readiness { ready: false, reason: reason.into(), message: message.into() }
    }
}

/// Whether a parent shows a change no reconcile has answered: it is being deleted, or its status's
/// `observedGeneration` is behind its generation. A status without `observedGeneration` says nothing
/// (a DecoratorController's, a hook's that writes none), so such a parent is not said to wait.
pub fn unanswered(parent: &kube::api::DynamicObject) -> bool {
    let observed = parent.data["status"]["observedGeneration"].as_i64();
    parent.metadata.deletion_timestamp.is_some()
        || matches!((observed, parent.metadata.generation), (Some(observed), Some(generation)) if observed < generation)
}

/// The `Ready` condition a status holds, if any.
pub fn ready_condition(status: &Value) -> Option<&Value> {
    status["conditions"].as_array()?.iter().find(|c| c["type"] == READY)
}

/// `status` with `observedGeneration` set, and `Ready` set to `readiness`. The transition time is the
/// one `current` (the status the parent holds now) gives, unless the condition's status flips.
pub fn set_ready(status: &mut Value, current: &Value, readiness: &Readiness, generation: i64, now: &str) {
    let flag = if readiness.ready { "True" } else { "False" };
    let transition = match ready_condition(current) {
        Some(c) if c["status"] == flag => c["lastTransitionTime"].as_str().unwrap_or(now).to_owned(),
        _ => now.to_owned(),
    };
    let condition = json!({
        "type": READY,
        "status": flag,
        "reason": readiness.reason,
        "message": readiness.message,
        "lastTransitionTime": transition,
        "observedGeneration": generation,
    });
    if !status.is_object() {
        *status = json!({});
    }
    status["observedGeneration"] = generation.into();
    match status["conditions"].as_array_mut() {
        Some(conditions) => match conditions.iter_mut().find(|c| c["type"] == READY) {
            Some(existing) => *existing = condition,
            None => conditions.push(condition),
        },
        None => status["conditions"] = json!([condition]),
    }
}

/// A status without any condition's `lastTransitionTime`: two reconciles of the same parent a second apart
/// compute different times for the same transition.
fn without_times(status: &Value) -> Value {
    let mut status = status.clone();
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if let Some(condition) = condition.as_object_mut() {
            condition.remove("lastTransitionTime");
        }
    }
    status
}

/// Compares two statuses leaving out every condition's `lastTransitionTime`.
pub fn same_status(a: &Value, b: &Value) -> bool {
    without_times(a) == without_times(b)
}

/// A status as [`same_status`] compares it, in 64 bits: what is remembered of a written status, so that a
/// memory per parent costs bytes, not a copy of the status.
pub fn digest(status: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    // serde_json's maps are sorted, so equal statuses print the same.
    without_times(status).to_string().hash(&mut hasher);
    hasher.finish()
}

/// The status to write for a parent whose status is `current`: the sync's answer (an empty status when it
/// gave none, as metacontroller takes it) with `observedGeneration` when `stamped` (a
/// CompositeController's; a DecoratorController's status is the hook's alone), and a problem with the
/// children (a conflict, a failed write), if any, in `Ready`.
pub fn desired(
    answered: Option<Value>,
    current: &Value,
    problem: Option<&Readiness>,
    (generation, stamped): (i64, bool),
    now: &str,
) -> Value {
    let mut status = answered.unwrap_or_else(|| json!({}));
    if !status.is_object() {
        status = json!({});
    }
    if stamped {
        status["observedGeneration"] = generation.into();
    }
    if let Some(problem) = problem {
        set_ready(&mut status, current, problem, generation, now);
    }
    status
}

/// A status samplectl wrote: from which version of the parent it was computed, what was asked, and what
/// the server kept (which may differ: fields pruned by the schema, defaults added), as digests.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub from_version: String,
    pub desired: u64,
    pub stored: u64,
}

impl Written {
    pub fn new(from_version: String, desired: &Value, stored: &Value) -> Self {
        Written { from_version, desired: digest(desired), stored: digest(stored) }
    }

    /// Whether the memory still explains something a parent showing `current` would otherwise be
    /// written for: not once the parent shows what was asked and the server kept all of it.
    pub fn still_needed(&self, current: &Value) -> bool {
        self.stored != self.desired || digest(current) != self.desired
    }
}

/// Whether `desired` must be written to a parent at resourceVersion `version` whose status is `current`,
/// given what was last written for it. Not when the parent already says it; nor when the same status was
/// written from this very version (a driver handed the version again before its cache saw the write) or
/// the parent holds what the server kept of it (a schema pruned part of what was written).
pub fn needs_write(desired: &Value, current: &Value, version: &str, last: Option<&Written>) -> bool {
    if same_status(desired, current) {
        return false;
    }
    !last.is_some_and(|w| w.desired == digest(desired) && (w.from_version == version || w.stored == digest(current)))
}

/// How a status reaches a parent's status subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Server-side apply: for a CRD that declares every field of the status (the Sample CRD).
    Apply,
    /// Replaced whole by a JSON patch, as metacontroller writes a hook's status. Apply would refuse a
    /// field the CRD's schema does not declare (`observedGeneration` in many); a JSON patch has it pruned,
    /// as any update would. "add" replaces a status that is there.
    Replace,
}

/// The request that writes `status` to the parent `(api_version, kind, namespace, name)` in `style`.
pub fn patch(
    style: Style,
    (api_version, kind): (&str, &str),
    parent: (Option<&str>, &str),
    status: &Value,
) -> (Patch<Value>, PatchParams) {
    let (namespace, name) = parent;
    match style {
        Style::Apply => {
            let body = json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": { "name": name, "namespace": namespace },
                "status": status,
            });
            (Patch::Apply(body), PatchParams::apply(FIELD_MANAGER).force())
        }
        Style::Replace => {
            let patch: json_patch::Patch =
                serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
                    .expect("a well-formed JSON patch");
            (Patch::Json(patch), PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() })
        }
    }
}

/// A status as it reads in a log line: the Ready condition if there is one.
pub fn summary(status: &Value) -> Option<Readiness> {
    let condition = ready_condition(status)?;
    Some(Readiness {
        ready: condition["status"] == "True",
        reason: condition["reason"].as_str().unwrap_or_default().to_owned(),
        message: condition["message"].as_str().unwrap_or_default().to_owned(),
    })
}

/// What a reconcile does with the parent's status once the children are written.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusPlan {
    /// Write this status, with the children's problem (if any) in `Ready`, and `observedGeneration`
    /// where asked.
    Write { answered: Option<Value>, observed_generation: bool },
    /// Leave it as it is.
    Keep,
}

/// What to do with the status: a CompositeController's parent gets the sync's status (null meaning none)
/// with `observedGeneration`, as metacontroller writes it; a decorated object only where it has a status
/// subresource, and only when the sync answered one (null keeps it as it is) or its attachments have a
/// problem to report.
pub fn plan(
    decorator: bool,
    status_subresource: bool,
    answered: Option<Value>,
    current: Option<&Value>,
    problem: bool,
) -> StatusPlan {
    match decorator {
        false => StatusPlan::Write { answered, observed_generation: true },
        true if status_subresource && (answered.is_some() || problem) => {
            StatusPlan::Write { answered: answered.or_else(|| current.cloned()), observed_generation: false }
        }
        true => StatusPlan::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_waits_when_deleted_or_its_generation_is_not_observed_yet() {
        let parent = |generation: i64, status: Value| {
            let mut object = kube::api::DynamicObject {
                types: None,
                metadata: Default::default(),
                data: json!({ "status": status }),
            };
            object.metadata.generation = Some(generation);
            object
        };
        assert!(unanswered(&parent(3, json!({"observedGeneration": 2}))), "spec changed since");
        assert!(!unanswered(&parent(3, json!({"observedGeneration": 3}))));
        assert!(!unanswered(&parent(3, json!({}))), "no observedGeneration: nothing known");
        assert!(!unanswered(&parent(3, Value::Null)));
        assert!(!unanswered(&parent(3, json!({"observedGeneration": "2"}))), "not a number: nothing known");
        let mut deleting = parent(3, json!({"observedGeneration": 3}));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(unanswered(&deleting));
    }

    #[test]
    fn ready_moves_its_transition_time_only_on_a_flip() {
        let mut first = json!({});
        set_ready(&mut first, &json!(null), &Readiness::ready("Fine", "all good"), 2, "2026-01-01T00:00:00Z");
        assert_eq!(first["observedGeneration"], 2);
        assert_eq!(first["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:00Z");

        let mut again = json!({});
        set_ready(&mut again, &first, &Readiness::ready("Fine", "new words"), 3, "2026-01-02T00:00:00Z");
        assert_eq!(again["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(again["conditions"][0]["observedGeneration"], 3);

        let mut flipped = json!({"replicas": 2, "conditions": [{"type": "Other", "status": "True"}]});
        set_ready(&mut flipped, &first, &Readiness::not_ready("Broken", "no"), 3, "2026-01-03T00:00:00Z");
        assert_eq!(flipped["replicas"], 2, "the rest of the status stays");
        assert_eq!(flipped["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(flipped["conditions"][1]["lastTransitionTime"], "2026-01-03T00:00:00Z");
        assert_eq!(summary(&flipped), Some(Readiness::not_ready("Broken", "no")));
    }

    #[test]
    fn the_desired_status_carries_the_generation_and_the_childrens_problem() {
        let plain = desired(None, &json!(null), None, (4, true), "t");
        assert_eq!(plain, json!({"observedGeneration": 4}));
        let answered = desired(Some(json!({"replicas": 1})), &json!(null), None, (4, true), "t");
        assert_eq!(answered, json!({"replicas": 1, "observedGeneration": 4}));
        let problem = Readiness::not_ready("ConfigMapConflict", "taken");
        let blocked = desired(Some(json!({"replicas": 1})), &json!(null), Some(&problem), (4, true), "t");
        assert_eq!(summary(&blocked), Some(problem));
        assert_eq!(blocked["replicas"], 1);
        let decorated = desired(Some(json!({"replicas": 1})), &json!(null), None, (4, false), "t");
        assert_eq!(decorated, json!({"replicas": 1}), "a decorator's status is the hook's alone");
    }

    #[test]
    fn a_status_is_written_only_when_it_would_change_something() {
        let want = json!({"n": 2, "observedGeneration": 1});
        let has = json!({"n": 1, "observedGeneration": 1});
        assert!(!needs_write(&want, &want, "5", None), "the parent already says it");
        assert!(needs_write(&want, &has, "5", None));
        let written = Written::new("5".into(), &want, &json!({"n": 2}));
        assert!(!needs_write(&want, &has, "5", Some(&written)), "handed the same version again");
        assert!(needs_write(&want, &has, "6", Some(&written)), "changed since, and not what the server kept");
        assert!(!needs_write(&want, &json!({"n": 2}), "6", Some(&written)), "what the server kept of it");
        let other = json!({"n": 3, "observedGeneration": 1});
        assert!(needs_write(&other, &has, "5", Some(&written)), "a different status is written");
        assert!(written.still_needed(&json!({"n": 2})), "the server pruned part of it");
        let whole = Written::new("5".into(), &want, &want);
        assert!(whole.still_needed(&has), "the parent does not show it yet");
        assert!(!whole.still_needed(&want));
    }

    #[test]
    fn statuses_are_applied_or_replaced() {
        let status = json!({"a": 1});
        let (applied, params) = patch(Style::Apply, ("example.com/v1alpha1", "Sample"), (Some("ns"), "s"), &status);
        assert!(params.force && params.field_manager.as_deref() == Some(FIELD_MANAGER));
        let Patch::Apply(body) = applied else { panic!("an apply") };
        assert_eq!(body["kind"], "Sample");
        assert_eq!(body["metadata"], json!({"name": "s", "namespace": "ns"}));
        assert_eq!(body["status"], status);
        let (replaced, params) = patch(Style::Replace, ("v1", "Thing"), (None, "t"), &status);
        assert!(!params.force);
        let Patch::Json(ops) = replaced else { panic!("a JSON patch") };
        assert_eq!(serde_json::to_value(ops).unwrap(), json!([{"op": "add", "path": "/status", "value": {"a": 1}}]));
    }

    #[test]
    fn same_status_ignores_only_transition_times() {
        let a = json!({"conditions": [{"type": "Ready", "lastTransitionTime": "t1"}], "n": 1});
        let b = json!({"conditions": [{"type": "Ready", "lastTransitionTime": "t2"}], "n": 1});
        assert!(same_status(&a, &b));
        assert!(!same_status(&a, &json!({"conditions": [{"type": "Ready"}], "n": 2})));
    }

    #[test]
    fn a_composite_parent_always_gets_the_sync_s_status_and_a_decorated_one_only_where_it_can() {
        let answered = Some(json!({"phase": "Up"}));
        let current = json!({"phase": "Old"});
        assert_eq!(
            plan(false, false, None, Some(&current), false),
            StatusPlan::Write { answered: None, observed_generation: true },
            "a null status is written as none, as metacontroller does"
        );
        assert_eq!(
            plan(true, true, answered.clone(), Some(&current), false),
            StatusPlan::Write { answered, observed_generation: false }
        );
        assert_eq!(plan(true, true, None, Some(&current), false), StatusPlan::Keep, "null keeps it");
        assert_eq!(
            plan(true, true, None, Some(&current), true),
            StatusPlan::Write { answered: Some(current.clone()), observed_generation: false },
            "a problem is reported on the status it has"
        );
        assert_eq!(plan(true, false, Some(json!({})), Some(&current), true), StatusPlan::Keep, "no subresource");
    }
}
