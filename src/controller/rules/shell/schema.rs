//! The first check of a hook's `--config` answer: its shape against `config.schema.yaml`, with every
//! problem reported at once in the words shell-operator's OpenAPI validator uses (`schedule must be of
//! type array`, `.qwdqwd is a forbidden property`), so that a user who knows those messages finds the same
//! ones. Only the parts of JSON Schema that file uses are read.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

static SCHEMAS: LazyLock<Value> = LazyLock::new(|| {
    serde_yaml::from_str(include_str!("config.schema.yaml")).expect("the embedded config schema is valid YAML")
});

/// The problems of `config` as a `version` ("v0" or "v1") config, in the order they are found; empty
/// when it fits.
pub fn problems(config: &Value, version: &str) -> Vec<String> {
    let mut found = Vec::new();
    check(config, &SCHEMAS[version], "", &mut found);
    found
}

fn resolve(schema: &Value) -> &Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(name) => &SCHEMAS["definitions"][name],
        None => schema,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

fn type_fits(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        // A YAML or JSON number without a fraction, as Go's float64 holding an integer.
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        "number" => value.is_number(),
        _ => true,
    }
}

/// A value's type as the validator names it (JSON's numbers are all `number`).
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(value: &Value, schema: &Value, path: &str, found: &mut Vec<String>) {
    let schema = resolve(schema);
    if let Some(ty) = schema.get("type").and_then(Value::as_str)
        && !type_fits(value, ty)
    {
        found.push(format!("{path} must be of type {ty}: {:?}", json_type(value)));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let words: Vec<String> =
            allowed.iter().map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())).collect();
        found.push(format!("{path} should be one of [{}]", words.join(" ")));
    }
    match value {
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                found.push(format!("{path} should have at least {min} items"));
            }
            // The validator names an item by its list's path, without its index.
            if let Some(item) = schema.get("items") {
                for element in items {
                    check(element, item, path, found);
                }
            }
        }
        Value::Object(fields) => check_object(fields, schema, path, found),
        _ => {}
    }
}

fn check_object(fields: &serde_json::Map<String, Value>, schema: &Value, path: &str, found: &mut Vec<String>) {
    let count = fields.len() as u64;
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && count < min
    {
        found.push(format!("{path} should have at least {min} properties"));
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && count > max
    {
        found.push(format!("{path} should have at most {max} properties"));
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        if let Some(name) = required.as_str()
            && !fields.contains_key(name)
        {
            found.push(format!("{} is required", join(path, name)));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let patterns: Vec<(Regex, &Value)> = schema
        .get("patternProperties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(pattern, sub)| Regex::new(pattern).ok().map(|re| (re, sub)))
        .collect();
    let additional = schema.get("additionalProperties");
    for (key, field) in fields {
        let at = join(path, key);
        if let Some(sub) = properties.and_then(|p| p.get(key)) {
            check(field, sub, &at, found);
            continue;
        }
        let matching: Vec<&Value> = patterns.iter().filter(|(re, _)| re.is_match(key)).map(|(_, s)| *s).collect();
        if !matching.is_empty() {
            for sub in matching {
                check(field, sub, &at, found);
            }
            continue;
        }
        match additional {
            Some(Value::Bool(false)) => found.push(format!("{path}.{key} is a forbidden property")),
            Some(sub @ Value::Object(_)) => check(field, sub, &at, found),
            _ => {}
        }
    }
}

/// Problems joined as shell-operator joins them (hashicorp's multierror).
pub fn joined(problems: &[String]) -> String {
    let head = match problems.len() {
        1 => "1 error occurred:".to_owned(),
        n => format!("{n} errors occurred:"),
    };
    let mut text = head;
    text.push('\n');
    for problem in problems {
        text.push_str(&format!("\t* {problem}\n"));
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_good_v1_config_fits() {
        let config = json!({
            "configVersion": "v1", "onStartup": 256,
            "schedule": [{"name": "qwe", "crontab": "*/5 * * * * *", "allowFailure": true,
                          "includeSnapshotsFrom": ["pods"], "queue": "offload"}],
            "kubernetes": [{"name": "pods", "executeHookOnEvent": ["Added", "Deleted"], "kind": "Pod",
                            "executeHookOnSynchronization": false,
                            "labelSelector": {"matchLabels": {"app": "app"}},
                            "fieldSelector": {"matchExpressions": [{"field": "metadata.name", "operator": "==", "value": "x"}]},
                            "namespace": {"nameSelector": {"matchNames": ["default"]}},
                            "jqFilter": ".metadata.labels", "resynchronizationPeriod": "10s"}]
        });
        assert_eq!(problems(&config, "v1"), Vec::<String>::new());
    }

    #[test]
    fn every_problem_is_reported_in_the_validators_words() {
        let config = json!({"configVrsion": "v1", "schedule": {"name": "qwe"}, "qwdqwd": "QWD"});
        let found = problems(&config, "v1");
        assert!(found.contains(&".configVrsion is a forbidden property".to_owned()), "{found:?}");
        assert!(found.contains(&".qwdqwd is a forbidden property".to_owned()), "{found:?}");
        assert!(found.contains(&"schedule must be of type array: \"object\"".to_owned()), "{found:?}");
        assert!(found.contains(&"configVersion is required".to_owned()), "{found:?}");

        let config = json!({"configVersion": "v1", "kubernetes": [
            {"kind": "Pod", "executeHookOnEvent": ["Added", "Created"], "allowFailure": "yes", "mode": "v0"},
            {"name": "x"}]});
        let found = problems(&config, "v1");
        assert_eq!(
            found,
            vec![
                "kubernetes.allowFailure must be of type boolean: \"string\"",
                "kubernetes.executeHookOnEvent should be one of [Added Modified Deleted]",
                "kubernetes.mode is a forbidden property",
                "kubernetes.kind is required",
            ]
        );
        assert_eq!(
            problems(&json!({"configVersion": "v1", "onStartup": 1.5}), "v1"),
            ["onStartup must be of type integer: \"number\""]
        );
        assert_eq!(
            problems(&json!({"configVersion": "v1", "schedule": []}), "v1"),
            ["schedule should have at least 1 items"]
        );
        assert_eq!(joined(&["a".into()]), "1 error occurred:\n\t* a\n\n");
        assert_eq!(joined(&["a".into(), "b".into()]), "2 errors occurred:\n\t* a\n\t* b\n\n");
    }
}
