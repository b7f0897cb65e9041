//! SimpleSchema, kro's short form of an OpenAPI schema (`replicas: integer | default=1 minimum=0`), read
//! into the OpenAPI v3 schema kro writes into the generated CRD: atomic types, `object`, `[]T`,
//! `map[string]V`, nested objects, custom types from `spec.schema.types`, and every marker kro accepts,
//! with kro's messages for what it refuses.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::dag::Dag;

/// How deep `[]` and `map[string]` may nest.
const MAX_NESTING: usize = 16;

/// A field's type, as written.
#[derive(Debug, Clone, PartialEq)]
enum Type {
    /// `string`, `integer`, `boolean`, or `float` (OpenAPI's `number`).
    Atomic(&'static str),
    /// `object`: any fields.
    Object,
    List(Box<Type>),
    Map(Box<Type>),
    /// Fields given as a nested map (only inside a custom type).
    Struct(BTreeMap<String, Type>),
    /// Any other name: one of `spec.schema.types`.
    Custom(String),
}

impl Type {
    fn custom_types(&self, into: &mut Vec<String>) {
        match self {
            Type::List(item) | Type::Map(item) => item.custom_types(into),
            Type::Struct(fields) => fields.values().for_each(|t| t.custom_types(into)),
            Type::Custom(name) => into.push(name.clone()),
            Type::Atomic(_) | Type::Object => {}
        }
    }
}

fn parse_type(text: &str, depth: usize) -> Result<Type, String> {
    if depth > MAX_NESTING {
        return Err(format!("type nesting too deep (max {MAX_NESTING}): {text:?}"));
    }
    let text = text.trim();
    match text {
        "string" => return Ok(Type::Atomic("string")),
        "integer" => return Ok(Type::Atomic("integer")),
        "boolean" => return Ok(Type::Atomic("boolean")),
        "float" => return Ok(Type::Atomic("number")),
        "object" => return Ok(Type::Object),
        _ => {}
    }
    if let Some(item) = text.strip_prefix("[]") {
        if item.is_empty() {
            return Err("empty slice element type".into());
        }
        return Ok(Type::List(Box::new(parse_type(item, depth + 1)?)));
    }
    if text.starts_with("map[") {
        let value = text.strip_prefix("map[string]").ok_or("map key must be string")?.trim();
        if value.is_empty() {
            return Err("map value type is required".into());
        }
        return Ok(Type::Map(Box::new(parse_type(value, depth + 1)?)));
    }
    Ok(Type::Custom(text.to_owned()))
}

/// The type of a field's text: everything before the first `|`.
fn field_type(text: &str) -> Result<Type, String> {
    let name = text.split('|').next().unwrap_or_default().trim();
    if name.is_empty() {
        return Err("empty type".into());
    }
    parse_type(name, 0)
}

/// How Go names the type of a decoded YAML value, as kro's `unexpected type: %T` says it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn parse_spec(value: &Value) -> Result<Type, String> {
    match value {
        Value::String(text) => field_type(text),
        Value::Object(fields) => {
            let mut parsed = BTreeMap::new();
            for (name, field) in fields {
                parsed.insert(name.clone(), parse_spec(field).map_err(|e| format!("field {name}: {e}"))?);
            }
            Ok(Type::Struct(parsed))
        }
        other => Err(format!("unexpected type: {}", go_type(other))),
    }
}

/// A custom type's schema, and whether a field of that type is required (a string alias carrying
/// `required=true`).
struct Custom {
    schema: Value,
    required: bool,
}

/// Turns SimpleSchema into OpenAPI, with the custom types it may name.
pub struct Transformer {
    types: HashMap<String, Custom>,
}

impl Transformer {
    /// Reads `types` (the RGD's `spec.schema.types`), each in an order where the types it uses come first.
    pub fn new(types: &Map<String, Value>) -> Result<Self, String> {
        let mut transformer = Transformer { types: HashMap::new() };
        let mut parsed = BTreeMap::new();
        for (name, spec) in types {
            parsed.insert(name.as_str(), parse_spec(spec).map_err(|e| format!("parsing type {name}: {e}"))?);
        }
        let mut dag = Dag::default();
        for name in parsed.keys() {
            dag.add(name, 0)?;
        }
        for (name, parsed) in &parsed {
            let mut uses = Vec::new();
            parsed.custom_types(&mut uses);
            dag.depend(name, &uses).map_err(|e| match e.starts_with("graph contains a cycle") {
                true => format!("cyclic dependency in type {name}: {e}"),
                false => e,
            })?;
        }
        for name in dag.order()? {
            let spec = &types[&name];
            let custom = match spec {
                Value::String(text) => {
                    let mut parent = object_schema();
                    let schema = transformer.field_from_text(&name, text, &mut parent)?;
                    Custom { schema, required: !required(&parent).is_empty() }
                }
                Value::Object(fields) => Custom { schema: transformer.object(fields)?, required: false },
                other => return Err(format!("building schema for {name}: unexpected type: {}", go_type(other))),
            };
            transformer.types.insert(name, custom);
        }
        Ok(transformer)
    }

    /// The OpenAPI schema of an object whose fields are `spec` (the RGD's `spec.schema.spec`).
    pub fn object(&self, spec: &Map<String, Value>) -> Result<Value, String> {
        let mut schema = object_schema();
        let mut defaulted_child = false;
        for (name, field) in spec {
            let field_schema = match field {
                Value::String(text) => self.field_from_text(name, text, &mut schema),
                Value::Object(fields) => self.object(fields),
                other => Err(format!("unexpected type: {}", go_type(other))),
            }
            .map_err(|e| format!("field {name}: {e}"))?;
            defaulted_child |= field_schema.get("default").is_some();
            schema["properties"][name] = field_schema;
        }
        // An object none of whose fields is required, with a field that has a default, defaults to {}
        // itself, so that the API server fills in the defaults of an object left out.
        if required(&schema).is_empty() && defaulted_child && schema.get("default").is_none() {
            schema["default"] = json!({});
        }
        if let Some(Value::Array(list)) = schema.get_mut("required") {
            list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
        Ok(schema)
    }

    fn field_from_text(&self, name: &str, text: &str, parent: &mut Value) -> Result<Value, String> {
        let typ = field_type(text)?;
        let markers = match text.split_once('|') {
            Some((_, markers)) => parse_markers(markers)?,
            None => Vec::new(),
        };
        let mut schema = self.schema_of(&typ)?;
        if let Type::Custom(custom) = &typ
            && self.types.get(custom).is_some_and(|c| c.required)
        {
            push_required(parent, name);
        }
        for (key, value) in &markers {
            apply_marker(&mut schema, key, value, name, parent)?;
        }
        if let Some(keys) = schema.get("x-kubernetes-list-map-keys")
            && keys.as_array().is_some_and(|k| !k.is_empty())
        {
            match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                None => return Err("listMapKey set while listType is unset, listType must be set to map".into()),
                Some("map") => {}
                Some(other) => {
                    return Err(format!(
                        "listMapKey set while listType is set to {other}, listType must be set to map"
                    ));
                }
            }
        }
        Ok(schema)
    }

    fn schema_of(&self, typ: &Type) -> Result<Value, String> {
        Ok(match typ {
            Type::Atomic(name) => json!({ "type": name }),
            Type::Object => json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }),
            Type::List(item) => json!({ "type": "array", "items": self.schema_of(item)? }),
            Type::Map(value) => json!({ "type": "object", "additionalProperties": self.schema_of(value)? }),
            Type::Struct(fields) => {
                let mut properties = Map::new();
                let mut defaulted_child = false;
                for (name, field) in fields {
                    let schema = self.schema_of(field)?;
                    defaulted_child |= schema.get("default").is_some();
                    properties.insert(name.clone(), schema);
                }
                let mut schema = json!({ "type": "object", "properties": properties });
                if defaulted_child {
                    schema["default"] = json!({});
                }
                schema
            }
            Type::Custom(name) => match self.types.get(name) {
                Some(custom) => custom.schema.clone(),
                None => return Err(format!("unknown type: {name}")),
            },
        })
    }
}

fn object_schema() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn push_required(parent: &mut Value, name: &str) {
    match parent.get_mut("required").and_then(Value::as_array_mut) {
        Some(list) => list.push(json!(name)),
        None => parent["required"] = json!([name]),
    }
}

const MARKERS: &[&str] = &[
    "required",
    "default",
    "description",
    "minimum",
    "maximum",
    "validation",
    "enum",
    "immutable",
    "pattern",
    "uniqueItems",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "listType",
    "listMapKey",
];

/// The markers after a field's `|`: `key=value` separated by spaces, a value double-quoted (with
/// backslash escapes) or bracketed (`{...}`, `[...]`) to hold spaces.
fn parse_markers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut markers = Vec::new();
    let mut key: Option<String> = None;
    let (mut quoted, mut escaped, mut depth) = (false, false, 0i32);
    let mut buffer = String::new();
    for c in text.chars() {
        match c {
            '=' if key.is_none() && !quoted && depth == 0 => {
                let name = buffer.trim();
                if name.is_empty() {
                    return Err("empty marker key".into());
                }
                if !MARKERS.contains(&name) {
                    return Err(format!("invalid marker key {name:?}: unknown marker: {name}"));
                }
                key = Some(name.to_owned());
                buffer.clear();
            }
            '"' if !escaped => {
                quoted = !quoted;
                buffer.push(c);
            }
            '\\' if quoted && !escaped => {
                escaped = true;
                buffer.push(c);
            }
            '{' | '[' if !quoted => {
                depth += 1;
                buffer.push(c);
            }
            '}' | ']' if !quoted => {
                depth -= 1;
                buffer.push(c);
                if depth < 0 {
                    return Err("unmatched closing bracket/brace".into());
                }
            }
            c if c.is_whitespace() && !quoted && depth == 0 => {
                if let Some(name) = key.take() {
                    markers.push((name, marker_value(&buffer)));
                    buffer.clear();
                }
            }
            c => {
                if escaped && quoted {
                    escaped = false;
                }
                buffer.push(c);
            }
        }
    }
    match key {
        Some(name) => markers.push((name, marker_value(&buffer))),
        None => return Err(format!("marker key '{buffer}' without a value")),
    }
    if quoted {
        return Err("unclosed quote".into());
    }
    if depth > 0 {
        return Err("unclosed bracket/brace".into());
    }
    Ok(markers)
}

fn marker_value(raw: &str) -> String {
    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) if raw.len() >= 2 => unescape(inner),
        _ => raw.trim().to_owned(),
    }
}

/// `\"` and `\\` become `"` and `\`; any other escape is kept as written.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            if c != '"' && c != '\\' {
                out.push('\\');
            }
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// Go's `strconv.ParseBool`.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn go_float(text: &str) -> Option<f64> {
    text.parse::<f64>().ok()
}

fn apply_marker(schema: &mut Value, key: &str, value: &str, field: &str, parent: &mut Value) -> Result<(), String> {
    let typ = schema.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
    let integer = |what: &str| {
        value
            .parse::<i64>()
            .map_err(|_| format!("failed to parse {what} value: strconv.ParseInt: parsing {value:?}: invalid syntax"))
    };
    let only_for = |marker: &str, wanted: &str, kind: &str| -> Result<(), String> {
        match typ == wanted {
            true => Ok(()),
            false => Err(format!("{marker} marker is only valid for {kind} types, got type: {typ}")),
        }
    };
    match key {
        "required" => {
            if go_bool(value).ok_or_else(|| parse_bool_error("required", value))? {
                push_required(parent, field);
            }
        }
        "default" => {
            let default = match typ.as_str() {
                "string" => Value::String(value.to_owned()),
                "integer" => json!(
                    value.parse::<i64>().map_err(|_| format!("default value must be a valid integer, got: {value}"))?
                ),
                "number" => {
                    number(value).ok_or_else(|| format!("default value must be a valid number, got: {value}"))?
                }
                "boolean" => {
                    json!(go_bool(value).ok_or_else(|| format!("default value must be a valid boolean, got: {value}"))?)
                }
                _ => serde_json::from_str(value).map_err(|e| format!("default value must be valid JSON: {e}"))?,
            };
            schema["default"] = default;
        }
        "description" => schema["description"] = json!(value),
        "minimum" | "maximum" => {
            let bound = go_float(value).ok_or_else(|| {
                format!("failed to parse {key} enum value: strconv.ParseFloat: parsing {value:?}: invalid syntax")
            })?;
            schema[key] = json!(bound);
        }
        "validation" => {
            if value.trim().is_empty() {
                return Err("validation failed".into());
            }
            push_validation(schema, value, "validation failed");
        }
        "immutable" => {
            if go_bool(value).ok_or_else(|| parse_bool_error("immutable", value))? {
                push_validation(schema, "self == oldSelf", "field is immutable");
            }
        }
        "enum" => {
            let mut values = Vec::new();
            for item in value.split(',') {
                let item = item.trim();
                if item.is_empty() {
                    return Err("empty enum values are not allowed".into());
                }
                values.push(match typ.as_str() {
                    "string" => json!(item),
                    "integer" => json!(item.parse::<i64>().map_err(|_| format!(
                        "failed to parse integer enum value: strconv.ParseInt: parsing {item:?}: invalid syntax"
                    ))?),
                    _ => {
                        return Err(format!(
                            "enum values only supported for string and integer types, got type: {typ}"
                        ));
                    }
                });
            }
            schema["enum"] = Value::Array(values);
        }
        "minLength" | "maxLength" => {
            only_for(key, "string", "string")?;
            schema[key] = json!(integer(key)?);
        }
        "pattern" => {
            if value.is_empty() {
                return Err("pattern marker value cannot be empty".into());
            }
            only_for("pattern", "string", "string")?;
            regex::Regex::new(value).map_err(|e| format!("invalid pattern regex: {e}"))?;
            schema["pattern"] = json!(value);
        }
        "uniqueItems" => {
            let unique = go_bool(value).ok_or_else(|| parse_bool_error("uniqueItems", value))?;
            only_for("uniqueItems", "array", "array")?;
            if unique {
                if let Some(other) = schema.get("x-kubernetes-list-type").and_then(Value::as_str)
                    && other != "set"
                {
                    return Err(format!("cannot set unique when listType is set to {other}"));
                }
                schema["x-kubernetes-list-type"] = json!("set");
            }
        }
        "minItems" | "maxItems" => {
            only_for(key, "array", "array")?;
            schema[key] = json!(integer(key)?);
        }
        "listType" => {
            if typ != "array" {
                return Err("listType marker only applies to array types".into());
            }
            if !matches!(value, "atomic" | "set" | "map") {
                return Err(format!("unsupported value for listType {value}, needs to be one of atomic, set, or map"));
            }
            if let Some(other) = schema.get("x-kubernetes-list-type").and_then(Value::as_str)
                && other != value
            {
                return Err(format!(
                    "listType attempting to overwrite set type of {other}, this can happen if you set contradictory \
                     markers like unique=true | listType=map"
                ));
            }
            schema["x-kubernetes-list-type"] = json!(value);
        }
        "listMapKey" => {
            if typ != "array" {
                return Err("listMapKey marker only applies to array types".into());
            }
            let keys = schema.as_object_mut().expect("a schema is an object").entry("x-kubernetes-list-map-keys");
            let keys = keys.or_insert_with(|| json!([])).as_array_mut().expect("a list");
            if keys.iter().any(|k| k == value) {
                return Err(format!("duplicate listMapKey marker, value {value}"));
            }
            keys.push(json!(value));
        }
        other => return Err(format!("unknown marker: {other}")),
    }
    Ok(())
}

fn parse_bool_error(marker: &str, value: &str) -> String {
    format!("failed to parse {marker} marker value: strconv.ParseBool: parsing {value:?}: invalid syntax")
}

/// A number marker as JSON: an integer stays one (`1`, not `1.0`), as kro copies the text.
fn number(text: &str) -> Option<Value> {
    if let Ok(n) = text.parse::<i64>() {
        return Some(json!(n));
    }
    go_float(text).filter(|f| f.is_finite()).map(|f| json!(f))
}

fn push_validation(schema: &mut Value, rule: &str, message: &str) {
    let rules = schema.as_object_mut().expect("a schema is an object").entry("x-kubernetes-validations");
    rules
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .expect("a list")
        .push(json!({ "rule": rule, "message": message }));
}

/// The instance's `spec` schema from the RGD's `spec.schema.spec` and `spec.schema.types`, with kro's
/// message for what it refuses.
pub fn spec_schema(spec: Option<&Value>, types: Option<&Value>) -> Result<Value, String> {
    let empty = Map::new();
    let spec = match spec {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(fields)) => fields,
        Some(other) => return Err(format!("failed to unmarshal spec schema: expected a map, got {}", go_type(other))),
    };
    let types = match types {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(types)) => types,
        Some(other) => {
            return Err(format!("failed to unmarshal predefined types: expected a map, got {}", go_type(other)));
        }
    };
    Transformer::new(types)
        .and_then(|t| t.object(spec))
        .map_err(|e| format!("failed to build OpenAPI schema for instance: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(spec: Value) -> Result<Value, String> {
        spec_schema(Some(&spec), None)
    }

    fn with_types(spec: Value, types: Value) -> Result<Value, String> {
        spec_schema(Some(&spec), Some(&types))
    }

    #[test]
    fn atomic_types_and_defaults() {
        let got = schema(json!({"replicas": "integer | default=1", "image": "string | default=\"nginx:latest\""}));
        assert_eq!(
            got.unwrap(),
            json!({"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "image": {"type": "string", "default": "nginx:latest"},
            }})
        );
        let got = schema(json!({"ratio": "float | default=0.5", "on": "boolean | default=true"})).unwrap();
        assert_eq!(got["properties"]["ratio"], json!({"type": "number", "default": 0.5}));
        assert_eq!(got["properties"]["on"], json!({"type": "boolean", "default": true}));
    }

    #[test]
    fn collections_objects_and_nesting() {
        let got = schema(json!({
            "values": "object | required=true",
            "ports": "[]integer | minItems=1 maxItems=3 uniqueItems=true",
            "labels": "map[string]string",
            "nested": {"field": "string | default=x"},
        }))
        .unwrap();
        assert_eq!(got["required"], json!(["values"]));
        assert!(got.get("default").is_none(), "an object with a required field has no default");
        assert_eq!(
            got["properties"]["values"],
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
        assert_eq!(
            got["properties"]["ports"],
            json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3, "x-kubernetes-list-type": "set"})
        );
        assert_eq!(got["properties"]["labels"], json!({"type": "object", "additionalProperties": {"type": "string"}}));
        assert_eq!(got["properties"]["nested"]["default"], json!({}));
    }

    #[test]
    fn markers_as_kro_writes_them() {
        let got = schema(json!({
            "name": "string | pattern=\"^[a-z]+$\" minLength=1 maxLength=10 description=\"the name\" immutable=true",
            "size": "string | enum=\"small,large\" validation=\"self != 'x'\"",
            "count": "integer | minimum=0 maximum=10 enum=\"1,2\"",
            "rules": "[]object | listType=map listMapKey=name",
        }))
        .unwrap();
        let name = &got["properties"]["name"];
        assert_eq!(name["pattern"], "^[a-z]+$");
        assert_eq!((name["minLength"].clone(), name["maxLength"].clone()), (json!(1), json!(10)));
        assert_eq!(name["description"], "the name");
        assert_eq!(
            name["x-kubernetes-validations"],
            json!([{"rule": "self == oldSelf", "message": "field is immutable"}])
        );
        let size = &got["properties"]["size"];
        assert_eq!(size["enum"], json!(["small", "large"]));
        assert_eq!(size["x-kubernetes-validations"], json!([{"rule": "self != 'x'", "message": "validation failed"}]));
        let count = &got["properties"]["count"];
        assert_eq!((count["minimum"].clone(), count["enum"].clone()), (json!(0.0), json!([1, 2])));
        assert_eq!(got["properties"]["rules"]["x-kubernetes-list-map-keys"], json!(["name"]));
    }

    #[test]
    fn custom_types_in_dependency_order_and_required_aliases() {
        let types = json!({
            "Port": {"number": "integer | required=true", "name": "string"},
            "Name": "string | required=true",
            "Service": {"ports": "[]Port | minItems=1", "owner": "Name"},
        });
        let got = with_types(json!({"service": "Service", "name": "Name"}), types).unwrap();
        assert_eq!(got["required"], json!(["name"]));
        let service = &got["properties"]["service"];
        assert_eq!(service["required"], json!(["owner"]));
        assert_eq!(service["properties"]["ports"]["items"]["required"], json!(["number"]));
        assert_eq!(service["properties"]["ports"]["minItems"], json!(1));
    }

    #[test]
    fn what_kro_refuses_is_refused_with_its_words() {
        let refused = |spec: Value| schema(spec).unwrap_err();
        assert_eq!(
            refused(json!({"n": "number"})),
            "failed to build OpenAPI schema for instance: field n: unknown type: number"
        );
        assert_eq!(
            refused(json!({"m": "map[int]string"})),
            "failed to build OpenAPI schema for instance: field m: map key must be string"
        );
        assert_eq!(
            refused(json!({"s": "string | colour=red"})),
            "failed to build OpenAPI schema for instance: field s: invalid marker key \"colour\": unknown marker: colour"
        );
        assert!(
            refused(json!({"s": "integer | minLength=1"}))
                .ends_with("minLength marker is only valid for string types, got type: integer")
        );
        assert!(refused(json!({"s": "string | pattern=\"(\""})).contains("invalid pattern regex"));
        assert!(
            refused(json!({"s": "integer | default=x"})).ends_with("default value must be a valid integer, got: x")
        );
        assert!(refused(json!({"s": 3})).ends_with("field s: unexpected type: int64"));
        assert!(
            refused(json!({"s": "[]object | listMapKey=name"}))
                .ends_with("listMapKey set while listType is unset, listType must be set to map")
        );
        assert!(refused(json!({"s": "string | enum=\"a,,b\""})).ends_with("empty enum values are not allowed"));
        let cycle = with_types(json!({}), json!({"A": {"b": "B"}, "B": {"a": "A"}})).unwrap_err();
        assert!(cycle.contains("cyclic dependency in type"), "{cycle}");
        assert!(
            cycle.contains("graph contains a cycle: A -> B -> A")
                || cycle.contains("graph contains a cycle: B -> A -> B"),
            "{cycle}"
        );
    }
}
