//! samplectl's side of the conformance run (`scripts/conformance`): reads the reference's cases
//! (`conformance/reference`, one JSON line each), evaluates each with samplectl's own evaluator, and
//! writes the line back with `samplectl` (what it gave) and `samplectl_pass` added.
//!
//! `runner cel` evaluates CEL as an RGD's expressions are evaluated (`rules::graph::cel::Scope`);
//! `runner jq` applies jq filters as a hook's `jqFilter` is (`rules::shell::jq::Jq`).

use std::io::{BufRead, Write};
use std::sync::Arc;

use base64::Engine as _;
use cel::objects::{Key, Map, OptionalValue};
use samplectl::controller::rules::graph::cel::{Scope, Unresolved};
use samplectl::controller::rules::graph::kubernetes;
use samplectl::controller::rules::shell::jq::Jq;
use serde_json::{Value, json};

/// What one jq case may take when it runs in a process of its own: jaq has no step limit, and some
/// suite filters never end there (`range(0; 1; 0)`, which gojq ends at once).
const JQ_SECONDS: u64 = 10;
const JQ_BYTES: u64 = 2 << 30;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let run: fn(&Value) -> Value = match mode.as_str() {
        "cel" => cel_case,
        "jq" => isolated,
        "jq-one" => {
            let case: Value = serde_json::from_reader(std::io::stdin()).expect("a case on stdin");
            println!("{}", jq_case(&case));
            return;
        }
        _ => {
            eprintln!("usage: runner cel|jq < cases.jsonl");
            std::process::exit(2);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin is readable");
        let mut case: Value = serde_json::from_str(&line).expect("the reference writes JSON lines");
        let got = if case["expect"].get("skip").is_some() {
            json!({"skip": case["expect"]["skip"]})
        } else {
            // A deep expression may need more stack than a test thread has; the engine's workers
            // have this much too.
            let case = case.clone();
            std::thread::Builder::new()
                .stack_size(64 << 20)
                .spawn(move || run(&case))
                .expect("a thread")
                .join()
                .unwrap_or_else(|_| json!({"error": "samplectl panicked"}))
        };
        let pass = passes(&case["expect"], &got, case["suite"].as_str().unwrap_or_default());
        case["samplectl"] = got;
        case["samplectl_pass"] = Value::Bool(pass);
        writeln!(out, "{case}").expect("stdout is writable");
    }
}

fn passes(expect: &Value, got: &Value, suite: &str) -> bool {
    if expect.get("skip").is_some() || got.get("skip").is_some() {
        return false;
    }
    match expect.get("error") {
        // Any error passes a CEL case, as cel-go's own conformance runner has it; a jq case's expected
        // error is gojq's, and only an error passes it.
        Some(_) => got.get("error").is_some(),
        None => match (expect.get("value"), got.get("value")) {
            (Some(want), Some(have)) if suite.starts_with("jq") => want == have,
            (Some(want), Some(have)) => same(want, have),
            _ => false,
        },
    }
}

/// Two tagged CEL values alike: doubles compared as numbers (NaN equal to NaN, as the suite wants).
fn same(a: &Value, b: &Value) -> bool {
    let instant = |v: &Value| v.get("timestamp")?.as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    if let (Some(x), Some(y)) = (instant(a), instant(b)) {
        return x == y;
    }
    match (a.get("double"), b.get("double")) {
        (Some(x), Some(y)) => match (double(x), double(y)) {
            (Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => false,
        },
        _ => match (a, b) {
            (Value::Object(x), Value::Object(y)) if x.len() == y.len() => {
                x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x.iter().zip(y).all(|(v, w)| same(v, w)),
            _ => a == b,
        },
    }
}

fn double(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "+Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn cel_case(case: &Value) -> Value {
    let mut values = Vec::new();
    for (name, tagged) in case["bindings"].as_object().into_iter().flatten() {
        match decode(tagged) {
            Ok(value) => values.push((name.as_str(), value)),
            Err(why) => return json!({"skip": format!("binding {name}: {why}")}),
        }
    }
    let scope = Scope::typed(values);
    match scope.value(case["expr"].as_str().unwrap_or_default()) {
        Ok(value) => json!({"value": encode(&value)}),
        Err(Unresolved::Pending(why) | Unresolved::Failed(why)) => json!({"error": why}),
    }
}

/// The reference's tagged form into a CEL value.
fn decode(tagged: &Value) -> Result<cel::Value, String> {
    let Some((tag, v)) = tagged.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("not a tagged value: {tagged}"));
    };
    let text = || v.as_str().unwrap_or_default();
    Ok(match tag.as_str() {
        "int" => cel::Value::Int(text().parse().map_err(|e| format!("{e}"))?),
        "uint" => cel::Value::UInt(text().parse().map_err(|e| format!("{e}"))?),
        "double" => cel::Value::Float(double(v).ok_or("a double")?),
        "string" => cel::Value::String(Arc::new(text().to_owned())),
        "bytes" => cel::Value::Bytes(Arc::new(
            base64::engine::general_purpose::STANDARD.decode(text()).map_err(|e| e.to_string())?,
        )),
        "bool" => cel::Value::Bool(v.as_bool().unwrap_or_default()),
        "null" => cel::Value::Null,
        "duration" => cel::Value::Duration(chrono::Duration::nanoseconds(text().parse().map_err(|e| format!("{e}"))?)),
        "timestamp" => cel::Value::Timestamp(chrono::DateTime::parse_from_rfc3339(text()).map_err(|e| e.to_string())?),
        "list" => {
            cel::Value::List(Arc::new(v.as_array().into_iter().flatten().map(decode).collect::<Result<Vec<_>, _>>()?))
        }
        "map" => {
            let mut map = std::collections::HashMap::new();
            for entry in v.as_array().into_iter().flatten() {
                let key = match decode(&entry[0])? {
                    cel::Value::Int(i) => Key::Int(i),
                    cel::Value::UInt(u) => Key::Uint(u),
                    cel::Value::Bool(b) => Key::Bool(b),
                    cel::Value::String(s) => Key::String(s),
                    other => return Err(format!("a map key of type {:?}", other.type_of())),
                };
                map.insert(key, decode(&entry[1])?);
            }
            cel::Value::Map(Map { map: Arc::new(map) })
        }
        "optional" => match v {
            Value::Null => cel::Value::Opaque(Arc::new(OptionalValue::none())),
            inner => cel::Value::Opaque(Arc::new(OptionalValue::of(decode(inner)?))),
        },
        other => return Err(format!("samplectl has no {other} values")),
    })
}

/// A CEL value in the reference's tagged form.
fn encode(value: &cel::Value) -> Value {
    match value {
        cel::Value::Int(i) => json!({"int": i.to_string()}),
        cel::Value::UInt(u) => json!({"uint": u.to_string()}),
        cel::Value::Float(f) if f.is_nan() => json!({"double": "NaN"}),
        cel::Value::Float(f) if f.is_infinite() => json!({"double": if *f > 0.0 { "+Inf" } else { "-Inf" }}),
        cel::Value::Float(f) => json!({"double": f}),
        cel::Value::String(s) => json!({"string": s.as_str()}),
        cel::Value::Bytes(b) => json!({"bytes": base64::engine::general_purpose::STANDARD.encode(b.as_slice())}),
        cel::Value::Bool(b) => json!({"bool": b}),
        cel::Value::Null => json!({"null": true}),
        cel::Value::Duration(d) => json!({"duration": d.num_nanoseconds().unwrap_or(i64::MAX).to_string()}),
        cel::Value::Timestamp(t) => {
            json!({"timestamp": t.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)})
        }
        cel::Value::List(items) => json!({"list": items.iter().map(encode).collect::<Vec<_>>()}),
        cel::Value::Map(map) => {
            let mut entries: Vec<(Value, Value)> =
                map.map.iter().map(|(k, v)| (encode(&cel::Value::from(k.clone())), encode(v))).collect();
            entries.sort_by_key(|(k, _)| k.to_string());
            json!({"map": entries.into_iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()})
        }
        cel::Value::Opaque(o) => match <&OptionalValue>::try_from(value) {
            Ok(optional) => json!({"optional": optional.value().map(encode)}),
            Err(_) => json!({"object": o.runtime_type_name(), "text": kubernetes::describe(value).unwrap_or_default()}),
        },
        cel::Value::Function(name, _) => json!({"object": format!("function {name}")}),
        cel::Value::Struct(_) => json!({"object": "struct"}),
    }
}

/// A jq case in a child process, bounded in time and memory; a case past either is an error.
fn isolated(case: &Value) -> Value {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(std::env::current_exe().expect("the runner's path"));
    command.arg("jq-one").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else of the parent.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: JQ_BYTES, rlim_max: JQ_BYTES };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("the runner runs itself");
    child.stdin.take().expect("piped").write_all(case.to_string().as_bytes()).expect("the child reads its case");
    let started = std::time::Instant::now();
    loop {
        if child.try_wait().expect("the child can be waited for").is_some() {
            break;
        }
        if started.elapsed().as_secs() >= JQ_SECONDS {
            let _ = child.kill();
            let _ = child.wait();
            return json!({"error": format!("samplectl: still running after {JQ_SECONDS} s")});
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut text).expect("the child's output");
    serde_json::from_str(&text).unwrap_or_else(|_| json!({"error": "samplectl: the filter ran out of memory"}))
}

fn jq_case(case: &Value) -> Value {
    let filter = match Jq::compile(case["expr"].as_str().unwrap_or_default()) {
        Ok(filter) => filter,
        Err(why) => return json!({"error": why}),
    };
    let mut outputs = Vec::new();
    for input in case["inputs"].as_array().into_iter().flatten() {
        match filter.outputs(input.as_str().unwrap_or_default().as_bytes()) {
            Ok(values) => outputs.extend(values),
            Err(why) => return json!({"error": why, "before": outputs}),
        }
    }
    json!({"value": outputs})
}
