//! An external reference's `metadata.selector`, checked as kro checks it when it accepts an RGD
//! (`validateSelector`): a standalone expression, or a LabelSelector object whose literals fit
//! LabelSelector's schema and, when it holds no expression, pass Kubernetes' own selector validation
//! (`ValidateLabelSelector`), in the API machinery's words.

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::expr::{self, Template};
use super::walk;

const SHAPE: &str = "selector must be a Kubernetes LabelSelector object or a CEL expression that resolves to one";

/// metav1.LabelSelector's schema, as kro's compiled-in definitions give it.
static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({"type": "object", "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
        "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"],
            "properties": {
                "key": {"type": "string", "default": ""},
                "operator": {"type": "string", "default": ""},
                "values": {"type": "array", "items": {"type": "string", "default": ""}}}}}}})
});

/// Checks a selector as kro does; the error is kro's.
pub fn check(selector: &Value) -> Result<(), String> {
    match selector {
        Value::String(text) => match expr::template(text) {
            Ok(Some(Template::Whole(_))) => Ok(()),
            Ok(_) => Err(SHAPE.into()),
            Err(e) => Err(format!("invalid selector expression: {e}")),
        },
        Value::Object(_) => {
            let found = walk::walk(selector, &SCHEMA, "metadata.selector", "__type_selector")?;
            match found.is_empty() {
                true => literal(selector),
                // What an expression gives is only known per instance; kro leaves it to the list.
                false => Ok(()),
            }
        }
        _ => Err(SHAPE.into()),
    }
}

/// A selector without expressions, through the API machinery's `ValidateLabelSelector`.
fn literal(selector: &Value) -> Result<(), String> {
    let mut errors = Vec::new();
    let at = "metadata.selector";
    for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
        for why in label_key(key) {
            errors.push(format!("{at}.matchLabels: Invalid value: {key:?}: {why}"));
        }
        for why in label_value(value.as_str().unwrap_or_default()) {
            errors.push(format!("{at}.matchLabels: Invalid value: {value}: {why}"));
        }
    }
    for (i, requirement) in selector["matchExpressions"].as_array().into_iter().flatten().enumerate() {
        let here = format!("{at}.matchExpressions[{i}]");
        let operator = requirement["operator"].as_str().unwrap_or_default();
        let values: Vec<&str> =
            requirement["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        match operator {
            "In" | "NotIn" if values.is_empty() => errors
                .push(format!("{here}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'")),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(format!(
                "{here}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(format!("{here}.operator: Invalid value: {other:?}: not a valid selector operator")),
        }
        let key = requirement["key"].as_str().unwrap_or_default();
        for why in label_key(key) {
            errors.push(format!("{here}.key: Invalid value: {key:?}: {why}"));
        }
        for (j, value) in values.iter().enumerate() {
            for why in label_value(value) {
                errors.push(format!("{here}.values[{j}]: Invalid value: {value:?}: {why}"));
            }
        }
    }
    match errors.is_empty() {
        true => Ok(()),
        false => Err(format!("invalid label selector: [{}]", errors.join(" "))),
    }
}

const KEY_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
                           alphanumeric character";
const KEY_FORMAT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
                                 '-' or '.', and must start and end with an alphanumeric character";
const SUBDOMAIN_FORMAT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let listed: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!("{message} (e.g. {}regex used for validation is '{format}')", listed.join("or "))
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
fn name_like(text: &str) -> bool {
    let bytes = text.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        let bytes = label.as_bytes();
        let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        bytes.first().is_some_and(edge) && bytes.last().is_some_and(edge) && bytes.iter().all(|b| edge(b) || *b == b'-')
    })
}

/// What is wrong with a label key (`IsQualifiedName`).
fn label_key(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    errors.push("prefix part must be no more than 253 bytes".to_owned());
                }
                if !subdomain(prefix) {
                    errors.push(format!(
                        "prefix part {}",
                        regex_error(SUBDOMAIN_MESSAGE, SUBDOMAIN_FORMAT, &["example.com"])
                    ));
                }
            }
            name
        }
        _ => {
            errors.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(KEY_MESSAGE, KEY_FORMAT, &["MyName", "my.name", "123-abc"])
            ));
            return errors;
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 bytes".to_owned());
    }
    if !name_like(name) {
        errors.push(format!("name part {}", regex_error(KEY_MESSAGE, KEY_FORMAT, &["MyName", "my.name", "123-abc"])));
    }
    errors
}

/// What is wrong with a label value (`IsValidLabelValue`).
fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 bytes".to_owned());
    }
    if !value.is_empty() && !name_like(value) {
        errors.push(regex_error(
            &format!("a valid label must be an empty string or {KEY_MESSAGE}"),
            &format!("({KEY_FORMAT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_checked_as_kro_checks_them() {
        assert_eq!(check(&json!("${schema.spec.selector}")), Ok(()));
        assert_eq!(check(&json!("app=x")).unwrap_err(), SHAPE);
        assert_eq!(check(&json!(3)).unwrap_err(), SHAPE);
        assert_eq!(check(&json!({"matchLabels": {"app": "${schema.spec.app}"}})), Ok(()));
        assert_eq!(
            check(&json!({"matchLabels": "${schema.spec.selector"})).unwrap_err(),
            "expected object type for path metadata.selector.matchLabels, got string"
        );
        assert_eq!(
            check(&json!({"bogusField": {}})).unwrap_err(),
            "error getting field schema for path metadata.selector.bogusField: schema not found for field bogusField"
        );
        assert_eq!(
            check(&json!({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["a"]}]})).unwrap_err(),
            "invalid label selector: [metadata.selector.matchExpressions[0].operator: Invalid value: \"Equals\": not a \
             valid selector operator]"
        );
        assert!(check(&json!({"matchExpressions": [{"key": "app", "operator": "In"}]})).unwrap_err().contains(
            "metadata.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        ));
        assert!(check(&json!({"matchLabels": {"-bad": "x"}})).unwrap_err().starts_with(
            "invalid label selector: [metadata.selector.matchLabels: Invalid value: \"-bad\": name part must consist of"
        ));
        assert_eq!(check(&json!({"matchLabels": {"example.com/app": "x_1"}})), Ok(()));
    }
}
