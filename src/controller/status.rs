//! A parent's status, decided without a cluster: the `Ready` condition (whose `lastTransitionTime` moves
//! only when its status flips), `observedGeneration`, and whether a status already says what would be
//! written. Both the built-in Sample sync and the engine (which reports conflicts and failed writes in
//! `Ready`) use it, so a hook's parent and a Sample read the same way.

use serde_json::{Value, json};

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

/// Compares two statuses leaving out every condition's `lastTransitionTime`: two reconciles of the same
/// parent a second apart compute different times for the same transition.
pub fn same_status(a: &Value, b: &Value) -> bool {
    let strip = |status: &Value| {
        let mut status = status.clone();
        for condition in status["conditions"].as_array_mut().into_iter().flatten() {
            if let Some(condition) = condition.as_object_mut() {
                condition.remove("lastTransitionTime");
            }
        }
        status
    };
    strip(a) == strip(b)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn same_status_ignores_only_transition_times() {
        let a = json!({"conditions": [{"type": "Ready", "lastTransitionTime": "t1"}], "n": 1});
        let b = json!({"conditions": [{"type": "Ready", "lastTransitionTime": "t2"}], "n": 1});
        assert!(same_status(&a, &b));
        assert!(!same_status(&a, &json!({"conditions": [{"type": "Ready"}], "n": 2})));
    }
}
