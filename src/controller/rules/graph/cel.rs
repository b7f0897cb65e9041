//! kro's expressions evaluated in process: CEL with the standard macros, optional values (`a.?b`,
//! `orValue`), the strings, lists and encoders extensions, cel-go's `cel.bind` and two-variable
//! comprehensions (`macros.rs`), as kro's environment has them (no math extension: kro has none), and
//! kro's own functions: those generated
//! names depend on (`random.seededString` and `random.seededInt`, byte for byte as kro computes them),
//! `json.marshal` / `json.unmarshal`, `hash.fnv64a` / `sha256` / `md5` (bytes), maps' `merge` and
//! `deepMerge` (the argument's entries win), and `omit()` (a template field left out; whether an RGD may
//! use it is kro's feature gate, decided when it is read).
//! An error that only says the data is not there yet (a missing key or field, an index out of range) is
//! `Pending`, as kro reads it: the resource waits, nothing failed.

use std::sync::{Arc, LazyLock};

use cel::extractors::{Arguments, This};
use cel::objects::{Key, Map};
use cel::{Context, Env, ExecutionError};
use md5::Digest as _;
use serde_json::Value;
use sha2::Sha256;

use super::super::go_json;
use super::cost;
use super::expr::{Piece, Template};
use super::kubernetes;
use super::macros;

/// Why an expression has no value.
#[derive(Debug, Clone, PartialEq)]
pub enum Unresolved {
    /// The data it reads is not there yet: wait for it.
    Pending(String),
    /// It cannot be evaluated: a wrong type, a bad call, a parse error.
    Failed(String),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::Pending(why) | Unresolved::Failed(why) => f.write_str(why),
        }
    }
}

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    for extension in
        // kro's environment (pkg/cel/environment.go) has no math extension: `math.greatest` is an
        // undeclared reference there, and so here.
        [cel::extensions::strings, cel::extensions::lists, cel::extensions::encoders]
    {
        env.add_extension(extension).expect("the extensions declare distinct functions");
    }
    super::macros::add(&mut env);
    Arc::new(env)
});

const ALPHANUMERIC: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// A string of `length` characters from `0-9a-z` that depends only on `seed`: character i is the
/// big-endian u32 at byte (4i mod 32) of SHA-256(seed), modulo 36.
pub fn seeded_string(length: i64, seed: &str) -> Result<String, String> {
    if length <= 0 {
        return Err("random.seededString length must be positive".into());
    }
    // kro has no bound: a length taken from an instance's field would let its author fill the memory.
    if length as u64 > cost::MAX_VALUE_BYTES as u64 {
        return Err(format!(
            "random.seededString length must be at most {} (3 MiB, the most the API server accepts in a request)",
            cost::MAX_VALUE_BYTES
        ));
    }
    let hash = Sha256::digest(seed.as_bytes());
    Ok((0..length as usize)
        .map(|i| {
            let at = (i * 4) % hash.len();
            let n = u32::from_be_bytes([hash[at], hash[at + 1], hash[at + 2], hash[at + 3]]);
            ALPHANUMERIC[(n % ALPHANUMERIC.len() as u32) as usize] as char
        })
        .collect())
}

/// An integer in `[min, max)` that depends only on `seed`: the first eight bytes of SHA-256(seed), big
/// endian, modulo the range.
pub fn seeded_int(min: i64, max: i64, seed: &str) -> Result<i64, String> {
    if min >= max {
        return Err("random.seededInt min must be less than max".into());
    }
    let hash = Sha256::digest(seed.as_bytes());
    let v = u64::from_be_bytes(hash[..8].try_into().expect("eight bytes"));
    let range = max.wrapping_sub(min) as u64;
    Ok(min.wrapping_add((v % range) as i64))
}

/// A value as kro's `json.unmarshal` gives it: Go's encoding/json decodes every number as a float64,
/// which cel-go makes a `double`.
fn doubles(value: &cel::Value) -> cel::Value {
    match value {
        cel::Value::Int(i) => cel::Value::Float(*i as f64),
        cel::Value::UInt(u) => cel::Value::Float(*u as f64),
        cel::Value::List(items) => cel::Value::List(Arc::new(items.iter().map(doubles).collect())),
        cel::Value::Map(map) => {
            cel::Value::Map(Map { map: Arc::new(map.map.iter().map(|(k, v)| (k.clone(), doubles(v))).collect()) })
        }
        other => other.clone(),
    }
}

/// A value as kro writes it into an object: Go's encoding/json writes a whole float64 without a
/// fraction (`3`, not `3.0`), which is what an integer field of the API server accepts.
fn as_go_writes(value: Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(as_go_writes).collect()),
        Value::Object(fields) => Value::Object(fields.into_iter().map(|(k, v)| (k, as_go_writes(v))).collect()),
        other => other,
    }
}

/// A value as cel-go's `json.encode` (the encoders extension) makes it JSON: proto3's mapping, where an
/// integer beyond 2^53 is a string, bytes are base64, and a map's keys must be strings. The text is
/// then Go's `json.Marshal` of it, every number a float64.
fn json_value(value: &cel::Value) -> Result<Value, String> {
    const EXACT: i64 = (1 << 53) - 1;
    Ok(match value {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Int(i) if (-EXACT..=EXACT).contains(i) => Value::from(*i as f64),
        cel::Value::Int(i) => Value::String(i.to_string()),
        cel::Value::UInt(u) if *u <= EXACT as u64 => Value::from(*u as f64),
        cel::Value::UInt(u) => Value::String(u.to_string()),
        cel::Value::Float(f) if f.is_finite() => Value::from(*f),
        cel::Value::Float(f) => return Err(format!("invalid value {f} for JSON")),
        cel::Value::String(s) => Value::String(s.to_string()),
        cel::Value::Bytes(b) => {
            use base64::Engine as _;
            Value::String(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        cel::Value::List(items) => Value::Array(items.iter().map(json_value).collect::<Result<_, _>>()?),
        cel::Value::Map(map) => {
            let mut fields = serde_json::Map::new();
            for (key, value) in map.map.iter() {
                let Key::String(key) = key else { return Err(format!("unsupported map key type for JSON: {key:?}")) };
                fields.insert(key.to_string(), json_value(value)?);
            }
            Value::Object(fields)
        }
        other => other.json().map_err(|e| e.to_string())?,
    })
}

/// A JSON value as CEL sees it: whole numbers are `int` (as the API server's integers are), others
/// `double`.
pub fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: std::collections::HashMap<Key, cel::Value> =
                fields.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

/// `this.merge(other)`: `other`'s entries over `this`'s; `deep`ly, maps under the same key are merged
/// the same way.
fn merged(this: &cel::Value, other: &cel::Value, deep: bool) -> Result<cel::Value, ExecutionError> {
    let (cel::Value::Map(this), cel::Value::Map(other)) = (this, other) else {
        return Err(ExecutionError::function_error("merge", "merge needs two maps"));
    };
    let mut result: std::collections::HashMap<Key, cel::Value> = (*this.map).clone();
    for (key, value) in other.map.iter() {
        let value = match (deep, result.get(key), value) {
            (true, Some(mine @ cel::Value::Map(_)), theirs @ cel::Value::Map(_)) => merged(mine, theirs, true)?,
            _ => value.clone(),
        };
        result.insert(key.clone(), value);
    }
    Ok(cel::Value::Map(Map { map: Arc::new(result) }))
}

fn pending(err: &ExecutionError) -> bool {
    let text = err.to_string();
    matches!(err, ExecutionError::NoSuchKey(_) | ExecutionError::IndexOutOfBounds(_))
        || ["no such key", "no such field", "no such attribute", "index out of bounds"].iter().any(|s| text.contains(s))
}

/// A failure at run time in cel-go's words, where kro shows them to users (an instance's conditions
/// quote them): checked against kro's environment on cel-go (`conformance/reference`) for arithmetic,
/// conversions, missing keys and indexes, operators without an overload, and a function's own error
/// (which cel-go gives as it is, without the crate's "Error executing function" frame).
fn go_words(err: &ExecutionError) -> String {
    match err {
        ExecutionError::FunctionError { function, message } => match function.as_str() {
            "int" | "uint" | "double" if message.starts_with("string parse error") => {
                format!("type conversion error from 'string' to '{function}'")
            }
            "duration" => "type conversion error from 'string' to 'google.protobuf.Duration'".to_owned(),
            _ => message.clone(),
        },
        // Not NoSuchOverload: the crate names the function and its argument types there, which says
        // more than cel-go's bare words and is what users of the type checker's message already read.
        ExecutionError::UnsupportedBinaryOperator(..) | ExecutionError::ValuesNotComparable(..) => {
            "no such overload".to_owned()
        }
        ExecutionError::IndexOutOfBounds(cel::Value::Int(index)) => format!("index out of bounds: {index}"),
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_owned(),
        ExecutionError::Overflow(_, cel::Value::UInt(_), _) => "unsigned integer overflow".to_owned(),
        ExecutionError::Overflow(..) => "integer overflow".to_owned(),
        other => other.to_string(),
    }
}

/// The variables an expression may read (`schema`, the instance, and each resource observed, by id),
/// made into CEL values once for all the expressions evaluated with them.
pub struct Scope<'a> {
    pub variables: Vec<(&'a str, &'a Value)>,
    context: Context<'static, 'static>,
}

impl<'a> Scope<'a> {
    pub fn new(variables: Vec<(&'a str, &'a Value)>) -> Self {
        let mut context = kro_context();
        for (name, value) in &variables {
            context.add_variable_from_value(*name, to_cel(value));
        }
        Scope { variables, context }
    }

    /// A scope of CEL values as they are, for the values JSON cannot carry (`uint`, `bytes`,
    /// timestamps): what the conformance runner (`conformance/runner.rs`) gives the suites' inputs.
    pub fn typed(values: Vec<(&str, cel::Value)>) -> Scope<'static> {
        let mut context = kro_context();
        for (name, value) in values {
            context.add_variable_from_value(name.to_owned(), value);
        }
        Scope { variables: Vec::new(), context }
    }
}

/// What `omit()` gives: not a value but the field's absence (kro's `CELOmitFunction`). Accepted only
/// where kro's gate lets it in (`rgd::Features`), and only a whole template field may give it.
#[derive(Debug, PartialEq, Eq)]
struct Omit;

impl cel::objects::Opaque for Omit {
    fn runtime_type_name(&self) -> &str {
        "kro.omit"
    }
}

fn is_omit(value: &cel::Value) -> bool {
    matches!(value, cel::Value::Opaque(o) if o.runtime_type_name() == "kro.omit")
}

/// A result as kro's `GoNativeType` takes it to write: an optional value is its value (none is null),
/// and a value of a library's own type (an IP, a quantity, ...) is refused in kro's words.
fn native(value: cel::Value) -> Result<cel::Value, Unresolved> {
    Ok(match value {
        cel::Value::List(items) => {
            cel::Value::List(Arc::new(items.iter().cloned().map(native).collect::<Result<_, _>>()?))
        }
        cel::Value::Map(map) => {
            let entries = map.map.iter().map(|(k, v)| native(v.clone()).map(|v| (k.clone(), v)));
            cel::Value::Map(Map { map: Arc::new(entries.collect::<Result<_, _>>()?) })
        }
        cel::Value::Opaque(ref o) if !is_omit(&value) => match <&cel::objects::OptionalValue>::try_from(&value) {
            Ok(optional) => native(optional.value().cloned().unwrap_or(cel::Value::Null))?,
            Err(_) => return Err(Unresolved::Failed(format!("unsupported type: {}", o.runtime_type_name()))),
        },
        other => other,
    })
}

/// cel-go's optional library (version 2 and on, as kro's `cel.OptionalTypes()` has it) gives lists
/// `first()` and `last()`, which the crate's does not: renamed as the Kubernetes libraries are.
const OPTIONAL_LISTS: [(&str, &str); 2] = [("first", "@optional.first"), ("last", "@optional.last")];

/// `list.first()` (or `last()`, with `last`): the element as an optional value, none for an empty list.
fn end_of(args: &[cel::Value], last: bool) -> Result<cel::Value, ExecutionError> {
    static OF: LazyLock<cel::IdedExpr> = LazyLock::new(|| super::expr::parse(&ENV, "optional.of(a0)").expect("CEL"));
    static NONE: LazyLock<cel::IdedExpr> = LazyLock::new(|| super::expr::parse(&ENV, "optional.none()").expect("CEL"));
    let function = if last { "last" } else { "first" };
    let (Some(cel::Value::List(items)), 1) = (args.first(), args.len()) else {
        return Err(ExecutionError::function_error(function, "no such overload"));
    };
    let mut context = Context::with_env(ENV.clone());
    let end = if last { items.last() } else { items.first() };
    match end {
        Some(value) => {
            context.add_variable_from_value("a0", value.clone());
            cel::Value::resolve(&OF, &context)
        }
        None => cel::Value::resolve(&NONE, &context),
    }
}

/// `args[0].function(args[1..])` (or `function(args...)`, not a `member`), as the environment's own
/// overload makes it.
fn call_function(function: &str, args: &[cel::Value], member: bool) -> Result<cel::Value, ExecutionError> {
    use cel::common::ast::{CallExpr, Expr, IdedExpr};
    let ident = |i: usize| IdedExpr { id: i as u64 + 2, expr: Expr::Ident(format!("a{i}")) };
    if member && args.is_empty() {
        return Err(ExecutionError::missing_argument_or_target());
    }
    let first = usize::from(member);
    let call = IdedExpr {
        id: 1,
        expr: Expr::Call(CallExpr {
            func_name: function.to_owned(),
            target: member.then(|| Box::new(ident(0))),
            args: (first..args.len()).map(ident).collect(),
        }),
    };
    let mut context = Context::with_env(ENV.clone());
    for (i, value) in args.iter().enumerate() {
        context.add_variable_from_value(format!("a{i}"), value.clone());
    }
    cel::Value::resolve(&call, &context)
}

/// A context with kro's functions, and no variables yet.
fn kro_context() -> Context<'static, 'static> {
    let mut context = Context::with_env(ENV.clone());
    context
        .add_function(cost::METER, || cost::step().map_err(|e| ExecutionError::function_error(cost::METER, e)))
        .expect(DISTINCT);
    context
        .add_function(cost::BUILT, |value: cel::Value| match cost::charge(&value) {
            Ok(()) => Ok(value),
            Err(why) => Err(ExecutionError::function_error(cost::BUILT, why)),
        })
        .expect(DISTINCT);
    for (function, reckoned) in cost::RECKONED {
        context
            .add_function(reckoned, move |Arguments(args): Arguments| {
                cost::would_build(function, &args).map_err(|why| ExecutionError::function_error(function, why))?;
                call_function(function, &args, true)
            })
            .expect(DISTINCT);
    }
    for member in kubernetes::MEMBERS {
        let function = kubernetes::member(member);
        context
            .add_function(&kubernetes::renamed(member), move |Arguments(args): Arguments| function(&args))
            .expect(DISTINCT);
    }
    for (name, function) in kubernetes::GLOBALS {
        context.add_function(name, move |Arguments(args): Arguments| function(&args)).expect(DISTINCT);
    }
    context
        .add_function(&kubernetes::renamed("string"), |Arguments(args): Arguments| match &args[..] {
            [value] => kubernetes::string(value).map_or_else(|| call_function("string", &args, false), Ok),
            _ => call_function("string", &args, false),
        })
        .expect(DISTINCT);
    context.add_function("@optional.first", |Arguments(args): Arguments| end_of(&args, false)).expect(DISTINCT);
    context.add_function("@optional.last", |Arguments(args): Arguments| end_of(&args, true)).expect(DISTINCT);
    context.add_function(macros::KEYS, macros::keys).expect(DISTINCT);
    context.add_function(macros::PAIRS_TO_MAP, macros::pairs_to_map).expect(DISTINCT);
    context.add_function(macros::ENTRIES_TO_MAP, macros::entries_to_map).expect(DISTINCT);
    context.add_function("omit", || cel::Value::Opaque(Arc::new(Omit))).expect(DISTINCT);
    context
        .add_function("random.seededString", |n: i64, seed: Arc<String>| {
            seeded_string(n, &seed)
                .map(|s| cel::Value::String(Arc::new(s)))
                .map_err(|e| ExecutionError::function_error("random.seededString", e))
        })
        .expect(DISTINCT);
    context
        .add_function("random.seededInt", |min: i64, max: i64, seed: Arc<String>| {
            seeded_int(min, max, &seed)
                .map(cel::Value::Int)
                .map_err(|e| ExecutionError::function_error("random.seededInt", e))
        })
        .expect(DISTINCT);
    context
        .add_function("json.unmarshal", |text: Arc<String>| {
            serde_json::from_str::<Value>(&text)
                .map(|v| doubles(&to_cel(&v)))
                .map_err(|e| ExecutionError::function_error("json.unmarshal", format!("json.unmarshal failed: {e}")))
        })
        .expect(DISTINCT);
    context
        .add_function("json.marshal", |value: cel::Value| {
            value.json().map(|v| cel::Value::String(Arc::new(go_json(&v)))).map_err(|e| {
                ExecutionError::function_error("json.marshal", format!("json.marshal failed to convert value: {e}"))
            })
        })
        .expect(DISTINCT);
    context
        .add_function("json.encode", |value: cel::Value| {
            let json = json_value(&value).map_err(|e| ExecutionError::function_error("json.encode", e))?;
            let mut text = String::new();
            crate::go_json::write(&json, crate::go_json::Numbers::Float64, &mut text);
            Ok::<_, ExecutionError>(cel::Value::String(Arc::new(text)))
        })
        .expect(DISTINCT);
    context
        .add_function("hash.fnv64a", |text: Arc<String>| -> cel::Value {
            use std::hash::Hasher;
            let mut hasher = fnv::FnvHasher::default();
            hasher.write(text.as_bytes());
            cel::Value::Bytes(Arc::new(hasher.finish().to_be_bytes().to_vec()))
        })
        .expect(DISTINCT);
    context
        .add_function("hash.sha256", |text: Arc<String>| -> cel::Value {
            cel::Value::Bytes(Arc::new(Sha256::digest(text.as_bytes()).to_vec()))
        })
        .expect(DISTINCT);
    context
        .add_function("hash.md5", |text: Arc<String>| -> cel::Value {
            cel::Value::Bytes(Arc::new(md5::Md5::digest(text.as_bytes()).to_vec()))
        })
        .expect(DISTINCT);
    context
        .add_function("merge", |This(this): This<cel::Value>, other: cel::Value| merged(&this, &other, false))
        .expect(DISTINCT);
    context
        .add_function("deepMerge", |This(this): This<cel::Value>, other: cel::Value| merged(&this, &other, true))
        .expect(DISTINCT);
    context.add_function("runtime.newCondition", |given: cel::Value| new_condition(&given)).expect(DISTINCT);
    context
        .add_function("runtime.condition", |object: cel::Value, kind: Arc<String>| condition_of(&object, &kind))
        .expect(DISTINCT);
    context
        .add_function("lists.setAtIndex", |list: Arc<Vec<cel::Value>>, index: i64, value: cel::Value| {
            at_index("lists.setAtIndex", &list, index, false).map(|i| {
                let mut items = (*list).clone();
                items[i] = value;
                cel::Value::List(Arc::new(items))
            })
        })
        .expect(DISTINCT);
    context
        .add_function("lists.insertAtIndex", |list: Arc<Vec<cel::Value>>, index: i64, value: cel::Value| {
            at_index("lists.insertAtIndex", &list, index, true).map(|i| {
                let mut items = (*list).clone();
                items.insert(i, value);
                cel::Value::List(Arc::new(items))
            })
        })
        .expect(DISTINCT);
    context
        .add_function("lists.removeAtIndex", |list: Arc<Vec<cel::Value>>, index: i64| {
            at_index("lists.removeAtIndex", &list, index, false).map(|i| {
                let mut items = (*list).clone();
                items.remove(i);
                cel::Value::List(Arc::new(items))
            })
        })
        .expect(DISTINCT);
    context
}

/// The keys a condition has, in kro's order; `runtime.newCondition` takes these and no others.
pub const CONDITION_KEYS: [&str; 4] = ["type", "status", "reason", "message"];

/// A condition as a CEL map of its four strings.
fn condition_value(fields: [String; 4]) -> cel::Value {
    let map: std::collections::HashMap<Key, cel::Value> = CONDITION_KEYS
        .iter()
        .zip(fields)
        .map(|(k, v)| (Key::String(Arc::new((*k).to_owned())), cel::Value::String(Arc::new(v))))
        .collect();
    cel::Value::Map(Map { map: Arc::new(map) })
}

fn string_at(map: &Map, key: &str) -> Option<String> {
    match map.map.get(&Key::String(Arc::new(key.to_owned()))) {
        Some(cel::Value::String(s)) => Some((**s).clone()),
        _ => None,
    }
}

/// `runtime.newCondition({type, status, reason, message})`: the condition, checked as kro checks it.
fn new_condition(given: &cel::Value) -> Result<cel::Value, ExecutionError> {
    let fail =
        |why: String| ExecutionError::function_error("runtime.newCondition", format!("runtime.newCondition: {why}"));
    let cel::Value::Map(map) = given else { return Err(fail("argument must be a map literal".into())) };
    for key in map.map.keys() {
        match key {
            Key::String(k) if CONDITION_KEYS.contains(&k.as_str()) => {}
            other => {
                return Err(fail(format!("unknown key {other:?} (allowed: type, status, reason, message)")));
            }
        }
    }
    let [kind, status, reason, message] = CONDITION_KEYS.map(|k| string_at(map, k));
    let kind = kind.ok_or_else(|| fail("'type' is required".into()))?;
    let status = status.ok_or_else(|| fail("'status' is required".into()))?;
    if !["True", "False", "Unknown"].contains(&status.as_str()) {
        return Err(fail(format!("status must be True, False or Unknown, not {status:?}")));
    }
    Ok(condition_value([kind, status, reason.unwrap_or_default(), message.unwrap_or_default()]))
}

/// `runtime.condition(object, type)`: the condition of that type in the object's
/// `status.conditions`, or an empty one.
fn condition_of(object: &cel::Value, kind: &str) -> cel::Value {
    let found = match object {
        cel::Value::Map(map) => match map.map.get(&Key::String(Arc::new("status".into()))) {
            Some(cel::Value::Map(status)) => match status.map.get(&Key::String(Arc::new("conditions".into()))) {
                Some(cel::Value::List(items)) => items.iter().find_map(|item| match item {
                    cel::Value::Map(c) if string_at(c, "type").as_deref() == Some(kind) => Some(c.clone()),
                    _ => None,
                }),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    };
    match found {
        Some(c) => condition_value(CONDITION_KEYS.map(|k| string_at(&c, k).unwrap_or_default())),
        None => condition_value(Default::default()),
    }
}

/// `index` as a place in `list` (or, `inserting`, also just past its end), or kro's error.
fn at_index(function: &str, list: &[cel::Value], index: i64, inserting: bool) -> Result<usize, ExecutionError> {
    let size = list.len() as i64;
    let (fits, bounds) = match inserting {
        true => (index <= size, format!("[0, {size}]")),
        false => (index < size, format!("[0, {size})")),
    };
    match index >= 0 && fits {
        true => Ok(index as usize),
        false => {
            Err(ExecutionError::function_error(function, format!("{function}: index {index} out of bounds {bounds}")))
        }
    }
}

const DISTINCT: &str = "kro's functions have names of their own";

impl Scope<'_> {
    /// Parsed (at most the parser's nesting depth), metered (`cost.rs`), evaluated, and checked for
    /// size.
    pub fn value(&self, expression: &str) -> Result<cel::Value, Unresolved> {
        let mut program = super::expr::parse(&ENV, expression).map_err(Unresolved::Failed)?;
        kubernetes::rename_libraries(&mut program);
        kubernetes::rename(&mut program, &OPTIONAL_LISTS);
        cost::meter(&mut program);
        cost::start();
        let value = cel::Value::resolve(&program, &self.context);
        if cost::exceeded() {
            return Err(Unresolved::Failed(cost::COST_EXCEEDED.to_owned()));
        }
        let value = value.map_err(|e| match pending(&e) {
            true => Unresolved::Pending(go_words(&e)),
            false => Unresolved::Failed(go_words(&e)),
        })?;
        if cost::larger_than(&value, cost::MAX_VALUE_BYTES) {
            return Err(Unresolved::Failed(format!(
                "the expression's value is larger than {} MiB, the most the API server accepts in a request",
                cost::MAX_VALUE_BYTES >> 20
            )));
        }
        Ok(value)
    }

    /// The value of one expression, as JSON.
    pub fn evaluate(&self, expression: &str) -> Result<Value, Unresolved> {
        let value = native(self.value(expression)?)?;
        if is_omit(&value) {
            return Err(Unresolved::Failed("omit() can only be used in resource template expressions".into()));
        }
        value.json().map(as_go_writes).map_err(|e| Unresolved::Failed(e.to_string()))
    }

    /// A template field's value, or `None` when its expression gives `omit()`: the field is left out.
    pub fn render_field(&self, template: &Template) -> Result<Option<Value>, Unresolved> {
        match template {
            Template::Whole(expression) => {
                let value = native(self.value(expression)?)?;
                match is_omit(&value) {
                    true => Ok(None),
                    false => value.json().map(|v| Some(as_go_writes(v))).map_err(|e| Unresolved::Failed(e.to_string())),
                }
            }
            Template::Joined(_) => self.render(template).map(Some),
        }
    }

    /// A template's value: the expression's for a whole one; the text with each expression's string put
    /// in for a joined one.
    pub fn render(&self, template: &Template) -> Result<Value, Unresolved> {
        match template {
            Template::Whole(expression) => self.evaluate(expression),
            Template::Joined(pieces) => {
                let mut text = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(t) => text.push_str(t),
                        Piece::Expression(e) => match self.evaluate(e)? {
                            Value::String(s) => text.push_str(&s),
                            other => {
                                return Err(Unresolved::Failed(format!(
                                    "expression {e:?} returns {} where a string is expected; use string(...)",
                                    super::super::children::json_type(&other)
                                )));
                            }
                        },
                    }
                }
                Ok(Value::String(text))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failures_at_run_time_are_in_cel_gos_words() {
        let scope = Scope::new(vec![]);
        let failed = |e: &str| match scope.evaluate(e) {
            Err(Unresolved::Failed(why)) => why,
            other => panic!("{e}: {other:?}"),
        };
        // Each as kro's environment on cel-go v0.31 says it.
        assert_eq!(failed("10 / 0"), "division by zero");
        assert_eq!(failed("10 % 0"), "modulus by zero");
        assert_eq!(failed("9223372036854775807 + 1"), "integer overflow");
        assert_eq!(failed("int('abc')"), "type conversion error from 'string' to 'int'");
        assert_eq!(failed("uint(-1)"), "unsigned integer overflow");
        assert_eq!(failed("dyn(1) + dyn('a')"), "no such overload");
        assert_eq!(failed("'abc'.substring(5)"), "index out of range: 5");
        // Data not there yet waits, in cel-go's words too.
        let Err(Unresolved::Pending(why)) = scope.evaluate("{'a': 1}['b']") else { panic!() };
        assert_eq!(why, "no such key: b");
    }

    #[test]
    fn seeded_values_are_kros() {
        // Computed with kro's Go implementation (pkg/cel/library/random.go).
        assert_eq!(seeded_string(10, "abc").unwrap(), "r6qfjs5dr6");
        assert_eq!(seeded_string(12, "3f2a9c1e-uid").unwrap(), "ag7bab4fag7b");
        assert_eq!(seeded_string(40, "x").unwrap(), "iot11jnp".repeat(5));
        assert_eq!((seeded_int(10, 20, "seed").unwrap(), seeded_int(-5, 1_000_000, "kro").unwrap()), (12, 212150));
        assert!(seeded_string(0, "abc").is_err());
        assert!(seeded_int(5, 5, "x").is_err());
    }

    #[test]
    fn expressions_read_the_instance_and_resources() {
        let instance =
            json!({"metadata": {"name": "demo", "uid": "u-1"}, "spec": {"replicas": 3, "names": ["a", "b"]}});
        let config = json!({"data": {"KEY": "v"}});
        let scope = Scope::new(vec![("schema", &instance), ("config", &config)]);
        assert_eq!(scope.evaluate("schema.spec.replicas + 1").unwrap(), json!(4));
        assert_eq!(scope.evaluate("schema.spec.names.join(\",\")").unwrap(), json!("a,b"));
        assert_eq!(scope.evaluate("config.?data.MISSING.orValue(\"none\")").unwrap(), json!("none"));
        assert_eq!(
            scope
                .render(&Template::Joined(vec![
                    Piece::Expression("schema.metadata.name".into()),
                    Piece::Text("-svc".into())
                ]))
                .unwrap(),
            json!("demo-svc")
        );
        assert!(matches!(scope.evaluate("config.status.ready"), Err(Unresolved::Pending(_))));
        assert!(matches!(scope.evaluate("schema.spec.names[5]"), Err(Unresolved::Pending(_))));
        assert!(matches!(scope.evaluate("schema.spec.replicas + \"x\""), Err(Unresolved::Failed(_))));
        assert!(matches!(
            scope.render(&Template::Joined(vec![Piece::Expression("schema.spec.replicas".into())])),
            Err(Unresolved::Failed(_))
        ));
        assert_eq!(
            scope.evaluate("random.seededString(5, schema.metadata.uid)").unwrap(),
            json!(seeded_string(5, "u-1").unwrap())
        );
    }

    #[test]
    fn kros_json_hash_and_maps_libraries() {
        let instance = json!({"spec": {"labels": {"a": "1", "b": "2"}, "doc": "{\"x\": [1, 2], \"y\": \"<&>\"}"}});
        let scope = Scope::new(vec![("schema", &instance)]);
        assert_eq!(scope.evaluate("json.unmarshal(schema.spec.doc).x[1]").unwrap(), json!(2));
        // Numbers as Go's encoding/json decodes them into kro's CEL: doubles, written as Go writes a
        // float64 (a whole one without its fraction, as an integer field takes it).
        assert_eq!(scope.evaluate("json.unmarshal(schema.spec.doc).x[1] / 4.0").unwrap(), json!(0.5));
        assert_eq!(scope.evaluate("json.unmarshal(schema.spec.doc).x[1] == 2.0").unwrap(), json!(true));
        assert_eq!(scope.evaluate("[3.0, 2.5, -0.0, 1e300]").unwrap(), json!([3, 2.5, 0, 1e300]));
        // As Go's encoding/json writes it: keys sorted, HTML characters escaped.
        assert_eq!(
            scope.evaluate("json.marshal(json.unmarshal(schema.spec.doc))").unwrap(),
            json!("{\"x\":[1,2],\"y\":\"\\u003c\\u0026\\u003e\"}")
        );
        // Digests of "kro", as `printf kro | sha256sum` and `md5sum` give them.
        assert_eq!(
            scope.evaluate("base64.encode(hash.sha256('kro'))").unwrap(),
            json!("U0eNuU6mXqd/DNkFbNFpJtfmYF4Lf3QlcZTqhVNSGFQ=")
        );
        assert_eq!(scope.evaluate("base64.encode(hash.md5('kro'))").unwrap(), json!("XG0BWHxGBgSIxW5khNPh6Q=="));
        assert_eq!(
            scope.evaluate("base64.encode(hash.fnv64a('kro'))").unwrap(),
            json!("Pec4GTZz7+U="),
            "as Go's fnv.New64a"
        );
        assert_eq!(
            scope.evaluate("schema.spec.labels.merge({'b': 'x', 'c': '3'})").unwrap(),
            json!({"a": "1", "b": "x", "c": "3"})
        );
        assert_eq!(
            scope.evaluate("{'m': {'a': 1, 'b': 2}, 'k': 1}.deepMerge({'m': {'b': 3}})").unwrap(),
            json!({"m": {"a": 1, "b": 3}, "k": 1})
        );
        assert_eq!(scope.evaluate("lists.setAtIndex([1, 2, 3], 1, 9)").unwrap(), json!([1, 9, 3]));
        assert_eq!(scope.evaluate("lists.insertAtIndex([1, 2], 2, 9)").unwrap(), json!([1, 2, 9]));
        assert_eq!(scope.evaluate("lists.removeAtIndex(['a', 'b'], 0)").unwrap(), json!(["b"]));
        let Err(Unresolved::Failed(why)) = scope.evaluate("lists.setAtIndex([1], 1, 9)") else { panic!() };
        assert!(why.contains("lists.setAtIndex: index 1 out of bounds [0, 1)"), "{why}");
    }

    fn failure(scope: &Scope, expression: &str) -> String {
        match scope.evaluate(expression) {
            Err(Unresolved::Failed(why)) => why,
            other => panic!("{expression}: {}", format!("{other:?}").chars().take(300).collect::<String>()),
        }
    }

    #[test]
    fn an_instance_field_cannot_make_an_expression_unbounded() {
        let instance = json!({"spec": {"length": 1_000_000_000_000_i64, "items": (0..1000).collect::<Vec<_>>()}});
        let scope = Scope::new(vec![("schema", &instance)]);
        let why = failure(&scope, "random.seededString(schema.spec.length, 'seed')");
        assert!(why.contains("length must be at most 3145728"), "{why}");
        // 10⁹ steps of nested maps: stopped at the millionth (unstopped, the test would not end).
        for expression in [
            "schema.spec.items.map(a, schema.spec.items.map(b, schema.spec.items.map(c, a + b + c)))",
            "schema.spec.items.all(a, schema.spec.items.all(b, schema.spec.items.all(c, a + b + c >= 0)))",
            "schema.spec.items.exists(a, schema.spec.items.exists(b, schema.spec.items.exists(c, c < 0)))",
            "schema.spec.items.filter(a, schema.spec.items.filter(b, schema.spec.items.exists_one(c, c == a)).size() > 0)",
            "schema.spec.items.transformList(i, a, schema.spec.items.transformList(j, b, schema.spec.items.all(k, c, c >= 0)))",
            "schema.spec.items.transformMap(i, a, schema.spec.items.exists(j, b, schema.spec.items.existsOne(k, c, c < 0)))",
            // An error absorbed by `||` still fails the whole expression once the limit is passed.
            "schema.spec.items.map(a, schema.spec.items.map(b, schema.spec.items.map(c, c))).size() > 0 || true",
        ] {
            assert_eq!(failure(&scope, expression), cost::COST_EXCEEDED, "{expression}");
        }
        // Just under a million in all is within the limit, and the same as unmetered: 998 + 998² steps,
        // and what was built (998 lists of one number, a step each; 998 numbers in a list, 899 steps).
        let under = json!({"spec": {"items": (0..998).collect::<Vec<_>>()}});
        let under = Scope::new(vec![("schema", &under)]);
        assert_eq!(
            under.evaluate("schema.spec.items.map(a, schema.spec.items.filter(b, b == a)).size()").unwrap(),
            json!(998)
        );
        assert_eq!(scope.evaluate("schema.spec.items.exists_one(a, a == 7)").unwrap(), json!(true));
        assert_eq!(scope.evaluate("[1, 2, 3].map(x, x > 1, x * 2)").unwrap(), json!([4, 6]));
        assert_eq!(scope.evaluate("[1, 2, 3].all(x, x > 0) && ![1, 2].exists(x, x > 5)").unwrap(), json!(true));
        // CEL's error absorption inside a comprehension, metered or not.
        assert_eq!(scope.evaluate("[0, 1].exists(x, 1 / x > 0)").unwrap(), json!(true));
    }

    /// cel-go's Bindings and TwoVarComprehensions, which kro enables: the examples of cel-go's own
    /// documentation of them, with the values it gives.
    #[test]
    fn bindings_and_two_variable_comprehensions_give_what_cel_go_gives() {
        let instance = json!({"spec": {"ports": {"http": 80, "https": 443}, "names": ["a", "b", "a"]}});
        let scope = Scope::new(vec![("schema", &instance)]);
        for (expression, expected) in [
            ("cel.bind(a, 'hello', cel.bind(b, 'world', a + b + b + a))", json!("helloworldworldhello")),
            ("cel.bind(valid, ['a', 'b'], ['a', 'c'].map(x, x in valid))", json!([true, false])),
            ("[1, 2, 3].all(i, j, i < j)", json!(true)),
            ("{'hello': 'world', 'taco': 'taco'}.all(k, v, k != v)", json!(false)),
            ("{'h': ['hello', 'hi'], 'j': ['joke', 'jog']}.all(k, vals, vals.all(v, v.startsWith(k)))", json!(true)),
            (
                "{'greeting': 'hello', 'farewell': 'goodbye'}.exists(k, v, k.startsWith('good') || v.endsWith('bye'))",
                json!(true),
            ),
            ("[1, 2, 4, 8, 16].exists(i, v, v == 1024 && i == 10)", json!(false)),
            ("[1, 2, 1, 3, 1, 4].existsOne(i, v, i == 1 || v == 1)", json!(false)),
            ("[1, 1, 2, 2, 3, 3].existsOne(i, v, i == 2 && v == 2)", json!(true)),
            ("{'i': 0, 'j': 1, 'k': 2}.exists_one(i, v, i == 'l' || v == 1)", json!(true)),
            ("[1, 2, 3].transformList(indexVar, valueVar, (indexVar * valueVar) + valueVar)", json!([1, 4, 9])),
            ("[1, 2, 3].transformList(i, v, i % 2 == 0, (i * v) + v)", json!([1, 9])),
            ("{'greeting': 'hello'}.transformList(k, v, k + '=' + v)", json!(["greeting=hello"])),
            ("[1, 2, 3].transformMap(i, v, (i * v) + v)", json!({"0": 1, "1": 4, "2": 9})),
            ("[1, 2, 3].transformMap(i, v, i % 2 == 0, (i * v) + v)", json!({"0": 1, "2": 9})),
            ("{'greeting': 'hello'}.transformMap(k, v, v + '!')", json!({"greeting": "hello!"})),
            (
                "{'greeting': 'hello'}.transformMapEntry(keyVar, valueVar, {valueVar: keyVar})",
                json!({"hello": "greeting"}),
            ),
            ("[1, 2, 3].transformMapEntry(i, v, {string(v): i})", json!({"1": 0, "2": 1, "3": 2})),
            ("schema.spec.ports.transformMap(name, port, port + 1)", json!({"http": 81, "https": 444})),
            ("schema.spec.ports.all(name, port, port > 0 && name.startsWith('http'))", json!(true)),
            ("schema.spec.names.transformList(i, n, i > 0, n + string(i))", json!(["b1", "a2"])),
            // Nested: each binds its own target and element.
            ("[[1, 2], [3]].transformList(i, row, row.transformList(j, v, v * 10 + i))", json!([[10, 20], [31]])),
        ] {
            assert_eq!(scope.evaluate(expression).unwrap(), expected, "{expression}");
        }
        for (expression, words) in [
            (
                "{'greeting': 'aloha', 'farewell': 'aloha'}.transformMapEntry(k, v, {v: k})",
                "insert failed: key aloha already exists",
            ),
            ("[1, 2].all(i, i, true)", "duplicate variable name: i"),
            ("[1, 2].all(i, 1, true)", "argument must be a simple name"),
            ("[1, 2].all(@result, v, true)", "Syntax error"),
            ("cel.bind(1, 2, 3)", "cel.bind() variable names must be simple identifiers"),
            ("'abc'.all(i, v, true)", "two-variable comprehensions take a list or a map"),
            // Absorbed as cel-go absorbs it: `all` is false once an element is, whatever errors.
        ] {
            let why = failure(&scope, expression);
            assert!(why.contains(words), "{expression}: {why}");
        }
        let why = failure(&scope, "math.greatest(1, 2)");
        assert!(why.contains("Undeclared reference to 'math'"), "kro has no math extension: {why}");
        assert_eq!(scope.evaluate("[0, 1].all(i, v, 1 / v > 1)").unwrap(), json!(false));
        assert_eq!(scope.evaluate("[0, 1].exists(i, v, 1 / v == 1)").unwrap(), json!(true));
        // `bind` on anything but `cel` is not the macro.
        let why = failure(&scope, "schema.bind(a, 1, a)");
        assert!(!why.contains("cel.bind"), "{why}");
    }

    /// The apiserver's Lists and Regex libraries, which kro adds: the apiserver's documented examples,
    /// and the matches as Go's regexp finds them (printed by Go 1.26 here), empty ones included.
    #[test]
    fn kubernetes_lists_and_regex_libraries_give_what_the_apiserver_gives() {
        let instance = json!({"spec": {"replicas": [3, 1, 2], "names": ["b", "a"]}});
        let scope = Scope::new(vec![("schema", &instance)]);
        for (expression, expected) in [
            ("[1, 2, 3].isSorted()", json!(true)),
            ("['a', 'b', 'b', 'c'].isSorted()", json!(true)),
            ("[2.0, 1.0].isSorted()", json!(false)),
            ("[1].isSorted() && [].isSorted()", json!(true)),
            ("[1, 3].sum()", json!(4)),
            ("[1.5, 3.0].sum()", json!(4.5)),
            ("[duration('1m'), duration('1s')].sum() == duration('61s')", json!(true)),
            ("[].sum()", json!(0)),
            ("schema.spec.replicas.min()", json!(1)),
            ("schema.spec.replicas.max()", json!(3)),
            ("schema.spec.names.min()", json!("a")),
            ("[1, 2, 3, 2].indexOf(2)", json!(1)),
            ("[1, 2, 3, 2].lastIndexOf(2)", json!(3)),
            ("[1, 2].indexOf(5)", json!(-1)),
            // A string's indexOf is the strings extension's, as before.
            ("'abcabc'.indexOf('c')", json!(2)),
            ("'abcabc'.lastIndexOf('c')", json!(5)),
            ("'abcabc'.indexOf('c', 3)", json!(5)),
            ("'123 abc 456'.find('[0-9]*')", json!("123")),
            ("'abc 123'.find('[0-9]*')", json!("")),
            ("'abc 123'.find('xyz')", json!("")),
            ("'123 abc 456'.findAll('[0-9]*')", json!(["123", "", "", "", "", "456"])),
            ("'abc 123'.findAll('[0-9]*')", json!(["", "", "", "", "123"])),
            ("'baaac'.findAll('a*')", json!(["", "aaa", ""])),
            ("'xyz'.findAll('')", json!(["", "", "", ""])),
            ("'123 abc 456'.findAll('[0-9]*', 1)", json!(["123"])),
            ("'a1b22c333'.findAll('[0-9]+', 0)", json!([])),
            ("'héllo'.findAll('.')", json!(["h", "é", "l", "l", "o"])),
            // cel-go's optional library, version 2: a list's ends as optional values.
            ("[1, 2, 3].first().value()", json!(1)),
            ("[1, 2, 3].last().value()", json!(3)),
            ("[].first().hasValue() || [].last().hasValue()", json!(false)),
            ("schema.spec.names.last().orValue('none')", json!("a")),
            ("[].first().orValue('none')", json!("none")),
        ] {
            assert_eq!(scope.evaluate(expression).unwrap(), expected, "{expression}");
        }
        for (expression, words) in [
            ("[].min()", "min called on empty list"),
            ("[].max()", "max called on empty list"),
            ("[1, 'a'].isSorted()", "no such overload"),
            ("'x'.find('(')", "Illegal regex"),
        ] {
            let why = failure(&scope, expression);
            assert!(why.contains(words), "{expression}: {why}");
        }
    }

    /// The apiserver's IP, CIDR, Quantity, Semver and URL libraries, which kro adds, as an RGD reads an
    /// instance's fields with them; each result here is cel-go's (kro v0.9.4's environment, run with
    /// conformance/reference), as are the refusals.
    #[test]
    fn kubernetes_network_quantity_semver_and_url_libraries_give_what_cel_go_gives() {
        let instance =
            json!({"spec": {"memory": "1536Mi", "limit": "2Gi", "cidr": "10.0.0.0/16", "version": "v1.29.3"}});
        let scope = Scope::new(vec![("schema", &instance)]);
        for (expression, expected) in [
            ("quantity(schema.spec.memory).isLessThan(quantity(schema.spec.limit))", json!(true)),
            ("quantity(schema.spec.memory).add(quantity('512Mi')) == quantity(schema.spec.limit)", json!(true)),
            ("quantity(schema.spec.limit).sub(1).asInteger()", json!(2147483647)),
            ("quantity('1.5').asApproximateFloat()", json!(1.5)),
            ("quantity('1000m').isInteger() || quantity('1.5Ki').isInteger()", json!(false)),
            ("quantity('1k').isInteger() && quantity('1k').asInteger() == 1000", json!(true)),
            ("quantity('-2').sign()", json!(-1)),
            ("quantity('1G').compareTo(quantity('1Gi'))", json!(-1)),
            ("isQuantity('1.5Gi') && !isQuantity('1.5GiB')", json!(true)),
            ("cidr(schema.spec.cidr).containsIP('10.0.255.1')", json!(true)),
            ("cidr(schema.spec.cidr).containsCIDR(cidr('10.0.4.0/24'))", json!(true)),
            ("string(cidr('192.168.0.1/24').masked())", json!("192.168.0.0/24")),
            ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", json!(true)),
            ("cidr(schema.spec.cidr).prefixLength()", json!(16)),
            ("ip('2001:DB8::68').family() == 6 && string(ip('2001:DB8::68')) == '2001:db8::68'", json!(true)),
            ("ip('127.0.0.1').isLoopback() && ip('10.1.2.3').isGlobalUnicast()", json!(true)),
            ("ip.isCanonical('2001:db8::68') && !ip.isCanonical('2001:DB8::68')", json!(true)),
            ("isIP('1.2.3') || isCIDR('10.0.0.0/33')", json!(false)),
            ("string(1) + string(b'x')", json!("1x")),
            ("semver('1.29.3').isGreaterThan(semver('1.29.3-rc.1'))", json!(true)),
            ("semver('1.2.3').major() + semver('1.2.3').minor() + semver('1.2.3').patch()", json!(6)),
            ("semver('1.0.0-alpha.1').compareTo(semver('1.0.0-alpha.beta'))", json!(-1)),
            ("isSemver(schema.spec.version)", json!(false)),
            ("url('https://user@example.com:8443/a%20b?x=1&x=2').getQuery()", json!({"x": ["1", "2"]})),
            ("url('https://example.com:8443/a b').getEscapedPath()", json!("/a%20b")),
            ("url('https://[::1]:80/').getHostname() + url('https://[::1]:80/').getPort()", json!("::180")),
            ("url('HTTPS://h/').getScheme() + url('https://h/').getHost()", json!("httpsh")),
            ("isURL('example.com') || isURL('')", json!(false)),
            // The strings extension as cel-go has it now: an offset past the end finds nothing.
            ("'tacocat'.indexOf('a', 30) + 'tacocat'.lastIndexOf('a', 30)", json!(-2)),
            ("'tacocat'.indexOf('', 30) + '©αT'.lastIndexOf('α')", json!(8)),
            // The encoders extension's json.encode: Go's encoding of proto3 JSON.
            (
                "json.encode({'b': [1, 2.5, true, null], 'a': b'hi', 'c': 9007199254740993})",
                json!(r#"{"a":"aGk=","b":[1,2.5,true,null],"c":"9007199254740993"}"#),
            ),
        ] {
            assert_eq!(scope.evaluate(expression).unwrap(), expected, "{expression}");
        }
        for (expression, words) in [
            ("quantity('12Mx')", "quantities must match the regular expression"),
            ("quantity('1.5').asInteger()", "cannot convert value to integer"),
            ("ip('::ffff:1.2.3.4')", "IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed"),
            ("cidr('10.0.0.0')", "network address parse error during conversion from string"),
            ("semver('1.2')", "No Major.Minor.Patch elements found"),
            // kro adds the Semver library at its first version, which has no normalize argument.
            ("semver('v1.2', true)", "no such overload"),
            ("url('example.com')", "URL parse error during conversion from string: parse \"example.com\": invalid URI"),
            ("'abc'.indexOf('a', -1)", "index out of range: -1"),
            ("json.encode({1: 2})", "unsupported map key type"),
            ("ip('1.2.3.4').family(1)", "no such overload"),
            ("quantity('1').isGreaterThan(semver('1.0.0'))", "no such overload"),
        ] {
            let why = failure(&scope, expression);
            assert!(why.contains(words), "{expression}: {why}");
        }
        // Writing one of these values into a field fails, as it does in kro (no JSON form); an optional
        // value is written as its value.
        assert_eq!(failure(&scope, "[1, {'a': ip('1.2.3.4')}]"), "unsupported type: net.IP");
        assert_eq!(scope.evaluate("[optional.of(1), optional.none()]").unwrap(), json!([1, null]));
    }

    /// A call whose one result is many times its arguments is refused before it is built, and copies
    /// piled up in a comprehension run out of steps: before, each of these built gigabytes.
    #[test]
    fn no_expression_builds_more_than_a_request_on_its_way() {
        let text = "x".repeat(1 << 20);
        let instance = json!({"spec": {"text": text, "short": "ab", "items": (0..2000).collect::<Vec<_>>()}});
        let scope = Scope::new(vec![("schema", &instance)]);
        for (expression, words) in [
            ("schema.spec.text.replace('', schema.spec.text)", "replace's result would be larger than 3 MiB"),
            ("schema.spec.text.replace('x', 'xxxx', 2000000)", "replace's result would be larger than 3 MiB"),
            ("schema.spec.items.map(i, schema.spec.short).join(schema.spec.text)", "join's result would be larger"),
            ("lists.range(3).map(i, schema.spec.text).join('')", "the value would be larger than 3 MiB"),
            ("'%s%s'.format([schema.spec.text, schema.spec.text]) + schema.spec.text + 'y'", "larger than 3 MiB"),
            ("[[schema.spec.text, schema.spec.text], [schema.spec.text, schema.spec.text]].flatten()", "larger than 3"),
        ] {
            let why = failure(&scope, expression);
            assert!(why.contains(words), "{expression}: {why}");
        }
        for expression in [
            "schema.spec.items.map(i, schema.spec.text.upperAscii()).size()",
            "schema.spec.items.map(i, schema.spec.text + 'y').size() > 0 || true",
            "schema.spec.items.map(i, base64.encode(bytes(schema.spec.text))).size()",
            "schema.spec.items.filter(i, [schema.spec.text].size() > 0).size()",
        ] {
            assert_eq!(failure(&scope, expression), cost::COST_EXCEEDED, "{expression}");
        }
        // The same calls within the bounds give what the environment's own overloads give.
        for (expression, expected) in [
            ("'a-b-c'.replace('-', '+')", json!("a+b+c")),
            ("'a-b-c'.replace('-', '+', 1)", json!("a+b-c")),
            ("'ab'.replace('', '.')", json!(".a.b.")),
            ("['a', 'b'].join()", json!("ab")),
            ("['a', 'b'].join(', ')", json!("a, b")),
            ("'%s is %d'.format(['x', 3])", json!("x is 3")),
            ("[[1, [2]], [3]].flatten()", json!([1, [2], 3])),
            ("[[1, [2]], [3]].flatten(2)", json!([1, 2, 3])),
            ("schema.spec.items.map(i, i * 2).filter(i, i < 6)", json!([0, 2, 4])),
            ("schema.spec.items.exists_one(i, i == 3) && schema.spec.short + 'c' == 'abc'", json!(true)),
            ("{'k': [schema.spec.short]}.k[0].size()", json!(2)),
        ] {
            assert_eq!(scope.evaluate(expression).unwrap(), expected, "{expression}");
        }
        // And refuse what they refuse in the same words.
        for expression in ["[1].join()", "['a', 2].join('-')", "'x'.replace(1, 'y')", "'x'.replace('x')"] {
            let program = super::super::expr::parse(&ENV, expression).unwrap();
            let unmetered = cel::Value::resolve(&program, &Context::with_env(ENV.clone())).unwrap_err().to_string();
            assert_eq!(failure(&scope, expression), unmetered, "{expression}");
        }
    }

    #[test]
    fn values_larger_than_a_request_and_deep_nesting_are_refused() {
        let text = "x".repeat(1 << 20);
        let instance = json!({"spec": {"text": text, "items": (0..4).collect::<Vec<_>>()}});
        let scope = Scope::new(vec![("schema", &instance)]);
        let why = failure(&scope, "schema.spec.items.map(i, schema.spec.text)");
        assert!(why.contains("larger than 3 MiB"), "{why}");
        // Also on its way to a small value: a value built is refused as soon as it is too large.
        let why = failure(&scope, "schema.spec.items.map(i, schema.spec.text).size()");
        assert!(why.contains("larger than 3 MiB"), "{why}");
        assert_eq!(scope.evaluate("schema.spec.items.slice(0, 2).map(i, schema.spec.text).size()").unwrap(), json!(2));
        // A debug build's frames are many times a release build's: the parser's own bound (96 levels)
        // is reached on a thread with a stack as deep as a release build's 2 MiB goes.
        let nested = std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(|| {
                let instance = json!({});
                let scope = Scope::new(vec![("schema", &instance)]);
                for deep in [
                    format!("{}1{}", "[".repeat(5000), "]".repeat(5000)),
                    format!("{}1{}", "(".repeat(5000), ")".repeat(5000)),
                    format!("{}true", "!".repeat(5000)),
                    format!("{}1", "- ".repeat(5000)),
                    format!("{{'a': {}1{}}}", "{'a': ".repeat(3000), "}".repeat(3000)),
                ] {
                    assert_eq!(failure(&scope, &deep), "max recursion depth exceeded");
                }
                // Below the bound the parser refuses by itself.
                for deep in [
                    format!("{}1{}", "[".repeat(250), "]".repeat(250)),
                    format!("{}1{}", "(".repeat(250), ")".repeat(250)),
                ] {
                    assert!(failure(&scope, &deep).contains("Syntax error"));
                }
            })
            .unwrap();
        nested.join().unwrap();
        assert_eq!(scope.evaluate("'((((((' + \"[[[\" + '''!!!'''").unwrap(), json!("(((((([[[!!!"));
        let long = format!("'{}'", "x".repeat(100_000));
        assert!(failure(&scope, &long).starts_with("expression code point size exceeds limit: size: 100002"));
    }
}
