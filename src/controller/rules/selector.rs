//! Kubernetes' label selectors, and metacontroller's annotation selectors (the same rules over
//! annotations): read strictly from controller objects, checked, and matched against an object.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Kubernetes' label selector, read strictly.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnnotationSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector, as Kubernetes matches them: every `matchLabels` pair, and
    /// every requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector matches everything.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        selects(&self.match_labels, &self.match_expressions, labels)
    }

    /// What is wrong with the selector, if anything: an operator Kubernetes does not know, or values where
    /// the operator takes none (or none where it needs some).
    pub fn check(&self) -> Result<(), String> {
        self.match_expressions.iter().try_for_each(Requirement::check)
    }

    /// The selector as a list request's `labelSelector` parameter says it (`a=b,c in (d,e),!f`), so the
    /// API server does the filtering.
    pub fn to_query(&self) -> String {
        let pairs = self.match_labels.iter().map(|(k, v)| format!("{k}={v}"));
        let requirements = self.match_expressions.iter().map(|r| match r.operator.as_str() {
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
            "DoesNotExist" => format!("!{}", r.key),
            _ => r.key.clone(),
        });
        pairs.chain(requirements).collect::<Vec<_>>().join(",")
    }
}

impl AnnotationSelector {
    /// The same rules as a label selector, over the annotations.
    pub fn matches(&self, annotations: &BTreeMap<String, String>) -> bool {
        selects(&self.match_annotations, &self.match_expressions, annotations)
    }

    pub fn check(&self) -> Result<(), String> {
        self.match_expressions.iter().try_for_each(Requirement::check)
    }
}

/// Which parents a controller takes: a CompositeController's `parentResource.labelSelector`, a
/// DecoratorController resource's label and annotation selectors. Every parent, when neither is given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParentSelector {
    pub labels: Option<LabelSelector>,
    pub annotations: Option<AnnotationSelector>,
}

impl ParentSelector {
    pub fn matches(&self, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
        let empty = BTreeMap::new();
        self.labels.as_ref().is_none_or(|s| s.matches(meta.labels.as_ref().unwrap_or(&empty)))
            && self.annotations.as_ref().is_none_or(|s| s.matches(meta.annotations.as_ref().unwrap_or(&empty)))
    }
}

impl ParentSelector {
    /// Whether no object can be taken by both: their label selectors, put together, ask of one key what
    /// no value can give (`auth=valid` and `auth=invalid`; `tier in (a)` and `tier notin (a)`; `x` and
    /// `!x`). Two CompositeControllers of one parent type may then run side by side, as metacontroller
    /// lets them, without ever writing the same parent. Annotation selectors are not looked at: they only
    /// narrow what the labels already keep apart.
    pub fn disjoint(&self, other: &ParentSelector) -> bool {
        let (Some(a), Some(b)) = (&self.labels, &other.labels) else { return false };
        let mut keys: BTreeMap<&str, KeyRule> = BTreeMap::new();
        for selector in [a, b] {
            for (key, value) in &selector.match_labels {
                keys.entry(key).or_default().add("In", std::slice::from_ref(value));
            }
            for req in &selector.match_expressions {
                keys.entry(&req.key).or_default().add(&req.operator, &req.values);
            }
        }
        keys.values().any(KeyRule::impossible)
    }
}

/// What the selectors ask of one label key, together.
#[derive(Default)]
struct KeyRule {
    present: bool,
    absent: bool,
    /// `None`: any value.
    allowed: Option<std::collections::BTreeSet<String>>,
    forbidden: std::collections::BTreeSet<String>,
}

impl KeyRule {
    fn add(&mut self, operator: &str, values: &[String]) {
        match operator {
            "In" => {
                self.present = true;
                let values: std::collections::BTreeSet<String> = values.iter().cloned().collect();
                self.allowed = Some(match self.allowed.take() {
                    Some(allowed) => allowed.intersection(&values).cloned().collect(),
                    None => values,
                });
            }
            "NotIn" => self.forbidden.extend(values.iter().cloned()),
            "Exists" => self.present = true,
            "DoesNotExist" => self.absent = true,
            _ => {}
        }
    }

    fn impossible(&self) -> bool {
        (self.present && self.absent)
            || self.allowed.as_ref().is_some_and(|allowed| allowed.iter().all(|v| self.forbidden.contains(v)))
    }
}

fn selects(pairs: &BTreeMap<String, String>, requirements: &[Requirement], map: &BTreeMap<String, String>) -> bool {
    pairs.iter().all(|(key, value)| map.get(key) == Some(value)) && requirements.iter().all(|req| req.matches(map))
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.contains(v)),
            "NotIn" => value.is_none_or(|v| !self.values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    }

    fn check(&self) -> Result<(), String> {
        match (self.operator.as_str(), self.values.is_empty()) {
            ("In" | "NotIn", true) => Err(format!("{:?} {}: values must be non-empty", self.key, self.operator)),
            ("Exists" | "DoesNotExist", false) => {
                Err(format!("{:?} {}: values must be empty", self.key, self.operator))
            }
            ("In" | "NotIn" | "Exists" | "DoesNotExist", _) => Ok(()),
            (other, _) => Err(format!("{:?} is not a valid label selector operator", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_that_no_object_can_satisfy_together_are_disjoint() {
        let parse = |v: serde_json::Value| ParentSelector {
            labels: Some(serde_json::from_value(v).unwrap()),
            annotations: None,
        };
        let valid = parse(serde_json::json!({"matchLabels": {"auth": "valid"}}));
        let invalid = parse(serde_json::json!({"matchLabels": {"auth": "invalid"}}));
        assert!(valid.disjoint(&invalid) && invalid.disjoint(&valid));
        assert!(!valid.disjoint(&valid));
        let not_valid =
            parse(serde_json::json!({"matchExpressions": [{"key": "auth", "operator": "NotIn", "values": ["valid"]}]}));
        assert!(valid.disjoint(&not_valid));
        let none = parse(serde_json::json!({"matchExpressions": [{"key": "auth", "operator": "DoesNotExist"}]}));
        assert!(valid.disjoint(&none));
        let some = parse(
            serde_json::json!({"matchExpressions": [{"key": "auth", "operator": "In", "values": ["valid", "x"]}]}),
        );
        assert!(!valid.disjoint(&some), "auth=valid satisfies both");
        let other_key = parse(serde_json::json!({"matchLabels": {"team": "a"}}));
        assert!(!valid.disjoint(&other_key), "auth=valid,team=a satisfies both");
        assert!(!valid.disjoint(&ParentSelector::default()), "no selector takes every parent");
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_matches_them() {
        let everything = LabelSelector::default();
        assert!(everything.matches(&labels(&[])));
        let selector = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                requirement("tier", "In", &["front", "back"]),
                requirement("canary", "DoesNotExist", &[]),
                requirement("zone", "NotIn", &["b"]),
            ],
        };
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "front")])));
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "back"), ("zone", "a")])));
        assert!(!selector.matches(&labels(&[("app", "web")])), "tier is required to be in the list");
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "front"), ("canary", "")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "front"), ("zone", "b")])));
        assert!(!selector.matches(&labels(&[("app", "db"), ("tier", "front")])));
        let exists =
            AnnotationSelector { match_expressions: vec![requirement("x", "Exists", &[])], ..Default::default() };
        assert!(exists.matches(&labels(&[("x", "")])) && !exists.matches(&labels(&[])));
    }

    #[test]
    fn selectors_are_written_as_list_requests_take_them() {
        let selector = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                requirement("tier", "In", &["front", "back"]),
                requirement("zone", "NotIn", &["b"]),
                requirement("canary", "DoesNotExist", &[]),
                requirement("team", "Exists", &[]),
            ],
        };
        assert_eq!(selector.to_query(), "app=web,tier in (front,back),zone notin (b),!canary,team");
        assert_eq!(LabelSelector::default().to_query(), "");
    }

    #[test]
    fn a_parent_selector_takes_both_labels_and_annotations() {
        let meta =
            |on: &[(&str, &str)], noted: &[(&str, &str)]| k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                labels: Some(labels(on)),
                annotations: Some(labels(noted)),
                ..Default::default()
            };
        assert!(ParentSelector::default().matches(&meta(&[], &[])));
        let both = ParentSelector {
            labels: Some(LabelSelector { match_labels: labels(&[("a", "1")]), ..Default::default() }),
            annotations: Some(AnnotationSelector { match_annotations: labels(&[("b", "2")]), ..Default::default() }),
        };
        assert!(both.matches(&meta(&[("a", "1")], &[("b", "2")])));
        assert!(!both.matches(&meta(&[("a", "1")], &[])));
        assert!(!both.matches(&meta(&[], &[("b", "2")])));
    }

    #[test]
    fn bad_requirements_are_named() {
        let check = |r: Requirement| LabelSelector { match_expressions: vec![r], ..Default::default() }.check();
        assert!(check(requirement("a", "In", &[])).unwrap_err().contains("values must be non-empty"));
        assert!(check(requirement("a", "Exists", &["x"])).unwrap_err().contains("values must be empty"));
        assert!(check(requirement("a", "Equals", &["x"])).unwrap_err().contains("not a valid label selector operator"));
        assert!(check(requirement("a", "NotIn", &["x"])).is_ok());
    }
}
