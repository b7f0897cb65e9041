//! A binding's `jqFilter`, on jaq (shell-operator uses gojq): compiled once when the config is read, so
//! that a filter that does not compile refuses the hook at start-up, then applied to each object. The
//! result takes shell-operator's shape: no output is `null`, one output is that value, several are an
//! array of them.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;
use serde_json::Value;

type Filter = jaq_core::Filter<data::JustLut<Val>>;

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
        let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
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
        let input = jaq_json::read::parse_single(input).map_err(|err| format!("cannot read the object: {err}"))?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([environment()]));
        let mut outputs = Vec::new();
        for output in self.filter.id.run((ctx, input)).map(unwrap_valr) {
            outputs.push(output.map_err(|err| format!("jqFilter {:?}: {err}", self.text))?);
        }
        Ok(match outputs.len() {
            0 => "null".to_owned(),
            1 => outputs[0].to_string(),
            _ => format!("[{}]", outputs.iter().map(Val::to_string).collect::<Vec<_>>().join(",")),
        })
    }

    /// `apply` on a value, back as a value.
    pub fn apply_value(&self, input: &Value) -> Result<Value, String> {
        let text = self.apply(&serde_json::to_vec(input).map_err(|err| err.to_string())?)?;
        serde_json::from_str(&text).map_err(|err| format!("jqFilter {:?} gave what is not JSON: {err}", self.text))
    }
}

/// `$ENV`, as gojq gives it: the process's environment as an object.
fn environment() -> Val {
    static ENV: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = ENV.get_or_init(|| {
        let vars: serde_json::Map<String, Value> = std::env::vars().map(|(k, v)| (k, Value::String(v))).collect();
        Value::Object(vars).to_string()
    });
    jaq_json::read::parse_single(text.as_bytes()).unwrap_or_default()
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
        assert_eq!(jq("$ENV.PATH | type"), json!("string"));
    }

    #[test]
    fn a_filter_that_does_not_compile_is_refused() {
        assert!(Jq::compile(".metadata | ").unwrap_err().starts_with("cannot parse"));
        assert!(Jq::compile("nosuchfunction(1)").unwrap_err().starts_with("cannot compile"));
    }
}
