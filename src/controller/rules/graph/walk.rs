//! A template read against the OpenAPI schema of what it makes, as kro's parser reads it
//! (`parser.ParseResource`): every literal must fit the field it is written in (`expected integer
//! type for path spec.replicas, got string`), every field must be declared (`schema not found for
//! field x`), and each string with expressions is found with the type its field declares, which the
//! expression's own type is then checked against. A subtree that keeps unknown fields is read without
//! a schema, as kro does. Where the schema says less than kro's compiled-in definitions would (a
//! recursion cut short), the walk accepts rather than refuse what kro might take.

use serde_json::Value;

use super::expr::{self, Template};
use super::types::{self, Ty};

/// A string with expressions, where it is (kro's path) and the type its field declares.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub path: String,
    pub template: Template,
    pub expected: Ty,
}

/// Every string with expressions in `value`, checked against `schema` from `path` on (`""` for a whole
/// object); `name` is the type name of the root (`__type_deployment`).
pub fn walk(value: &Value, schema: &Value, path: &str, name: &str) -> Result<Vec<Found>, String> {
    let mut found = Vec::new();
    Walk { found: &mut found }.value(value, Some(schema), path, name)?;
    Ok(found)
}

/// kro's path for a field: `a.b`, or `a["b.c"]` when the key holds a dot or is empty.
pub fn join(path: &str, field: &str) -> String {
    if field.is_empty() || field.contains('.') {
        format!("{path}[\"{field}\"]")
    } else if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

struct Walk<'a> {
    found: &'a mut Vec<Found>,
}

fn preserves_unknown(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == true
}

/// The types a value may have where `schema` is (`getExpectedTypes`); `None` for any.
fn expected_types(schema: &Value) -> Option<Vec<String>> {
    if preserves_unknown(schema) {
        return None;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return Some(vec!["string".into(), "integer".into()]);
    }
    for composite in ["oneOf", "anyOf"] {
        let mut types: Vec<String> = Vec::new();
        for sub in schema[composite].as_array().into_iter().flatten() {
            if sub.get("required").is_some_and(|r| r.as_array().is_some_and(|r| !r.is_empty()))
                || sub.get("not").is_some()
            {
                push_once(&mut types, "object");
            }
            match &sub["type"] {
                Value::String(t) if !t.is_empty() => push_once(&mut types, t),
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).for_each(|t| push_once(&mut types, t)),
                _ => {}
            }
        }
        if !types.is_empty() {
            return Some(types);
        }
    }
    match &schema["type"] {
        Value::String(t) if !t.is_empty() => return Some(vec![t.clone()]),
        Value::Array(ts) if !ts.is_empty() => {
            return Some(ts.iter().filter_map(Value::as_str).map(str::to_owned).collect());
        }
        _ => {}
    }
    // Only additional properties, or a schema that says nothing (as a recursion cut short reads):
    // anything goes.
    None
}

fn push_once(types: &mut Vec<String>, t: &str) {
    if !types.iter().any(|have| have == t) {
        types.push(t.to_owned());
    }
}

/// The schema of a field's values, if the object declares one: its property, or its additional
/// properties (`true` for any).
fn field_schema<'s>(schema: &'s Value, field: &str) -> Option<Option<&'s Value>> {
    if let Some(property) = schema["properties"].get(field) {
        return Some(Some(property));
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(true)) => Some(None),
        Some(inner @ Value::Object(_)) => Some(Some(inner)),
        _ => None,
    }
}

impl Walk<'_> {
    /// `schema` is `None` where anything goes: expressions are collected, untyped.
    fn value(&mut self, value: &Value, schema: Option<&Value>, path: &str, name: &str) -> Result<(), String> {
        let Some(schema) = schema.map(types::unwrapped) else { return self.schemaless(value, path) };
        if preserves_unknown(schema) && (value.is_object() || value.is_array()) {
            return self.schemaless(value, path);
        }
        let expected = expected_types(schema);
        let allows = |t: &str| expected.as_ref().is_none_or(|types| types.iter().any(|have| have == t));
        let listed = || expected.clone().unwrap_or_default().join(" or ");
        match value {
            Value::Object(fields) => {
                let open_map = matches!(schema.get("additionalProperties"), Some(Value::Bool(true) | Value::Object(_)));
                if !allows("object") && !open_map {
                    return Err(format!("expected {} type for path {path}, got object", listed()));
                }
                // A schema with neither properties nor additional properties declares no fields:
                // kro's compiled-in schemas always say which, so this one says too little to refuse.
                let declares = schema.get("properties").is_some() || schema.get("additionalProperties").is_some();
                for (field, item) in fields {
                    let inner = match field_schema(schema, field) {
                        Some(inner) => inner,
                        None if !declares => None,
                        None => {
                            return Err(format!(
                                "error getting field schema for path {path}.{field}: schema not found for field {field}"
                            ));
                        }
                    };
                    let item_name = match schema["properties"].get(field) {
                        Some(_) => format!("{name}.{field}"),
                        None => format!("{name}.@elem"),
                    };
                    self.value(item, inner, &join(path, field), &item_name)?;
                }
                Ok(())
            }
            Value::Array(items) => {
                if !allows("array") {
                    return Err(format!("expected {} type for path {path}, got array", listed()));
                }
                let inner = schema.get("items").filter(|i| i.is_object());
                for (i, item) in items.iter().enumerate() {
                    self.value(item, inner, &format!("{path}[{i}]"), &format!("{name}.@idx"))?;
                }
                Ok(())
            }
            Value::String(text) => {
                let template = expr::template(text)?;
                if let Some(Template::Whole(_)) = &template {
                    self.found.push(Found {
                        path: path.to_owned(),
                        template: template.expect("whole"),
                        expected: types::of_schema(schema, name),
                    });
                    return Ok(());
                }
                if !allows("string") {
                    return Err(format!("expected {} type for path {path}, got string", listed()));
                }
                if let Some(template) = template {
                    self.found.push(Found {
                        path: path.to_owned(),
                        template,
                        expected: types::of_schema(schema, name),
                    });
                }
                Ok(())
            }
            Value::Null => Ok(()),
            Value::Bool(_) | Value::Number(_) => {
                let Some(types) = &expected else { return Ok(()) };
                let integer = value.is_i64() || value.is_u64();
                let fits = types.iter().any(|t| match t.as_str() {
                    "number" => value.is_number(),
                    "int" | "integer" => integer,
                    "boolean" | "bool" => value.is_boolean(),
                    _ => false,
                });
                if fits {
                    return Ok(());
                }
                let actual = match value {
                    Value::Bool(_) => "boolean",
                    _ if integer => "integer",
                    _ => "float64",
                };
                Err(format!("expected {} type for path {path}, got {actual}", listed()))
            }
        }
    }

    /// kro's schemaless parser: every string with expressions, typed `dyn`.
    fn schemaless(&mut self, value: &Value, path: &str) -> Result<(), String> {
        match value {
            Value::Object(fields) => {
                fields.iter().try_for_each(|(field, item)| self.schemaless(item, &join(path, field)))
            }
            Value::Array(items) => {
                items.iter().enumerate().try_for_each(|(i, item)| self.schemaless(item, &format!("{path}[{i}]")))
            }
            Value::String(text) => {
                if let Some(template) = expr::template(text)? {
                    self.found.push(Found { path: path.to_owned(), template, expected: Ty::Dyn });
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"default": {}, "allOf": [{"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}]},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "paused": {"type": "boolean"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "port": {"type": "integer"},
                    "targetPort": {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]}}}},
                "cpu": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    #[test]
    fn literals_must_fit_their_fields() {
        let schema = deployment();
        let ok = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": "b"}},
            "spec": {"replicas": 2, "paused": false, "ports": [{"port": 80, "targetPort": "http"}, {"targetPort": 8080}],
                "cpu": 0.5, "extra": {"anything": [1, {"x": true}]}}});
        assert_eq!(walk(&ok, &schema, "", "__type_d").unwrap(), []);
        let refused = |template: Value| walk(&template, &schema, "", "__type_d").unwrap_err();
        assert_eq!(
            refused(json!({"spec": {"replicas": "two"}})),
            "expected integer type for path spec.replicas, got string"
        );
        assert_eq!(
            refused(json!({"spec": {"replicas": 1.5}})),
            "expected integer type for path spec.replicas, got float64"
        );
        assert_eq!(refused(json!({"spec": {"paused": 1}})), "expected boolean type for path spec.paused, got integer");
        assert_eq!(
            refused(json!({"spec": {"replicas": true}})),
            "expected integer type for path spec.replicas, got boolean"
        );
        assert_eq!(
            refused(json!({"spec": {"ports": [{"targetPort": true}]}})),
            "expected integer or string type for path spec.ports[0].targetPort, got boolean"
        );
        assert_eq!(
            refused(json!({"spec": {"ports": {"port": 1}}})),
            "expected array type for path spec.ports, got object"
        );
        assert_eq!(
            refused(json!({"spec": {"bogus": 1}})),
            "error getting field schema for path spec.bogus: schema not found for field bogus"
        );
        assert_eq!(
            refused(json!({"metadata": {"labels": {"a": 1}}})),
            "expected string type for path metadata.labels.a, got integer"
        );
    }

    #[test]
    fn expressions_are_found_with_the_types_their_fields_declare() {
        let template = json!({"metadata": {"name": "${schema.spec.name}-x", "labels": {"app.kubernetes.io/name": "${x}"}},
            "spec": {"replicas": "${schema.spec.replicas}", "ports": [{"targetPort": "${p}"}],
                "extra": {"deep": "${e}"}}});
        let mut found = walk(&template, &deployment(), "", "__type_d").unwrap();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        let seen: Vec<(&str, &Ty)> = found.iter().map(|f| (f.path.as_str(), &f.expected)).collect();
        assert_eq!(
            seen,
            [
                ("metadata.labels[\"app.kubernetes.io/name\"]", &Ty::String),
                ("metadata.name", &Ty::String),
                ("spec.extra.deep", &Ty::Dyn),
                ("spec.ports[0].targetPort", &Ty::Dyn),
                ("spec.replicas", &Ty::Int),
            ]
        );
    }
}
