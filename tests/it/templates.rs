//! `-o jsonpath`, `-o custom-columns` (and their file forms) and `--sort-by`, side by side with the built
//! kubectl on the same objects: integers, floats, booleans, arrays, maps, dotted label keys, quantities and
//! timestamps, through a CRD of the test's own. Output, error text and exit code are compared.

use std::time::Duration;

use serde_json::json;

use crate::support::{Namespace, Run, Watcher, apply, established, eventually, kubectl, samplectl};

/// A test's own Gauge CRD (tests run side by side), deleted however the test ends.
struct Gauges {
    /// `gauges.<group>`, as both tools take it.
    resource: String,
}

impl Drop for Gauges {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "crd", &self.resource, "--wait=false"]);
    }
}

/// The CRD and four Gauges, created a second apart (so that creation time is an order of its own) and
/// in an order that is neither their names' nor any field's.
fn gauges(ns: &Namespace) -> Gauges {
    let group = format!("{}.samplectl.example.com", ns.0);
    let ns = ns.0.as_str();
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let columns = json!([
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Label", "type": "string", "jsonPath": ".spec.label"},
        {"name": "Enabled", "type": "boolean", "jsonPath": ".spec.enabled"},
    ]);
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gauges.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": "Gauge", "plural": "gauges", "singular": "gauge"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema,
                               "additionalPrinterColumns": columns}]}
    });
    apply("default", &crd);
    let gauges = Gauges { resource: format!("gauges.{group}") };
    established(&[&format!("crd/{}", gauges.resource)]);
    let objects = [
        ("beta", 10, 0.5, "g-10", "1Gi", true, json!(["x", "y"])),
        ("delta", 2, 1.25, "g-2", "512Mi", false, json!([])),
        ("alpha", 7, 3.0e-7, "g-1", "2Gi", true, json!(["z"])),
        ("gamma", 30, 2.5, "G-3", "100m", false, json!([1, 2])),
    ];
    for (i, (name, size, ratio, label, memory, enabled, tags)) in objects.into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(1100));
        }
        let labels =
            json!({"app.kubernetes.io/name": format!("app-{name}"), "tier": if enabled { "front" } else { "back" }});
        apply(
            ns,
            &json!({
                "apiVersion": format!("{group}/v1"), "kind": "Gauge",
                "metadata": {"name": name, "labels": labels},
                "spec": {"size": size, "ratio": ratio, "label": label, "memory": memory, "enabled": enabled,
                         "tags": tags, "nested": {"b": [1, {"c": null}], "a": "<&>", "d": "\u{1b}[1mbold\u{a0}x\u{301} it's"}},
            }),
        );
    }
    gauges
}

/// `samplectl list` and `kubectl get` of the Gauges in `ns`, with the same arguments after that.
fn both(g: &Gauges, ns: &str, args: &[&str]) -> (Run, Run) {
    (
        samplectl(&[&["list", &g.resource, "-n", ns][..], args].concat()),
        kubectl(&[&["get", &g.resource, "-n", ns][..], args].concat()),
    )
}

/// Both tools with the same arguments after the command word; their stdout and exit codes must match.
#[track_caller]
fn same(g: &Gauges, ns: &str, args: &[&str]) -> Run {
    let (ours, theirs) = both(g, ns, args);
    assert_eq!(
        (ours.code, &ours.stdout),
        (theirs.code, &theirs.stdout),
        "{args:?}\nsamplectl stderr: {}\nkubectl stderr: {}",
        ours.stderr,
        theirs.stderr
    );
    ours
}

#[test]
fn jsonpath_templates_print_like_kubectl() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("tpl-jsonpath");
    let g = gauges(&ns);
    for template in [
        "{.items[*].metadata.name}",
        r#"{range .items[*]}{.metadata.name}{"\t"}{.spec.size}{"\t"}{.spec.ratio}{"\n"}{end}"#,
        "{.items[?(@.spec.size>5)].metadata.name}",
        r#"{.items[?(@.spec.label=="g-2")].spec.memory}"#,
        "{.items[?(@.spec.enabled)].metadata.name}",
        "{.items[*].spec.tags}",
        "{.items[0].spec.nested}",
        "{.items[*].spec.enabled}",
        r"{.items[*].metadata.labels.app\.kubernetes\.io/name}",
        "{.items[*].metadata.labels['tier']}",
        "{.items[-1:].metadata.name} {.items[0:4:2].metadata.name} {.items[1,3].metadata.name}",
        "{.items[*].spec.missing}",
        "kind={.kind} meta={.metadata} nothing={.items[0].spec.nested.b[1].c}",
        "{..label}",
        "{range .items[*]}[{range .spec.tags[*]}<{@}>{end}]{end}",
        "no braces at all",
    ] {
        same(&g, &ns.0, &["-o", &format!("jsonpath={template}")]);
    }
    // One object named alone is given as itself, several as a List.
    same(&g, &ns.0, &["alpha", "-o", "jsonpath={.metadata.name} {.spec.size}"]);
    same(&g, &ns.0, &["alpha", "gamma", "-o", "jsonpath={.items[*].spec.label}"]);
    same(&g, &ns.0, &["-o", "jsonpath-as-json={.items[*].metadata.name}"]);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("template.txt");
    std::fs::write(&file, r#"{range .items[*]}{.metadata.name}={.spec.memory}{"\n"}{end}"#).unwrap();
    same(&g, &ns.0, &["-o", &format!("jsonpath-file={}", file.display())]);

    // A key an object lacks is an error only when asked: exit 1, and kubectl's message down to its Go
    // dump of the objects (escape sequences, a no-break space and a combining accent in .spec.nested.d).
    for args in [
        &["-o", "jsonpath={.items[*].nope}", "--allow-missing-template-keys=false"][..],
        &["beta", "-o", "jsonpath={.nope}", "--allow-missing-template-keys=false"],
    ] {
        let (ours, theirs) = both(&g, &ns.0, args);
        assert_eq!((ours.code, &ours.stderr), (theirs.code, &theirs.stderr), "{ours:#?}\n{theirs:#?}");
        assert!(ours.stderr.contains("\"d\":\"\\x1b[1mbold\\u00a0x\u{301} it's\""), "{}", ours.stderr);
        assert!(ours.stdout.is_empty(), "{ours:#?}");
    }

    // A template that does not parse: kubectl's words; a usage error here (exit 2), exit 1 in kubectl.
    // `{x.\` ends inside an escape: it panicked here (a read past the end of the template).
    for (template, error) in
        [("{.items[*", "unterminated array"), ("{.a", "unclosed action"), ("", ""), ("{x.\\", "unclosed action")]
    {
        let said = same_usage_error(&g, &ns.0, &format!("jsonpath={template}"));
        assert!(said.contains(error), "{said}");
    }
}

/// An `-o` value that kubectl refuses (exit 1) is a usage error here (exit 2) in the same words; returns them.
#[track_caller]
fn same_usage_error(g: &Gauges, ns: &str, output: &str) -> String {
    let (ours, theirs) = both(g, ns, &["-o", output]);
    let said = theirs.stderr.trim().trim_start_matches("error: ").trim_end_matches(',').to_owned();
    assert_eq!((ours.code, theirs.code), (2, 1), "{ours:#?}\n{theirs:#?}");
    assert!(ours.stderr.contains(&said), "samplectl: {}\nkubectl: {said}", ours.stderr);
    said
}

#[test]
fn custom_columns_print_like_kubectl() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("tpl-columns");
    let g = gauges(&ns);
    let spec = "NAME:.metadata.name,SIZE:.spec.size,RATIO:spec.ratio,TAGS:{.spec.tags},ON:{.spec.enabled},\
                NESTED:.spec.nested,NONE:.spec.nope,PORTS:.spec.tags[*],APP:.metadata.labels.app\\.kubernetes\\.io/name";
    let printed = same(&g, &ns.0, &["-o", &format!("custom-columns={spec}")]);
    assert!(printed.stdout.starts_with("NAME "), "{}", printed.stdout);
    same(&g, &ns.0, &["-o", &format!("custom-columns={spec}"), "--no-headers"]);
    same(&g, &ns.0, &["beta", "-o", "custom-columns=NAME:.metadata.name,MEMORY:.spec.memory"]);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("columns.txt");
    std::fs::write(&file, "NAME   LABEL        TIER\n.metadata.name  {.spec.label}  .metadata.labels.tier\n").unwrap();
    let output = format!("custom-columns-file={}", file.display());
    same(&g, &ns.0, &["-o", &output]);
    // kubectl prints a columns file's header even with --no-headers.
    same(&g, &ns.0, &["-o", &output, "--no-headers"]);

    for spec in ["NAME", "NAME:{.a}{.b}", ""] {
        same_usage_error(&g, &ns.0, &format!("custom-columns={spec}"));
    }
}

#[test]
fn sort_by_orders_like_kubectl() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("tpl-sort");
    let g = gauges(&ns);
    for path in [
        ".spec.size",
        "{.spec.ratio}",
        "spec.label",
        ".spec.memory",
        ".metadata.creationTimestamp",
        ".metadata.name",
        // Equal in all four: the server's order (by name) is kept.
        ".spec.nested.a",
    ] {
        // The server's own columns (no AGE here, so the whole table compares), names, and templates.
        same(&g, &ns.0, &["--sort-by", path]);
        same(&g, &ns.0, &["--sort-by", path, "-o", "name"]);
        same(&g, &ns.0, &["--sort-by", path, "-o", "custom-columns=NAME:.metadata.name,KEY:.spec.memory"]);
        same(&g, &ns.0, &["--sort-by", path, "-o", "jsonpath={.items[*].metadata.name}"]);
    }
    // Named objects are sorted too. (kubectl 1.34 fails to sort a table of named objects, whose rows it
    // reads without their objects: "couldn't find any field"; samplectl sorts them.)
    same(&g, &ns.0, &["alpha", "gamma", "beta", "--sort-by", ".spec.size", "-o", "name"]);
    let table = samplectl(&["list", &g.resource, "-n", &ns.0, "gamma", "alpha", "--sort-by", ".spec.size"]).success();
    let names: Vec<&str> = table.stdout.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, ["alpha", "gamma"], "{}", table.stdout);

    // A path no object has. kubectl's table path loses this error ("No resources found", exit 0); its
    // other printers report it, and samplectl reports it for every output.
    let (ours, theirs) = both(&g, &ns.0, &["--sort-by", ".spec.nope", "-o", "name"]);
    assert_eq!((ours.code, ours.stderr.trim()), (theirs.code, theirs.stderr.trim()), "{ours:#?}\n{theirs:#?}");
    assert_eq!(
        theirs.stderr.trim(),
        "error: couldn't find any field with path \"{.spec.nope}\" in the list of objects"
    );
    let table = samplectl(&["list", &g.resource, "-n", &ns.0, "--sort-by", ".spec.nope"]);
    assert_eq!((table.code, table.stderr.trim()), (1, theirs.stderr.trim()), "{table:#?}");
    // Values kubectl cannot order: an error and exit 1 from both (kubectl's is a klog line).
    let (ours, theirs) = both(&g, &ns.0, &["--sort-by", ".spec.enabled", "-o", "name"]);
    assert_eq!((ours.code, theirs.code), (1, theirs.code.max(1)), "{ours:#?}\n{theirs:#?}");
    assert!(ours.stderr.contains("unsortable type: bool"), "{ours:#?}");
    assert!(ours.stdout.is_empty() && theirs.stdout.is_empty(), "{ours:#?}\n{theirs:#?}");
}

#[test]
fn watch_prints_each_object_through_a_template() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("tpl-watch");
    let g = gauges(&ns);
    let template = r#"{.metadata.name}:{.spec.size}{"\n"}"#;
    let watched = samplectl(&[
        "watch",
        &g.resource,
        "-n",
        &ns.0,
        "-o",
        &format!("jsonpath={template}"),
        "--max-events",
        "4",
        "--timeout",
        "20s",
    ])
    .success();
    // The witness, again until a moment of 404 passes: another test deleting its CRD can cause one.
    let witness = |args: &[&str]| {
        let mut all = vec!["get", &g.resource, "-n", &ns.0];
        all.extend_from_slice(args);
        eventually(Duration::from_secs(10), "kubectl lists the Gauges", || {
            let run = kubectl(&all);
            if run.code == 0 { Ok(run) } else { Err(format!("{run:#?}")) }
        })
    };
    let listed = witness(&["-o", &format!("jsonpath={{range .items[*]}}{template}{{end}}")]);
    assert_eq!(watched.stdout, listed.stdout);
    let columns = samplectl(&[
        "watch",
        &g.resource,
        "-n",
        &ns.0,
        "-o",
        "custom-columns=NAME:.metadata.name,SIZE:.spec.size",
        "--max-events",
        "4",
        "--timeout",
        "20s",
    ])
    .success();
    let listed = witness(&["-o", "custom-columns=NAME:.metadata.name,SIZE:.spec.size"]);
    assert_eq!(columns.stdout, listed.stdout);
}

/// Custom columns through a watch, against `kubectl get -w`: the objects there at the start aligned as one
/// table with the header (a later row wider than the first ones widens them all), then each change in
/// columns as wide as they have been, as kubectl's tabwriter remembers widths across flushes.
#[test]
fn watch_aligns_custom_columns_as_kubectl_get_w_does() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("tpl-watch-cols");
    let g = gauges(&ns);
    // MEMORY is 2Gi, 1Gi, 512Mi, 100m in name order: the third row is the widest.
    let spec = "custom-columns=NAME:.metadata.name,M:.spec.memory,SIZE:.spec.size";
    let mut ours = Watcher::start(&["watch", &g.resource, "-n", &ns.0, "-o", spec]);
    let mut theirs = Watcher::kubectl(&["get", &g.resource, "-n", &ns.0, "-w", "-o", spec]);
    let first_five =
        |watcher: &mut Watcher| (0..5).map(|_| watcher.next_line(Duration::from_secs(20))).collect::<Vec<_>>();
    let listed = first_five(&mut ours);
    assert_eq!(listed, first_five(&mut theirs));
    assert_eq!(listed[3], "delta   512Mi   2", "{listed:#?}");
    kubectl(&["patch", &g.resource, "beta", "-n", &ns.0, "--type=merge", "-p", r#"{"spec":{"memory":"1G"}}"#])
        .success();
    let changed = ours.next_line(Duration::from_secs(20));
    assert_eq!(changed, theirs.next_line(Duration::from_secs(20)));
    assert_eq!(changed, "beta    1G      10");
}
