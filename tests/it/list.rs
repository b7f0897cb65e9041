//! `samplectl list` side by side with the built kubectl.

use crate::support::{Namespace, established, install_crd, kubectl, samplectl, table, user_kubeconfig};
use serde_json::Value;

/// Header and the NAME column (or the NAMESPACE and NAME columns) of both tools' tables.
fn same_table(samplectl_args: &[&str], kubectl_args: &[&str]) -> (Vec<String>, Vec<Vec<String>>) {
    let ours = samplectl(samplectl_args).success();
    let theirs = kubectl(kubectl_args).success();
    let (our_header, our_rows) = table(&ours.stdout);
    let (their_header, their_rows) = table(&theirs.stdout);
    assert_eq!(our_header, their_header, "headers\nsamplectl:\n{}\nkubectl:\n{}", ours.stdout, theirs.stdout);
    let keys = |rows: &[Vec<String>]| -> Vec<Vec<String>> {
        let n = if our_header.first().is_some_and(|h| h == "NAMESPACE") { 2 } else { 1 };
        rows.iter().map(|r| r[..n].to_vec()).collect()
    };
    assert_eq!(keys(&our_rows), keys(&their_rows), "samplectl:\n{}\nkubectl:\n{}", ours.stdout, theirs.stdout);
    (our_header, our_rows)
}

#[test]
fn samples_show_their_printer_columns_like_kubectl() {
    let _cluster = crate::support::shared();
    install_crd();
    let ns = Namespace::new("list-samples");
    kubectl(&["apply", "-n", &ns.0, "-f", "manifests/samples/sample-resource-1.yaml"]).success();
    let (header, rows) = same_table(
        &["list", "--gvr", "example.com/v1alpha1/samples", "-n", &ns.0],
        &["get", "samples.example.com", "-n", &ns.0],
    );
    assert_eq!(header, ["NAME", "TEST STRING", "READY", "AGE"]);
    assert_eq!(rows[0][..2], ["sample-resource-1", "first sample resource"]);
    for name in ["samples", "sample", "smp", "Sample", "samples.example.com"] {
        same_table(&["list", name, "-n", &ns.0], &["get", "samples.example.com", "-n", &ns.0]);
    }
    // Across namespaces, narrowed to this test's Sample: other tests create and delete Samples meanwhile.
    let label = format!("test=list-samples-{}", std::process::id());
    kubectl(&["label", "sample", "sample-resource-1", "-n", &ns.0, &label]).success();
    let (all, rows) =
        same_table(&["list", "smp", "-A", "-l", &label], &["get", "samples.example.com", "-A", "-l", &label]);
    assert_eq!((all[0].as_str(), rows.len()), ("NAMESPACE", 1));
}

#[test]
fn builtin_resources_match_kubectl() {
    let _cluster = crate::support::exclusive();
    let ns = Namespace::new("list-builtin");
    for name in ["one", "two", "three"] {
        kubectl(&["create", "configmap", name, "-n", &ns.0, "--from-literal=k=v"]).success();
    }
    same_table(&["list", "--gvr", "v1/configmaps", "-n", &ns.0], &["get", "configmaps", "-n", &ns.0]);
    same_table(&["list", "cm", "-n", &ns.0, "-o", "wide"], &["get", "configmaps", "-n", &ns.0, "-o", "wide"]);
    same_table(&["list", "cm", "-n", &ns.0, "--show-labels"], &["get", "cm", "-n", &ns.0, "--show-labels"]);
    same_table(&["list", "cm", "-n", &ns.0, "-l", "missing=label"], &["get", "cm", "-n", &ns.0, "-l", "missing=x"])
        .1
        .is_empty()
        .then_some(())
        .expect("nothing selected");
    let by_field = ["--field-selector", "metadata.name=two"];
    let (_, rows) = same_table(
        &[&["list", "cm", "-n", &ns.0][..], &by_field].concat(),
        &[&["get", "cm", "-n", &ns.0][..], &by_field].concat(),
    );
    assert_eq!(rows.len(), 1);

    // Cluster-scoped: -n is ignored, as kubectl ignores it.
    let selector = "kubernetes.io/metadata.name in (default,kube-public,kube-system)";
    let (header, rows) = same_table(
        &["list", "--gvr", "v1/namespaces", "-n", &ns.0, "-l", selector],
        &["get", "namespaces", "-l", selector],
    );
    assert_eq!(header, ["NAME", "STATUS", "AGE"]);
    assert_eq!(rows.len(), 3);
    install_crd();
    // Other tests' CRDs may still be going away (deleted without waiting): compare until both tools agree.
    crate::support::eventually(std::time::Duration::from_secs(30), "the same CRDs from both tools", || {
        let ours = samplectl(&["list", "--gvr", "apiextensions.k8s.io/v1/customresourcedefinitions"]).success();
        let theirs = kubectl(&["get", "customresourcedefinitions"]).success();
        let names = |text: &str| -> Vec<String> { table(text).1.into_iter().map(|row| row[0].clone()).collect() };
        let same = table(&ours.stdout).0 == table(&theirs.stdout).0 && names(&ours.stdout) == names(&theirs.stdout);
        if same { Ok(()) } else { Err(format!("samplectl:\n{}\nkubectl:\n{}", ours.stdout, theirs.stdout)) }
    });
}

#[test]
fn an_empty_list_says_so_on_stderr() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("list-empty");
    for name in ["deployments", "deploy", "deployments.apps", "deployments.v1.apps"] {
        let ours = samplectl(&["list", name, "-n", &ns.0]).success();
        let theirs = kubectl(&["get", "deployments", "-n", &ns.0]).success();
        assert_eq!(ours.stdout, "");
        assert_eq!(ours.stderr, format!("No resources found in {} namespace.\n", ns.0));
        assert_eq!(ours.stderr, theirs.stderr);
    }
    for output in ["json", "yaml"] {
        let ours = samplectl(&["list", "--gvr", "apps/v1/deployments", "-n", &ns.0, "-o", output]).success();
        let theirs = kubectl(&["get", "deployments", "-n", &ns.0, "-o", output]).success();
        assert_eq!(ours.stdout, theirs.stdout, "the empty List, byte for byte");
        assert_eq!((ours.stderr.as_str(), theirs.stderr.as_str()), ("", ""));
    }
    // --ignore-not-found: nothing found is not worth a line either.
    let ours = samplectl(&["list", "deploy", "-n", &ns.0, "--ignore-not-found"]).success();
    let theirs = kubectl(&["get", "deploy", "-n", &ns.0, "--ignore-not-found"]).success();
    assert_eq!((ours.stdout, ours.stderr), (theirs.stdout, theirs.stderr));
}

#[test]
fn every_output_format_parses_back() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("list-formats");
    for name in ["alpha", "beta"] {
        kubectl(&["create", "configmap", name, "-n", &ns.0, "--from-literal=text=line one\nline two"]).success();
    }
    let names = kubectl(&["get", "cm", "-n", &ns.0, "-o", "name"]).success().stdout;
    assert_eq!(samplectl(&["list", "cm", "-n", &ns.0, "-o", "name"]).success().stdout, names);

    let json: Value =
        serde_json::from_str(&samplectl(&["list", "cm", "-n", &ns.0, "-o", "json"]).success().stdout).unwrap();
    let yaml: Value =
        serde_yaml::from_str(&samplectl(&["list", "cm", "-n", &ns.0, "-o", "yaml"]).success().stdout).unwrap();
    let theirs: Value =
        serde_json::from_str(&kubectl(&["get", "cm", "-n", &ns.0, "-o", "json"]).success().stdout).unwrap();
    for ours in [&json, &yaml] {
        assert_eq!(ours, &theirs, "the same List as kubectl's: objects with apiVersion and kind, resourceVersion \"\"");
    }

    // One named object prints the object itself, exactly as kubectl does.
    let ours: Value =
        serde_json::from_str(&samplectl(&["list", "cm", "alpha", "-n", &ns.0, "-o", "json"]).success().stdout).unwrap();
    let theirs: Value =
        serde_json::from_str(&kubectl(&["get", "cm", "alpha", "-n", &ns.0, "-o", "json"]).success().stdout).unwrap();
    assert_eq!(ours, theirs);
    let (header, rows) = table(&samplectl(&["list", "cm", "beta", "-n", &ns.0]).success().stdout);
    assert_eq!((header.len(), rows.len()), (3, 1));
}

#[test]
fn a_long_list_is_paged_and_complete() {
    let _cluster = crate::support::exclusive();
    let ns = Namespace::new("list-paged");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("configmaps.yaml");
    let docs: Vec<String> = (0..1200)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:04}\ndata:\n  i: \"{i}\"\n"))
        .collect();
    std::fs::write(&manifest, docs.join("---\n")).unwrap();
    kubectl(&["create", "-n", &ns.0, "-f", manifest.to_str().unwrap(), "-o", "name"]).success();

    let run = samplectl(&["-v", "list", "cm", "-n", &ns.0, "--no-headers"]).success();
    let names: Vec<&str> = run.stdout.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    let expected: Vec<String> = (0..1200).map(|i| format!("cm-{i:04}")).collect();
    assert_eq!(names, expected, "every ConfigMap exactly once, in order");
    let pages = run.stderr.lines().filter(|l| l.contains("listed a page")).count();
    assert_eq!(pages, 3, "1,200 objects at the default 500 per request:\n{}", run.stderr);

    let run = samplectl(&["-v", "list", "cm", "-n", &ns.0, "-o", "name", "--chunk-size", "100"]).success();
    assert_eq!(run.stdout.lines().count(), 1200);
    assert_eq!(run.stderr.lines().filter(|l| l.contains("listed a page")).count(), 12);

    // Compressed, as kubectl asks for it: for one page of all 1,200 the API server counts far fewer bytes
    // sent than the JSON samplectl printed from it (other tests' small lists beside it add only a little).
    let sent = || {
        crate::support::apiserver_metric("apiserver_response_sizes_sum", |series| {
            series.contains(r#"resource="configmaps""#) && series.contains(r#"verb="LIST""#)
        })
    };
    let before = sent();
    let run = samplectl(&["list", "cm", "-n", &ns.0, "-o", "json", "--chunk-size", "0"]).success();
    let bytes = sent() - before;
    assert!(bytes * 4.0 < run.stdout.len() as f64, "{bytes} bytes sent for {} printed", run.stdout.len());

    // `samplectl list ... | head -1`: the reader goes away after one line; that is not an error.
    let mut child = crate::support::samplectl_spawn(&["list", "cm", "-n", &ns.0, "-o", "json"]);
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut first).unwrap();
    assert_eq!(first, "{\n");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "a closed pipe ends quietly");
}

#[test]
fn user_errors_have_clear_messages_and_exit_codes() {
    let _cluster = crate::support::shared();
    let run = samplectl(&["list", "--gvr", "example.com/v1alpha1"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(
        run.stderr.starts_with("error: invalid --gvr \"example.com/v1alpha1\": empty part")
            || run.stderr.contains("expected GROUP/VERSION/RESOURCE such as example.com/v1alpha1/samples"),
        "{run:#?}"
    );
    let run = samplectl(&["list", "--gvr", "example.com/v1alpha1/samples/status"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("subresources such as samples/status cannot be listed"), "{run:#?}");

    let run = samplectl(&["list", "nosuchthings"]);
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (1, "error: the server doesn't have a resource type \"nosuchthings\"\n")
    );
    let run = samplectl(&["list", "--gvr", "example.com/v9/samples"]);
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (1, "error: the server doesn't have a resource type \"example.com/v9/samples\"\n")
    );

    let ns = Namespace::new("list-errors");
    let run = samplectl(&["list", "cm", "missing", "-n", &ns.0]);
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (1, "Error from server (NotFound): configmaps \"missing\" not found\n")
    );
    let run = samplectl(&["list", "cm", "missing", "-A"]);
    assert_eq!(run.code, 2, "{run:#?}");
    let run = samplectl(&["list", "cm", "-o", "json", "--show-labels"]);
    assert_eq!(
        (run.code, run.stderr.lines().next()),
        (2, Some("error: --show-labels option cannot be used with json printer"))
    );
    let run = samplectl(&["list"]);
    assert_eq!(run.code, 2, "{run:#?}");
}

#[test]
fn a_user_without_permission_is_forbidden() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    let config = user_kubeconfig(dir.path(), "list-nobody");
    let run =
        crate::support::samplectl_bare(&["--kubeconfig", config.to_str().unwrap(), "list", "cm", "-n", "default"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stderr,
        "Error from server (Forbidden): configmaps is forbidden: User \"list-nobody\" cannot list resource \
         \"configmaps\" in API group \"\" in the namespace \"default\"\n"
    );
}

#[test]
fn a_bad_token_is_unauthorized() {
    let _cluster = crate::support::shared();
    // A real service-account token with its signature broken: the server recognises its issuer, rejects it
    // and answers 401 (a token it does not recognise at all would only make the request anonymous).
    let ns = Namespace::new("list-token");
    kubectl(&["create", "serviceaccount", "robot", "-n", &ns.0]).success();
    let token = kubectl(&["create", "token", "robot", "-n", &ns.0]).success().stdout;
    let token = token.trim();
    let broken = format!("{}{}", &token[..token.len() - 4], if token.ends_with("AAAA") { "BBBB" } else { "AAAA" });
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::token_kubeconfig(dir.path(), "token", &broken);
    let run = crate::support::samplectl_bare(&["--kubeconfig", config.to_str().unwrap(), "list", "cm"]);
    assert_eq!((run.code, run.stderr.as_str()), (1, "error: You must be logged in to the server (Unauthorized)\n"));
}

#[test]
fn expired_or_untrusted_client_certificates_are_unauthorized() {
    let _cluster = crate::support::shared();
    use crate::support::{Signer, cert_kubeconfig};
    let dir = tempfile::tempdir().unwrap();
    for (name, signer, days) in [("expired", Signer::ClusterCa, -1), ("foreign", Signer::ForeignCa, 1)] {
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).unwrap();
        let config = cert_kubeconfig(&sub, name, signer, days);
        let run = crate::support::samplectl_bare(&["--kubeconfig", config.to_str().unwrap(), "list", "cm"]);
        assert_eq!(
            (run.code, run.stderr.as_str()),
            (1, "error: You must be logged in to the server (Unauthorized)\n"),
            "{name}"
        );
    }
}

#[test]
fn an_unreachable_server_is_named() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::kubeconfig_variant(dir.path(), "unreachable", |text| {
        text.lines()
            .map(|l| if l.trim_start().starts_with("server:") { "    server: https://127.0.0.1:1" } else { l })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let run =
        crate::support::samplectl_bare(&["--kubeconfig", config.to_str().unwrap(), "list", "--gvr", "v1/configmaps"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.starts_with("error: the connection to the server 127.0.0.1:1 was refused"), "{run:#?}");
}

#[test]
fn a_fresh_crd_is_waited_for_not_reported_missing() {
    let _cluster = crate::support::shared();
    let group = format!("fresh-{}.example.com", std::process::id());
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: things.{group}\n\
         spec:\n  group: {group}\n  scope: Cluster\n  names: {{kind: Thing, plural: things, singular: thing}}\n  \
         versions:\n  - name: v1\n    served: true\n    storage: true\n    \
         schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crd.yaml");
    std::fs::write(&file, crd).unwrap();
    kubectl(&["create", "-f", file.to_str().unwrap()]).success();
    // Straight away, by --gvr and by name: discovery may lag the CRD by a moment.
    let by_gvr = samplectl(&["list", "--gvr", &format!("{group}/v1/things")]);
    let by_name = samplectl(&["list", &format!("things.{group}")]);
    kubectl(&["delete", "-f", file.to_str().unwrap(), "--wait=false"]).success();
    for run in [by_gvr, by_name] {
        assert_eq!((run.code, run.stderr.as_str()), (0, "No resources found\n"), "{run:#?}");
    }
}

/// `list RESOURCE NAME...` as `kubectl get RESOURCE NAME...`: the ones found, in the order given, in
/// one table (or a `List`); a NotFound line on stderr for each one missing and exit 1; with
/// `--ignore-not-found`, the missing ones passed over and exit 0.
#[test]
fn several_names_print_like_kubectl() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("list-names");
    for name in ["a", "b", "c"] {
        kubectl(&["create", "configmap", name, "-n", &ns.0, "--from-literal=k=v"]).success();
    }
    let names = |text: &str| -> Vec<String> { table(text).1.into_iter().map(|row| row[0].clone()).collect() };
    let cases: &[&[&str]] = &[
        &["c", "a"],
        &["a", "missing", "b", "gone"],
        &["missing"],
        &["missing", "gone"],
        &["c", "a", "--ignore-not-found"],
        &["a", "missing", "--ignore-not-found"],
        &["missing", "--ignore-not-found"],
    ];
    for case in cases {
        let ours = samplectl(&[&["list", "cm", "-n", &ns.0][..], case].concat());
        let theirs = kubectl(&[&["get", "cm", "-n", &ns.0][..], case].concat());
        let both = format!("{case:?}\nsamplectl: {ours:#?}\nkubectl: {theirs:#?}");
        assert_eq!(ours.code, theirs.code, "{both}");
        assert_eq!(ours.stderr, theirs.stderr, "{both}");
        assert_eq!(table(&ours.stdout).0, table(&theirs.stdout).0, "headers: {both}");
        assert_eq!(names(&ours.stdout), names(&theirs.stdout), "{both}");
        for output in ["name", "json", "yaml"] {
            let ours = samplectl(&[&["list", "cm", "-n", &ns.0, "-o", output][..], case].concat());
            let theirs = kubectl(&[&["get", "cm", "-n", &ns.0, "-o", output][..], case].concat());
            let both = format!("{case:?} -o {output}\nsamplectl: {ours:#?}\nkubectl: {theirs:#?}");
            assert_eq!((ours.code, &ours.stderr), (theirs.code, &theirs.stderr), "{both}");
            match output {
                "name" => assert_eq!(ours.stdout, theirs.stdout, "{both}"),
                "json" if !theirs.stdout.is_empty() => {
                    let ours: Value = serde_json::from_str(&ours.stdout).unwrap();
                    let theirs: Value = serde_json::from_str(&theirs.stdout).unwrap();
                    assert_eq!(ours, theirs, "{both}");
                }
                _ => assert_eq!(ours.stdout.is_empty(), theirs.stdout.is_empty(), "{both}"),
            }
        }
    }
    // With --gvr, every argument is an object name.
    let ours = samplectl(&["list", "--gvr", "v1/configmaps", "b", "a", "-n", &ns.0, "-o", "name"]).success();
    assert_eq!(ours.stdout, "configmap/b\nconfigmap/a\n");
}

/// Lines of kubectl-style output without their last column (AGE, which may tick between the two runs).
fn without_age(text: &str) -> String {
    text.lines()
        .map(|line| line.trim_end().rsplit_once("   ").map_or(line, |(rest, _)| rest).trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Several resource types at once (`cm,sa`) and categories (`all`, and one two CRDs declare), as
/// `kubectl get` prints them: one table per type with `kind.group/name` names and a blank line between,
/// nothing for a type without objects, one List for json, and kubectl's words when nothing is found.
#[test]
fn several_types_and_categories_print_like_kubectl() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("list-types");
    let group = format!("cat{}.samplectl.example.com", std::process::id());
    let category = format!("samplectl-cat-{}", std::process::id());
    let schema =
        serde_json::json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    for (kind, plural) in [("Gadget", "gadgets"), ("Gizmo", "gizmos")] {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "categories": [category]},
                     "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema}]}
        });
        crate::support::apply("default", &crd);
    }
    struct DeleteCrds(String);
    impl Drop for DeleteCrds {
        fn drop(&mut self) {
            let _ = kubectl(&[
                "delete",
                "crd",
                &format!("gadgets.{}", self.0),
                &format!("gizmos.{}", self.0),
                "--wait=false",
            ]);
        }
    }
    let _delete = DeleteCrds(group.clone());
    established(&[&format!("crd/gadgets.{group}"), &format!("crd/gizmos.{group}")]);
    for (kind, name) in [("Gadget", "g1"), ("Gizmo", "z1"), ("Gizmo", "z2")] {
        let object = serde_json::json!({"apiVersion": format!("{group}/v1"), "kind": kind,
                                        "metadata": {"name": name, "labels": {"test": "list-types"}}});
        crate::support::apply(&ns.0, &object);
    }
    for name in ["one", "two"] {
        kubectl(&["create", "configmap", name, "-n", &ns.0]).success();
        kubectl(&["label", "configmap", name, "-n", &ns.0, "test=list-types"]).success();
    }
    kubectl(&["create", "serviceaccount", "robot", "-n", &ns.0]).success();
    kubectl(&["label", "serviceaccount", "robot", "-n", &ns.0, "test=list-types"]).success();

    let selector = ["-l", "test=list-types"];
    let cases: Vec<Vec<&str>> = vec![
        vec!["cm,sa", "-n", &ns.0],
        vec!["sa,cm", "-n", &ns.0, "-o", "wide"],
        vec!["cm,deploy,sa", "-n", &ns.0],
        vec!["deploy,rs", "-n", &ns.0],
        vec!["cm,sa", "-A", selector[0], selector[1]],
        vec![&category, "-n", &ns.0],
        vec![&category, "-A", selector[0], selector[1]],
        vec!["all", "-n", &ns.0],
        vec!["cm,sa", "-n", &ns.0, "-o", "name"],
        vec![&category, "-n", &ns.0, "-o", "name"],
        vec!["cm,sa,nosuchthings", "-n", &ns.0],
    ];
    // kubectl's discovery may take a moment to show the new CRDs.
    crate::support::eventually(std::time::Duration::from_secs(30), "kubectl knows the category", || {
        let run = kubectl(&["get", &category, "-n", &ns.0, "-o", "name"]);
        if run.stdout.lines().count() == 3 { Ok(()) } else { Err(format!("{run:#?}")) }
    });
    for case in &cases {
        let ours = samplectl(&[&["list"][..], case].concat());
        let theirs = kubectl(&[&["get"][..], case].concat());
        let both = format!("{case:?}\nsamplectl: {ours:#?}\nkubectl: {theirs:#?}");
        assert_eq!((ours.code, &ours.stderr), (theirs.code, &theirs.stderr), "{both}");
        assert_eq!(without_age(&ours.stdout), without_age(&theirs.stdout), "{both}");
    }
    for output in ["json", "yaml"] {
        let ours = samplectl(&["list", "cm,sa", "-n", &ns.0, "-o", output]).success();
        let theirs = kubectl(&["get", "cm,sa", "-n", &ns.0, "-o", output]).success();
        let parse = |text: &str| -> Value { serde_yaml::from_str(text).unwrap() };
        assert_eq!(parse(&ours.stdout), parse(&theirs.stdout), "-o {output}: one List of both kinds");
    }
    // A category is known only after discovery: names with it, and watching it, fail then (exit 1).
    let run = samplectl(&["list", &category, "g1", "-n", &ns.0]);
    let want = format!("error: {category:?} names 2 resource types; object names go with one type only\n");
    assert_eq!((run.code, run.stderr.as_str(), run.stdout.as_str()), (1, want.as_str(), ""), "{run:#?}");
    let run = samplectl(&["watch", &category, "-n", &ns.0]);
    let want = format!("error: watch follows one resource type; this names 2: gadgets.{group}, gizmos.{group}\n");
    assert_eq!((run.code, run.stderr.as_str(), run.stdout.as_str()), (1, want.as_str(), ""), "{run:#?}");
}

/// `-L KEY` (repeated or comma-separated) as kubectl: a column per label, headed by the key's last segment
/// in capitals, before LABELS; empty for an object without the label, the line then ending in the padding
/// before it, as kubectl's does; ignored by `-o name`. In `watch` too.
#[test]
fn label_columns_print_like_kubectl() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("list-label-columns");
    kubectl(&["create", "configmap", "a", "-n", &ns.0]).success();
    kubectl(&["label", "configmap", "a", "-n", &ns.0, "app=web", "app.kubernetes.io/name=thing", "tier=Front"])
        .success();
    kubectl(&["create", "configmap", "b", "-n", &ns.0]).success();
    let cases: &[&[&str]] = &[
        &["-L", "app"],
        &["-L", "app", "-L", "app.kubernetes.io/name,tier", "-L", "missing"],
        &["-L", "tier", "--show-labels"],
        &["-L", "app", "-o", "wide"],
        &["b", "-L", "app"],
        &["-L", "app", "-o", "name"],
    ];
    let cells = |text: &str| table(text);
    let padded = |text: &str| text.lines().map(|l| l.ends_with(' ')).collect::<Vec<_>>();
    for case in cases {
        let ours = samplectl(&[&["list", "cm", "-n", &ns.0][..], case].concat());
        let theirs = kubectl(&[&["get", "cm", "-n", &ns.0][..], case].concat());
        let both = format!("{case:?}\nsamplectl: {ours:#?}\nkubectl: {theirs:#?}");
        assert_eq!((ours.code, &ours.stderr), (theirs.code, &theirs.stderr), "{both}");
        let (mut ours_cells, mut theirs_cells) = (cells(&ours.stdout), cells(&theirs.stdout));
        if let Some(age) = ours_cells.0.iter().position(|h| h == "AGE") {
            ours_cells.1.iter_mut().chain(theirs_cells.1.iter_mut()).for_each(|row| drop(row.remove(age)));
        }
        assert_eq!(ours_cells, theirs_cells, "{both}");
        assert_eq!(padded(&ours.stdout), padded(&theirs.stdout), "lines ending in padding: {both}");
    }
    let mut watcher = crate::support::Watcher::start(&["watch", "cm", "-n", &ns.0, "-L", "app", "--max-events", "2"]);
    let header = watcher.next_line(std::time::Duration::from_secs(20));
    assert_eq!(table(&header).0, ["EVENT", "NAME", "DATA", "AGE", "APP"]);
    let rows =
        [watcher.next_line(std::time::Duration::from_secs(20)), watcher.next_line(std::time::Duration::from_secs(20))];
    assert!(rows[0].starts_with("ADDED") && rows[0].ends_with("web"), "{rows:?}");
}

/// `--subresource status|scale` with names, as kubectl: the server's Table of the subresource, the
/// subresource object itself for json, yaml and name (`scale.autoscaling/web`), NotFound for a missing
/// object or an unknown subresource, and refused without a name.
#[test]
fn subresources_print_like_kubectl() {
    let _cluster = crate::support::shared();
    install_crd();
    let ns = Namespace::new("list-subresource");
    kubectl(&["create", "deployment", "web", "--image=registry.invalid/web", "--replicas=2", "-n", &ns.0]).success();
    kubectl(&["apply", "-n", &ns.0, "-f", "manifests/samples/sample-resource-1.yaml"]).success();
    let cases: &[&[&str]] = &[
        &["deploy", "web", "--subresource", "scale"],
        &["deploy", "web", "--subresource", "status"],
        &["deploy", "web", "--subresource", "scale", "-o", "json"],
        &["deploy", "web", "--subresource", "scale", "-o", "yaml"],
        &["deploy", "web", "--subresource", "scale", "-o", "name"],
        &["deploy", "web", "nothere", "--subresource", "scale"],
        &["deploy", "web", "--subresource", "bogus"],
        &["samples", "sample-resource-1", "--subresource", "status", "-o", "json"],
    ];
    for case in cases {
        let ours = samplectl(&[&["list", "-n", &ns.0][..], case].concat());
        let theirs = kubectl(&[&["get", "-n", &ns.0][..], case].concat());
        let both = format!("{case:?}\nsamplectl: {ours:#?}\nkubectl: {theirs:#?}");
        assert_eq!((ours.code, &ours.stderr), (theirs.code, &theirs.stderr), "{both}");
        if case.contains(&"json") || case.contains(&"yaml") {
            let parse = |text: &str| -> Value { serde_yaml::from_str(text).unwrap() };
            let (mut ours, mut theirs) = (parse(&ours.stdout), parse(&theirs.stdout));
            // The Sample's status may be written between the two reads by nothing here; managed fields aside.
            for object in [&mut ours, &mut theirs] {
                object["metadata"].as_object_mut().unwrap().remove("managedFields");
            }
            assert_eq!(ours, theirs, "{both}");
        } else {
            let (mut ours_cells, mut theirs_cells) = (table(&ours.stdout), table(&theirs.stdout));
            if let Some(age) = ours_cells.0.iter().position(|h| h == "AGE") {
                ours_cells.1.iter_mut().chain(theirs_cells.1.iter_mut()).for_each(|row| drop(row.remove(age)));
            }
            assert_eq!(ours_cells, theirs_cells, "{both}");
        }
    }
    let run = samplectl(&["list", "deploy", "-n", &ns.0, "--subresource", "scale"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.starts_with("error: subresource cannot be used when bulk resources are specified"), "{run:#?}");
}

/// Object text that would drive a terminal (a title-setting OSC sequence, a screen clear, a bidi override)
/// is shown escaped when stdout is a terminal, every control and bidi character of it; piped, it is
/// printed exactly as kubectl prints it (which writes ESC as `^[` and leaves the rest); json stays exact.
#[test]
fn escape_sequences_in_objects_do_not_reach_a_terminal() {
    let _cluster = crate::support::shared();
    install_crd();
    let ns = Namespace::new("list-terminal");
    let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2Jhello\u{202e}dlrow";
    crate::support::apply_sample(&ns.0, "evil", evil);

    let piped = samplectl(&["list", "smp", "-n", &ns.0]).success();
    let theirs = kubectl(&["get", "smp", "-n", &ns.0]).success();
    assert_eq!(table(&piped.stdout).1[0][1], table(&theirs.stdout).1[0][1], "piped: kubectl's bytes");
    assert!(piped.stdout.contains("^[]0;pwned\u{7}^[[2Jhello\u{202e}dlrow"), "{piped:#?}");

    let shown = crate::support::samplectl_on_terminal(200, &["list", "smp", "-n", &ns.0]);
    assert!(!shown.contains('\u{1b}') && !shown.contains('\u{7}') && !shown.contains('\u{202e}'), "{shown:?}");
    assert!(shown.contains(r"\x1b]0;pwned\x07\x1b[2Jhello\u{202e}dlrow"), "{shown:?}");

    let json = crate::support::samplectl_on_terminal(200, &["list", "smp", "evil", "-n", &ns.0, "-o", "json"]);
    let object: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(object["testString"], evil, "json is exact");
    assert!(!json.contains('\u{1b}'), "json escapes it already");
}

/// A 4,096-character cell: piped, whole, as kubectl prints it; on a terminal, cut with `…` so that rows fit
/// its width, unless `--wide-cells`; json whole either way. In `watch` too.
#[test]
fn long_cells_are_cut_to_a_terminal_only() {
    let _cluster = crate::support::shared();
    install_crd();
    let ns = Namespace::new("list-width");
    let long = "0123456789abcdef".repeat(256);
    crate::support::apply_sample(&ns.0, "long", &long);
    crate::support::apply_sample(&ns.0, "short", "fits");

    let piped = samplectl(&["list", "smp", "-n", &ns.0]).success();
    let theirs = kubectl(&["get", "smp", "-n", &ns.0]).success();
    assert_eq!(table(&piped.stdout).1[0][1], table(&theirs.stdout).1[0][1], "piped: whole, as kubectl");
    assert!(piped.stdout.contains(&long));

    for args in [vec!["list", "smp", "-n", &ns.0], vec!["watch", "smp", "-n", &ns.0, "--max-events", "2"]] {
        let shown = crate::support::samplectl_on_terminal(80, &args);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 3, "{args:?}: {shown}");
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{args:?}: every line fits 80 columns:\n{shown}");
        assert!(
            lines[1..].iter().any(|l| l.contains("0123456789abcdef0123") && l.contains('…')),
            "{args:?}: cut with …:\n{shown}"
        );
        assert!(lines[1..].iter().any(|l| l.contains(" fits ")), "{args:?}: short cells whole:\n{shown}");
    }
    let whole = crate::support::samplectl_on_terminal(80, &["list", "smp", "-n", &ns.0, "--wide-cells"]);
    assert!(whole.replace('\n', "").contains(&long), "--wide-cells keeps it whole");
    let json = crate::support::samplectl_on_terminal(80, &["list", "smp", "long", "-n", &ns.0, "-o", "json"]);
    assert!(json.replace('\n', "").contains(&long), "json is never cut");
}
