//! The conditions kro writes on ResourceGraphDefinitions and their instances: a root (`Ready`) over
//! dependent conditions, each stamped with the object's generation, kept sorted by when they last
//! changed with the root last, and the root recomputed from the dependents after every change (True
//! with reason `Ready` when all are True at this generation, else a copy of the most recently changed
//! False one, or failing that Unknown one). Tools and people read these lists as kro writes them, order
//! and wording included.

use serde::{Deserialize, Serialize};

pub const READY: &str = "Ready";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default)]
    pub observed_generation: i64,
}

/// One object's conditions while a reconcile changes them.
pub struct Conditions<'a> {
    dependents: &'a [&'a str],
    list: Vec<Condition>,
    generation: i64,
    created: String,
    deleting: bool,
    now: String,
}

impl<'a> Conditions<'a> {
    /// The conditions read from an object (`list`), with those of `prune` dropped and any of the root and
    /// `dependents` missing set Unknown, awaiting reconciliation. `created` and `now` are RFC 3339 times.
    pub fn read(
        list: Vec<Condition>,
        dependents: &'a [&'a str],
        prune: &[&str],
        (generation, deleting): (i64, bool),
        created: &str,
        now: &str,
    ) -> Self {
        let list = list.into_iter().filter(|c| !prune.contains(&c.kind.as_str())).collect();
        let mut conditions =
            Conditions { dependents, list, generation, created: created.to_owned(), deleting, now: now.to_owned() };
        for kind in std::iter::once(READY).chain(dependents.iter().copied()) {
            if conditions.get(kind).is_none() {
                conditions.set_unknown(
                    kind,
                    "AwaitingReconciliation",
                    &format!("condition {kind:?} is awaiting reconciliation"),
                );
            }
        }
        conditions
    }

    pub fn get(&self, kind: &str) -> Option<&Condition> {
        self.list.iter().find(|c| c.kind == kind)
    }

    pub fn is_true(&self, kind: &str) -> bool {
        self.get(kind).is_some_and(|c| c.status == "True")
    }

    pub fn list(&self) -> &[Condition] {
        &self.list
    }

    pub fn into_list(self) -> Vec<Condition> {
        self.list
    }

    /// Whether the root is True at the object's generation.
    pub fn ready(&self) -> bool {
        self.get(READY).is_some_and(|c| c.status == "True" && c.observed_generation == self.generation)
    }

    pub fn set_true(&mut self, kind: &str, reason: &str, message: &str) -> bool {
        self.set(kind, "True", reason, message)
    }

    pub fn set_false(&mut self, kind: &str, reason: &str, message: &str) -> bool {
        self.set(kind, "False", reason, message)
    }

    pub fn set_unknown(&mut self, kind: &str, reason: &str, message: &str) -> bool {
        self.set(kind, "Unknown", reason, message)
    }

    fn set(&mut self, kind: &str, status: &str, reason: &str, message: &str) -> bool {
        let mut condition = Condition {
            kind: kind.to_owned(),
            status: status.to_owned(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: None,
            observed_generation: self.generation,
        };
        match self.list.iter().find(|c| c.kind == kind) {
            Some(existing) => {
                condition.last_transition_time = match existing.status == status {
                    true => existing.last_transition_time.clone(),
                    false => Some(self.now.clone()),
                };
                if condition == *existing {
                    return false;
                }
            }
            // The root and its dependents count from the object's creation, others from now.
            None => {
                condition.last_transition_time = match kind == READY || self.dependents.contains(&kind) {
                    true => Some(self.created.clone()),
                    false => Some(self.now.clone()),
                };
            }
        }
        let (deleting, generation) = (self.deleting, self.generation);
        let mut kept: Vec<Condition> = std::mem::take(&mut self.list)
            .into_iter()
            .filter(|c| c.kind != kind)
            .map(|mut c| {
                if deleting {
                    c.observed_generation = generation;
                }
                c
            })
            .collect();
        kept.push(condition);
        // Stable: conditions that changed at the same time keep the order they were set in.
        kept.sort_by(|a, b| match (a.kind == READY, b.kind == READY) {
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            (true, true) => std::cmp::Ordering::Equal,
            (false, false) => a.last_transition_time.cmp(&b.last_transition_time),
        });
        self.list = kept;
        if kind != READY {
            self.recompute_root();
        }
        true
    }

    fn recompute_root(&mut self) {
        let mut unhealthy: Vec<&Condition> = self
            .list
            .iter()
            .filter(|c| self.dependents.contains(&c.kind.as_str()))
            .filter(|c| c.status != "True" || c.observed_generation != self.generation)
            .collect();
        if unhealthy.is_empty() {
            self.set(READY, "True", READY, "");
            return;
        }
        // The most recently changed first.
        unhealthy.sort_by(|a, b| b.last_transition_time.cmp(&a.last_transition_time));
        let worst = unhealthy
            .iter()
            .find(|c| c.status == "False")
            .or_else(|| unhealthy.iter().find(|c| c.status == "Unknown"))
            .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()));
        if let Some((status, reason, message)) = worst {
            self.set(READY, &status, &reason, &message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATED: &str = "2026-01-01T00:00:00Z";
    const INSTANCE: &[&str] = &["InstanceManaged", "GraphResolved", "ResourcesReady"];

    fn summary(conditions: &Conditions) -> Vec<(String, String, String)> {
        conditions
            .list()
            .iter()
            .map(|c| (c.kind.clone(), c.status.clone(), c.reason.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn a_fresh_object_awaits_every_condition_and_the_root_copies_one() {
        let conditions = Conditions::read(vec![], INSTANCE, &[], (1, false), CREATED, "2026-01-01T00:00:05Z");
        let kinds: Vec<&str> = conditions.list().iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, ["InstanceManaged", "GraphResolved", "ResourcesReady", "Ready"]);
        assert!(
            conditions
                .list()
                .iter()
                .all(|c| c.status == "Unknown" && c.last_transition_time.as_deref() == Some(CREATED))
        );
        assert_eq!(conditions.get(READY).unwrap().reason.as_deref(), Some("AwaitingReconciliation"));
        assert!(!conditions.ready());
    }

    #[test]
    fn all_dependents_true_make_the_root_true_with_an_empty_message() {
        let now = "2026-01-01T00:00:05Z";
        let mut conditions = Conditions::read(vec![], INSTANCE, &[], (1, false), CREATED, now);
        conditions.set_true("InstanceManaged", "Managed", "instance is properly managed with finalizers and labels");
        conditions.set_true("GraphResolved", "Resolved", "runtime graph created and all resources resolved");
        assert_eq!(conditions.get(READY).unwrap().status, "Unknown");
        conditions.set_true("ResourcesReady", "AllResourcesReady", "all resources are created and ready");
        assert_eq!(
            summary(&conditions),
            [
                ("InstanceManaged".into(), "True".into(), "Managed".into()),
                ("GraphResolved".into(), "True".into(), "Resolved".into()),
                ("ResourcesReady".into(), "True".into(), "AllResourcesReady".into()),
                ("Ready".into(), "True".into(), "Ready".into()),
            ]
        );
        let ready = conditions.get(READY).unwrap();
        assert_eq!((ready.message.as_deref(), ready.observed_generation), (Some(""), 1));
        assert!(conditions.ready());
        assert!(!conditions.set_true("GraphResolved", "Resolved", "runtime graph created and all resources resolved"));
    }

    #[test]
    fn the_root_copies_the_most_recent_false_dependent_and_order_follows_changes() {
        let mut conditions = Conditions::read(vec![], INSTANCE, &[], (2, false), CREATED, "2026-01-01T00:00:05Z");
        for (kind, reason) in
            [("InstanceManaged", "Managed"), ("GraphResolved", "Resolved"), ("ResourcesReady", "AllResourcesReady")]
        {
            conditions.set_true(kind, reason, "");
        }
        let list = conditions.into_list();
        let mut later = Conditions::read(list, INSTANCE, &[], (2, false), CREATED, "2026-01-01T00:01:00Z");
        later.set_false("GraphResolved", "ResolutionFailed", "no graph");
        let kinds: Vec<&str> = later.list().iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, ["InstanceManaged", "ResourcesReady", "GraphResolved", "Ready"]);
        let ready = later.get(READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("ResolutionFailed")));
        assert_eq!(ready.last_transition_time.as_deref(), Some("2026-01-01T00:01:00Z"));
    }

    #[test]
    fn pruned_conditions_go_and_a_new_generation_is_not_ready() {
        let old = Condition {
            kind: "ResourceGraphAccepted".into(),
            status: "True".into(),
            reason: None,
            message: None,
            last_transition_time: None,
            observed_generation: 1,
        };
        let rgd = &["GraphRevisionsResolved", "GraphAccepted", "KindReady", "ControllerReady"][..];
        let mut conditions = Conditions::read(vec![old], rgd, &["ResourceGraphAccepted"], (1, false), CREATED, CREATED);
        assert!(conditions.get("ResourceGraphAccepted").is_none());
        for kind in rgd {
            conditions.set_true(kind, "x", "");
        }
        assert!(conditions.ready());
        let next = Conditions::read(conditions.into_list(), rgd, &[], (2, false), CREATED, CREATED);
        assert!(!next.ready(), "conditions of generation 1 say nothing of generation 2");
    }
}
