//! Bad resource names through the binary, for every command that takes one: the message a user sees and
//! the exit code (2 for a malformed name, 1 for a well-formed one the server does not serve). The parser's
//! own cases are unit- and property-tested in src/resource.rs; this holds the whole path to them.

use crate::support::{refusing_kubeconfig, samplectl, samplectl_bare};

const FORM: &str = "expected GROUP/VERSION/RESOURCE such as example.com/v1alpha1/samples";

/// `--gvr` values, with the exit code and the start of the error line.
fn bad_gvrs() -> Vec<(String, i32, String)> {
    let long = format!("example.com/v1alpha1/{}", "s".repeat(300));
    let usage =
        |gvr: &str, why: &str| (gvr.to_owned(), 2, format!("error: invalid value '{gvr}' for '--gvr <GVR>': {why}"));
    vec![
        usage("", "too few parts"),
        usage("samples", "too few parts"),
        usage("example.com/v1alpha1/samples/status/x", "too many parts"),
        usage("example.com/v1alpha1/samples/status", "subresources such as samples/status cannot be listed"),
        usage("example.com//samples", "empty part"),
        usage("v1/config maps", "\"config maps\" is not a valid resource name"),
        usage("example.com/v1alpha1/sämples", "\"sämples\" is not a valid resource name"),
        usage("exämple.com/v1alpha1/samples", "\"exämple.com\" is not a valid API group"),
        usage(&long, &format!("{:?} is not a valid resource name", "s".repeat(300))),
        (
            "example.com/v9/samples".to_owned(),
            1,
            "error: the server doesn't have a resource type \"example.com/v9/samples\"".to_owned(),
        ),
        (
            "nosuch.example.com/v1/things".to_owned(),
            1,
            "error: the server doesn't have a resource type \"nosuch.example.com/v1/things\"".to_owned(),
        ),
    ]
}

/// Positional resource names (list and watch), with the exit code and the whole error line.
fn bad_names() -> Vec<(String, i32, String)> {
    let invalid = |name: &str| {
        let line = format!(
            "error: invalid resource name {name:?}: expected a name such as samples, smp or deployments.apps, or use --gvr"
        );
        (name.to_owned(), 2, line)
    };
    let unknown = |name: &str| (name.to_owned(), 1, format!("error: the server doesn't have a resource type {name:?}"));
    vec![
        invalid(""),
        invalid("sam ples"),
        invalid("samples/status"),
        unknown("sämples"),
        unknown(&"s".repeat(300)),
        unknown("samples.v9.example.com"),
        unknown("samples.nosuch.example.com"),
    ]
}

#[test]
fn bad_gvrs_are_refused_by_every_command() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for (gvr, code, message) in bad_gvrs() {
        for command in ["list", "watch", "reconcile"] {
            let mut args = vec![command, "--gvr", &gvr];
            if command == "reconcile" {
                args.push("--once");
            }
            let run = samplectl(&args);
            assert_eq!(run.code, code, "{command} --gvr {gvr:?}: {run:#?}");
            let line = run.stderr.lines().next().unwrap_or_default();
            assert!(line.starts_with(&message), "{command} --gvr {gvr:?}: {line}");
            if code == 2 {
                assert!(line.contains(FORM), "{command} --gvr {gvr:?} shows the expected form: {line}");
            }
            assert_eq!(run.stdout, "", "{command} --gvr {gvr:?} prints no data");
        }
    }
}

#[test]
fn bad_resource_names_are_refused_by_list_and_watch() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for (name, code, message) in bad_names() {
        for command in ["list", "watch"] {
            let run = samplectl(&[command, &name]);
            assert_eq!((run.code, run.stderr.lines().next()), (code, Some(message.as_str())), "{command} {name:?}");
            assert_eq!(run.stdout, "", "{command} {name:?} prints no data");
        }
    }
}

/// Usage mistakes are found while the command line is parsed: with a kubeconfig that does not exist, or
/// one whose server refuses connections, each still exits 2 with clap's message and its usage line, and
/// nothing about the kubeconfig or the server.
#[test]
fn usage_mistakes_are_found_before_any_kubeconfig_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let unreachable = refusing_kubeconfig(dir.path());
    let mistakes: &[(&[&str], &str)] = &[
        (&["list"], "error: name a resource: --gvr GROUP/VERSION/RESOURCE"),
        (&["watch", "--gvr", "v1/configmaps", "a", "b"], "error: watch is only supported on individual resources"),
        (&["watch", "cm", "a", "-A"], "error: a resource cannot be retrieved by name across all namespaces"),
        (
            &["list", "cm", "-o", "yaml", "--show-labels"],
            "error: --show-labels option cannot be used with yaml printer",
        ),
        (&["list", "cm", "-o", "table"], "error: invalid value 'table' for '--output <FORMAT>'"),
        (&["watch", "sam ples"], "error: invalid resource name \"sam ples\""),
        (&["watch", "cm,sa"], "error: watch follows one resource type; \"cm,sa\" names several"),
        (&["list", "cm,sa", "a"], "error: \"cm,sa\" names several resource types; object names go with one type only"),
        (
            &["list", "deploy", "--subresource", "scale"],
            "error: subresource cannot be used when bulk resources are specified",
        ),
        (&["watch", "cm", "--timeout", "soon"], "error: invalid value 'soon' for '--timeout <DURATION>'"),
        (
            &["reconcile", "--gvr", "v1/configmaps", "--watch", "--once"],
            "error: --once with --watch applies to Samples and hooks only",
        ),
        (
            &["reconcile", "--leader-elect", "--retry-period", "10s"],
            "error: --retry-period must be shorter than --renew-deadline",
        ),
        (&["install-crd", "--timeout", "1d"], "error: invalid value '1d' for '--timeout <DURATION>'"),
        (&["reconcile", "--max-connections", "0"], "error: invalid value '0' for '--max-connections <N>'"),
        (
            &["reconcile", "--webhook-runs-in-flight", "0"],
            "error: invalid value '0' for '--webhook-runs-in-flight <N>'",
        ),
        (&["reconcile", "--cel-cost-limit", "0"], "error: invalid value '0' for '--cel-cost-limit <N>'"),
    ];
    let missing = dir.path().join("missing.kubeconfig");
    for kubeconfig in [&missing, &unreachable] {
        for (args, message) in mistakes {
            let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
            all.extend_from_slice(args);
            let run = samplectl_bare(&all);
            assert_eq!(run.code, 2, "{args:?}: {run:#?}");
            assert!(run.stderr.starts_with(message), "{args:?}: {run:#?}");
            assert!(run.stderr.contains("For more information, try '--help'."), "clap's message: {run:#?}");
            assert!(!run.stderr.contains("kubeconfig") && !run.stderr.contains("127.0.0.1"), "{args:?}: {run:#?}");
        }
    }
}
