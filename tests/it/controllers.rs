//! `samplectl reconcile -f`: metacontroller's CompositeController objects read from manifests and run in
//! one process: hooks over HTTP with v1 and v2 keys, strict v2 answers, the finalize hook and
//! metacontroller's finalizer name, the parent label selector, update strategies, and every mistake in a
//! manifest refused with its place before anything is written. `install-crd --metacontroller` installs
//! metacontroller's CRDs, and kubectl accepts controller objects against them. Checked with kubectl.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Background, Namespace, apply, established, eventually, free_port, http_get, kubectl, kubectl_json, samplectl,
};

const SOON: Duration = Duration::from_secs(30);

/// A CRD of the test's own, namespaced, with a status subresource; `spec` is free.
pub fn crd(plural: &str, kind: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.controllers.example.com")},
        "spec": {
            "group": "controllers.example.com",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    })
}

/// The test's CRDs, applied once per run and never deleted (tests side by side share them).
pub fn crds() {
    static APPLIED: std::sync::Once = std::sync::Once::new();
    APPLIED.call_once(|| {
        for (plural, kind) in [("keepers", "Keeper"), ("tallies", "Tally"), ("fleets", "Fleet"), ("workers", "Worker")]
        {
            apply("default", &crd(plural, kind));
            let name = format!("crd/{plural}.controllers.example.com");
            established(&[&name]);
        }
    });
}

/// The keys hook (tests/fixtures/keys-hook.py) on a port of its own, stopped when dropped.
pub struct HookServer {
    child: std::process::Child,
    pub url: String,
}

impl HookServer {
    fn start() -> Self {
        Self::of("tests/fixtures/keys-hook.py")
    }

    pub fn of(script: &str) -> Self {
        let port = free_port();
        let child = std::process::Command::new("python3").args([script, &port.to_string()]).spawn().unwrap();
        eventually(SOON, "the hook server", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())
        });
        HookServer { child, url: format!("http://127.0.0.1:{port}/sync") }
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CompositeController for `plural`, with ConfigMaps as children, its hooks at `url`.
fn controller(name: &str, plural: &str, url: &str, version: &str, extra: Value) -> Value {
    let mut cc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": name},
        "spec": {
            "parentResource": {"apiVersion": "controllers.example.com/v1", "resource": plural},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"version": version, "webhook": {"url": url}}},
        },
    });
    merge(&mut cc, extra);
    cc
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

/// Writes `documents` as one YAML file of several documents.
fn manifest(dir: &Path, file: &str, documents: &[Value]) -> String {
    let text: Vec<String> = documents.iter().map(|d| serde_yaml::to_string(d).unwrap()).collect();
    let path = dir.join(file);
    std::fs::write(&path, text.join("---\n")).unwrap();
    path.display().to_string()
}

fn parent(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "controllers.example.com/v1", "kind": kind, "metadata": {"name": name}, "spec": spec})
}

fn configmap(ns: &str, name: &str) -> Option<Value> {
    let run = kubectl(&["get", "configmap", name, "-n", ns, "-o", "json", "--ignore-not-found"]);
    (!run.stdout.trim().is_empty()).then(|| serde_json::from_str(&run.stdout).unwrap())
}

/// Two CompositeControllers of one parent type run side by side when no parent can satisfy both label
/// selectors (metacontroller's webhook-auth example runs one for `auth: valid` and one for `auth:
/// invalid`): each reconciles its own parents and leaves the other's alone. Selectors that could both
/// take a parent are refused (`bad_manifests_are_refused_with_their_place`).
#[test]
fn composite_controllers_of_one_parent_type_with_disjoint_selectors_run_side_by_side() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-sides");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let side = |name: &str| {
        let selector = json!({"spec": {"parentResource": {"labelSelector": {"matchLabels": {"side": name}}}}});
        controller(name, "keepers", &hook.url, "v1", selector)
    };
    let file = manifest(dir.path(), "sides.yaml", &[side("left"), side("right")]);
    for (name, label) in [("l", "left"), ("r", "right")] {
        let mut keeper = parent("Keeper", name, json!({}));
        keeper["metadata"]["labels"] = json!({"side": label});
        apply(&ns.0, &keeper);
    }
    samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]).success();
    assert_eq!(configmap(&ns.0, "l").unwrap()["data"]["controller"], "left");
    assert_eq!(configmap(&ns.0, "r").unwrap()["data"]["controller"], "right");
}

/// Two controllers from one manifest (beside a Deployment, which is skipped): a v1 hook and a v2 hook
/// see their children keyed as metacontroller keys them, each ConfigMap says which controller made it,
/// and each parent's status is the hook's with `observedGeneration`.
#[test]
fn composite_controllers_from_a_manifest_run_side_by_side() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-keys");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hook-server"}});
    let file = manifest(
        dir.path(),
        "controllers.yaml",
        &[
            deployment,
            controller("keeper-controller", "keepers", &hook.url, "v1", json!({})),
            controller("tally-controller", "tallies", &hook.url, "v2", json!({})),
        ],
    );
    apply(&ns.0, &parent("Keeper", "k", json!({})));
    apply(&ns.0, &parent("Tally", "t", json!({})));
    let once = || samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
    let first = once();
    let created = |name: &str| format!("{}/{name}: configmap created", ns.0);
    assert!(first.stderr.contains(&created("k")) && first.stderr.contains(&created("t")), "{first:#?}");
    once().success();
    let keeper = configmap(&ns.0, "k").unwrap();
    assert_eq!(keeper["data"]["keys"], "k", "v1: a namespaced parent's children by name");
    assert_eq!(keeper["data"]["controller"], "keeper-controller");
    let tally = configmap(&ns.0, "t").unwrap();
    assert_eq!(tally["data"]["keys"], format!("{}/t", ns.0), "v2: by namespace/name");
    assert_eq!(tally["data"]["controller"], "tally-controller");
    let status = kubectl_json(&["get", "keepers.controllers.example.com", "k", "-n", &ns.0])["status"].clone();
    assert_eq!(status, json!({"seen": 1, "observedGeneration": 1}));
    // Owned as metacontroller owns them: a controller reference to the parent.
    let owner = &keeper["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["controller"].as_bool()), (Some("Keeper"), Some(true)));
}

/// A v2 hook's answers are read strictly: a field the protocol does not have fails the sync, changes
/// nothing, and says which field; `responseUnMarshallMode: loose` takes the same answer.
#[test]
fn a_v2_answer_with_an_unknown_field_is_refused_unless_loose() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-strict");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let strict = manifest(dir.path(), "strict.yaml", &[controller("strict", "tallies", &hook.url, "v2", json!({}))]);
    apply(&ns.0, &parent("Tally", "odd", json!({"answer": "unknown-field"})));
    let run = samplectl(&["reconcile", "-f", &strict, "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains(r#"answered unknown field "labels""#), "{run:#?}");
    assert!(configmap(&ns.0, "odd").is_none(), "a refused answer writes nothing");

    let loose = json!({"spec": {"hooks": {"sync": {"webhook": {"responseUnMarshallMode": "loose"}}}}});
    let loose = manifest(dir.path(), "loose.yaml", &[controller("loose", "tallies", &hook.url, "v2", loose)]);
    samplectl(&["reconcile", "-f", &loose, "-n", &ns.0, "--once"]);
    assert!(configmap(&ns.0, "odd").is_some());
}

/// With a finalize hook, parents carry metacontroller's finalizer for the controller, and a deleted
/// parent is kept until the finalize hook (called with `finalizing: true`) says it is done; a parent the
/// label selector does not take is left alone.
#[test]
fn finalize_hooks_and_the_parent_selector() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-finalize");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let extra = json!({"spec": {
        "parentResource": {"labelSelector": {"matchLabels": {"managed": "yes"}}},
        "hooks": {"finalize": {"webhook": {"url": hook.url}}},
    }});
    let file = manifest(dir.path(), "finalize.yaml", &[controller("finalizing", "keepers", &hook.url, "v1", extra)]);
    let mut taken = parent("Keeper", "taken", json!({}));
    taken["metadata"]["labels"] = json!({"managed": "yes"});
    apply(&ns.0, &taken);
    apply(&ns.0, &parent("Keeper", "left", json!({})));
    let (metrics, health) = (free_port(), free_port());
    let (metrics_addr, health_addr) = (format!("127.0.0.1:{metrics}"), format!("127.0.0.1:{health}"));
    let _controller = Background::start(&[
        "reconcile",
        "-f",
        &file,
        "-n",
        &ns.0,
        "--watch",
        "--metrics-addr",
        &metrics_addr,
        "--health-addr",
        &health_addr,
    ]);
    eventually(SOON, "the selected parent's ConfigMap", || {
        configmap(&ns.0, "taken").ok_or_else(|| "not yet".to_owned())
    });
    eventually(SOON, "ready", || match http_get(health, "/readyz") {
        Some((200, _)) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    // Metrics carry the controller's name, as controller-runtime's do. The ConfigMap is written before
    // the parent's status, and a reconcile is counted when it ends: its count may come a moment after.
    eventually(SOON, "the reconciles counted by controller and result", || {
        let Some((_, text)) = http_get(metrics, "/metrics") else { return Err("no answer from /metrics".to_owned()) };
        let counted = ["ready", "ignored"].iter().all(|result| {
            text.contains(&format!(r#"samplectl_reconcile_total{{controller="finalizing",result="{result}"}}"#))
        });
        if counted { Ok(()) } else { Err(text) }
    });
    let finalizers =
        kubectl_json(&["get", "keepers.controllers.example.com", "taken", "-n", &ns.0])["metadata"]["finalizers"]
            .clone();
    assert_eq!(finalizers, json!(["metacontroller.io/compositecontroller-finalizing"]));
    std::thread::sleep(Duration::from_secs(2));
    assert!(configmap(&ns.0, "left").is_none(), "a parent the selector does not take is left alone");
    let left = kubectl_json(&["get", "keepers.controllers.example.com", "left", "-n", &ns.0]);
    assert!(left.get("status").is_none() && left["metadata"].get("finalizers").is_none(), "{left}");

    kubectl(&["delete", "keepers.controllers.example.com", "taken", "-n", &ns.0, "--wait=false"]).success();
    eventually(SOON, "the parent finalized and gone", || {
        let run = kubectl(&["get", "keepers.controllers.example.com", "taken", "-n", &ns.0, "--ignore-not-found"]);
        if run.stdout.trim().is_empty() { Ok(()) } else { Err(run.stdout) }
    });
    assert!(configmap(&ns.0, "taken").is_none(), "the finalize hook asked for no children");
}

/// A customize hook's `relatedResources` fill the sync request's `related`, keyed as the sync hook's
/// version keys them, and a related object that changes, appears, stops matching or goes re-syncs the
/// parent at once, with either driver.
#[test]
fn customize_hooks_feed_related_objects_and_their_changes_resync() {
    let _cluster = crate::support::shared();
    crds();
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let customize = hook.url.replace("/sync", "/customize");
    for (driver, version) in [("--watch", "v1"), ("--interval=1s", "v2")] {
        let ns = Namespace::new("cc-related");
        let extra = json!({"spec": {"hooks": {"customize": {"version": version, "webhook": {"url": customize}}}}});
        let file =
            manifest(dir.path(), "related.yaml", &[controller("relating", "keepers", &hook.url, version, extra)]);
        let rules = json!([{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"role": "input"}}}]);
        let input = |name: &str, value: &str, role: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "labels": {"role": role}}, "data": {"value": value}})
        };
        apply(&ns.0, &input("in1", "a", "input"));
        apply(&ns.0, &input("other", "z", "something-else"));
        apply(&ns.0, &parent("Keeper", "k", json!({"related": rules})));
        let _controller = Background::start(&["reconcile", "-f", &file, "-n", &ns.0, driver]);
        let key = |name: &str| match version {
            "v1" => format!("ConfigMap.v1:{name}"),
            _ => format!("ConfigMap.v1:{}/{name}", ns.0),
        };
        let related_is = |keys: &[&str], values: &str| {
            let keys: Vec<String> = keys.iter().map(|k| key(k)).collect();
            let (keys, values) = (keys.join(","), values.to_owned());
            eventually(SOON, &format!("{driver}: related {keys} with values {values}"), || {
                let data = configmap(&ns.0, "k").map(|c| c["data"].clone()).unwrap_or_default();
                match (data["related"].as_str(), data["relatedValues"].as_str()) {
                    (Some(k), Some(v)) if k == keys && v == values => Ok(data),
                    _ => Err(format!("{data}")),
                }
            })
        };
        let data = related_is(&["in1"], "a");
        assert_eq!(data["relatedKinds"], "ConfigMap", "a related object carries its type");
        apply(&ns.0, &input("in1", "b", "input"));
        related_is(&["in1"], "b");
        apply(&ns.0, &input("in2", "c", "input"));
        related_is(&["in1", "in2"], "b,c");
        apply(&ns.0, &input("in1", "b", "retired"));
        related_is(&["in2"], "c");
        kubectl(&["delete", "configmap", "in2", "-n", &ns.0]).success();
        related_is(&[], "");
    }

    // A rule metacontroller would refuse fails the sync with the rule's fault, and writes nothing.
    let ns = Namespace::new("cc-related-bad");
    let extra = json!({"spec": {"hooks": {"customize": {"webhook": {"url": customize}}}}});
    let file = manifest(dir.path(), "bad.yaml", &[controller("relating", "keepers", &hook.url, "v1", extra)]);
    let both = json!([{"apiVersion": "v1", "resource": "secrets", "names": ["a"], "labelSelector": {}}]);
    apply(&ns.0, &parent("Keeper", "bad", json!({"related": both})));
    let elsewhere = json!([{"apiVersion": "v1", "resource": "secrets", "namespace": "kube-system"}]);
    apply(&ns.0, &parent("Keeper", "far", json!({"related": elsewhere})));
    let unknown = json!([{"apiVersion": "v1", "resource": "gadgets"}]);
    apply(&ns.0, &parent("Keeper", "odd", json!({"related": unknown})));
    let run = samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "{run:#?}");
    for expected in [
        "names cannot be combined with labelSelector or namespaceSelector",
        "namespace kube-system is not the parent's namespace",
        "the customize hook answered related gadgets (v1): ",
    ] {
        assert!(run.stderr.contains(expected), "{expected}: {run:#?}");
    }
    for name in ["bad", "far", "odd"] {
        assert!(configmap(&ns.0, name).is_none(), "{name}: nothing written");
    }
}

/// A DecoratorController of Tallies labelled `decorate=yes` and of ClusterRoles annotated
/// `samplectl-test/decorate=<ns>`, each given a ConfigMap attachment, synced (and with `finalize`
/// finalized) by the hook at `url`.
pub fn decorator(name: &str, ns: &str, url: &str, finalize: bool) -> Value {
    let mut dc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [
                {"apiVersion": "controllers.example.com/v1", "resource": "tallies",
                 "labelSelector": {"matchLabels": {"decorate": "yes"}}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles",
                 "annotationSelector": {"matchAnnotations": {"samplectl-test/decorate": ns}}},
            ],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": url}}},
        },
    });
    if finalize {
        dc["spec"]["hooks"]["finalize"] = json!({"webhook": {"url": url}});
    }
    dc
}

/// A DecoratorController decorates a CRD's objects (by label) and a built-in cluster-scoped kind (by
/// annotation): the hook's labels and annotations land on the object itself (null removes), its
/// attachments are made, owned by the object, marked with the decorator's name and sent back keyed as
/// v1 keys them, a status is written only where one is answered and the type has the subresource, and
/// the finalize hook runs under metacontroller's finalizer name before the object goes.
#[test]
fn decorator_controllers_decorate_custom_and_built_in_objects() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("dc");
    let hook = HookServer::of("tests/fixtures/decorator-hook.py");
    let dir = tempfile::tempdir().unwrap();
    let role = format!("samplectl-test-{}", ns.0);
    let dc = decorator("decorating", &ns.0, &hook.url, true);
    let file = manifest(dir.path(), "decorator.yaml", std::slice::from_ref(&dc));
    let dc_object = dc;
    let mut taken = parent("Tally", "taken", json!({}));
    taken["metadata"]["labels"] = json!({"decorate": "yes", "remove-me": "x"});
    taken["metadata"]["annotations"] = json!({"samplectl-test/status": ""});
    apply(&ns.0, &taken);
    let mut quiet = parent("Tally", "quiet", json!({}));
    quiet["metadata"]["labels"] = json!({"decorate": "yes"});
    apply(&ns.0, &quiet);
    apply(&ns.0, &parent("Tally", "left", json!({})));
    let cluster_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role, "annotations": {"samplectl-test/decorate": ns.0}}, "rules": []});
    apply("default", &cluster_role);

    let controller = Background::start(&["reconcile", "-f", &file, "-n", &ns.0, "--watch"]);
    let tally = |name: &str| kubectl_json(&["get", "tallies.controllers.example.com", name, "-n", &ns.0]);
    let decorated = eventually(SOON, "the labelled Tally decorated, its attachment seen", || {
        let t = tally("taken");
        match t["metadata"]["annotations"]["samplectl-test/attachments"].as_str() {
            Some("ConfigMap.v1:taken-decor") => Ok(t),
            _ => Err(format!("{t}")),
        }
    });
    let labels = &decorated["metadata"]["labels"];
    assert_eq!(labels["decorated"], "yes", "{decorated}");
    assert!(labels.get("remove-me").is_none(), "a null label is removed: {decorated}");
    assert_eq!(decorated["status"], json!({"decorated": true}), "the hook's status alone");
    assert_eq!(decorated["metadata"]["finalizers"], json!(["metacontroller.io/decoratorcontroller-decorating"]));
    let attachment = configmap(&ns.0, "taken-decor").unwrap();
    assert_eq!(attachment["data"]["kind"], "Tally");
    assert_eq!(attachment["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"], "decorating");
    let owner = &attachment["metadata"]["ownerReferences"][0];
    assert_eq!((owner["name"].as_str(), owner["controller"].as_bool()), (Some("taken"), Some(true)));

    let quiet = eventually(SOON, "the second Tally decorated", || {
        let t = tally("quiet");
        if t["metadata"]["labels"]["decorated"] == "yes" { Ok(t) } else { Err(format!("{t}")) }
    });
    assert!(quiet.get("status").is_none(), "a null status leaves it as it is: {quiet}");
    let role_object = eventually(SOON, "the ClusterRole decorated", || {
        let r = kubectl_json(&["get", "clusterrole", &role]);
        if r["metadata"]["labels"]["decorated"] == "yes" { Ok(r) } else { Err(format!("{r}")) }
    });
    assert!(role_object.get("status").is_none());
    let role_attachment = eventually(SOON, "the ClusterRole's attachment", || {
        configmap(&ns.0, &format!("{role}-decor")).ok_or_else(|| "not yet".to_owned())
    });
    assert_eq!(role_attachment["data"]["kind"], "ClusterRole");
    assert_eq!(role_attachment["metadata"]["ownerReferences"][0]["kind"], "ClusterRole");
    let left = tally("left");
    assert!(left["metadata"].get("labels").is_none() && left["metadata"].get("finalizers").is_none(), "{left}");
    assert!(configmap(&ns.0, "left-decor").is_none());

    // The finalize hook removes the attachment, then says it is done; the object goes.
    kubectl(&["delete", "tallies.controllers.example.com", "taken", "-n", &ns.0, "--wait=false"]).success();
    kubectl(&["delete", "clusterrole", &role, "--wait=false"]).success();
    eventually(SOON, "the finalized objects gone", || {
        let t = kubectl(&["get", "tallies.controllers.example.com", "taken", "-n", &ns.0, "--ignore-not-found"]);
        let r = kubectl(&["get", "clusterrole", &role, "--ignore-not-found"]);
        if t.stdout.trim().is_empty() && r.stdout.trim().is_empty() { Ok(()) } else { Err(t.stdout + &r.stdout) }
    });
    assert!(configmap(&ns.0, "taken-decor").is_none());
    drop(controller);

    // The poll driver does the same, once; without a finalize hook nothing is written to the object
    // before the hook is called, so the hook sees it as listed (a built-in kind's list items carry no
    // kind: the request must still say it).
    let mut no_finalize = dc_object.clone();
    no_finalize["spec"]["hooks"].as_object_mut().unwrap().remove("finalize");
    let file = manifest(dir.path(), "no-finalize.yaml", &[no_finalize]);
    kubectl(&["label", "tallies.controllers.example.com", "left", "-n", &ns.0, "decorate=yes"]).success();
    apply("default", &cluster_role);
    samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]).success();
    assert_eq!(tally("left")["metadata"]["labels"]["decorated"], "yes");
    assert!(configmap(&ns.0, "left-decor").is_some());
    let role_object = kubectl_json(&["get", "clusterrole", &role]);
    assert_eq!(role_object["metadata"]["labels"]["decorated"], "yes", "{role_object}");
    assert_eq!(configmap(&ns.0, &format!("{role}-decor")).unwrap()["data"]["kind"], "ClusterRole");
    kubectl(&["delete", "clusterrole", &role]).success();
}

/// A DecoratorController run sharded (`--shard-ring`, two members): the objects it decorates (by label,
/// and by annotation on a cluster-scoped built-in kind) are labelled for a member and decorated; the
/// ones it does not select are left without a shard label.
#[test]
fn a_sharded_decorator_labels_only_what_it_decorates() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("dc-sharded");
    let hook = HookServer::of("tests/fixtures/decorator-hook.py");
    let dir = tempfile::tempdir().unwrap();
    let (chosen, passed_over) = (format!("samplectl-test-{}", ns.0), format!("samplectl-test-{}-not", ns.0));
    let dc = decorator("decorating-sharded", &ns.0, &hook.url, false);
    let file = manifest(dir.path(), "decorator.yaml", &[dc]);
    let mut taken = parent("Tally", "taken", json!({}));
    taken["metadata"]["labels"] = json!({"decorate": "yes"});
    apply(&ns.0, &taken);
    apply(&ns.0, &parent("Tally", "left", json!({})));
    for (name, annotated) in [(&chosen, true), (&passed_over, false)] {
        let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": []});
        if annotated {
            role["metadata"]["annotations"] = json!({"samplectl-test/decorate": ns.0});
        }
        apply("default", &role);
    }
    let ring = ns.0.clone();
    let label = format!("shard.samplectl.io/{ring}");
    let member = |name: &str| {
        let mut args = vec!["reconcile", "-f", &file, "-n", &ns.0, "--watch", "--shard-ring", &ring];
        args.extend(["--shard-member", name, "--leader-election-namespace", &ns.0]);
        args.extend(crate::sharding::TIMINGS);
        Background::start(&args)
    };
    let members = [member("a"), member("b")];
    let logs = || members.iter().map(Background::stderr).collect::<Vec<_>>().join("\n---\n");
    let on_a_member = |object: &Value| {
        let labels = &object["metadata"]["labels"];
        // Labelled for a member's incarnation: its name and its process's id.
        let member = labels[&label].as_str().unwrap_or_default();
        labels["decorated"] == "yes" && (member.starts_with("a_") || member.starts_with("b_"))
    };
    let tally = |name: &str| kubectl_json(&["get", "tallies.controllers.example.com", name, "-n", &ns.0]);
    eventually(SOON, "the Tally and the ClusterRole decorated, each on a member", || {
        let (t, r) = (tally("taken"), kubectl_json(&["get", "clusterrole", &chosen]));
        match on_a_member(&t) && on_a_member(&r) && configmap(&ns.0, "taken-decor").is_some() {
            true => Ok(()),
            false => Err(format!("{t}\n{r}\n{}", logs())),
        }
    });
    // Give the coordinator time it would need to label what it should not.
    std::thread::sleep(Duration::from_secs(2));
    let left = tally("left");
    assert!(left["metadata"]["labels"].get(&label).is_none(), "{left}");
    for name in [passed_over.as_str(), "admin"] {
        let role = kubectl_json(&["get", "clusterrole", name]);
        assert!(role["metadata"]["labels"].get(&label).is_none(), "{role}");
    }
    drop(members);
    kubectl(&["delete", "clusterrole", &chosen, &passed_over]).success();
}

/// `--from-cluster` runs the controller objects stored in the cluster that carry the target labels:
/// each starts when it appears, restarts when its spec changes, and stops when it is deleted; one that
/// cannot run is said in a warning while the others run; `--once` runs them once.
#[test]
fn controllers_stored_in_the_cluster_are_followed() {
    let _cluster = crate::support::shared();
    crds();
    samplectl(&["install-crd", "--metacontroller"]).success();
    let ns = Namespace::new("cc-cluster");
    let hook = HookServer::start();
    let label = format!("samplectl-test={}", ns.0);
    let stored = |name: &str, plural: &str, version: &str, extra: Value| {
        let mut cc = controller(name, plural, &hook.url, version, extra);
        cc["metadata"]["labels"] = json!({"samplectl-test": ns.0});
        cc
    };
    let (followed, broken) = (format!("{}-keepers", ns.0), format!("{}-broken", ns.0));
    apply("default", &stored(&followed, "keepers", "v1", json!({})));
    let unserved = json!({"spec": {"parentResource": {"resource": "nothings"}}});
    apply("default", &stored(&broken, "tallies", "v1", unserved));
    // Another controller object, without the labels: not this instance's.
    let other = format!("{}-other", ns.0);
    apply("default", &controller(&other, "tallies", &hook.url, "v1", json!({})));
    apply(&ns.0, &parent("Keeper", "k", json!({})));
    apply(&ns.0, &parent("Tally", "t", json!({})));

    let run =
        Background::start(&["reconcile", "--from-cluster", "--target-label-selector", &label, "-n", &ns.0, "--watch"]);
    let keys_are = |name: &str, keys: String| {
        eventually(SOON, &format!("{name}'s ConfigMap keyed {keys}"), || {
            let data = configmap(&ns.0, name).map(|c| c["data"].clone()).unwrap_or_default();
            if data["keys"] == keys.as_str() { Ok(data) } else { Err(format!("{data}")) }
        })
    };
    let data = keys_are("k", "k".into());
    assert_eq!(data["controller"], followed.as_str());
    eventually(SOON, "the broken controller object said", || {
        let said = run.stderr();
        if said.contains(&format!("cannot run CompositeController \"{broken}\""))
            && said.contains("spec.parentResource")
        {
            Ok(())
        } else {
            Err(said)
        }
    });
    // A changed spec restarts it: v2 keys children by namespace/name.
    apply("default", &stored(&followed, "keepers", "v2", json!({})));
    keys_are("k", format!("{}/k", ns.0));
    assert!(configmap(&ns.0, "t").is_none(), "neither the broken nor the unlabelled controller ran");

    kubectl(&["delete", "compositecontroller", &followed]).success();
    eventually(SOON, "the deleted controller stopped", || {
        let said = run.stderr();
        if said.contains(&format!("stopped CompositeController \"{followed}\"")) { Ok(()) } else { Err(said) }
    });
    apply(&ns.0, &parent("Keeper", "late", json!({})));
    std::thread::sleep(Duration::from_secs(2));
    assert!(configmap(&ns.0, "late").is_none(), "a deleted controller object runs no more");
    drop(run);

    // --once: each stored controller once; the broken one fails the run after the others ran.
    apply("default", &stored(&followed, "keepers", "v1", json!({})));
    let once = samplectl(&["reconcile", "--from-cluster", "--target-label-selector", &label, "-n", &ns.0, "--once"]);
    assert_eq!(once.code, 1, "{once:#?}");
    assert!(once.stderr.contains(&format!("cannot run CompositeController \"{broken}\"")), "{once:#?}");
    assert!(configmap(&ns.0, "late").is_some(), "the others ran");
    for name in [&followed, &broken, &other] {
        kubectl(&["delete", "compositecontroller", name, "--ignore-not-found"]).success();
    }
}

/// A second CompositeController for a parent type another already reconciles is refused (as
/// metacontroller's webhook-auth example applies one on purpose), and said once: its retries every 30 s
/// fail the same way and are not said again.
#[test]
fn a_refused_controller_object_is_said_once_not_at_every_retry() {
    let _cluster = crate::support::shared();
    crds();
    samplectl(&["install-crd", "--metacontroller"]).success();
    let ns = Namespace::new("cc-refused");
    let hook = HookServer::start();
    let label = format!("samplectl-test={}", ns.0);
    let names = [format!("{}-first", ns.0), format!("{}-second", ns.0)];
    for name in &names {
        let mut cc = controller(name, "keepers", &hook.url, "v1", json!({}));
        cc["metadata"]["labels"] = json!({"samplectl-test": ns.0});
        apply("default", &cc);
    }
    let started = std::time::Instant::now();
    let run =
        Background::start(&["reconcile", "--from-cluster", "--target-label-selector", &label, "-n", &ns.0, "--watch"]);
    let refusal = "two CompositeControllers of one parent type must have label selectors";
    eventually(SOON, "one of the two refused", || {
        let said = run.stderr();
        if said.contains(refusal) { Ok(()) } else { Err(said) }
    });
    // Past the first retry (30 s after the start).
    std::thread::sleep(Duration::from_secs(36).saturating_sub(started.elapsed()));
    let said = run.stderr();
    assert_eq!(said.matches(refusal).count(), 1, "{said}");
    drop(run);
    for name in &names {
        kubectl(&["delete", "compositecontroller", name, "--ignore-not-found"]).success();
    }
}

/// examples/myapp, as written (only the hook's port changed): a MyApp gets its Deployment and Service,
/// reports the Deployment's available replicas in a Ready condition, gets a HorizontalPodAutoscaler
/// while autoscaling is on (and loses it when it is off), and its Service follows `serviceType`.
#[test]
fn the_myapp_example_runs_as_written() {
    let _cluster = crate::support::shared();
    static CRD: std::sync::Once = std::sync::Once::new();
    CRD.call_once(|| {
        kubectl(&["apply", "-f", "examples/myapp/crd.yaml"]).success();
        established(&["crd/myapps.apps.example.com"]);
    });
    let ns = Namespace::new("myapp");
    let port = free_port();
    let mut hook = std::process::Command::new("python3")
        .args(["examples/myapp/sync.py", "--serve", &port.to_string()])
        .spawn()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let controller = std::fs::read_to_string("examples/myapp/controller.yaml").unwrap();
    assert!(controller.contains("127.0.0.1:8010"), "the example's hook address");
    let file = dir.path().join("controller.yaml");
    std::fs::write(&file, controller.replace("127.0.0.1:8010", &format!("127.0.0.1:{port}"))).unwrap();
    kubectl(&["apply", "-n", &ns.0, "-f", "examples/myapp/myapp.yaml"]).success();
    let run = Background::start(&["reconcile", "-f", file.to_str().unwrap(), "-n", &ns.0, "--watch"]);

    let get = |what: &str| kubectl_json(&["get", what, "shop", "-n", &ns.0]);
    let ready = |want: &str| {
        eventually(SOON, &format!("MyApp Ready={want}"), || {
            let app = get("myapps.apps.example.com");
            let condition = app["status"]["conditions"][0].clone();
            if condition["status"] == want { Ok(app) } else { Err(format!("{app}")) }
        })
    };
    let app = ready("False");
    assert_eq!(app["status"]["availableReplicas"], 0);
    let deployment = get("deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        (container["image"].as_str(), container["ports"][0]["containerPort"].as_i64()),
        (Some("nginx:1.27"), Some(8080))
    );
    assert_eq!(container["env"][0], json!({"name": "MODE", "value": "production"}));
    assert_eq!(container["resources"]["requests"]["cpu"], "100m");
    assert_eq!(deployment["metadata"]["ownerReferences"][0]["kind"], "MyApp");
    let service = get("service");
    assert_eq!(
        (service["spec"]["type"].as_str(), service["spec"]["ports"][0]["targetPort"].as_i64()),
        (Some("ClusterIP"), Some(8080))
    );

    // No kubelet here: the test plays the Deployment controller's part.
    let status = r#"{"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}}"#;
    kubectl(&["patch", "deployment", "shop", "-n", &ns.0, "--subresource=status", "--type=merge", "-p", status])
        .success();
    let app = ready("True");
    assert_eq!(app["status"]["availableReplicas"], 2);

    let on = r#"{"spec": {"serviceType": "NodePort", "autoScaling": {"enabled": true, "minReplicas": 2, "maxReplicas": 6}}}"#;
    kubectl(&["patch", "myapps.apps.example.com", "shop", "-n", &ns.0, "--type=merge", "-p", on]).success();
    let hpa = eventually(SOON, "the autoscaler", || {
        let run = kubectl(&["get", "hpa", "shop", "-n", &ns.0, "-o", "json", "--ignore-not-found"]);
        if run.stdout.trim().is_empty() {
            Err("not yet".to_owned())
        } else {
            Ok(serde_json::from_str::<Value>(&run.stdout).unwrap())
        }
    });
    assert_eq!((hpa["spec"]["minReplicas"].as_i64(), hpa["spec"]["maxReplicas"].as_i64()), (Some(2), Some(6)));
    assert_eq!(hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
    eventually(SOON, "the Service a NodePort", || {
        let service = get("service");
        if service["spec"]["type"] == "NodePort" { Ok(()) } else { Err(format!("{service}")) }
    });
    let off = r#"{"spec": {"autoScaling": {"enabled": false}}}"#;
    kubectl(&["patch", "myapps.apps.example.com", "shop", "-n", &ns.0, "--type=merge", "-p", off]).success();
    eventually(SOON, "the autoscaler gone", || {
        let run = kubectl(&["get", "hpa", "shop", "-n", &ns.0, "--ignore-not-found"]);
        if run.stdout.trim().is_empty() { Ok(()) } else { Err(run.stdout) }
    });
    drop(run);
    let _ = hook.kill();
    let _ = hook.wait();
}

/// A webhook over HTTPS with a CA of its own and a Bearer token: the controller object's
/// `endpointConfigs` entry for the hook's host names the CA (a ConfigMap) and the token (a Secret), read
/// from the cluster; without the entry the certificate is refused, and with a wrong token the hook's 401
/// is said.
#[test]
fn endpoint_configs_bring_a_ca_and_a_token_from_the_cluster() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-tls");
    let dir = tempfile::tempdir().unwrap();
    let at = |f: &str| dir.path().join(f).display().to_string();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        &at("ca.key"),
        "-out",
        &at("ca.crt"),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &at("tls.key"),
        "-out",
        &at("tls.csr"),
    ]);
    std::fs::write(at("ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &at("tls.csr"),
        "-CA",
        &at("ca.crt"),
        "-CAkey",
        &at("ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &at("ext"),
        "-out",
        &at("tls.crt"),
    ]);
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .args(["tests/fixtures/tls-hook.py", &port.to_string(), &at("tls.crt"), &at("tls.key"), "s3cret"])
        .spawn()
        .unwrap();
    eventually(SOON, "the HTTPS hook", || std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string()));
    kubectl(&["create", "configmap", "hook-ca", "-n", &ns.0, &format!("--from-file=ca.crt={}", at("ca.crt"))])
        .success();
    kubectl(&["create", "secret", "generic", "hook-token", "-n", &ns.0, "--from-literal=token=s3cret"]).success();
    apply(&ns.0, &parent("Keeper", "k", json!({})));

    let url = format!("https://127.0.0.1:{port}/sync");
    let entry = json!({"host": format!("127.0.0.1:{port}"),
        "caBundle": {"configMapRef": {"name": "hook-ca", "namespace": ns.0}},
        "authorization": {"secretRef": {"name": "hook-token", "namespace": ns.0, "key": "token"}}});
    let without = manifest(dir.path(), "without.yaml", &[controller("tls", "keepers", &url, "v1", json!({}))]);
    let run = samplectl(&["reconcile", "-f", &without, "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("cannot be reached") && run.stderr.to_lowercase().contains("certificate"), "{run:#?}");

    let with = json!({"spec": {"endpointConfigs": [entry]}});
    let with = manifest(dir.path(), "with.yaml", &[controller("tls", "keepers", &url, "v1", with)]);
    samplectl(&["reconcile", "-f", &with, "-n", &ns.0, "--once"]).success();
    assert_eq!(configmap(&ns.0, "k").unwrap()["data"]["controller"], "tls");

    kubectl(&["delete", "secret", "hook-token", "-n", &ns.0]).success();
    kubectl(&["create", "secret", "generic", "hook-token", "-n", &ns.0, "--from-literal=token=wrong"]).success();
    let run = samplectl(&["reconcile", "-f", &with, "-n", &ns.0, "--once"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("answered HTTP 401"), "{run:#?}");
    let _ = server.kill();
    let _ = server.wait();
}

/// openssl with `args`, which must succeed.
fn openssl(args: &[&str]) {
    let out = std::process::Command::new("openssl").args(args).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The TLS material users make for metacontroller's hooks, taken wherever Go takes it, while the hook's
/// server is still verified: client certificates of X.509 v1 (openssl's `x509 -req` without an
/// extension file, as metacontroller's webhook-auth example makes them) and v3 with and without
/// extensions; EC and RSA keys in PKCS#8, SEC1 and PKCS#1 files; CA bundles of several certificates.
/// A server certificate with only a Common Name is refused in Go's words, and a key that is not the
/// certificate's names the Secret and its keys.
#[test]
fn endpoint_configs_take_the_tls_material_users_make() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-mtls");
    let dir = tempfile::tempdir().unwrap();
    let at = |f: &str| dir.path().join(f).display().to_string();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    let x509 = |csr: &str, out: &str, ext: Option<&str>| {
        let mut args =
            vec!["x509", "-req", "-in", csr, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1"];
        args.extend(ext.map(|e| ["-extfile", e]).into_iter().flatten());
        args.extend(["-out", out]);
        let out = std::process::Command::new("openssl").args(&args).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let req = |key_args: &[&str], cn: &str, key: &str, csr: &str| {
        let mut args = vec!["req"];
        args.extend_from_slice(key_args);
        args.extend(["-subj", cn, "-keyout", key, "-out", csr]);
        let out = std::process::Command::new("openssl").args(&args).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    // The CA and the server's certificate, as webhook-auth makes them.
    let (ca_key, ca_crt) = (at("ca.key"), at("ca.crt"));
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-days", "1", "-subj", "/CN=test-ca", "-keyout", &ca_key, "-out", &ca_crt]);
    openssl(&ca);
    req(&ec, "/CN=127.0.0.1", "server.key", "server.csr");
    std::fs::write(at("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    x509("server.csr", "server.crt", Some("san.ext"));
    // A server certificate with only a Common Name (v3, no subjectAltName).
    req(&ec, "/CN=127.0.0.1", "cn.key", "cn.csr");
    std::fs::write(at("cn.ext"), "basicConstraints=CA:FALSE\n").unwrap();
    x509("cn.csr", "cn.crt", Some("cn.ext"));
    // Client certificates: v1 with an EC key (PKCS#8, and the same key as SEC1); v3 with extensions and an
    // RSA key (PKCS#1); v3 without extensions, from a second CA.
    req(&ec, "/CN=metacontroller", "v1.key", "v1.csr");
    x509("v1.csr", "v1.crt", None);
    openssl(&["ec", "-in", &at("v1.key"), "-out", &at("v1-sec1.key")]);
    req(&["-newkey", "rsa:2048", "-nodes"], "/CN=metacontroller", "rsa.key", "rsa.csr");
    std::fs::write(at("client.ext"), "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n").unwrap();
    x509("rsa.csr", "rsa.crt", Some("client.ext"));
    openssl(&["rsa", "-in", &at("rsa.key"), "-traditional", "-out", &at("rsa-pkcs1.key")]);
    let mut other_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    other_params.distinguished_name.push(rcgen::DnType::CommonName, "other-ca");
    let other = rcgen::CertifiedIssuer::self_signed(other_params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let bare_key = rcgen::KeyPair::generate().unwrap();
    let bare = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap().signed_by(&bare_key, &other).unwrap();
    std::fs::write(at("bare.crt"), bare.pem()).unwrap();
    std::fs::write(at("bare.key"), bare_key.serialize_pem()).unwrap();
    // Bundles of several CAs: the server's client CAs, and the caBundle samplectl trusts.
    let both = format!("{}{}", other.pem(), std::fs::read_to_string(at("ca.crt")).unwrap());
    std::fs::write(at("cas.crt"), &both).unwrap();

    /// The hook's server, stopped however the test ends.
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let serve = |cert: &str, key: &str, no_length: bool| {
        let port = free_port();
        let child = std::process::Command::new("python3")
            .args(["tests/fixtures/tls-hook.py", &port.to_string(), &at(cert), &at(key), "s3cret", &at("cas.crt")])
            .env("NO_LENGTH", if no_length { "1" } else { "0" })
            .spawn()
            .unwrap();
        let server = Server(child);
        eventually(SOON, "the HTTPS hook", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())
        });
        (port, server)
    };
    let (port, server) = serve("server.crt", "server.key", false);
    kubectl(&["create", "configmap", "hook-cas", "-n", &ns.0, &format!("--from-file=ca.crt={}", at("cas.crt"))])
        .success();
    kubectl(&["create", "secret", "generic", "hook-token", "-n", &ns.0, "--from-literal=token=s3cret"]).success();
    apply(&ns.0, &parent("Keeper", "k", json!({})));
    let run_with = |port: u16, secret: Option<&str>| {
        let mut entry = json!({"host": format!("127.0.0.1:{port}"),
            "caBundle": {"configMapRef": {"name": "hook-cas", "namespace": ns.0}},
            "authorization": {"secretRef": {"name": "hook-token", "namespace": ns.0, "key": "token"}}});
        if let Some(secret) = secret {
            entry["clientTLS"] = json!({"secretRef": {"name": secret, "namespace": ns.0}});
        }
        let url = format!("https://127.0.0.1:{port}/sync");
        let spec = json!({"spec": {"endpointConfigs": [entry]}});
        let file = format!("{}.yaml", secret.unwrap_or("none"));
        let path = manifest(dir.path(), &file, &[controller("mtls", "keepers", &url, "v1", spec)]);
        samplectl(&["reconcile", "-f", &path, "-n", &ns.0, "--once"])
    };
    for (secret, cert, key) in [
        ("v1-pkcs8", "v1.crt", "v1.key"),
        ("v1-sec1", "v1.crt", "v1-sec1.key"),
        ("v3-rsa-pkcs1", "rsa.crt", "rsa-pkcs1.key"),
        ("v3-bare", "bare.crt", "bare.key"),
    ] {
        let (crt, key) = (format!("--from-file=tls.crt={}", at(cert)), format!("--from-file=tls.key={}", at(key)));
        kubectl(&["create", "secret", "generic", secret, "-n", &ns.0, &crt, &key]).success();
        let run = run_with(port, Some(secret));
        assert_eq!(run.code, 0, "{secret}: {run:#?}");
    }
    assert_eq!(configmap(&ns.0, "k").unwrap()["data"]["controller"], "mtls");
    // Without a client certificate the server refuses the handshake.
    let run = run_with(port, None);
    assert_eq!(run.code, 1, "{run:#?}");
    // A key that is not the certificate's: said with the Secret and its keys.
    let (crt, key) =
        (format!("--from-file=tls.crt={}", at("v1.crt")), format!("--from-file=tls.key={}", at("rsa.key")));
    kubectl(&["create", "secret", "generic", "mismatched", "-n", &ns.0, &crt, &key]).success();
    let run = run_with(port, Some("mismatched"));
    assert_eq!(run.code, 1, "{run:#?}");
    let said = format!(
        "clientTLS: Secret {}/mismatched key \"tls.crt\" and key \"tls.key\": private key does not match public key",
        ns.0
    );
    assert!(run.stderr.contains(&said), "{run:#?}");
    // Running on, it is said once, not at every retry (the retries are there at debug level).
    let manifest_file = at("mismatched.yaml");
    let watching = Background::start(&["-v", "reconcile", "-f", &manifest_file, "-n", &ns.0, "--watch"]);
    let lines = |level: &str| {
        let log = watching.stderr();
        log.lines().filter(|l| l.contains(level) && l.contains(&said)).count()
    };
    eventually(SOON, "three tries", || if lines(" DEBUG ") >= 2 { Ok(()) } else { Err(watching.stderr()) });
    assert_eq!(lines(" WARN "), 1, "{}", watching.stderr());
    drop(watching);
    drop(server);

    // A server certificate naming its host only in the Common Name: refused as Go refuses it.
    let (port, cn_server) = serve("cn.crt", "cn.key", false);
    let run = run_with(port, Some("v1-pkcs8"));
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("x509: certificate relies on legacy Common Name field, use SANs instead"), "{run:#?}");
    drop(cn_server);

    // An answer without a length, ended by a close without close_notify, as webhook-auth's server answers:
    // read to its end, as Go reads it.
    let (port, _server) = serve("server.crt", "server.key", true);
    let run = run_with(port, Some("v1-pkcs8"));
    assert_eq!(run.code, 0, "{run:#?}");
}

/// A parent whose finalize hook says it is done goes, even when the children that answer asks for cannot
/// be written (here a ConfigMap key the API server refuses; in life, a namespace being deleted refuses
/// every create).
#[test]
fn a_finalized_parent_goes_even_when_its_children_cannot_be_written() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-finalized");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let extra = json!({"spec": {"hooks": {"finalize": {"webhook": {"url": hook.url}}}}});
    let file = manifest(dir.path(), "finalize.yaml", &[controller("finalized", "keepers", &hook.url, "v1", extra)]);
    let spec = json!({"answer": "keep-while-finalizing", "data": {"not a key!": "x"}});
    apply(&ns.0, &parent("Keeper", "doomed", spec));
    let _controller = Background::start(&["reconcile", "-f", &file, "-n", &ns.0, "--watch"]);
    eventually(SOON, "the finalizer on", || {
        let keeper = kubectl_json(&["get", "keepers.controllers.example.com", "doomed", "-n", &ns.0]);
        match keeper["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()) {
            true => Ok(()),
            false => Err(keeper.to_string()),
        }
    });
    kubectl(&["delete", "keepers.controllers.example.com", "doomed", "-n", &ns.0, "--wait=false"]).success();
    eventually(SOON, "the parent gone", || {
        let run = kubectl(&["get", "keepers.controllers.example.com", "doomed", "-n", &ns.0, "--ignore-not-found"]);
        if run.stdout.trim().is_empty() { Ok(()) } else { Err(run.stdout) }
    });
}

/// A child the parent already controls but samplectl's watches cannot see (made by metacontroller before
/// the switch, without samplectl's label) is labelled once, even under OnDelete; the hook sees it from
/// then on, and a converged controller writes nothing.
#[test]
fn children_metacontroller_made_are_taken_over_without_a_write_loop() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-switch");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let on_delete = json!({"spec": {"childResources": [{"apiVersion": "v1", "resource": "configmaps"}]}});
    let file = manifest(dir.path(), "switch.yaml", &[controller("switch", "keepers", &hook.url, "v1", on_delete)]);
    apply(&ns.0, &parent("Keeper", "old", json!({})));
    let keeper = kubectl_json(&["get", "keepers.controllers.example.com", "old", "-n", &ns.0]);
    let made = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "old", "ownerReferences": [{
            "apiVersion": "controllers.example.com/v1", "kind": "Keeper", "name": "old",
            "uid": keeper["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
        }]},
        "data": {"made": "by metacontroller"},
    });
    apply(&ns.0, &made);
    samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
    let taken = configmap(&ns.0, "old").unwrap();
    assert_eq!(taken["metadata"]["labels"]["app.kubernetes.io/managed-by"], "samplectl", "{taken}");
    assert_eq!(taken["data"], json!({"made": "by metacontroller"}), "OnDelete: its content is left alone");
    samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
    let status = kubectl_json(&["get", "keepers.controllers.example.com", "old", "-n", &ns.0])["status"].clone();
    assert_eq!(status["seen"], 1, "the hook sees its child: {status}");
    let quiet = samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]).success();
    let totals = quiet.stderr.lines().find(|l| l.contains("requests sent:")).expect("totals are printed");
    assert!(totals.contains("(0 writes)") && !totals.contains("get configmaps"), "{totals}");
}

/// OnDelete (metacontroller's default) leaves a child that differs alone; InPlace updates it where it
/// stands; Recreate deletes it and creates it anew (a new uid).
#[test]
fn update_strategies() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-updates");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    for (method, name) in [("OnDelete", "on-delete"), ("InPlace", "in-place"), ("Recreate", "recreate")] {
        let strategy = json!({"spec": {"childResources": [
            {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": method}}
        ]}});
        let file =
            manifest(dir.path(), &format!("{name}.yaml"), &[controller(name, "keepers", &hook.url, "v1", strategy)]);
        apply(&ns.0, &parent("Keeper", name, json!({"data": {"n": "1"}})));
        samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
        let before = configmap(&ns.0, name).unwrap();
        assert_eq!(before["data"]["n"], "1", "{method}");
        apply(&ns.0, &parent("Keeper", name, json!({"data": {"n": "2"}})));
        samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
        samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]);
        let after = configmap(&ns.0, name).unwrap();
        let (same_uid, n) = (before["metadata"]["uid"] == after["metadata"]["uid"], after["data"]["n"].clone());
        match method {
            "OnDelete" => assert!(same_uid && n == "1", "{method}: {after}"),
            "InPlace" => assert!(same_uid && n == "2", "{method}: {after}"),
            _ => assert!(!same_uid && n == "2", "{method}: {after}"),
        }
    }
}

/// A Fleet controller whose Worker (or ConfigMap) children roll with `method`, gated by `checks`.
fn fleet_controller(name: &str, url: &str, resource: &str, method: &str, checks: Value) -> Value {
    let api_version = if resource == "configmaps" { "v1" } else { "controllers.example.com/v1" };
    let strategy = json!({"method": method, "statusChecks": checks});
    controller(
        name,
        "fleets",
        url,
        "v1",
        json!({"spec": {
            "parentResource": {"revisionHistory": {"fieldPaths": ["spec.version"]}},
            "childResources": [{"apiVersion": api_version, "resource": resource, "updateStrategy": strategy}],
        }}),
    )
}

/// The test CRDs and metacontroller's, a namespace, the keys hook (whose /rolling path serves Fleets) and a
/// directory for manifests.
fn rolling_setup(prefix: &str) -> (Namespace, HookServer, tempfile::TempDir) {
    crds();
    samplectl(&["install-crd", "--metacontroller"]).success();
    (Namespace::new(prefix), HookServer::start(), tempfile::tempdir().unwrap())
}

/// The `Updated` condition of a parent, as (status, reason, message).
fn updated(ns: &str, resource: &str, name: &str) -> (String, String, String) {
    let status = kubectl_json(&["get", resource, name, "-n", ns])["status"].clone();
    let found = status["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Updated").cloned();
    let field = |f: &str| found.as_ref().and_then(|c| c[f].as_str()).unwrap_or_default().to_owned();
    (field("status"), field("reason"), field("message"))
}

/// Each revision (by its parentPatch's `spec.version`) and the children it claims, as kubectl sees them.
fn revisions(ns: &str) -> Vec<(String, Vec<String>)> {
    let list = kubectl_json(&["get", "controllerrevisions.metacontroller.k8s.io", "-n", ns]);
    let mut seen: Vec<(String, Vec<String>)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let names = r["children"].as_array().into_iter().flatten().flat_map(|c| c["names"].as_array().unwrap());
            let mut names: Vec<String> = names.map(|n| n.as_str().unwrap().to_owned()).collect();
            names.sort();
            (r["parentPatch"]["spec"]["version"].as_str().unwrap_or_default().to_owned(), names)
        })
        .collect();
    seen.sort();
    seen
}

fn worker_versions(ns: &str, name: &str) -> Vec<String> {
    (0..3)
        .map(|i| kubectl_json(&["get", "workers.controllers.example.com", &format!("{name}-{i}"), "-n", ns]))
        .map(|w| w["spec"]["version"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn set_ready(ns: &str, worker: &str, ready: &str) {
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": ready}]}}).to_string();
    let resource = "workers.controllers.example.com";
    kubectl(&["patch", resource, worker, "-n", ns, "--subresource=status", "--type=merge", "-p", &patch]).success();
}

/// RollingInPlace, step by step with `--once`: a new revision of the parent's `spec.version` moves one
/// child at a time, in the hook's order, each step only once every child already moved passes its status
/// check; the parent's `Updated` condition says where the rollout stands, and ControllerRevisions (named
/// and labelled as metacontroller names them) record which revision holds which child until the old one
/// holds none and is deleted.
#[test]
fn rolling_in_place_moves_one_child_at_a_time_behind_its_status_checks() {
    let _cluster = crate::support::shared();
    let (ns, hook, dir) = rolling_setup("cc-rolling");
    let checks = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    let file = manifest(
        dir.path(),
        "fleet.yaml",
        &[fleet_controller("fleet", &hook.url.replace("/sync", "/rolling"), "workers", "RollingInPlace", checks)],
    );
    let once = || samplectl(&["reconcile", "-f", &file, "-n", &ns.0, "--once"]).success();
    let fleet = "fleets.controllers.example.com";

    apply(&ns.0, &parent("Fleet", "web", json!({"count": 3, "version": "a"})));
    once();
    assert_eq!(worker_versions(&ns.0, "web"), ["a", "a", "a"]);
    assert_eq!(revisions(&ns.0), [("a".to_owned(), vec!["web-0".to_owned(), "web-1".into(), "web-2".into()])]);
    let (status, reason, message) = updated(&ns.0, fleet, "web");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "OnLatestRevision"));
    let stored = kubectl_json(&["get", "controllerrevisions.metacontroller.k8s.io", "-n", &ns.0]);
    let revision = &stored["items"][0];
    let name = revision["metadata"]["name"].as_str().unwrap();
    assert_eq!(message, format!("latest ControllerRevision: {name}"));
    let hash = name.strip_prefix("fleets.controllers.example.com-").unwrap();
    assert!(hash.len() == 40 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert_eq!(revision["metadata"]["labels"]["metacontroller.k8s.io/resource"], "fleets");
    assert_eq!(revision["metadata"]["ownerReferences"][0]["kind"], "Fleet");
    for i in 0..3 {
        set_ready(&ns.0, &format!("web-{i}"), "True");
    }

    apply(&ns.0, &parent("Fleet", "web", json!({"count": 3, "version": "b"})));
    once();
    assert_eq!(worker_versions(&ns.0, "web"), ["b", "a", "a"]);
    assert_eq!(updated(&ns.0, fleet, "web").2, "updating Worker web-0");
    assert_eq!(
        revisions(&ns.0),
        [("a".to_owned(), vec!["web-1".to_owned(), "web-2".into()]), ("b".into(), vec!["web-0".into()])]
    );

    // The moved child is not Ready: the rollout waits, says why, and moves nothing.
    set_ready(&ns.0, "web-0", "False");
    once();
    once();
    assert_eq!(worker_versions(&ns.0, "web"), ["b", "a", "a"]);
    let (status, reason, message) = updated(&ns.0, fleet, "web");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "RolloutWaiting"));
    assert_eq!(message, r#"child Worker web-0 failed status check: "Ready" condition status is "False" (want "True")"#);

    set_ready(&ns.0, "web-0", "True");
    once();
    assert_eq!(worker_versions(&ns.0, "web"), ["b", "b", "a"]);
    once();
    assert_eq!(worker_versions(&ns.0, "web"), ["b", "b", "b"]);
    once();
    assert_eq!(updated(&ns.0, fleet, "web").1, "OnLatestRevision");
    assert_eq!(revisions(&ns.0), [("b".to_owned(), vec!["web-0".to_owned(), "web-1".into(), "web-2".into()])]);
}

/// RollingRecreate under the watch driver, with no status checks: a version change rolls through every
/// child by itself (each recreated, one after another), and the rollout ends on one revision. A second
/// change made mid-rollout wins: the children end on the last version.
#[test]
fn rolling_recreate_rolls_on_by_itself_under_the_watch_driver() {
    let _cluster = crate::support::shared();
    let (ns, hook, dir) = rolling_setup("cc-rolling-watch");
    let file = manifest(
        dir.path(),
        "fleet.yaml",
        &[fleet_controller(
            "fleet-cm",
            &hook.url.replace("/sync", "/rolling"),
            "configmaps",
            "RollingRecreate",
            json!({}),
        )],
    );
    let _controller = Background::start(&["reconcile", "-f", &file, "-n", &ns.0, "--watch"]);
    let spec = |version: &str| json!({"count": 3, "version": version, "childKind": "ConfigMap"});
    apply(&ns.0, &parent("Fleet", "cm", spec("a")));
    let versions = |ns: &str| -> Vec<(String, String)> {
        (0..3)
            .map(|i| configmap(ns, &format!("cm-{i}")))
            .map(|c| {
                c.map_or((String::new(), String::new()), |c| {
                    (
                        c["data"]["version"].as_str().unwrap_or_default().to_owned(),
                        c["metadata"]["uid"].as_str().unwrap().to_owned(),
                    )
                })
            })
            .collect()
    };
    let first = eventually(SOON, "three ConfigMaps of version a", || {
        let now = versions(&ns.0);
        match now.iter().all(|(v, _)| v == "a") {
            true => Ok(now),
            false => Err(format!("{now:?}")),
        }
    });
    apply(&ns.0, &parent("Fleet", "cm", spec("b")));
    apply(&ns.0, &parent("Fleet", "cm", spec("c")));
    eventually(Duration::from_secs(60), "every ConfigMap recreated on version c, one revision left", || {
        let now = versions(&ns.0);
        let done = now.iter().zip(&first).all(|((v, uid), (_, old))| v == "c" && uid != old);
        let (_, reason, _) = updated(&ns.0, "fleets.controllers.example.com", "cm");
        let revisions = revisions(&ns.0);
        match done && reason == "OnLatestRevision" && revisions.len() == 1 && revisions[0].0 == "c" {
            true => Ok(()),
            false => Err(format!("{now:?} {reason} {revisions:?}")),
        }
    });
}

/// `ignoreStatusChanges`: a write to a parent's status alone syncs nothing (the status someone else wrote
/// stays), while a controller without it puts its status back at once; a change to the spec still syncs.
/// Both drivers.
#[test]
fn ignore_status_changes_skips_status_only_writes() {
    let _cluster = crate::support::shared();
    crds();
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    for driver in ["--watch", "--interval=1s"] {
        let ns = Namespace::new("cc-ignore-status");
        let ignoring = json!({"spec": {"parentResource": {"ignoreStatusChanges": true}}});
        let file = manifest(
            dir.path(),
            "ignore.yaml",
            &[
                controller("ignoring", "keepers", &hook.url, "v1", ignoring),
                controller("minding", "tallies", &hook.url, "v1", json!({})),
            ],
        );
        apply(&ns.0, &parent("Keeper", "k", json!({"data": {"n": "1"}})));
        apply(&ns.0, &parent("Tally", "t", json!({"data": {"n": "1"}})));
        let _controller = Background::start(&["reconcile", "-f", &file, "-n", &ns.0, driver]);
        let status_of =
            |resource: &str, name: &str| kubectl_json(&["get", resource, name, "-n", &ns.0])["status"].clone();
        let (keepers, tallies) = ("keepers.controllers.example.com", "tallies.controllers.example.com");
        for (resource, name) in [(keepers, "k"), (tallies, "t")] {
            eventually(SOON, "the hook's status", || match status_of(resource, name)["seen"].is_number() {
                true => Ok(()),
                false => Err(status_of(resource, name).to_string()),
            });
        }
        // Past the poll driver's second look, which follows a reconcile that wrote.
        std::thread::sleep(Duration::from_secs(3));
        for (resource, name) in [(keepers, "k"), (tallies, "t")] {
            let patch = json!({"status": {"seen": 0, "written": "by someone else"}}).to_string();
            kubectl(&["patch", resource, name, "-n", &ns.0, "--subresource=status", "--type=merge", "-p", &patch])
                .success();
        }
        eventually(SOON, "the status put back where status changes count", || {
            match status_of(tallies, "t").get("written") {
                None => Ok(()),
                Some(_) => Err(status_of(tallies, "t").to_string()),
            }
        });
        // The minding controller has synced since; the same process left the ignoring one's alone.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(status_of(keepers, "k")["written"], "by someone else", "{driver}");
        apply(&ns.0, &parent("Keeper", "k", json!({"data": {"n": "2"}})));
        eventually(SOON, "a spec change synced", || {
            let status = status_of(keepers, "k");
            match status.get("written").is_none() && configmap(&ns.0, "k").unwrap()["data"]["n"] == "2" {
                true => Ok(()),
                false => Err(status.to_string()),
            }
        });
    }
}

/// Controllers in one process share one watch per resource, namespace and selector (as metacontroller
/// shares its informers): two controllers whose children are ConfigMaps in one namespace list and watch
/// the ConfigMaps they manage once between them, and the other ConfigMaps' metadata (for conflicts) once,
/// and each still gets its own children.
#[test]
fn controllers_in_one_process_share_their_watches() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-shared-watch");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = manifest(
        dir.path(),
        "two.yaml",
        &[
            controller("first", "keepers", &hook.url, "v1", json!({})),
            controller("second", "tallies", &hook.url, "v1", json!({})),
        ],
    );
    apply(&ns.0, &parent("Keeper", "k", json!({})));
    apply(&ns.0, &parent("Tally", "t", json!({})));
    let run = Background::start(&["reconcile", "-f", &file, "-n", &ns.0, "--watch"]);
    for (name, controller) in [("k", "first"), ("t", "second")] {
        eventually(SOON, "each controller's child", || match configmap(&ns.0, name) {
            Some(child) if child["data"]["controller"] == controller => Ok(()),
            other => Err(format!("{other:?}")),
        });
    }
    let (_, stderr) = run.stop("TERM", SOON);
    let totals = stderr.lines().find(|l| l.contains("requests sent")).unwrap_or_default().to_owned();
    // One shared watch of the labelled ConfigMaps and one of the others' metadata, each listing by
    // streaming (no list request): two, where unshared watches made four.
    assert!(totals.contains("watch configmaps 2,") && !totals.contains("list configmaps"), "{totals}");
}

/// Claiming as metacontroller claims, under Kubernetes' ControllerRef rules: with `generateSelector`
/// every child is labelled `controller-uid`, and an orphan of a wanted name with that label is adopted;
/// without it, an orphan the parent's own `spec.selector` takes is adopted. An orphan neither takes, or
/// an object another controller owns, is left alone and reported as a conflict.
#[test]
fn orphans_are_adopted_only_when_the_selector_takes_them() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-adopt");
    let hook = HookServer::start();
    let dir = tempfile::tempdir().unwrap();
    let generated = json!({"spec": {"generateSelector": true}});
    let by_uid = manifest(dir.path(), "uid.yaml", &[controller("by-uid", "keepers", &hook.url, "v1", generated)]);
    let by_selector =
        manifest(dir.path(), "selector.yaml", &[controller("by-selector", "tallies", &hook.url, "v1", json!({}))]);
    let orphan = |name: &str, labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"n": "0"}});
    apply(&ns.0, &parent("Keeper", "labelled", json!({})));
    apply(&ns.0, &parent("Keeper", "unlabelled", json!({})));
    let uid =
        kubectl_json(&["get", "keepers.controllers.example.com", "labelled", "-n", &ns.0])["metadata"]["uid"].clone();
    apply(&ns.0, &orphan("labelled", json!({"controller-uid": uid})));
    apply(&ns.0, &orphan("unlabelled", json!({"app": "other"})));
    apply(&ns.0, &parent("Tally", "selecting", json!({"selector": {"matchLabels": {"app": "web"}}})));
    apply(&ns.0, &orphan("selecting", json!({"app": "web"})));

    for file in [&by_uid, &by_selector] {
        samplectl(&["reconcile", "-f", file, "-n", &ns.0, "--once"]);
        samplectl(&["reconcile", "-f", file, "-n", &ns.0, "--once"]);
    }
    for (name, kind) in [("labelled", "Keeper"), ("selecting", "Tally")] {
        let adopted = configmap(&ns.0, name).unwrap();
        let owner = &adopted["metadata"]["ownerReferences"][0];
        assert_eq!((owner["kind"].as_str(), owner["controller"].as_bool()), (Some(kind), Some(true)), "{adopted}");
        assert_eq!(adopted["data"]["keys"], name, "adopted, then written as the hook wants: {adopted}");
    }
    assert_eq!(configmap(&ns.0, "labelled").unwrap()["metadata"]["labels"]["controller-uid"], uid);
    let left = configmap(&ns.0, "unlabelled").unwrap();
    assert!(left["metadata"].get("ownerReferences").is_none() && left["data"]["n"] == "0", "{left}");
    let status = kubectl_json(&["get", "keepers.controllers.example.com", "unlabelled", "-n", &ns.0])["status"].clone();
    let ready = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("ConfigMapConflict")),
        "{status}"
    );
}

/// Every mistake in a manifest is refused before anything is written, with its file and place, exit 1;
/// `-f` with the flags that define a controller the other way is a usage error, exit 2.
#[test]
fn bad_manifests_are_refused_with_their_place() {
    let _cluster = crate::support::shared();
    crds();
    let ns = Namespace::new("cc-bad");
    let dir = tempfile::tempdir().unwrap();
    // A hook that answers, and a parent it would give a ConfigMap, had any of these run.
    let hook = HookServer::start();
    let url = hook.url.as_str();
    apply(&ns.0, &parent("Keeper", "p", json!({})));
    let bad = |file: &str, docs: &[Value], says: &str| {
        let path = manifest(dir.path(), file, docs);
        let run = samplectl(&["reconcile", "-f", &path, "-n", &ns.0, "--once"]);
        assert_eq!(run.code, 1, "{file}: {run:#?}");
        assert!(run.stderr.contains(says), "{file}: wanted {says:?} in {run:#?}");
        assert!(run.stdout.is_empty(), "{run:#?}");
    };
    let unknown = json!({"spec": {"parentResource": {"selector": {}}}});
    bad(
        "unknown.yaml",
        &[controller("c", "keepers", url, "v1", unknown)],
        "at spec.parentResource.selector: unknown field `selector`",
    );
    let method = json!({"spec": {"childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "Often"}}]}});
    bad("method.yaml", &[controller("c", "keepers", url, "v1", method)], "unknown variant `Often`");
    let unserved = json!({"spec": {"parentResource": {"resource": "nothings"}}});
    bad("unserved.yaml", &[controller("c", "keepers", url, "v1", unserved)], "spec.parentResource");
    let no_url =
        json!({"spec": {"hooks": {"sync": {"webhook": {"url": null, "service": {"name": "s", "namespace": "n"}}}}}});
    bad(
        "no-path.yaml",
        &[controller("c", "keepers", url, "v1", no_url)],
        "must specify either a full 'url', or both 'service' and 'path'",
    );
    let twice = [controller("a", "keepers", url, "v1", json!({})), controller("b", "keepers", url, "v1", json!({}))];
    bad("twice.yaml", &twice, "both reconcile keepers.controllers.example.com");
    let picks = |values: Value| {
        json!({"spec": {"parentResource": {"labelSelector": {"matchExpressions": [
        {"key": "side", "operator": "In", "values": values}]}}}})
    };
    let overlapping = [
        controller("a", "keepers", url, "v1", picks(json!(["left"]))),
        controller("b", "keepers", url, "v1", picks(json!(["left", "right"]))),
    ];
    bad("overlapping.yaml", &overlapping, "must have label selectors that no parent can satisfy both");
    let no_status = json!({"spec": {"parentResource": {"apiVersion": "v1", "resource": "configmaps"}}});
    bad("no-status.yaml", &[controller("c", "keepers", url, "v1", no_status)], "has no status subresource");
    let customize = json!({"spec": {"hooks": {"customize": {"version": "v2"}}}});
    bad("customize.yaml", &[controller("c", "keepers", url, "v1", customize)], "hooks.customize has no webhook");
    let decorator = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "d"}, "spec": {"resources": [{"apiVersion": "v1", "resource": "configmaps"}]}});
    bad("decorator.yaml", std::slice::from_ref(&decorator), "spec.hooks: no hooks defined");
    let mut rolling = decorator.clone();
    rolling["spec"]["hooks"] = json!({"sync": {"webhook": {"url": url}}});
    rolling["spec"]["attachments"] =
        json!([{"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "RollingInPlace"}}]);
    bad(
        "rolling.yaml",
        &[rolling],
        "spec.attachments[0].updateStrategy.method: RollingInPlace is for a CompositeController",
    );
    let cluster_rolling = json!({"spec": {"parentResource": {"apiVersion": "v1", "resource": "namespaces"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "RollingInPlace"}}]}});
    bad(
        "cluster-rolling.yaml",
        &[controller("c", "keepers", url, "v1", cluster_rolling)],
        "spec.childResources[0].updateStrategy.method: RollingInPlace needs a namespaced parent",
    );
    let mut cluster_child = decorator.clone();
    cluster_child["spec"]["hooks"] = json!({"sync": {"webhook": {"url": url}}});
    cluster_child["spec"]["attachments"] = json!([{"apiVersion": "v1", "resource": "namespaces"}]);
    bad("cluster-child.yaml", &[cluster_child], "spec.resources[0]: cannot attach these types");
    let secret = json!({"name": "s", "namespace": "n", "key": "k"});
    let both = json!({"spec": {"endpointConfigs": [{"host": url.trim_start_matches("http://").split('/').next().unwrap(),
        "authorization": {"secretRef": secret}, "basicAuth": {"secretRef": {"name": "s", "namespace": "n"}}}]}});
    bad(
        "both-auths.yaml",
        &[controller("c", "keepers", url, "v1", both)],
        "authorization and basicAuth are mutually exclusive",
    );
    let mut nothing_decorated = decorator.clone();
    nothing_decorated["spec"]["resources"] = json!([]);
    bad("no-resources.yaml", &[nothing_decorated], "spec.resources: a DecoratorController needs at least one resource");
    let same = [controller("c", "keepers", url, "v1", json!({})), controller("c", "tallies", url, "v1", json!({}))];
    bad("same-name.yaml", &same, "CompositeController \"c\" is given twice");
    bad(
        "nothing.yaml",
        &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})],
        "no CompositeController, DecoratorController or ResourceGraphDefinition found",
    );
    let missing = dir.path().join("missing.yaml").display().to_string();
    let run = samplectl(&["reconcile", "-f", &missing, "--once"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains(&format!("the path \"{missing}\" does not exist")), "{run:#?}");
    // Nothing was written for any of them.
    assert!(configmap(&ns.0, "p").is_none());

    let file = manifest(dir.path(), "ok.yaml", &[controller("c", "keepers", url, "v1", json!({}))]);
    let usage = samplectl(&["reconcile", "-f", &file, "--hook-url", url]);
    assert_eq!(usage.code, 2, "{usage:#?}");
    assert!(usage.stderr.contains("cannot be used with"), "{usage:#?}");
    let usage = samplectl(&["reconcile", "--target-label-selector", "a=b"]);
    assert_eq!(usage.code, 2, "{usage:#?}");
    assert!(usage.stderr.contains("--from-cluster"), "{usage:#?}");
    let usage = samplectl(&["reconcile", "--from-cluster", "-f", &file]);
    assert_eq!(usage.code, 2, "{usage:#?}");
}

/// `install-crd --metacontroller` installs metacontroller's three CRDs (created, then unchanged), and
/// the API server takes a CompositeController object, as kubectl sees it.
#[test]
fn metacontrollers_crds_are_installed() {
    let _cluster = crate::support::shared();
    let dry = samplectl(&["install-crd", "--metacontroller", "--dry-run"]).success();
    assert!(dry.stdout.contains("compositecontrollers.metacontroller.k8s.io"), "{dry:#?}");
    let first = samplectl(&["install-crd", "--metacontroller"]).success();
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{first:#?}");
    let again = samplectl(&["install-crd", "--metacontroller"]).success();
    assert_eq!(
        again.stdout,
        "customresourcedefinition.apiextensions.k8s.io/compositecontrollers.metacontroller.k8s.io unchanged\n\
         customresourcedefinition.apiextensions.k8s.io/decoratorcontrollers.metacontroller.k8s.io unchanged\n\
         customresourcedefinition.apiextensions.k8s.io/controllerrevisions.metacontroller.k8s.io unchanged\n"
    );
    let name = format!("cc-{}", free_port());
    let cc = controller(&name, "keepers", "http://127.0.0.1:9/sync", "v2", json!({}));
    apply("default", &cc);
    let stored = kubectl_json(&["get", "compositecontrollers.metacontroller.k8s.io", &name]);
    assert_eq!(stored["spec"]["hooks"]["sync"]["version"], "v2");
    let short = kubectl(&["get", "cc", &name, "-o", "name"]).success();
    assert_eq!(short.stdout.trim(), format!("compositecontroller.metacontroller.k8s.io/{name}"));
    kubectl(&["delete", "cc", &name]).success();
    let print = samplectl(&["install-crd", "--metacontroller", "--print"]).success();
    assert!(print.stdout.contains("name: controllerrevisions.metacontroller.k8s.io"));
}
