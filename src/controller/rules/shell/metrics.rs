//! A hook's `$METRICS_PATH`: a stream of JSON operations (`{"name":"x","set":1}`, `{"name":"x","add":1}`,
//! `{"name":"x","action":"observe","value":0.2,"buckets":[...]}`, `{"group":"g","action":"expire"}`), read
//! and checked as shell-operator checks them, and the series they make, kept per metric and labels and
//! written in the exposition format for samplectl's `/metrics`, each with a `hook` label.
//!
//! As shell-operator's documentation describes, not as its code does since its #777: an operation
//! without a group is not put in a group named after the hook. With that change each run wipes the
//! hook's earlier series, so counters never count past one run and `observe` is refused outright.
//! Operations of a group replace the group's series as a whole, so a series a run no longer sets goes.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Operation {
    #[serde(default)]
    pub name: String,
    pub add: Option<f64>,
    pub set: Option<f64>,
    pub value: Option<f64>,
    pub buckets: Option<Vec<f64>>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub action: String,
}

/// What a metrics file holds: the operations to apply, and the warnings for those dropped.
#[derive(Debug, Default)]
pub struct Read {
    pub operations: Vec<Operation>,
    pub dropped: Vec<String>,
}

/// The operations of a metrics file. One without an action, or with one shell-operator does not know,
/// is dropped with a warning, as shell-operator drops it. The rest are checked as its metric storage
/// checks them (a name, a value, buckets for `observe`, names Prometheus can carry), and any problem
/// refuses the file, before anything of the run is applied.
pub fn parse(file: &[u8]) -> Result<Read, String> {
    let mut read = Read::default();
    for op in serde_json::Deserializer::from_slice(file).into_iter::<Operation>() {
        let mut op = op.map_err(|err| format!("got bad metrics: {err}"))?;
        match (op.set, op.add) {
            (Some(v), None) => (op.action, op.value) = ("set".into(), Some(v)),
            (None, Some(v)) => (op.action, op.value) = ("add".into(), Some(v)),
            _ => {}
        }
        if !["set", "add", "observe", "expire"].contains(&op.action.as_str()) {
            read.dropped.push(format!("unknown action in MetricOperation: {:?} {}", op.action, shown(&op)));
            continue;
        }
        read.operations.push(op);
    }
    let problems: Vec<String> = read.operations.iter().flat_map(check).collect();
    match problems.is_empty() {
        true => Ok(read),
        false => Err(super::schema::joined(&problems)),
    }
}

/// An operation as shell-operator prints it in its messages: `[group=g, name=x, action=set, value=1.000000]`.
fn shown(op: &Operation) -> String {
    let mut parts = Vec::new();
    if !op.group.is_empty() {
        parts.push(format!("group={}", op.group));
    }
    if !op.name.is_empty() {
        parts.push(format!("name={}", op.name));
    }
    if !op.action.is_empty() {
        parts.push(format!("action={}", op.action));
    }
    for (key, value) in [("value", op.value), ("set", op.set), ("add", op.add)] {
        if let Some(value) = value {
            parts.push(format!("{key}={value:.6}"));
        }
    }
    if let Some(buckets) = &op.buckets {
        parts.push(format!("buckets={buckets:?}"));
    }
    if !op.labels.is_empty() {
        let labels: Vec<String> = op.labels.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        parts.push(format!("labels=map[{}]", labels.join(" ")));
    }
    format!("[{}]", parts.join(", "))
}

/// A metric name Prometheus' text format can carry, and not one of samplectl's own.
fn metric_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !name.starts_with("samplectl_")
}

fn label_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != "hook"
        && name != "le"
}

fn check(op: &Operation) -> Vec<String> {
    let mut problems = Vec::new();
    let shown = shown(op);
    if op.group.is_empty() && op.action == "expire" {
        problems.push(format!("unsupported action '{}': {shown}", op.action));
    }
    if op.name.is_empty() && op.group.is_empty() {
        problems.push(format!("'name' is required: {shown}"));
    }
    if op.name.is_empty() && !op.group.is_empty() && op.action != "expire" {
        problems.push(format!("'name' is required when action is not 'expire': {shown}"));
    }
    if !op.name.is_empty() && !metric_name_ok(&op.name) {
        problems.push(format!("'name' is not a Prometheus metric name (or is samplectl's own): {shown}"));
    }
    if let Some(bad) = op.labels.keys().find(|k| !label_name_ok(k)) {
        problems.push(format!("label {bad:?} is not a Prometheus label name (hook and le are taken): {shown}"));
    }
    if ["set", "add", "observe"].contains(&op.action.as_str()) && op.value.is_none() {
        problems.push(format!("'value' is required for action '{}': {shown}", op.action));
    }
    if op.action == "observe" && op.buckets.is_none() {
        problems.push(format!("'buckets' is required for action 'observe': {shown}"));
    }
    problems
}

type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Number(f64),
    Histogram { bounds: Vec<f64>, counts: Vec<u64>, sum: f64, count: u64 },
}

#[derive(Debug, Default)]
struct Family {
    kind: Option<Kind>,
    /// Per label set: the value, and the group that set it.
    series: BTreeMap<Labels, (Value, String)>,
}

/// Every series hooks made.
#[derive(Debug, Default)]
pub struct Series {
    families: BTreeMap<String, Family>,
}

impl Series {
    /// Applies one run's operations of `hook`: each group named is cleared first, then every operation
    /// is applied in order. A metric keeps the kind it was first given; an operation of another kind on
    /// it is reported and skipped.
    pub fn apply(&mut self, hook: &str, operations: &[Operation]) -> Vec<String> {
        let mut problems = Vec::new();
        let groups: std::collections::BTreeSet<&str> =
            operations.iter().filter(|op| !op.group.is_empty()).map(|op| op.group.as_str()).collect();
        for group in &groups {
            self.expire(group);
        }
        for op in operations {
            if op.action == "expire" {
                continue;
            }
            let kind = match op.action.as_str() {
                "set" => Kind::Gauge,
                "add" => Kind::Counter,
                _ => Kind::Histogram,
            };
            let mut labels = op.labels.clone();
            labels.insert("hook".into(), hook.to_owned());
            let family = self.families.entry(op.name.clone()).or_default();
            if *family.kind.get_or_insert(kind) != kind {
                problems.push(format!("metric {} is a {:?}, not a {kind:?}", op.name, family.kind.unwrap_or(kind)));
                continue;
            }
            let value = op.value.unwrap_or_default();
            let slot = family.series.entry(labels).or_insert_with(|| {
                let fresh = match kind {
                    Kind::Histogram => {
                        let mut bounds = op.buckets.clone().unwrap_or_default();
                        bounds.sort_by(f64::total_cmp);
                        Value::Histogram { counts: vec![0; bounds.len()], bounds, sum: 0.0, count: 0 }
                    }
                    _ => Value::Number(0.0),
                };
                (fresh, op.group.clone())
            });
            slot.1 = op.group.clone();
            match (&mut slot.0, kind) {
                (Value::Number(n), Kind::Gauge) => *n = value,
                (Value::Number(n), Kind::Counter) => *n += value,
                (Value::Histogram { bounds, counts, sum, count }, _) => {
                    for (bound, n) in bounds.iter().zip(counts.iter_mut()) {
                        if value <= *bound {
                            *n += 1;
                        }
                    }
                    *sum += value;
                    *count += 1;
                }
                _ => {}
            }
        }
        problems
    }

    fn expire(&mut self, group: &str) {
        for family in self.families.values_mut() {
            family.series.retain(|_, (_, g)| g != group);
        }
        self.families.retain(|_, f| !f.series.is_empty());
    }

    /// The series in OpenMetrics text, metric names as the hooks gave them: a counter named `..._total`
    /// is typed a counter, another keeps its name as an `unknown` metric, since OpenMetrics would
    /// otherwise add `_total` to it.
    pub fn render(&self) -> String {
        let mut text = String::new();
        for (name, family) in &self.families {
            let labels = |labels: &Labels, extra: Option<(&str, String)>| {
                let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
                if let Some((k, v)) = extra {
                    parts.push(format!("{k}=\"{v}\""));
                }
                format!("{{{}}}", parts.join(","))
            };
            match family.kind {
                Some(Kind::Histogram) => {
                    let _ = writeln!(text, "# TYPE {name} histogram");
                    for (set, (value, _)) in &family.series {
                        if let Value::Histogram { bounds, counts, sum, count } = value {
                            for (bound, n) in bounds.iter().zip(counts) {
                                let _ =
                                    writeln!(text, "{name}_bucket{} {n}", labels(set, Some(("le", number(*bound)))));
                            }
                            let _ = writeln!(text, "{name}_bucket{} {count}", labels(set, Some(("le", "+Inf".into()))));
                            let _ = writeln!(text, "{name}_sum{} {}", labels(set, None), number(*sum));
                            let _ = writeln!(text, "{name}_count{} {count}", labels(set, None));
                        }
                    }
                }
                kind => {
                    let ty = match kind {
                        Some(Kind::Gauge) => "gauge",
                        _ if name.ends_with("_total") => "counter",
                        _ => "unknown",
                    };
                    let family_name = if ty == "counter" { name.trim_end_matches("_total") } else { name.as_str() };
                    let _ = writeln!(text, "# TYPE {family_name} {ty}");
                    for (set, (value, _)) in &family.series {
                        if let Value::Number(n) = value {
                            let _ = writeln!(text, "{name}{} {}", labels(set, None), number(*n));
                        }
                    }
                }
            }
        }
        text
    }
}

fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(n: f64) -> String {
    if n.is_infinite() {
        return if n > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    format!("{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_read_and_checked_as_shell_operator_does() {
        let read = parse(
            br#"{"name":"a","set":1}
{"name":"b","add":2,"labels":{"x":"y"}}
{"name":"c","action":"observe","value":0.3,"buckets":[0.1,1]}
{"group":"g","action":"expire"}
{"name":"d","value":1}
{"name":"e","action":"inc","value":1}"#,
        )
        .unwrap();
        let actions: Vec<&str> = read.operations.iter().map(|o| o.action.as_str()).collect();
        assert_eq!(actions, ["set", "add", "observe", "expire"]);
        assert_eq!(
            read.dropped,
            [
                "unknown action in MetricOperation: \"\" [name=d, value=1.000000]",
                "unknown action in MetricOperation: \"inc\" [name=e, action=inc, value=1.000000]"
            ]
        );
        let refused = parse(
            br#"{"name":"b","action":"observe","value":1}{"set":1}{"name":"d","set":1,"add":1}{"name":"e","action":"expire"}{"name":"a-b","set":1}{"name":"f","set":1,"labels":{"app.kubernetes.io/name":"x"}}"#,
        )
        .unwrap_err();
        // Both `set` and `add` leave no action: such an operation is dropped, not refused.
        assert!(refused.starts_with("5 errors occurred:"), "{refused}");
        assert!(
            refused.contains("'buckets' is required for action 'observe': [name=b, action=observe, value=1.000000]")
        );
        assert!(refused.contains("'name' is required: [action=set, value=1.000000, set=1.000000]"));
        assert!(refused.contains("unsupported action 'expire'"));
        assert!(refused.contains("'name' is not a Prometheus metric name"));
        assert!(refused.contains("label \"app.kubernetes.io/name\" is not a Prometheus label name"));
        assert!(parse(b"not json").unwrap_err().starts_with("got bad metrics: "));
    }

    #[test]
    fn series_add_up_and_groups_replace_their_series() {
        let mut series = Series::default();
        let run = |text: &str| parse(text.as_bytes()).unwrap().operations;
        series.apply("h", &run(r#"{"name":"runs_total","add":1}{"name":"temp","set":20.5,"labels":{"room":"a"}}"#));
        series.apply(
            "h",
            &run(r#"{"name":"runs_total","add":1}{"name":"lat","action":"observe","value":0.3,"buckets":[0.1,1]}"#),
        );
        series.apply("h", &run(r#"{"name":"objects","set":3,"group":"g","labels":{"kind":"a"}}{"name":"objects","set":4,"group":"g","labels":{"kind":"b"}}"#));
        series.apply("h", &run(r#"{"name":"objects","set":5,"group":"g","labels":{"kind":"a"}}"#));
        assert_eq!(
            series.render(),
            "# TYPE lat histogram\n\
             lat_bucket{hook=\"h\",le=\"0.1\"} 0\n\
             lat_bucket{hook=\"h\",le=\"1\"} 1\n\
             lat_bucket{hook=\"h\",le=\"+Inf\"} 1\n\
             lat_sum{hook=\"h\"} 0.3\n\
             lat_count{hook=\"h\"} 1\n\
             # TYPE objects gauge\n\
             objects{hook=\"h\",kind=\"a\"} 5\n\
             # TYPE runs counter\n\
             runs_total{hook=\"h\"} 2\n\
             # TYPE temp gauge\n\
             temp{hook=\"h\",room=\"a\"} 20.5\n"
        );
        series.apply("h", &run(r#"{"group":"g","action":"expire"}"#));
        assert!(!series.render().contains("objects"));
        assert_eq!(series.apply("h", &run(r#"{"name":"temp","add":1}"#)), ["metric temp is a Gauge, not a Counter"]);
    }
}
