//! What a hook asks to change, written to `$KUBERNETES_PATCH_PATH`, read as shell-operator reads it:
//! first as a stream of JSON objects (field names in any case, as Go's JSON reads them), and if that
//! fails anywhere, the whole file again as YAML documents. Each operation is checked before any is sent:
//! one bad operation refuses the file, and the run fails.

use serde_json::{Map, Value};

use super::jq::Jq;

/// One operation of the file.
#[derive(Debug)]
pub struct Operation {
    pub what: What,
    /// `apiVersion` (for a create, the object's); empty: the kind's preferred version.
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `status`, `scale`, ...; empty for the object itself.
    pub subresource: String,
    pub ignore_missing_object: bool,
    /// Applied even when the hook fails: only a patch of the `status` subresource may be.
    pub ignore_hook_error: bool,
}

impl Operation {
    /// Whether it is applied after the hook failed: a patch of the status subresource marked
    /// `ignoreHookError`, as shell-operator documents it (its code never applies it).
    pub fn despite_failure(&self) -> bool {
        self.ignore_hook_error
            && self.subresource.trim_start_matches('/') == "status"
            && matches!(self.what, What::JqPatch(_) | What::MergePatch(_) | What::JsonPatch(_))
    }
}

#[derive(Debug)]
pub enum What {
    Create { object: Value, if_exists: IfExists },
    Delete { propagation: &'static str },
    JqPatch(Jq),
    MergePatch(Value),
    JsonPatch(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfExists {
    /// `Create`: an error.
    Fail,
    /// `CreateIfNotExists`: nothing to do.
    Ignore,
    /// `CreateOrUpdate`: replaced whole, guarded by the live resourceVersion.
    Update,
}

impl Operation {
    /// `Create object apiVersion/kind/namespace/name`, as shell-operator names an operation in errors.
    pub fn describe(&self) -> String {
        let verb = match self.what {
            What::Create { .. } => "Create",
            What::Delete { .. } => "Delete",
            _ => "Filter",
        };
        format!("{verb} object {}/{}/{}/{}", self.api_version, self.kind, self.namespace, self.name)
    }
}

const FIELDS: [&str; 12] = [
    "operation",
    "apiVersion",
    "kind",
    "namespace",
    "name",
    "subresource",
    "object",
    "jqFilter",
    "mergePatch",
    "jsonPatch",
    "ignoreMissingObject",
    "ignoreHookError",
];

/// The operations in `file`, in order; empty for an empty file.
pub fn parse(file: &[u8]) -> Result<Vec<Operation>, String> {
    let documents = match json_documents(file) {
        Ok(documents) => documents,
        Err(_) => yaml_documents(file)?,
    };
    documents.into_iter().map(operation).collect()
}

/// A stream of JSON objects; a field's name matched to the known ones in any case.
fn json_documents(file: &[u8]) -> Result<Vec<Map<String, Value>>, String> {
    let mut documents = Vec::new();
    for value in serde_json::Deserializer::from_slice(file).into_iter::<Value>() {
        let Value::Object(fields) = value.map_err(|err| err.to_string())? else {
            return Err("not an object".into());
        };
        let mut document = Map::new();
        for (key, value) in fields {
            let known = FIELDS.iter().find(|f| f.eq_ignore_ascii_case(&key));
            // Go's JSON drops what its struct does not have.
            if let Some(known) = known {
                document.insert((*known).to_owned(), value);
            }
        }
        documents.push(document);
    }
    Ok(documents)
}

/// serde_yaml refuses flow collections nested deeper than this, but its scanner takes time quadratic in
/// their depth to get there (a patch file of 160 KB of `{a: ` took 33 s): deeper text is refused first,
/// in its words.
const MAX_FLOW_DEPTH: usize = 128;

/// How deep `[` and `{` nest in `text`, outside quoted scalars and comments: at least the flow depth
/// the YAML parser will see.
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(inner) = chars.next() {
                    match inner {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            // In YAML, '' inside single quotes is a quote: the scan ends at the first and starts again.
            '\'' => {
                for inner in chars.by_ref() {
                    if inner == '\'' {
                        break;
                    }
                }
            }
            '#' => {
                for inner in chars.by_ref() {
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `text` read as YAML documents by serde_yaml, once it is known to nest no deeper than it allows.
fn shallow_enough(text: &str) -> Result<&str, String> {
    match flow_depth(text) > MAX_FLOW_DEPTH {
        true => Err(format!("recursion limit exceeded: collections nested deeper than {MAX_FLOW_DEPTH}")),
        false => Ok(text),
    }
}

fn yaml_documents(file: &[u8]) -> Result<Vec<Map<String, Value>>, String> {
    let text = String::from_utf8_lossy(file);
    let text = shallow_enough(&text)?;
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = <Value as serde::Deserialize>::deserialize(document).map_err(|err| err.to_string())?;
        match value {
            Value::Null => {}
            Value::Object(fields) => {
                documents.push(fields.into_iter().filter(|(k, _)| FIELDS.contains(&k.as_str())).collect())
            }
            other => return Err(format!("can't validate document: expected an operation object, got {other}")),
        }
    }
    Ok(documents)
}

fn text_field(doc: &Map<String, Value>, name: &str) -> Result<String, String> {
    match doc.get(name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{name} must be of type string")),
    }
}

fn flag(doc: &Map<String, Value>, name: &str) -> Result<bool, String> {
    match doc.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("{name} must be of type boolean")),
    }
}

/// A map, or YAML or JSON text of one.
fn object_or_text(value: &Value, name: &str) -> Result<Value, String> {
    match value {
        Value::String(text) => shallow_enough(text)
            .and_then(|text| serde_yaml::from_str::<Value>(text).map_err(|err| err.to_string()))
            .map_err(|err| format!("{name}: cannot be read as YAML or JSON: {err}")),
        other => Ok(other.clone()),
    }
}

fn operation(doc: Map<String, Value>) -> Result<Operation, String> {
    let refuse = |problem: String| {
        let yaml = serde_yaml::to_string(&doc).unwrap_or_default();
        format!("can't validate document:\n{yaml}{problem}")
    };
    let op = text_field(&doc, "operation").map_err(refuse)?;
    let mut operation = Operation {
        what: What::Delete { propagation: "Foreground" },
        api_version: text_field(&doc, "apiVersion").map_err(refuse)?,
        kind: text_field(&doc, "kind").map_err(refuse)?,
        namespace: text_field(&doc, "namespace").map_err(refuse)?,
        name: text_field(&doc, "name").map_err(refuse)?,
        subresource: text_field(&doc, "subresource").map_err(refuse)?,
        ignore_missing_object: flag(&doc, "ignoreMissingObject").map_err(refuse)?,
        ignore_hook_error: flag(&doc, "ignoreHookError").map_err(refuse)?,
    };
    let needs_target = |operation: &Operation| {
        if operation.kind.is_empty() {
            return Err(refuse("kind is required".into()));
        }
        if operation.name.is_empty() {
            return Err(refuse("name is required".into()));
        }
        Ok(())
    };
    operation.what = match op.as_str() {
        "Create" | "CreateOrUpdate" | "CreateIfNotExists" => {
            let object = match doc.get("object") {
                None | Some(Value::Null) => return Err(refuse("object is required".into())),
                Some(value) => object_or_text(value, "object").map_err(refuse)?,
            };
            let Value::Object(fields) = &object else {
                return Err(refuse("object must be an object, or YAML or JSON text of one".into()));
            };
            if fields.is_empty() {
                return Err(refuse("object should have at least 1 properties".into()));
            }
            // The object says where it goes; the operation's own coordinates are not used.
            let text = |path: &[&str]| {
                let mut at = &object;
                for step in path {
                    at = &at[step];
                }
                at.as_str().unwrap_or_default().to_owned()
            };
            operation.api_version = text(&["apiVersion"]);
            operation.kind = text(&["kind"]);
            operation.namespace = text(&["metadata", "namespace"]);
            operation.name = text(&["metadata", "name"]);
            operation.subresource.clear();
            let if_exists = match op.as_str() {
                "Create" => IfExists::Fail,
                "CreateIfNotExists" => IfExists::Ignore,
                _ => IfExists::Update,
            };
            What::Create { object, if_exists }
        }
        "Delete" | "DeleteInBackground" | "DeleteNonCascading" => {
            needs_target(&operation)?;
            let propagation = match op.as_str() {
                "Delete" => "Foreground",
                "DeleteInBackground" => "Background",
                _ => "Orphan",
            };
            What::Delete { propagation }
        }
        "JQPatch" => {
            needs_target(&operation)?;
            let filter = text_field(&doc, "jqFilter").map_err(refuse)?;
            if filter.is_empty() {
                return Err(refuse("jqFilter is required".into()));
            }
            What::JqPatch(Jq::compile(&filter).map_err(|err| refuse(format!("jqFilter: {err}")))?)
        }
        "MergePatch" => {
            needs_target(&operation)?;
            let patch = match doc.get("mergePatch") {
                None | Some(Value::Null) => return Err(refuse("mergePatch is required".into())),
                Some(value) => object_or_text(value, "mergePatch").map_err(refuse)?,
            };
            if patch.as_object().is_none_or(|p| p.is_empty()) {
                return Err(refuse("mergePatch must be an object with at least 1 properties".into()));
            }
            What::MergePatch(patch)
        }
        "JSONPatch" => {
            needs_target(&operation)?;
            let patch = match doc.get("jsonPatch") {
                None | Some(Value::Null) => return Err(refuse("jsonPatch is required".into())),
                Some(value) => object_or_text(value, "jsonPatch").map_err(refuse)?,
            };
            if patch.as_array().is_none_or(|p| p.is_empty()) {
                return Err(refuse("jsonPatch must be an array with at least 1 items".into()));
            }
            What::JsonPatch(patch)
        }
        "" => return Err(refuse("operation is required".into())),
        other => {
            return Err(refuse(format!(
                "operation should be one of [Create CreateOrUpdate CreateIfNotExists Delete DeleteInBackground \
                 DeleteNonCascading JQPatch MergePatch JSONPatch], not {other:?}"
            )));
        }
    };
    Ok(operation)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_stream_or_yaml_documents() {
        let json = br#"{"operation":"Create","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n"}}}
{"OPERATION":"MergePatch","kind":"Pod","namespace":"n","name":"p","mergePatch":{"metadata":{"labels":{"x":"y"}}},"unknown":1}
{"operation":"Delete","kind":"Pod","namespace":"n","name":"p"}"#;
        let ops = parse(json).unwrap();
        assert_eq!(ops.len(), 3);
        assert!(matches!(&ops[0].what, What::Create { if_exists: IfExists::Fail, .. }));
        assert_eq!(ops[0].describe(), "Create object v1/ConfigMap/n/a");
        assert!(matches!(&ops[1].what, What::MergePatch(p) if p == &json!({"metadata": {"labels": {"x": "y"}}})));
        assert!(matches!(&ops[2].what, What::Delete { propagation: "Foreground" }));

        let yaml = b"operation: CreateOrUpdate\nobject: |\n  apiVersion: v1\n  kind: Secret\n  metadata: {name: s}\n---\n\
            operation: JSONPatch\nkind: Deployment\nname: d\nsubresource: /status\njsonPatch: '[{\"op\":\"replace\",\"path\":\"/x\",\"value\":1}]'\n---\n\
            operation: JQPatch\nkind: ConfigMap\nname: c\njqFilter: .data.x = \"1\"\nignoreMissingObject: true\n---\n\
            operation: DeleteNonCascading\nkind: Pod\nname: p\n";
        let ops = parse(yaml).unwrap();
        assert!(
            matches!(&ops[0].what, What::Create { if_exists: IfExists::Update, object } if object["kind"] == "Secret")
        );
        assert_eq!(ops[1].subresource, "/status");
        assert!(matches!(&ops[1].what, What::JsonPatch(p) if p[0]["op"] == "replace"));
        assert!(matches!(&ops[2].what, What::JqPatch(_)) && ops[2].ignore_missing_object);
        assert!(matches!(&ops[3].what, What::Delete { propagation: "Orphan" }));
        assert!(parse(b"").unwrap().is_empty());
        let on_failure = parse(b"{\"operation\":\"MergePatch\",\"kind\":\"Sample\",\"name\":\"s\",\"subresource\":\"/status\",\"ignoreHookError\":true,\"mergePatch\":{\"status\":{}}}\n{\"operation\":\"MergePatch\",\"kind\":\"Sample\",\"name\":\"s\",\"ignoreHookError\":true,\"mergePatch\":{\"a\":1}}").unwrap();
        assert_eq!(on_failure.iter().map(Operation::despite_failure).collect::<Vec<_>>(), [true, false]);
    }

    #[test]
    fn one_bad_operation_refuses_the_file() {
        let refused = |text: &[u8]| parse(text).unwrap_err();
        assert!(refused(b"operation: Delete\nname: p\n").ends_with("kind is required"));
        assert!(refused(b"operation: Create\n").ends_with("object is required"));
        assert!(refused(b"operation: MergePatch\nkind: Pod\nname: p\n").ends_with("mergePatch is required"));
        assert!(
            refused(b"operation: JQPatch\nkind: Pod\nname: p\njqFilter: '.a |'\n").contains("jqFilter: cannot parse")
        );
        assert!(refused(b"operation: Frobnicate\nkind: Pod\nname: p\n").contains("operation should be one of"));
        assert!(
            refused(b"operation: Delete\nkind: Pod\nname: p\nignoreMissingObject: yes please\n")
                .ends_with("ignoreMissingObject must be of type boolean")
        );
        assert!(
            refused(b"operation: Create\nobject: {a: 1}\n---\n- not an operation\n")
                .contains("expected an operation object")
        );
    }

    #[test]
    fn deeply_nested_yaml_is_refused_before_the_parser_slows_down() {
        // Before, 40,000 levels of `{a: ` took serde_yaml 33 s to refuse; every depth now ends at once.
        for depth in [200, 40_000, 1_000_000] {
            let nested = format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth));
            let started = std::time::Instant::now();
            let why = parse(nested.as_bytes()).unwrap_err();
            assert!(why.starts_with("recursion limit exceeded"), "{why}");
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "{depth}: {:?}", started.elapsed());
        }
        // Brackets inside quotes and comments are not nesting; shallow YAML reads as before.
        let quoted = format!(
            "operation: Create\n# {}\nobject: {{kind: ConfigMap, data: {{a: \"{}\", b: '{}'}}}}\n",
            "[".repeat(500),
            "[".repeat(500),
            "{".repeat(500)
        );
        let read = parse(quoted.as_bytes()).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(flow_depth("a: [[1], {b: [2]}]"), 3);
    }
}
