//! Every parser of input from outside, fed what a hook, a neighbouring pod or an author could send:
//! arbitrary bytes (invalid UTF-8 included), arbitrary and deeply nested JSON, huge strings, and values
//! shaped like the real thing with arbitrary contents. Each must answer, Ok or Err, and never panic,
//! overflow its stack or hang. No cluster is needed.
//!
//! A debug build's stack frames are many times a release build's (the CEL parser overflows 2 MiB at
//! about 15 levels in debug, and stops at its own 96 in release), so each property runs on a thread
//! with a stack as deep as a release build's 2 MiB reaches.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Value, json};

use samplectl::controller::rules::graph::cel::Scope;
use samplectl::controller::rules::graph::rgd;
use samplectl::controller::rules::shell::{config, metrics, patch, webhook};
use samplectl::controller::sync::{Shape, parse_answer, parse_customize};
use samplectl::output::jsonpath::Template;

fn on_a_deep_stack(property: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new().stack_size(256 << 20).spawn(property).unwrap().join().unwrap();
}

/// Cases per property: 256 in the suite, more for `scripts/fuzz` (`SAMPLECTL_FUZZ_CASES`).
fn cases() -> u32 {
    std::env::var("SAMPLECTL_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
}

/// Keys the parsers look for, and others.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z]{1,8}",
        prop::sample::select(vec![
            "status",
            "children",
            "attachments",
            "labels",
            "annotations",
            "resyncAfterSeconds",
            "finalized",
            "apiVersion",
            "kind",
            "metadata",
            "name",
            "namespace",
            "spec",
            "schema",
            "resources",
            "id",
            "template",
            "readyWhen",
            "includeWhen",
            "forEach",
            "externalRef",
            "operation",
            "op",
            "object",
            "jsonMergePatch",
            "jqFilter",
            "configVersion",
            "kubernetes",
            "schedule",
            "onStartup",
            "group",
            "action",
            "value",
            "allowed",
            "message",
            "patch",
            "convertedObjects",
            "failedMessage",
            "relatedResources",
            "resource",
            "selector",
            "matchLabels",
            "path",
            "subresource",
        ])
        .prop_map(str::to_owned),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
        // Expressions and templates, whole and joined.
        "\\$\\{.{0,30}\\}".prop_map(Value::from),
        "[a-z]{0,5}\\$\\{schema\\.spec\\.[a-z]{1,5}\\}[a-z]{0,5}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every parser of bytes from a hook or a file it wrote.
fn parse_all(bytes: &[u8]) {
    for shape in [Shape::Composite, Shape::Decorator, Shape::Graph] {
        for strict in [false, true] {
            let _ = parse_answer(bytes, strict, shape);
        }
    }
    let _ = parse_customize(bytes, false);
    let _ = parse_customize(bytes, true);
    let _ = config::parse(bytes);
    let _ = metrics::parse(bytes);
    let _ = patch::parse(bytes);
    let _ = webhook::admission_answer(bytes);
    let _ = webhook::conversion_answer(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_refused_or_read(bytes in vec(any::<u8>(), 0..512)) {
        parse_all(&bytes);
    }

    #[test]
    fn arbitrary_json_is_refused_or_read(value in json()) {
        let text = value.to_string();
        on_a_deep_stack(move || {
            parse_all(text.as_bytes());
            // And as YAML, which hook configs may be.
            if let Ok(yaml) = serde_yaml::to_string(&serde_json::from_str::<Value>(&text).unwrap()) {
                let _ = config::parse(yaml.as_bytes());
            }
        });
    }

    #[test]
    fn arbitrary_graphs_are_refused_or_built(resources in vec(json(), 0..4), schema in json()) {
        let rgd = json!({
            "apiVersion": "kro.run/v1alpha1",
            "kind": "ResourceGraphDefinition",
            "metadata": {"name": "fuzz"},
            "spec": {"schema": {"apiVersion": "v1alpha1", "kind": "Fuzz", "spec": schema}, "resources": resources},
        });
        on_a_deep_stack(move || {
            let _ = rgd::build(&rgd);
        });
    }

    #[test]
    fn arbitrary_expressions_are_refused_or_evaluated(expression in ".{0,60}", instance in json()) {
        on_a_deep_stack(move || {
            let scope = Scope::new(vec![("schema", &instance)]);
            let _ = scope.evaluate(&expression);
        });
    }

    #[test]
    fn arbitrary_jsonpath_is_refused_or_run(template in ".{0,40}", data in json()) {
        if let Ok(parsed) = Template::parse(&template) {
            let _ = parsed.execute(&data);
            let _ = parsed.execute_as_json(&data);
        }
    }
}

#[test]
fn deep_and_huge_inputs_are_refused_or_read() {
    on_a_deep_stack(|| {
        for depth in [100, 10_000, 1_000_000] {
            let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let objects = format!("{}1{}", "{\"status\":".repeat(depth), "}".repeat(depth));
            parse_all(arrays.as_bytes());
            parse_all(objects.as_bytes());
        }
        let huge = format!("{{\"status\": {{\"text\": \"{}\"}}, \"children\": []}}", "x".repeat(32 << 20));
        assert!(parse_answer(huge.as_bytes(), false, Shape::Composite).is_ok(), "a large answer within bounds is read");
        let invalid = b"{\"status\": {\"text\": \"\xff\xfe\"}}";
        assert!(
            parse_answer(invalid, false, Shape::Composite).is_err(),
            "invalid UTF-8 in JSON is an error, not a panic"
        );
        let yaml_bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\ni: [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n";
        let _ = config::parse(yaml_bomb.as_bytes());
    });
}
