//! kro's compatibility check of an instance CRD about to be updated (`pkg/graph/crd/compat`): what the
//! new schema changes against the stored one, and which changes break stored instances (a property
//! removed or retyped, a field newly required, an enum value removed, a pattern added or changed, a
//! bound tightened). An RGD whose CRD would break is refused unless it carries
//! `kro.run/allow-breaking-changes: "true"`; a CRD with no change at all is not written.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

pub const ALLOW_BREAKING_ANNOTATION: &str = "kro.run/allow-breaking-changes";
/// How many breaking changes a message lists before "and N more changes".
const LISTED: usize = 3;

/// One change, worded as kro words it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub path: String,
    pub description: String,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub breaking: Vec<Change>,
    pub other: Vec<Change>,
}

impl Report {
    pub fn has_changes(&self) -> bool {
        !self.breaking.is_empty() || !self.other.is_empty()
    }

    fn breaking(&mut self, path: &str, description: String) {
        self.breaking.push(Change { path: path.to_owned(), description });
    }

    fn other(&mut self, path: &str, description: String) {
        self.other.push(Change { path: path.to_owned(), description });
    }

    /// The breaking changes in one line: the first three, then how many more.
    pub fn summary(&self) -> String {
        if self.breaking.is_empty() {
            return "no breaking changes".into();
        }
        let mut parts: Vec<String> = self.breaking.iter().take(LISTED).map(|c| c.description.clone()).collect();
        if self.breaking.len() > LISTED {
            parts.push(format!("and {} more changes", self.breaking.len() - LISTED));
        }
        parts.join("; ")
    }
}

/// Compares the versions of a stored CRD's spec with a desired one's (kro makes exactly one).
pub fn compare_versions(old: &Value, new: &Value) -> Result<Report, String> {
    let (Some([old]), Some([new])) = (old.as_array().map(Vec::as_slice), new.as_array().map(Vec::as_slice)) else {
        let count = |v: &Value| v.as_array().map_or(0, Vec::len);
        return Err(format!(
            "expected exactly one version in each CRD, got {} old and {} new versions",
            count(old),
            count(new)
        ));
    };
    let (old_name, new_name) = (text(&old["name"]), text(&new["name"]));
    let mut report = Report::default();
    if old_name != new_name {
        report.breaking("version", format!("Type changed from {old_name} to {new_name}"));
        return Ok(report);
    }
    let schema = |v: &Value| v["schema"]["openAPIV3Schema"].clone();
    if schema(old).is_null() {
        return Err(format!("old version {old_name} has no schema"));
    }
    if schema(new).is_null() {
        return Err(format!("new version {new_name} has no schema"));
    }
    compare("", &schema(old), &schema(new), &mut report);
    if old["served"] == true && new["served"] != true {
        report.breaking("version.served", "Type changed from true to false".into());
    }
    if !old["subresources"]["status"].is_null() && new["subresources"]["status"].is_null() {
        report.breaking("version.subresources.status", "Property status was removed".into());
    }
    Ok(report)
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn last(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// A value as kro prints it: its JSON, nothing for none.
fn raw(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn compare(path: &str, old: &Value, new: &Value, report: &mut Report) {
    if old["description"] != new["description"] {
        let (o, n) = (text(&old["description"]), text(&new["description"]));
        report.other(&format!("{path}.description"), format!("Description field was changed from {o} to {n}"));
    }
    if old.get("default") != new.get("default") {
        let (o, n) = (raw(&old["default"]), raw(&new["default"]));
        report.other(&format!("{path}.default"), format!("Default value was changed from {o} to {n}"));
    }
    let (old_type, new_type) = (text(&old["type"]), text(&new["type"]));
    if old_type != new_type {
        report.breaking(&format!("{path}.type"), format!("Type changed from {old_type} to {new_type}"));
        return;
    }
    let (old_pattern, new_pattern) = (text(&old["pattern"]), text(&new["pattern"]));
    if old_pattern != new_pattern {
        let at = format!("{path}.pattern");
        match (old_pattern.is_empty(), new_pattern.is_empty()) {
            (true, _) => report.breaking(&at, format!("Validation pattern {new_pattern} was added")),
            (_, true) => report.other(&at, format!("Validation pattern {old_pattern} was removed")),
            _ => report.breaking(&at, format!("Validation pattern changed from {old_pattern} to {new_pattern}")),
        }
    }
    for (name, lower, label) in [
        ("minimum", true, "Minimum"),
        ("maximum", false, "Maximum"),
        ("minLength", true, "MinLength"),
        ("maxLength", false, "MaxLength"),
        ("minItems", true, "MinItems"),
        ("maxItems", false, "MaxItems"),
    ] {
        bound(path, name, label, lower, &old[name], &new[name], report);
    }
    properties(path, old, new, report);
    required(path, old, new, report);
    enums(path, old, new, report);
    if old_type == "array" {
        match (old.get("items").filter(|i| i.is_object()), new.get("items").filter(|i| i.is_object())) {
            (Some(o), Some(n)) => compare(&format!("{path}.items"), o, n, report),
            (Some(_), None) => report.breaking(&format!("{path}.items"), "Property items was removed".into()),
            (None, Some(_)) => report.other(&format!("{path}.items"), "Optional property items was added".into()),
            (None, None) => {}
        }
    }
}

fn number(value: &Value) -> String {
    match value.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => f.to_string(),
        None => value.to_string(),
    }
}

fn bound(path: &str, name: &str, label: &str, lower: bool, old: &Value, new: &Value, report: &mut Report) {
    let at = format!("{path}.{name}");
    match (old.as_f64(), new.as_f64()) {
        (None, None) => {}
        (None, Some(_)) => report.breaking(&at, format!("{label} constraint {} was added", number(new))),
        (Some(_), None) => report.other(&at, format!("{label} constraint {} was removed", number(old))),
        (Some(o), Some(n)) if o == n => {}
        (Some(o), Some(n)) => {
            let (tighter, verb) = match (lower, n > o) {
                (true, true) => (true, "increased"),
                (true, false) => (false, "decreased"),
                (false, true) => (false, "increased"),
                (false, false) => (true, "decreased"),
            };
            let description = format!("{label} was {verb} from {} to {}", number(old), number(new));
            if tighter { report.breaking(&at, description) } else { report.other(&at, description) }
        }
    }
}

fn props(schema: &Value) -> Map<String, Value> {
    schema["properties"].as_object().cloned().unwrap_or_default()
}

fn names(schema: &Value, key: &str) -> BTreeSet<String> {
    schema[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

fn has_default(schema: &Value) -> bool {
    schema.get("default").is_some_and(|d| !d.is_null())
}

fn properties(path: &str, old: &Value, new: &Value, report: &mut Report) {
    let (old_props, new_props) = (props(old), props(new));
    let new_required = names(new, "required");
    for (name, old_prop) in &old_props {
        let at = format!("{path}.properties.{name}");
        match new_props.get(name) {
            Some(new_prop) => compare(&at, old_prop, new_prop, report),
            None => report.breaking(&at, format!("Property {} was removed", last(&at))),
        }
    }
    for (name, new_prop) in &new_props {
        if old_props.contains_key(name) {
            continue;
        }
        let at = format!("{path}.properties.{name}");
        if new_required.contains(name) && !has_default(new_prop) {
            report.breaking(&at, format!("Optional property {} was added", last(&at)));
        } else {
            report.other(&at, format!("Optional property {} was added", last(&at)));
        }
    }
}

fn required(path: &str, old: &Value, new: &Value, report: &mut Report) {
    let (old_required, new_required) = (names(old, "required"), names(new, "required"));
    let at = format!("{path}.required");
    let existing = props(old);
    for name in new_required.difference(&old_required).filter(|n| existing.contains_key(*n)) {
        report.breaking(&at, format!("Field {name} is newly required"));
    }
    for name in old_required.difference(&new_required) {
        report.other(&at, format!("Field {name} is no longer required"));
    }
    for name in new_required.intersection(&old_required).filter(|n| existing.contains_key(*n)) {
        if has_default(&existing[name]) && !has_default(&props(new)[name]) {
            report.breaking(&at, format!("Default value removed from required field {name}"));
        }
    }
}

fn enums(path: &str, old: &Value, new: &Value, report: &mut Report) {
    let values =
        |s: &Value| -> BTreeSet<String> { s["enum"].as_array().into_iter().flatten().map(|v| v.to_string()).collect() };
    let (old_values, new_values) = (values(old), values(new));
    if old_values.is_empty() || new_values.is_empty() {
        return;
    }
    let at = format!("{path}.enum");
    for value in old_values.difference(&new_values) {
        report.breaking(&at, format!("Enum value {value} was removed"));
    }
    for value in new_values.difference(&old_values) {
        report.other(&at, format!("Enum value {value} was added"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(spec: Value) -> Value {
        json!([{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}])
    }

    #[test]
    fn the_same_schema_is_no_change() {
        let spec = json!({"type": "object", "properties": {"port": {"type": "integer", "default": 80}}});
        let report = compare_versions(&version(spec.clone()), &version(spec)).unwrap();
        assert!(!report.has_changes());
        assert_eq!(report.summary(), "no breaking changes");
    }

    #[test]
    fn what_breaks_stored_instances_is_breaking() {
        let old = json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "default": "x"},
            "port": {"type": "integer", "minimum": 1, "maximum": 100},
            "size": {"type": "string", "enum": ["small", "large"]},
            "gone": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
        }});
        let new = json!({"type": "object", "required": ["name", "port"], "properties": {
            "name": {"type": "string"},
            "port": {"type": "string"},
            "size": {"type": "string", "enum": ["small", "medium"]},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^a"}, "maxItems": 5},
            "added": {"type": "string"},
        }});
        let report = compare_versions(&version(old), &version(new)).unwrap();
        let breaking: Vec<&str> = report.breaking.iter().map(|c| c.description.as_str()).collect();
        assert_eq!(
            breaking,
            [
                "Property gone was removed",
                "Type changed from integer to string",
                "Enum value \"large\" was removed",
                "MaxItems was decreased from 10 to 5",
                "Validation pattern ^a was added",
                "Field port is newly required",
                "Default value removed from required field name",
            ]
        );
        assert_eq!(
            report.summary(),
            "Property gone was removed; Type changed from integer to string; Enum value \"large\" was removed; \
             and 4 more changes"
        );
        assert!(report.other.iter().any(|c| c.description == "Optional property added was added"));
    }

    #[test]
    fn loosening_is_a_change_that_breaks_nothing() {
        let old =
            json!({"type": "object", "properties": {"port": {"type": "integer", "maximum": 10, "description": "a"}}});
        let new =
            json!({"type": "object", "properties": {"port": {"type": "integer", "maximum": 20, "description": "b"}}});
        let report = compare_versions(&version(old), &version(new)).unwrap();
        assert!(report.breaking.is_empty() && report.has_changes());
        let mut served = version(json!({"type": "object"}));
        served[0]["served"] = json!(false);
        let report = compare_versions(&version(json!({"type": "object"})), &served).unwrap();
        assert_eq!(report.summary(), "Type changed from true to false");
    }
}
