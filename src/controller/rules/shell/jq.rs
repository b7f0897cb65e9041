//! A binding's `jqFilter`, on jaq (shell-operator uses gojq): compiled once when the config is read, so
//! that a filter that does not compile refuses the hook at start-up, then applied to each object. The
//! result takes shell-operator's shape: no output is `null`, one output is that value, several are an
//! array of them.
//!
//! The object goes in as client-go decodes it for shell-operator (an integer that fits int64 is an
//! integer, any other number a float64, and an object's keys in order, as Go's maps are iterated by
//! gojq), and the result comes out as shell-operator writes it (encoding/json: keys sorted, a whole
//! float64 without a fraction, `<`, `>` and `&` escaped): `1.0` in the object is `1` to the hook, as
//! there. `scripts/conformance jq` measures the rest against gojq.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;
use serde_json::Value;

use crate::go_json;

type Filter = jaq_core::Filter<data::JustLut<Val>>;

/// The most outputs one filter gives over one object: a filter that never stops giving (`repeat(.)`)
/// is refused here rather than filling memory. shell-operator's filters give one, or a list of an
/// object's items.
pub const MAX_OUTPUTS: usize = 100_000;

/// The deepest a filter's text may nest brackets: jaq's parser recurses once a level, so a text of a
/// hundred thousand `(` would end the process by overflowing its stack before it is refused. A level
/// takes some 8 KiB of stack in a debug build (256 levels overflowed a test thread's 2 MiB), and a
/// config is read on a runtime thread of 2 MiB too; filters written by hand nest a few levels.
pub const MAX_NESTING: usize = 64;

/// A compiled filter and the text it was compiled from.
pub struct Jq {
    pub text: String,
    filter: Filter,
}

impl std::fmt::Debug for Jq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Jq({:?})", self.text)
    }
}

impl Jq {
    pub fn compile(text: &str) -> Result<Self, String> {
        if nesting(text) > MAX_NESTING {
            return Err(format!("cannot parse {text:?}: it nests brackets more than {MAX_NESTING} deep"));
        }
        let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs()).chain(gojq_defs());
        let funs = jaq_core::funs().chain(jaq_std::funs()).chain(jaq_json::funs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let modules = loader
            .load(&arena, File { code: text, path: () })
            .map_err(|errors| format!("cannot parse {text:?}: {}", load_errors(errors)))?;
        let filter = Compiler::default()
            .with_funs(funs)
            .with_global_vars(["$ENV"])
            .compile(modules)
            .map_err(|errors| format!("cannot compile {text:?}: {}", compile_errors(errors)))?;
        Ok(Jq { text: text.to_owned(), filter })
    }

    /// The filter over `input`'s JSON text, as JSON text: `null` for no output, the one output, or an
    /// array of several.
    pub fn apply(&self, input: &[u8]) -> Result<String, String> {
        let input: Value = serde_json::from_slice(input).map_err(|err| format!("cannot read the object: {err}"))?;
        self.apply_to(&input)
    }

    /// The filter over an object already read, in the shape `apply` gives (the engine's worker process
    /// reads the object once, with the request it came in).
    pub fn apply_to(&self, input: &Value) -> Result<String, String> {
        let mut outputs = self.outputs_of(input)?;
        Ok(match outputs.len() {
            0 => "null".to_owned(),
            1 => go_json::encode(&outputs.remove(0)),
            _ => go_json::encode(&Value::Array(outputs)),
        })
    }

    fn run(&self, input: &[u8]) -> Result<Vec<Value>, String> {
        let input: Value = serde_json::from_slice(input).map_err(|err| format!("cannot read the object: {err}"))?;
        self.outputs_of(&input)
    }

    fn outputs_of(&self, input: &Value) -> Result<Vec<Value>, String> {
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([environment()]));
        let mut outputs = Vec::new();
        for output in self.filter.id.run((ctx, to_val(input))).map(unwrap_valr) {
            if outputs.len() == MAX_OUTPUTS {
                return Err(format!("jqFilter {:?} gives more than {MAX_OUTPUTS} outputs", self.text));
            }
            let output = output.map_err(|err| format!("jqFilter {:?}: {err}", self.text))?;
            outputs.push(from_val(&output).map_err(|err| format!("jqFilter {:?}: {err}", self.text))?);
        }
        Ok(outputs)
    }

    /// Each of the filter's outputs over one JSON input, as shell-operator writes each (the conformance
    /// runner compares them with gojq's one by one).
    pub fn outputs(&self, input: &[u8]) -> Result<Vec<String>, String> {
        Ok(self.run(input)?.iter().map(go_json::encode).collect())
    }

    /// `apply` on a value, back as a value.
    pub fn apply_value(&self, input: &Value) -> Result<Value, String> {
        let text = self.apply(&serde_json::to_vec(input).map_err(|err| err.to_string())?)?;
        serde_json::from_str(&text).map_err(|err| format!("jqFilter {:?} gave what is not JSON: {err}", self.text))
    }
}

/// A decoded object as jaq's value: integers that fit int64 stay integers, every other number is a
/// float64, as client-go decodes them.
fn to_val(value: &Value) -> Val {
    match value {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Val::from(i as isize),
            None => Val::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Val::from(s.clone()),
        Value::Array(items) => items.iter().map(to_val).collect(),
        Value::Object(fields) => Val::obj(fields.iter().map(|(k, v)| (Val::from(k.clone()), to_val(v))).collect()),
    }
}

/// An output as the JSON encoding/json writes: what is not JSON (NaN, infinities, a key that is not a
/// string) is refused in its words.
fn from_val(value: &Val) -> Result<Value, String> {
    use jaq_json::Num;
    let float = |f: f64| {
        serde_json::Number::from_f64(f).map(Value::Number).ok_or_else(|| format!("json: unsupported value: {f}"))
    };
    Ok(match value {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(Num::Int(i)) => Value::from(*i as i64),
        Val::Num(Num::Float(f)) => float(*f)?,
        // A number beyond int64 (gojq's big.Int) or a literal kept as written: as a float64.
        Val::Num(other) => float(other.to_string().parse::<f64>().map_err(|e| e.to_string())?)?,
        Val::TStr(b) | Val::BStr(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(items) => Value::Array(items.iter().map(from_val).collect::<Result<_, _>>()?),
        Val::Obj(fields) => {
            let mut object = serde_json::Map::new();
            for (k, v) in fields.iter() {
                let key = match k {
                    Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
                    other => return Err(format!("json: unsupported object key {other}")),
                };
                object.insert(key, from_val(v)?);
            }
            Value::Object(object)
        }
    })
}

/// How deep a filter's brackets nest, counted over the whole text (brackets inside a string literal
/// count too: the bound is on the text's size, far above any filter written by hand).
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// gojq's definitions where jaq's differ (gojq.jq), loaded after jaq's.
fn gojq_defs() -> impl Iterator<Item = jaq_core::load::parse::Def<&'static str>> {
    jaq_core::load::parse(include_str!("gojq.jq"), |p| p.defs()).expect("gojq.jq parses").into_iter()
}

/// `$ENV` (and `env`), as shell-operator's gojq gives it: an empty object, since it compiles filters
/// without an environment loader. The engine's own environment, its tokens included, stays its own.
fn environment() -> Val {
    Val::obj(jaq_json::Map::default())
}

/// Where the text stops making sense, and what was expected there.
fn at(rest: &str) -> String {
    if rest.is_empty() {
        "at the end".to_owned()
    } else {
        format!("at {:?}", rest.chars().take(20).collect::<String>())
    }
}

fn load_errors<P>(errors: jaq_core::load::Errors<&str, P>) -> String {
    use jaq_core::load::Error;
    let mut said = Vec::new();
    for (_, error) in errors {
        match error {
            Error::Io(errs) => said.extend(errs.into_iter().map(|(path, err)| format!("{path}: {err}"))),
            Error::Lex(errs) => {
                said.extend(errs.into_iter().map(|(expect, rest)| format!("expected {} {}", expect.as_str(), at(rest))))
            }
            Error::Parse(errs) => {
                said.extend(errs.into_iter().map(|(expect, rest)| format!("expected {} {}", expect.as_str(), at(rest))))
            }
        }
    }
    said.join("; ")
}

fn compile_errors<P>(errors: jaq_core::compile::Errors<&str, P>) -> String {
    let mut said = Vec::new();
    for (_, errs) in errors {
        said.extend(errs.into_iter().map(|(name, undefined)| format!("undefined {} {name}", undefined.as_str())));
    }
    said.join("; ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn outputs_take_shell_operators_shape() {
        let object = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"items": [1, 2]}});
        let jq = |text: &str| Jq::compile(text).unwrap().apply_value(&object).unwrap();
        assert_eq!(jq(".metadata.labels"), json!({"x": "1"}));
        assert_eq!(jq(".spec.items[]"), json!([1, 2]));
        assert_eq!(jq("empty"), Value::Null);
        assert_eq!(jq(".missing"), Value::Null);
        assert_eq!(jq("{name: .metadata.name, n: (.spec.items | length)}"), json!({"name": "a", "n": 2}));
        assert_eq!(jq("[$ENV, env, $ENV.PATH]"), json!([{}, {}, null]));
        // gojq's join and range, where jaq's differ.
        assert_eq!(jq("[null, 1, true, \"a\"] | join(\",\")"), json!(",1,true,a"));
        assert_eq!(jq("[] | join(\",\")"), json!(""));
        assert_eq!(jq("[range(0; 10; 0)]"), json!([]));
        assert_eq!(jq("[range(0; 10; 3)]"), json!([0, 3, 6, 9]));
        // Updates through null and past an array's end, as a JQPatch writes labels onto an object that
        // has none (vendor/jaq-json).
        assert_eq!(
            jq(".metadata.labels.team = \"a\" | .spec.items[3] = 9 | .metadata"),
            json!({"name": "a", "labels": {"x": "1", "team": "a"}})
        );
        assert_eq!(
            jq(".status.conditions[1].type = \"Ready\" | .status"),
            json!({"conditions": [null, {"type": "Ready"}]})
        );
        assert_eq!(jq(".spec.items[5] = 0 | .spec.items"), json!([1, 2, null, null, null, 0]));
        assert_eq!(jq("del(.spec.items[7]) | .spec.items"), json!([1, 2]));
    }

    /// What shell-operator hands a hook: its gojq result written by encoding/json (checked with
    /// conformance/reference, which runs shell-operator's filter code).
    #[test]
    fn results_are_written_as_shell_operator_writes_them() {
        let object = br#"{"spec": {"b": 1.0, "a": "<&>", "big": 1e21, "n": 12345678901234567890, "f": 0.5}}"#;
        let jq = |text: &str| Jq::compile(text).unwrap().apply(object).unwrap();
        assert_eq!(jq(".spec"), r#"{"a":"\u003c\u0026\u003e","b":1,"big":1e+21,"f":0.5,"n":12345678901234567000}"#);
        assert_eq!(jq("[.spec.b, .spec.f * 4, 1 / 3]"), "[1,2,0.3333333333333333]");
        assert_eq!(jq(".spec | keys"), r#"["a","b","big","f","n"]"#);
        let nan = Jq::compile("nan").unwrap().apply(object).unwrap_err();
        assert!(nan.contains("json: unsupported value: NaN"), "{nan}");
    }

    #[test]
    fn a_filter_that_does_not_compile_is_refused() {
        assert!(Jq::compile(".metadata | ").unwrap_err().starts_with("cannot parse"));
        assert!(Jq::compile("nosuchfunction(1)").unwrap_err().starts_with("cannot compile"));
    }

    #[test]
    fn a_filter_past_its_bounds_is_refused_not_followed() {
        // Nesting past the bound is refused before the parser recurses into it; at the bound it parses.
        let deep = format!("{}.{}", "(".repeat(100_000), ")".repeat(100_000));
        let refused = Jq::compile(&deep).unwrap_err();
        assert!(refused.ends_with(&format!("it nests brackets more than {MAX_NESTING} deep")), "{refused}");
        let at_bound = format!("{}.{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert!(Jq::compile(&at_bound).is_ok());
        // Outputs without end stop at the bound.
        let endless = Jq::compile("repeat(1)").unwrap().apply(b"{}").unwrap_err();
        assert_eq!(endless, format!("jqFilter \"repeat(1)\" gives more than {MAX_OUTPUTS} outputs"));
        let many = Jq::compile(&format!("range({MAX_OUTPUTS})")).unwrap().outputs(b"{}").unwrap();
        assert_eq!(many.len(), MAX_OUTPUTS);
    }
}
