//! kubectl's JSONPath templates (`-o jsonpath=`, custom columns, `--sort-by`), as client-go's
//! `util/jsonpath` parses and runs them: text outside `{}` copied as it is, `{.a.b}`, `[*]`, slices and
//! negative indexes, unions `[0,2]`, `['key']`, recursive descent `..`, filters `[?(@.x == "y")]`,
//! `{range ...}...{end}`, quoted literals such as `{"\n"}`, and `\.` in field names
//! (`{.metadata.labels.app\.kubernetes\.io/name}`). The crates on crates.io implement RFC 9535 queries,
//! which have neither the template text, nor `range`/`end`, nor kubectl's rules for printing and for
//! missing keys, so this follows client-go's parser.go and jsonpath.go instead, error texts included.
//!
//! `parse` reads a template into nodes, `eval` walks them over an object; what they find prints as Go
//! prints it (`output::go_print`).

mod eval;
mod parse;

use serde_json::{Number, Value};

use super::go_print::{go_float, go_json, go_sprint};

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The text it was parsed from, for messages.
    pub raw: String,
    nodes: Vec<Node>,
    /// With `false`, a field that is not there is an error, as with kubectl's
    /// `--allow-missing-template-keys=false`.
    pub allow_missing_keys: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    List(Vec<Node>),
    Field(String),
    Identifier(String),
    Array([Param; 3]),
    Filter { left: Vec<Node>, right: Vec<Node>, operator: String },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

/// A value found by a template: a piece of the object, or a literal of the template.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
    Value(&'a Value),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// One byte of a string, which client-go's wildcard and recursive descent walk into.
    Byte(u8),
}

impl Found<'_> {
    /// As Go's `fmt.Print` prints it: what custom columns show.
    pub fn to_go_string(&self) -> String {
        match self {
            Found::Value(v) => go_sprint(v),
            Found::Text(t) => t.clone(),
            Found::Int(i) => i.to_string(),
            Found::Float(f) => go_float(*f),
            Found::Bool(b) => b.to_string(),
            Found::Byte(b) => b.to_string(),
        }
    }

    /// As `-o jsonpath` prints it: maps and lists as JSON, the rest as `fmt.Print` does (JSON null as `<nil>`).
    pub fn to_template_string(&self) -> String {
        match self {
            Found::Value(v @ (Value::Object(_) | Value::Array(_))) => go_json(v),
            other => other.to_go_string(),
        }
    }

    pub fn value(&self) -> Option<&Value> {
        match self {
            Found::Value(v) => Some(v),
            _ => None,
        }
    }
}

impl Template {
    /// Parses a template as `kubectl get -o jsonpath=...` takes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        Ok(Template { raw: text.to_owned(), nodes: parse::nodes(text)?, allow_missing_keys: true })
    }

    /// A path as custom columns and `--sort-by` take it (`.metadata.name`, `metadata.name`,
    /// `{.metadata.name}`), made a template: client-go's `RelaxedJSONPathExpression`.
    pub fn relaxed(path: &str) -> Result<String, String> {
        if path.is_empty() {
            return Ok(String::new());
        }
        let inner = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
        let inner = inner.strip_prefix('.').unwrap_or(inner);
        if inner.is_empty() || inner.contains(['{', '}']) {
            return Err("unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or \
                        '{.name1.name2}'"
                .into());
        }
        Ok(format!("{{.{inner}}}"))
    }

    /// Every result, one list per action (and per pass of a `range`), as client-go's `FindResults`.
    pub fn find<'v>(&self, data: &'v Value) -> Result<Vec<Vec<Found<'v>>>, String> {
        eval::find(&self.nodes, data, self.allow_missing_keys)
    }

    /// The template applied to `data`, as `kubectl get -o jsonpath` prints it.
    pub fn execute(&self, data: &Value) -> Result<String, String> {
        let mut text = String::new();
        for results in self.find(data)? {
            let printed: Vec<String> = results.iter().map(Found::to_template_string).collect();
            text.push_str(&printed.join(" "));
        }
        Ok(text)
    }

    /// The template applied to `data` as `-o jsonpath-as-json` prints it: every result in one JSON array.
    pub fn execute_as_json(&self, data: &Value) -> Result<String, String> {
        let mut text = String::new();
        for results in self.find(data)? {
            let values: Vec<Value> = results.iter().map(found_to_json).collect();
            let array = Value::Array(values);
            text.push_str(&crate::output::objects::json_pretty(&array).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        Ok(text)
    }
}

fn found_to_json(found: &Found) -> Value {
    match found {
        Found::Value(v) => (*v).clone(),
        Found::Text(t) => Value::String(t.clone()),
        Found::Int(i) => Value::from(*i),
        Found::Float(f) => Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null),
        Found::Bool(b) => Value::Bool(*b),
        Found::Byte(b) => Value::from(*b),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(template: &str, data: &Value) -> String {
        Template::parse(template).unwrap().execute(data).unwrap()
    }

    fn list() -> Value {
        json!({
            "kind": "List",
            "items": [
                {"metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "web", "tier": "front"}},
                 "spec": {"replicas": 3, "ratio": 1.5, "on": true, "ports": [80, 443]}},
                {"metadata": {"name": "b", "labels": {"tier": "back"}},
                 "spec": {"replicas": 1, "ratio": 0.25, "on": false, "ports": []}},
            ]
        })
    }

    #[test]
    fn fields_wildcards_and_text_print_as_kubectl() {
        let data = list();
        assert_eq!(run("{.items[*].metadata.name}", &data), "a b");
        assert_eq!(run("names: {.items[0].metadata.name}, {.items[-1].metadata.name}!", &data), "names: a, b!");
        assert_eq!(run("{.items[*].spec.replicas}", &data), "3 1");
        assert_eq!(run("{.items[*].spec.ratio}", &data), "1.5 0.25");
        assert_eq!(run("{.items[*].spec.on}", &data), "true false");
        assert_eq!(run("{.items[0].spec.ports}", &data), "[80,443]");
        assert_eq!(run("{.items[0].metadata.labels}", &data), r#"{"app.kubernetes.io/name":"web","tier":"front"}"#);
        assert_eq!(run(r"{.items[0].metadata.labels.app\.kubernetes\.io/name}", &data), "web");
        assert_eq!(run("{.items[0].metadata.labels['tier']}", &data), "front");
        assert_eq!(run("{$.kind}", &data), "List");
        assert_eq!(run("{.items[0].missing}", &data), "");
        assert_eq!(run("plain text", &data), "plain text");
        assert_eq!(run("{.items[0:1].metadata.name}", &data), "a");
        assert_eq!(run("{.items[0,1].metadata.name}", &data), "a b");
        assert_eq!(run("{..name}", &data), "a b");
    }

    #[test]
    fn range_and_literals() {
        let data = list();
        assert_eq!(run(r#"{range .items[*]}{.metadata.name}{"\t"}{.spec.replicas}{"\n"}{end}"#, &data), "a\t3\nb\t1\n");
        assert_eq!(run("{range .items[*]}[{.metadata.name}]{end} after", &data), "[a][b] after");
        assert_eq!(run("{range .nothing[*]}x{end}done", &data), "done");
    }

    #[test]
    fn filters_compare_as_go_templates_do() {
        let data = list();
        assert_eq!(run(r#"{.items[?(@.metadata.name=="b")].spec.replicas}"#, &data), "1");
        assert_eq!(run("{.items[?(@.spec.replicas>2)].metadata.name}", &data), "a");
        assert_eq!(run("{.items[?(@.metadata.labels.app\\.kubernetes\\.io/name)].metadata.name}", &data), "a");
        assert_eq!(run("{.items[?(@.spec.on==true)].metadata.name}", &data), "a");
        let err = Template::parse("{.items[?(@.spec.ratio>1)].metadata.name}").unwrap().execute(&data).unwrap_err();
        assert_eq!(err, "incompatible types for comparison");
    }

    #[test]
    fn missing_keys_and_bad_templates_fail_with_client_gos_words() {
        let data = list();
        let mut strict = Template::parse("{.items[0].nope}").unwrap();
        strict.allow_missing_keys = false;
        assert_eq!(strict.execute(&data).unwrap_err(), "nope is not found");
        for (template, error) in [
            ("{.a", "unclosed action"),
            ("{.a[1}", "unterminated array"),
            ("{.a[x]}", "invalid array index x"),
            ("{.a[?(@.x==1}", "unterminated filter"),
            ("{#}", "unrecognized character in action: U+0023 '#'"),
            (r#"{"abc}"#, "unterminated quoted string"),
            // Found by tests/untrusted.rs: a template ending in an escape read past its end and panicked.
            ("{x.\\", "unclosed action"),
            ("{¹.\\", "unclosed action"),
        ] {
            assert_eq!(Template::parse(template).unwrap_err(), error, "{template}");
        }
        let run_err = |t: &str| Template::parse(t).unwrap().execute(&data).unwrap_err();
        assert_eq!(run_err("{.items[5]}"), "array index out of bounds: index 5, length 2");
        assert_eq!(run_err("{end}"), "not in range, nothing to end");
        assert_eq!(run_err("{.kind[0]}"), "string is not array or slice");
        assert_eq!(run_err("{foo}"), "unrecognized identifier foo");
    }

    #[test]
    fn relaxed_paths_become_templates() {
        for path in ["metadata.name", ".metadata.name", "{metadata.name}", "{.metadata.name}"] {
            assert_eq!(Template::relaxed(path).unwrap(), "{.metadata.name}");
        }
        assert!(Template::relaxed("{.a}{.b}").unwrap_err().starts_with("unexpected path string"));
    }
}
