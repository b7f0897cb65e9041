//! kro's ResourceGraphDefinitions run by `samplectl reconcile --from-cluster`: `install-crd --kro`
//! installs kro's CRDs; an RGD gets its instance CRD, finalizer and kro's status; its instances get their
//! children in dependency order with kro's labels, kro's conditions and state, follow spec changes, and
//! lose their children (last wave first) when deleted; a broken RGD says why in its status while others
//! run; an object of a wanted name that is not the instance's is never taken. Checked with kubectl.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Background, Namespace, apply, eventually, kubectl, kubectl_json, samplectl};

const SOON: Duration = Duration::from_secs(30);

fn install_kro() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        samplectl(&["install-crd", "--kro"]).success();
    });
}

/// An RGD labelled for one test's controller (so that tests side by side do not run each other's).
fn rgd(name: &str, label: &str, schema: Value, resources: Value) -> Value {
    json!({
        "apiVersion": "kro.run/v1alpha1",
        "kind": "ResourceGraphDefinition",
        "metadata": {"name": name, "labels": {"samplectl-test": label}},
        "spec": {"schema": schema, "resources": resources},
    })
}

fn follow(ns: &Namespace) -> Background {
    let label = format!("samplectl-test={}", ns.0);
    Background::start(&["reconcile", "--from-cluster", "--target-label-selector", &label, "-n", &ns.0, "--watch"])
}

fn get(what: &str, name: &str, ns: Option<&str>) -> Option<Value> {
    let mut args = vec!["get", what, name, "-o", "json", "--ignore-not-found"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    let run = kubectl(&args).success();
    (!run.stdout.trim().is_empty()).then(|| serde_json::from_str(&run.stdout).unwrap())
}

/// Deletes RGDs a test stopped following, their finalizers taken off (nothing runs them any more).
fn forget_rgds(names: &[&str]) {
    for name in names {
        kubectl(&["delete", "rgd", name, "--wait=false", "--ignore-not-found"]).success();
        let _ = kubectl(&["patch", "rgd", name, "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#]);
    }
}

/// Takes kro's finalizer off instances nothing runs any more, so that their namespace can go.
fn forget_instances(resource: &str, ns: &str, names: &[&str]) {
    for name in names {
        let finalizers = r#"{"metadata":{"finalizers":null}}"#;
        let _ = kubectl(&["patch", resource, name, "-n", ns, "--type=merge", "-p", finalizers]);
    }
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

fn summary(object: &Value) -> Vec<(String, String, String, String)> {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("type"), s("status"), s("reason"), s("message"))
        })
        .collect()
}

#[test]
fn kros_crds_are_installed() {
    let _cluster = crate::support::shared();
    let first = samplectl(&["install-crd", "--kro"]).success();
    assert_eq!(first.stdout.lines().count(), 2, "{first:#?}");
    let again = samplectl(&["install-crd", "--kro"]).success();
    assert_eq!(
        again.stdout,
        "customresourcedefinition.apiextensions.k8s.io/resourcegraphdefinitions.kro.run unchanged\n\
         customresourcedefinition.apiextensions.k8s.io/graphrevisions.internal.kro.run unchanged\n"
    );
    let rgd = kubectl_json(&["get", "crd", "resourcegraphdefinitions.kro.run"]);
    assert_eq!(rgd["spec"]["names"]["shortNames"], json!(["rgd"]));
    let usage = samplectl(&["install-crd", "--kro", "--metacontroller"]);
    assert_eq!(usage.code, 2, "{usage:#?}");
}

/// An RGD with a ConfigMap and a Service that reads it: the CRD kro would make, the RGD Active, an
/// instance's children in order with kro's labels, the instance ACTIVE with kro's four conditions, a spec
/// change followed, and deletion in waves.
#[test]
fn a_graph_defines_an_api_and_runs_its_instances() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-web");
    // The CRD an RGD makes names it, and another RGD may not take it: one name across runs.
    let name = "samplectl-it-web".to_owned();
    let schema = json!({
        "apiVersion": "v1alpha1",
        "kind": "GraphWebApp",
        "group": "graphs.samplectl.test",
        "spec": {"port": "integer | default=8080", "greeting": "string | default=\"hello\""},
        "status": {"configName": "${config.metadata.name}", "servicePort": "${service.spec.ports[0].port}"},
    });
    let resources = json!([
        {"id": "service", "template": {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "${config.metadata.name}-svc"},
            "spec": {"ports": [{"port": "${schema.spec.port}"}]}}},
        {"id": "config", "template": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${schema.metadata.name}-config"},
            "data": {"greeting": "${schema.spec.greeting}", "port": "${string(schema.spec.port)}"}}},
    ]);
    // The CRD outlives its RGD: one an earlier run made (maybe of an earlier schema) goes first, so that
    // this run's is made once, at generation 1.
    kubectl(&["delete", "crd", "graphwebapps.graphs.samplectl.test", "--ignore-not-found"]).success();
    apply("default", &rgd(&name, &ns.0, schema, resources));
    let run = follow(&ns);

    let rgd_status = eventually(SOON, "the RGD Active", || {
        let object = get("rgd", &name, None).ok_or("no RGD")?;
        match object["status"]["state"] == "Active" {
            true => Ok(object),
            false => Err(format!("{}\n{}", object["status"], run.stderr())),
        }
    });
    assert_eq!(rgd_status["metadata"]["finalizers"], json!(["kro.run/finalizer"]));
    assert_eq!(rgd_status["status"]["topologicalOrder"], json!(["config", "service"]));
    assert_eq!(condition(&rgd_status, "Ready").unwrap()["observedGeneration"], 1);
    let crd = kubectl_json(&["get", "crd", "graphwebapps.graphs.samplectl.test"]);
    assert_eq!(crd["metadata"]["generation"], 1);
    assert_eq!(crd["metadata"]["labels"]["kro.run/resource-graph-definition-name"], name.as_str());
    let columns: Vec<&str> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["State", "Ready", "Age"]);
    // The status fields typed as kro infers them, from the Service's OpenAPI schema.
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(status["configName"], json!({"type": "string"}));
    assert_eq!(status["servicePort"], json!({"type": "integer"}));

    apply(
        &ns.0,
        &json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphWebApp", "metadata": {"name": "shop"}}),
    );
    let instance = eventually(SOON, "the instance ACTIVE", || {
        let object = get("graphwebapps.graphs.samplectl.test", "shop", Some(&ns.0)).ok_or("no instance")?;
        match object["status"]["state"] == "ACTIVE" {
            true => Ok(object),
            false => Err(format!("{}", object["status"])),
        }
    });
    let empty = String::new();
    assert_eq!(
        summary(&instance),
        [
            (
                "InstanceManaged".into(),
                "True".into(),
                "Managed".into(),
                "instance is properly managed with finalizers and labels".into()
            ),
            (
                "GraphResolved".into(),
                "True".into(),
                "Resolved".into(),
                "runtime graph created and all resources resolved".into()
            ),
            (
                "ResourcesReady".into(),
                "True".into(),
                "AllResourcesReady".into(),
                "all resources are created and ready".into()
            ),
            ("Ready".into(), "True".into(), "Ready".into(), empty),
        ]
    );
    assert_eq!(instance["status"]["configName"], "shop-config");
    assert_eq!(instance["status"]["servicePort"], 8080);
    assert_eq!(instance["metadata"]["labels"]["kro.run/owned"], "true");
    assert_eq!(instance["metadata"]["finalizers"], json!(["kro.run/finalizer"]));
    assert_eq!(instance["metadata"]["generation"], 1, "the instance's spec is never written");
    let config = get("configmap", "shop-config", Some(&ns.0)).unwrap();
    assert_eq!(config["data"], json!({"greeting": "hello", "port": "8080"}));
    let labels = &config["metadata"]["labels"];
    assert_eq!(
        (labels["kro.run/node-id"].as_str(), labels["kro.run/instance-name"].as_str()),
        (Some("config"), Some("shop"))
    );
    assert_eq!(config["metadata"]["annotations"]["internal.kro.run/apply-order"], "1");
    let service = get("service", "shop-config-svc", Some(&ns.0)).unwrap();
    assert_eq!(service["spec"]["ports"][0]["port"], 8080);
    assert_eq!(service["metadata"]["annotations"]["internal.kro.run/apply-order"], "2");
    // kro's ApplySet: the instance is its parent, listing its children's kinds; the children are part of
    // it and applied under kro's field manager.
    let applyset = instance["metadata"]["labels"]["applyset.kubernetes.io/id"].as_str().unwrap_or_default();
    assert!(applyset.starts_with("applyset-") && applyset.ends_with("-v1"), "{}", instance["metadata"]);
    for child in [&config, &service] {
        assert_eq!(child["metadata"]["labels"]["applyset.kubernetes.io/part-of"], applyset);
        assert_eq!(child["metadata"]["labels"]["app.kubernetes.io/managed-by"], "kro");
        assert!(child["metadata"].get("ownerReferences").is_none(), "kro's children have none: {child}");
    }
    let annotations = &instance["metadata"]["annotations"];
    assert_eq!(annotations["applyset.kubernetes.io/contains-group-kinds"], "ConfigMap,Service");
    assert_eq!(annotations["applyset.kubernetes.io/additional-namespaces"], "");
    assert!(annotations["applyset.kubernetes.io/tooling"].as_str().is_some_and(|t| t.starts_with("kro/")));
    let managed = kubectl_json(&["get", "configmap", "shop-config", "-n", &ns.0, "--show-managed-fields"]);
    let managers: Vec<(&str, &str)> = managed["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["manager"].as_str().unwrap(), e["operation"].as_str().unwrap()))
        .collect();
    assert_eq!(managers, [("kro.run/applyset", "Apply")]);

    // A spec change reaches the children.
    kubectl(&[
        "patch",
        "graphwebapps.graphs.samplectl.test",
        "shop",
        "-n",
        &ns.0,
        "--type=merge",
        "-p",
        r#"{"spec":{"port":9090}}"#,
    ])
    .success();
    eventually(SOON, "the Service on the new port", || {
        let service = get("service", "shop-config-svc", Some(&ns.0)).ok_or("no service")?;
        if service["spec"]["ports"][0]["port"] == 9090 { Ok(()) } else { Err(format!("{}", service["spec"])) }
    });

    // Deleted: the children go, then the instance.
    kubectl(&["delete", "graphwebapps.graphs.samplectl.test", "shop", "-n", &ns.0, "--wait=false"]).success();
    eventually(SOON, "the instance and its children gone", || {
        let left: Vec<&str> = [
            ("graphwebapps.graphs.samplectl.test", "shop"),
            ("configmap", "shop-config"),
            ("service", "shop-config-svc"),
        ]
        .into_iter()
        .filter(|(what, n)| get(what, n, Some(&ns.0)).is_some())
        .map(|(what, _)| what)
        .collect();
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
    });

    // The RGD deleted: its finalizer goes, its CRD stays.
    kubectl(&["delete", "rgd", &name, "--wait=true", "--timeout=30s"]).success();
    assert!(get("crd", "graphwebapps.graphs.samplectl.test", None).is_some(), "the CRD is kept");
    drop(run);
}

/// A cluster moving from kro: an instance's children that kro made (kro's labels naming the instance's
/// uid, no owner reference) are taken as the instance's and brought to what the graph wants, not
/// reported as someone else's; an object kro made for another instance is still not taken.
#[test]
fn children_kro_made_are_taken_over() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-from-kro");
    let name = "samplectl-it-from-kro".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphFromKro", "group": "graphs.samplectl.test",
                        "spec": {"colour": "string | default=\"blue\""}});
    let resources = json!([{"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}-config"}, "data": {"colour": "${schema.spec.colour}"}}}]);
    apply("default", &rgd(&name, &ns.0, schema, resources));
    let run = follow(&ns);
    eventually(SOON, "the RGD Active", || {
        let object = get("rgd", &name, None).ok_or("no RGD")?;
        if object["status"]["state"] == "Active" { Ok(()) } else { Err(format!("{}", object["status"])) }
    });
    drop(run);

    // While nothing runs: two instances, and the ConfigMaps kro would have made for them, out of date.
    let resource = "graphfromkroes.graphs.samplectl.test";
    for instance in ["moved", "other"] {
        apply(
            &ns.0,
            &json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphFromKro", "metadata": {"name": instance}}),
        );
    }
    let uid =
        |instance: &str| get(resource, instance, Some(&ns.0)).unwrap()["metadata"]["uid"].as_str().unwrap().to_owned();
    let kro_made = |config: &str, owner: &str, owner_uid: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config, "labels": {
            "app.kubernetes.io/managed-by": "kro", "kro.run/owned": "true", "kro.run/kro-version": "v0.9.4",
            "kro.run/instance-id": owner_uid, "kro.run/instance-name": owner, "kro.run/instance-namespace": ns.0,
            "kro.run/instance-kind": "GraphFromKro", "kro.run/instance-group": "graphs.samplectl.test",
            "kro.run/instance-version": "v1alpha1", "kro.run/node-id": "config"}},
            "data": {"colour": "red"}})
    };
    apply(&ns.0, &kro_made("moved-config", "moved", &uid("moved")));
    // Made by kro for an earlier instance of the name "other" (another uid): the new one does not take it.
    apply(&ns.0, &kro_made("other-config", "other", "0d0f3c6e-7a4e-4f8e-9d65-000000000000"));

    let run = follow(&ns);
    eventually(SOON, "moved ACTIVE with its ConfigMap brought up to date", || {
        let instance = get(resource, "moved", Some(&ns.0)).ok_or("no instance")?;
        let config = get("configmap", "moved-config", Some(&ns.0)).ok_or("no ConfigMap")?;
        match (instance["status"]["state"].as_str(), config["data"]["colour"].as_str()) {
            (Some("ACTIVE"), Some("blue")) => Ok(()),
            _ => Err(format!("{}\n{}\n{}", instance["status"], config["data"], run.stderr())),
        }
    });
    let other = eventually(SOON, "other told its ConfigMap is not its own", || {
        let instance = get(resource, "other", Some(&ns.0)).ok_or("no instance")?;
        match condition(&instance, "Ready").is_some_and(|c| c["status"] == "False") {
            true => Ok(instance),
            false => Err(format!("{}", instance["status"])),
        }
    });
    let foreign = get("configmap", "other-config", Some(&ns.0)).unwrap();
    assert_eq!(foreign["data"]["colour"], "red", "not taken: {other}");
    assert_eq!(foreign["metadata"]["labels"]["kro.run/instance-id"], "0d0f3c6e-7a4e-4f8e-9d65-000000000000");
    drop(run);
    forget_rgds(&[&name]);
}

/// The author's conditions (kro's `status.conditions` with `runtime.newCondition`) own the instance's
/// conditions, computed from what the graph observed and from kro's own (`runtime.condition`).
#[test]
fn the_authors_conditions_are_the_instances() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-conditions");
    let name = "samplectl-it-conditions".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphConditions", "group": "graphs.samplectl.test",
    "spec": {"ok": "string | default=\"yes\""},
    "status": {"conditions": [
        "${runtime.newCondition({type: 'ConfigReady', status: config.data.ok == 'yes' ? 'True' : 'False', reason: 'Data', message: 'ok is ' + config.data.ok})}",
        "${runtime.newCondition({type: 'Ready', status: runtime.condition(schema, 'ResourcesReady').status, reason: 'Kro', message: ''})}",
    ]}});
    let resources = json!([{"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}-config"}, "data": {"ok": "${schema.spec.ok}"}}}]);
    apply("default", &rgd(&name, &ns.0, schema, resources));
    let run = follow(&ns);
    let resource = "graphconditions.graphs.samplectl.test";
    let instance =
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphConditions", "metadata": {"name": "c"}});
    let done = eventually(SOON, "the author's conditions written", || {
        let _ = crate::support::try_apply(&ns.0, &instance);
        let object = get(resource, "c", Some(&ns.0)).ok_or("no instance")?;
        let summary = summary(&object);
        match summary.len() == 2 && summary[1].1 == "True" {
            true => Ok(object),
            false => Err(format!("{}\n{}", object["status"], run.stderr())),
        }
    });
    assert_eq!(
        summary(&done),
        [
            ("ConfigReady".into(), "True".into(), "Data".into(), "ok is yes".into()),
            ("Ready".into(), "True".into(), "Kro".into(), String::new()),
        ]
    );
    assert_eq!(done["status"]["state"], "ACTIVE");
    assert_eq!(done["status"]["conditions"][0]["observedGeneration"], 1);
    drop(run);
    kubectl(&["patch", resource, "c", "-n", &ns.0, "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#])
        .success();
    forget_rgds(&[&name]);
}

/// `--cel-cost-limit` bounds the steps of every expression: an instance whose list makes a nested map
/// pass it fails, in its conditions and in cel-go's words, while an instance of the same graph with a
/// shorter list runs.
#[test]
fn an_expression_past_the_cost_limit_fails_its_own_instance_only() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-cost");
    let name = "samplectl-it-cost".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphCost", "group": "graphs.samplectl.test",
                        "spec": {"items": "[]integer"}});
    let resources = json!([{"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}-config"},
        "data": {"pairs": "${string(schema.spec.items.map(a, schema.spec.items.map(b, a + b)).size())}"}}}]);
    apply("default", &rgd(&name, &ns.0, schema, resources));
    let label = format!("samplectl-test={}", ns.0);
    let run = Background::start(&[
        "reconcile",
        "--from-cluster",
        "--target-label-selector",
        &label,
        "-n",
        &ns.0,
        "--watch",
        "--cel-cost-limit",
        "2000",
    ]);
    let resource = "graphcosts.graphs.samplectl.test";
    crate::support::established(&[&format!("crd/{resource}")]);
    let instance = |name: &str, n: usize| {
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphCost", "metadata": {"name": name},
               "spec": {"items": (0..n).collect::<Vec<_>>()}})
    };
    // 10 + 10² steps, and ten lists of ten numbers built: within 2,000. 50 + 50² is not.
    let small = eventually(SOON, "the small instance's ConfigMap", || {
        let _ = crate::support::try_apply(&ns.0, &instance("small", 10));
        get("configmap", "small-config", Some(&ns.0)).ok_or_else(|| run.stderr())
    });
    assert_eq!(small["data"]["pairs"], "10");
    let failed = eventually(SOON, "the large instance's conditions", || {
        let _ = crate::support::try_apply(&ns.0, &instance("large", 50));
        let object = get(resource, "large", Some(&ns.0)).ok_or("no instance")?;
        let said = object["status"]["conditions"].to_string();
        match said.contains("operation cancelled: actual cost limit exceeded") {
            true => Ok(object),
            false => Err(format!("{}\n{}", object["status"], run.stderr())),
        }
    });
    assert_ne!(failed["status"]["state"], "ACTIVE", "{}", failed["status"]);
    assert!(get("configmap", "large-config", Some(&ns.0)).is_none(), "nothing made for the large instance");
    let small = get(resource, "small", Some(&ns.0)).unwrap();
    assert_eq!(small["status"]["state"], "ACTIVE", "the other instance runs on: {}", small["status"]);
    drop(run);
    for instance in ["small", "large"] {
        let unfinalized = r#"{"metadata":{"finalizers":null}}"#;
        kubectl(&["patch", resource, instance, "-n", &ns.0, "--type=merge", "-p", unfinalized]).success();
    }
    forget_rgds(&[&name]);
}

/// The API server's CEL libraries that kro adds (Quantity, CIDR, IP, URL, Semver) in an RGD: accepted,
/// and computed into a child as kro computes them; a value that is not a quantity fails that instance
/// in the library's words, and the other one runs on.
#[test]
fn an_rgd_computes_with_the_kubernetes_cel_libraries() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-libraries");
    let name = "samplectl-it-libraries".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphLibraries", "group": "graphs.samplectl.test",
        "spec": {"memory": "string", "limit": "string", "cidr": "string", "endpoint": "string", "version": "string"}});
    let resources = json!([{"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "${schema.metadata.name}-config"},
    "data": {
        "fits": "${string(quantity(schema.spec.memory).isLessThan(quantity(schema.spec.limit)))}",
        "headroom": "${string(quantity(schema.spec.limit).sub(quantity(schema.spec.memory)).asInteger())}",
        "gateway": "${string(cidr(schema.spec.cidr).masked().ip())}",
        "internal": "${string(cidr(schema.spec.cidr).containsIP('10.0.3.4'))}",
        "host": "${url(schema.spec.endpoint).getHostname()}",
        "port": "${url(schema.spec.endpoint).getPort()}",
        "canonical": "${string(ip.isCanonical('2001:db8::68'))}",
        "newer": "${string(semver(schema.spec.version).isGreaterThan(semver('1.29.0')))}"
    }}}]);
    apply("default", &rgd(&name, &ns.0, schema, resources));
    let run = follow(&ns);
    let resource = "graphlibraries.graphs.samplectl.test";
    crate::support::established(&[&format!("crd/{resource}")]);
    let instance = |name: &str, memory: &str| {
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphLibraries", "metadata": {"name": name},
               "spec": {"memory": memory, "limit": "2Gi", "cidr": "10.0.1.7/16",
                        "endpoint": "https://api.example.com:8443/v1", "version": "1.30.2"}})
    };
    let config = eventually(SOON, "the instance's ConfigMap", || {
        let _ = crate::support::try_apply(&ns.0, &instance("good", "1536Mi"));
        get("configmap", "good-config", Some(&ns.0)).ok_or_else(|| run.stderr())
    });
    // Each value as kro v0.9.4's cel-go gives it (conformance/reference evaluates the same expressions).
    assert_eq!(
        config["data"],
        json!({"fits": "true", "headroom": "536870912", "gateway": "10.0.0.0", "internal": "true",
               "host": "api.example.com", "port": "8443", "canonical": "true", "newer": "true"})
    );
    let failed = eventually(SOON, "the bad instance's conditions", || {
        let _ = crate::support::try_apply(&ns.0, &instance("bad", "lots"));
        let object = get(resource, "bad", Some(&ns.0)).ok_or("no instance")?;
        match object["status"]["conditions"].to_string().contains("quantities must match the regular expression") {
            true => Ok(object),
            false => Err(format!("{}\n{}", object["status"], run.stderr())),
        }
    });
    assert_ne!(failed["status"]["state"], "ACTIVE", "{}", failed["status"]);
    assert!(get("configmap", "bad-config", Some(&ns.0)).is_none(), "nothing made for the bad instance");
    let good = get(resource, "good", Some(&ns.0)).unwrap();
    assert_eq!(good["status"]["state"], "ACTIVE", "the other instance runs on: {}", good["status"]);
    drop(run);
    forget_instances(resource, &ns.0, &["good", "bad"]);
    forget_rgds(&[&name]);
}

/// A child the API server refuses (422 Invalid) makes its instance ERROR, in kro's words:
/// `ResourcesReady` False with reason `NotReady` and `resource reconciliation failed: apply results
/// contain errors: ...`, which `Ready` copies; before, it was IN_PROGRESS with reason ApplyFailed.
#[test]
fn a_child_the_api_server_refuses_makes_its_instance_error_in_kros_words() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-refused");
    let name = "samplectl-it-refused".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphRefused", "group": "graphs.samplectl.test",
                        "spec": {"key": "string"}});
    // A label value from the instance: the API server refuses one with spaces.
    let resources = json!([{"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}-config", "labels": {"key": "${schema.spec.key}"}},
        "data": {"key": "${schema.spec.key}"}}}]);
    apply("default", &rgd(&name, &ns.0, schema, resources));
    let run = follow(&ns);
    let resource = "graphrefuseds.graphs.samplectl.test";
    crate::support::established(&[&format!("crd/{resource}")]);
    let instance = |n: &str, key: &str| {
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphRefused", "metadata": {"name": n},
               "spec": {"key": key}})
    };
    let refused = eventually(SOON, "the refused instance in ERROR", || {
        let _ = crate::support::try_apply(&ns.0, &instance("refused", "not a valid label!"));
        let object = get(resource, "refused", Some(&ns.0)).ok_or("no instance")?;
        match object["status"]["state"] == "ERROR" {
            true => Ok(object),
            false => Err(format!("{}\n{}", object["status"], run.stderr())),
        }
    });
    let resources_ready = condition(&refused, "ResourcesReady").expect("ResourcesReady");
    assert_eq!(resources_ready["status"], "False");
    assert_eq!(resources_ready["reason"], "NotReady");
    let message = resources_ready["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("resource reconciliation failed: apply results contain errors: "), "{message}");
    assert!(message.contains("is invalid") && message.contains("not a valid label!"), "{message}");
    let ready = condition(&refused, "Ready").expect("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"], &ready["message"]),
        (&json!("False"), &json!("NotReady"), &json!(message))
    );
    let last = refused["status"]["conditions"].as_array().unwrap().last().unwrap()["type"].clone();
    assert_eq!(last, "Ready", "Ready last, as kro orders them");
    // An instance of the same graph whose child is valid runs.
    let fine = eventually(SOON, "a valid instance ACTIVE", || {
        let _ = crate::support::try_apply(&ns.0, &instance("fine", "valid"));
        let object = get(resource, "fine", Some(&ns.0)).ok_or("no instance")?;
        match object["status"]["state"] == "ACTIVE" {
            true => Ok(object),
            false => Err(format!("{}", object["status"])),
        }
    });
    assert_eq!(condition(&fine, "ResourcesReady").unwrap()["status"], "True");
    drop(run);
    for n in ["refused", "fine"] {
        let unfinalized = r#"{"metadata":{"finalizers":null}}"#;
        kubectl(&["patch", resource, n, "-n", &ns.0, "--type=merge", "-p", unfinalized]).success();
    }
    forget_rgds(&[&name]);
}

/// kro's compatibility check: a change to the RGD that would break stored instances (a field retyped)
/// leaves the CRD as it is and says so in KindReady, in kro's words, until the RGD allows breaking
/// changes; a change that breaks nothing (a field added) is written.
#[test]
fn a_breaking_change_to_the_crd_waits_for_kros_annotation() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-compat");
    let name = "samplectl-it-compat".to_owned();
    let crd_name = "graphcompats.graphs.samplectl.test";
    kubectl(&["delete", "crd", crd_name, "--ignore-not-found"]).success();
    let schema = |spec: Value| json!({"apiVersion": "v1alpha1", "kind": "GraphCompat", "group": "graphs.samplectl.test", "spec": spec});
    let resources = json!([{"id": "note", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}"}, "data": {"size": "${string(schema.spec.size)}"}}}]);
    apply("default", &rgd(&name, &ns.0, schema(json!({"size": "string"})), resources.clone()));
    let run = follow(&ns);
    let kind_ready = |generation: i64| {
        eventually(SOON, "the RGD's KindReady for its generation", || {
            let object = get("rgd", &name, None).ok_or("no RGD")?;
            let kind = condition(&object, "KindReady").ok_or("no KindReady")?;
            match kind["observedGeneration"] == generation {
                true => Ok(kind.clone()),
                false => Err(format!("{}\n{}", object["status"], run.stderr())),
            }
        })
    };
    assert_eq!(kind_ready(1)["status"], "True");
    let field = || {
        let crd = kubectl_json(&["get", "crd", crd_name]);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].clone()
    };

    // Retyped: refused, the CRD left as it was.
    apply("default", &rgd(&name, &ns.0, schema(json!({"size": "integer"})), resources.clone()));
    let refused = kind_ready(2);
    assert_eq!(
        (refused["status"].as_str(), refused["message"].as_str()),
        (
            Some("False"),
            Some(
                "cannot update CRD graphcompats.graphs.samplectl.test: breaking changes detected: Type changed from \
                 string to integer"
            )
        )
    );
    assert_eq!(field()["size"]["type"], "string");

    // Allowed: written.
    let mut allowed = rgd(&name, &ns.0, schema(json!({"size": "integer", "colour": "string"})), resources);
    allowed["metadata"]["annotations"] = json!({"kro.run/allow-breaking-changes": "true"});
    apply("default", &allowed);
    assert_eq!(kind_ready(3)["status"], "True");
    assert_eq!(field()["size"]["type"], "integer");
    assert_eq!(field()["colour"]["type"], "string");
    drop(run);
    forget_rgds(&[&name]);
}

/// A graph with a cycle is refused in its status, with kro's reason and the cycle named, while another
/// RGD of the same controller runs; an object of a wanted name that is not the instance's is left alone.
#[test]
fn a_broken_graph_is_said_and_a_foreign_object_is_not_taken() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-broken");
    let cyclic = "samplectl-it-cycle".to_owned();
    let cm = |id: &str, name: &str| json!({"id": id, "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}});
    let schema =
        |kind: &str| json!({"apiVersion": "v1alpha1", "kind": kind, "group": "graphs.samplectl.test", "spec": {}});
    apply(
        "default",
        &rgd(
            &cyclic,
            &ns.0,
            schema("GraphCycle"),
            json!([cm("a", "${b.metadata.name}-a"), cm("b", "${a.metadata.name}-b")]),
        ),
    );
    let fine = "samplectl-it-fine".to_owned();
    apply("default", &rgd(&fine, &ns.0, schema("GraphFine"), json!([cm("only", "${schema.metadata.name}")])));
    let run = follow(&ns);

    let broken = eventually(SOON, "the cyclic RGD refused", || {
        let object = get("rgd", &cyclic, None).ok_or("no RGD")?;
        match condition(&object, "GraphAccepted").is_some_and(|c| c["status"] == "False") {
            true => Ok(object),
            false => Err(format!("{}", object["status"])),
        }
    });
    let accepted = condition(&broken, "GraphAccepted").unwrap();
    assert_eq!(accepted["reason"], "InvalidResourceGraph");
    assert_eq!(accepted["message"], "failed to build dependency graph: graph contains a cycle: a -> b -> a");
    assert_eq!(broken["status"]["state"], "Inactive");
    assert_eq!(condition(&broken, "Ready").unwrap()["status"], "False");
    // Said once the refusal is written to the RGD's status: looked for until it is.
    eventually(SOON, "the refusal said", || {
        match run.stderr().contains(&format!("cannot run ResourceGraphDefinition \"{cyclic}\"")) {
            true => Ok(()),
            false => Err(run.stderr()),
        }
    });

    // Someone else's ConfigMap holds the name the fine RGD's instance wants.
    apply(
        &ns.0,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken"}, "data": {"mine": "yes"}}),
    );
    // The fine RGD's CRD may still be on its way (the wait above was for the other RGD): kubectl can
    // create an instance once the API server serves the kind.
    for name in ["taken", "free"] {
        let instance =
            json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphFine", "metadata": {"name": name}});
        eventually(SOON, "an instance of the fine RGD created", || match crate::support::try_apply(&ns.0, &instance) {
            run if run.code == 0 => Ok(()),
            run => Err(run.stderr),
        });
    }
    eventually(SOON, "the free instance ACTIVE", || {
        let object = get("graphfines.graphs.samplectl.test", "free", Some(&ns.0)).ok_or("none")?;
        if object["status"]["state"] == "ACTIVE" { Ok(()) } else { Err(format!("{}", object["status"])) }
    });
    let taken = eventually(SOON, "the instance whose name is taken not Ready", || {
        let object = get("graphfines.graphs.samplectl.test", "taken", Some(&ns.0)).ok_or("none")?;
        match condition(&object, "Ready").is_some_and(|c| c["status"] == "False") {
            true => Ok(object),
            false => Err(format!("{}", object["status"])),
        }
    });
    let foreign = get("configmap", "taken", Some(&ns.0)).unwrap();
    assert_eq!(foreign["data"], json!({"mine": "yes"}), "not taken: {taken}");
    assert!(foreign["metadata"].get("ownerReferences").is_none());
    assert!(foreign["metadata"]["labels"].get("kro.run/node-id").is_none());

    // Another RGD defining the same kind may not take the first one's CRD.
    let twin = "samplectl-it-fine-twin".to_owned();
    apply("default", &rgd(&twin, &ns.0, schema("GraphFine"), json!([cm("only", "${schema.metadata.name}")])));
    let refused = eventually(SOON, "the twin RGD refused", || {
        let object = get("rgd", &twin, None).ok_or("no RGD")?;
        match condition(&object, "KindReady").is_some_and(|c| c["status"] == "False") {
            true => Ok(object),
            false => Err(format!("{}", object["status"])),
        }
    });
    assert_eq!(
        condition(&refused, "KindReady").unwrap()["message"],
        format!(
            "failed to update CRD graphfines.graphs.samplectl.test: CRD is owned by another ResourceGraphDefinition {fine}"
        )
    );
    drop(run);
    forget_rgds(&[&cyclic, &fine, &twin]);
    kubectl(&["delete", "graphfines.graphs.samplectl.test", "--all", "-n", &ns.0, "--wait=false"]).success();
    forget_instances("graphfines.graphs.samplectl.test", &ns.0, &["taken", "free"]);
}

/// What kro refuses before it accepts an RGD for the types of what it reads and writes is refused with
/// kro's words (checked against kro v0.9.4 on the same RGDs): a field the schema does not declare, an
/// expression of the wrong type for its field, a literal of the wrong type, an operator without an
/// overload, a bad selector. A graph whose expressions all fit is accepted.
#[test]
fn a_graph_whose_types_do_not_fit_is_refused_in_kros_words() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-types");
    let schema = |kind: &str| {
        json!({"apiVersion": "v1alpha1", "kind": kind, "group": "graphs.samplectl.test",
            "spec": {"name": "string", "port": "integer", "names": "[]string", "labels": "map[string]string"},
            "status": {"available": "${deploy.status.availableReplicas}"}})
    };
    let deployment = |replicas: Value, port: Value, data: Value| {
        json!([
            {"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "${schema.metadata.name}", "labels": "${schema.spec.labels}"}, "data": data}},
            {"id": "deploy", "readyWhen": ["${deploy.status.?availableReplicas.orValue(0) > 0}"], "template": {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "${schema.metadata.name}"},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}}, "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "${schema.spec.name}",
                        "env": [{"name": "A", "value": "${config.data.a}"}],
                        "ports": [{"containerPort": port}]}]}}}}},
            {"id": "copies", "forEach": [{"suffix": "${schema.spec.names}"}], "template": {"apiVersion": "v1",
                "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}-${suffix}"}, "data": {"v": "${suffix}"}}},
        ])
    };
    let fits = deployment(
        json!("${schema.spec.port}"),
        json!("${schema.spec.port + 1}"),
        json!({"a": "${schema.spec.name}-${string(schema.spec.port)}"}),
    );
    let cases = [
        ("samplectl-it-types-fit", schema("GraphTypesFit"), fits.clone(), None),
        (
            "samplectl-it-types-undefined",
            schema("GraphTypesUndefined"),
            deployment(json!(1), json!(80), json!({"a": "${schema.spec.nope}"})),
            Some(
                "failed to validate resource \"config\": failed to compile template expression \"schema.spec.nope\" at \
                 path \"data.a\": ERROR: <input>:1:12: undefined field 'nope'\n | schema.spec.nope\n | ...........^",
            ),
        ),
        (
            "samplectl-it-types-mismatch",
            schema("GraphTypesMismatch"),
            deployment(json!(1), json!("${schema.spec.name}"), json!({})),
            Some(
                "failed to validate resource \"deploy\": type mismatch in resource \"deploy\" at path \
                 \"spec.template.spec.containers[0].ports[0].containerPort\": expression \"schema.spec.name\" returns type \
                 \"string\" but expected \"int\": type kind mismatch: got \"string\", expected \"int\"",
            ),
        ),
        (
            "samplectl-it-types-literal",
            schema("GraphTypesLiteral"),
            deployment(json!("two"), json!(80), json!({})),
            Some(
                "failed to build resource \"deploy\": failed to extract CEL expressions from schema for resource deploy: \
                 expected integer type for path spec.replicas, got string",
            ),
        ),
        (
            "samplectl-it-types-operator",
            schema("GraphTypesOperator"),
            deployment(json!(1), json!(80), json!({"a": "port-${schema.spec.port}"})),
            Some(
                "failed to validate resource \"config\": failed to compile template expression \"port-${schema.spec.port}\" \
                 at path \"data.a\": ERROR: <input>:1:9: found no matching overload for '_+_' applied to '(string, int)'\n | \
                 \"port-\" + (schema.spec.port)\n | ........^",
            ),
        ),
        (
            "samplectl-it-types-selector",
            schema("GraphTypesSelector"),
            json!([{"id": "deploy", "externalRef": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
                "selector": {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}}}}]),
            Some(
                "failed to build resource \"deploy\": invalid external ref metadata for resource deploy: invalid label \
                 selector: [metadata.selector.matchExpressions[0].operator: Invalid value: \"Equals\": not a valid \
                 selector operator]",
            ),
        ),
    ];
    for (name, schema, resources, _) in &cases {
        apply("default", &rgd(name, &ns.0, schema.clone(), resources.clone()));
    }
    let run = follow(&ns);
    for (name, _, _, refusal) in &cases {
        let object = eventually(SOON, &format!("{name} judged"), || {
            let object = get("rgd", name, None).ok_or("no RGD")?;
            let judged = condition(&object, "GraphAccepted")
                .filter(|c| c["observedGeneration"] == object["metadata"]["generation"] && c["status"] != "Unknown");
            match judged {
                Some(_) => Ok(object),
                None => Err(format!("{}", object["status"])),
            }
        });
        let accepted = condition(&object, "GraphAccepted").unwrap();
        match refusal {
            None => {
                assert_eq!(accepted["status"], "True", "{name}: {accepted}");
                eventually(SOON, "the fitting RGD Active", || {
                    let object = get("rgd", name, None).ok_or("no RGD")?;
                    if object["status"]["state"] == "Active" { Ok(()) } else { Err(format!("{}", object["status"])) }
                });
            }
            Some(message) => {
                assert_eq!(accepted["status"], "False", "{name}: {accepted}");
                assert_eq!(accepted["reason"], "InvalidResourceGraph");
                assert_eq!(accepted["message"], *message, "{name}");
                assert_eq!(object["status"]["state"], "Inactive");
            }
        }
    }
    drop(run);

    // Read from a file, the same refusal is the command's error.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mismatch.yaml");
    let (name, schema, resources, message) = &cases[2];
    std::fs::write(&path, serde_yaml::to_string(&rgd(name, "file", schema.clone(), resources.clone())).unwrap())
        .unwrap();
    let refused = samplectl(&["reconcile", "-f", &path.display().to_string(), "-n", &ns.0, "--once"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.contains(message.unwrap()), "{refused:#?}");
    let names: Vec<&str> = cases.iter().map(|(name, ..)| *name).collect();
    forget_rgds(&names);
}

/// An accepted RGD is snapshotted in kro's GraphRevisions: `<rgd>-r00001`, labelled with the hash kro
/// v0.9.4 gives the same spec, verified, owned by the RGD; a new one for each change of the spec, the
/// oldest beyond five deleted, and none for a reconcile that changes nothing.
#[test]
fn an_accepted_graph_is_kept_in_kros_graph_revisions() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-revisions");
    let name = "samplectl-it-revisions";
    // The spec kro v0.9.4 labelled 5182846d90b1cda7 (as rules::graph::revision's unit test has it).
    let spec = json!({
        "resources": [{"id": "cm", "template": {"apiVersion": "v1", "data": {"a": "${schema.spec.n}"},
            "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}"}}}],
        "schema": {"apiVersion": "v1alpha1", "group": "kro.run", "kind": "CondOk", "scope": "Namespaced",
            "spec": {"n": "string"}, "status": {"conditions": [
                "${runtime.newCondition({type: 'B', status: runtime.condition(schema, 'ResourcesReady').status})}",
                "${runtime.newCondition({type: 'C', status: cm.data.a == 'x' ? 'True' : 'False'})}"]}}});
    // What an earlier run left (its RGD's revisions, which the garbage collector may not have reached).
    forget_rgds(&[name]);
    let selector = format!("kro.run/resource-graph-definition-name={name}");
    kubectl(&["delete", "graphrevisions", "-l", &selector, "--wait=true", "--timeout=30s"]).success();
    let mut object = rgd(name, &ns.0, json!({}), json!([]));
    object["spec"] = spec;
    apply("default", &object);
    let run = follow(&ns);
    let revisions = || -> Vec<Value> {
        let listed =
            kubectl_json(&["get", "graphrevisions", "-l", &format!("kro.run/resource-graph-definition-name={name}")]);
        listed["items"].as_array().cloned().unwrap_or_default()
    };
    let first = eventually(SOON, "the first revision verified", || {
        let found = get("graphrevision", &format!("{name}-r00001"), None).ok_or("none")?;
        match condition(&found, "GraphVerified").is_some_and(|c| c["status"] == "True") {
            true => Ok(found),
            false => Err(format!("{found}")),
        }
    });
    let stored = get("rgd", name, None).unwrap();
    assert_eq!(first["metadata"]["labels"]["kro.run/graph-revision-hash"], "5182846d90b1cda7");
    assert_eq!(first["metadata"]["labels"]["kro.run/resource-graph-definition-name"], name);
    assert_eq!(first["metadata"]["ownerReferences"][0]["uid"], stored["metadata"]["uid"]);
    assert_eq!(first["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(first["spec"]["revision"], 1);
    assert_eq!(first["spec"]["snapshot"]["spec"], stored["spec"]);
    assert_eq!(first["status"]["topologicalOrder"], json!(["cm"]));
    assert_eq!(condition(&first, "Ready").unwrap()["status"], "True");
    assert_eq!(
        eventually(SOON, "lastIssuedRevision set", || {
            get("rgd", name, None).unwrap()["status"].get("lastIssuedRevision").cloned().ok_or("none".to_owned())
        }),
        1
    );

    for change in 2..=7 {
        let data = format!(
            "[{{\"op\":\"replace\",\"path\":\"/spec/resources/0/template/data/a\",\"value\":\"v{change}-${{schema.spec.n}}\"}}]"
        );
        kubectl(&["patch", "rgd", name, "--type=json", "-p", &data]).success();
        eventually(SOON, &format!("revision {change}"), || {
            let found = get("graphrevision", &format!("{name}-r{change:05}"), None).ok_or("none")?;
            let status = get("rgd", name, None).unwrap()["status"].clone();
            match status["lastIssuedRevision"] == change {
                true => Ok(found),
                false => Err(format!("{status}")),
            }
        });
    }
    let kept = eventually(SOON, "five revisions kept", || {
        let mut numbers: Vec<i64> = revisions().iter().filter_map(|r| r["spec"]["revision"].as_i64()).collect();
        numbers.sort();
        match numbers.len() {
            5 => Ok(numbers),
            _ => Err(format!("{numbers:?}")),
        }
    });
    assert_eq!(kept, [3, 4, 5, 6, 7]);
    drop(run);
    // Started again on the same spec, nothing new is issued.
    let again = follow(&ns);
    let running = format!("with the graph of ResourceGraphDefinition {name:?}");
    eventually(SOON, "the RGD run again", || match again.stderr().contains(&running) {
        true => Ok(()),
        false => Err(again.stderr()),
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(revisions().len(), 5);
    assert!(get("graphrevision", &format!("{name}-r00008"), None).is_none());
    drop(again);
    forget_rgds(&[name]);
}

/// `omit()` is kro's behind its CELOmitFunction gate: refused without `--feature-gates
/// CELOmitFunction=true`, and with it a field (or list item) whose expression gives `omit()` is left out
/// of the child. The gate is checked as kro checks its flag.
#[test]
fn omit_leaves_a_field_out_behind_kros_gate() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-omit");
    let dir = tempfile::tempdir().unwrap();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphOmit", "group": "graphs.samplectl.test",
        "spec": {"note": "string | default=\"\""}});
    let resources = json!([{"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}"},
        "data": {"note": "${schema.spec.note == '' ? omit() : schema.spec.note}", "kept": "yes"}}},
        {"id": "job", "template": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "${schema.metadata.name}"},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c",
                "image": "busybox", "args": ["first", "${schema.spec.note == '' ? omit() : schema.spec.note}", "last"]}]}}}}}]);
    let path = dir.path().join("omit.yaml");
    std::fs::write(&path, serde_yaml::to_string(&rgd("samplectl-it-omit", "file", schema, resources)).unwrap())
        .unwrap();
    let path = path.display().to_string();

    let refused = samplectl(&["reconcile", "-f", &path, "-n", &ns.0, "--once"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.contains("omit() requires the CELOmitFunction feature gate to be enabled"), "{refused:#?}");
    let unknown = samplectl(&["reconcile", "-f", &path, "--feature-gates", "Omit=true"]);
    assert_eq!(unknown.code, 2, "{unknown:#?}");
    assert!(unknown.stderr.contains("unrecognized feature gate: Omit"), "{unknown:#?}");
    let alone = samplectl(&["reconcile", "--feature-gates", "CELOmitFunction=true"]);
    assert_eq!(alone.code, 2, "{alone:#?}");
    assert!(alone.stderr.contains("--feature-gates are kro's, for ResourceGraphDefinitions"), "{alone:#?}");

    // The instance CRD is made by the first run that accepts the graph; the instances come after it.
    let gate = ["--feature-gates", "CELOmitFunction=true"];
    let first = samplectl(&[&["reconcile", "-f", &path, "-n", &ns.0, "--once"][..], &gate].concat());
    assert_eq!(first.code, 0, "{first:#?}");
    for (name, note) in [("blank", ""), ("noted", "hello")] {
        apply(
            &ns.0,
            &json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphOmit",
            "metadata": {"name": name}, "spec": {"note": note}}),
        );
    }
    let once = samplectl(&[&["reconcile", "-f", &path, "-n", &ns.0, "--once", "--watch"][..], &gate].concat());
    assert_eq!(once.code, 0, "{once:#?}");
    assert_eq!(get("configmap", "blank", Some(&ns.0)).unwrap()["data"], json!({"kept": "yes"}));
    assert_eq!(get("configmap", "noted", Some(&ns.0)).unwrap()["data"], json!({"kept": "yes", "note": "hello"}));
    let args = |name: &str| {
        get("job", name, Some(&ns.0)).unwrap()["spec"]["template"]["spec"]["containers"][0]["args"].clone()
    };
    assert_eq!(args("blank"), json!(["first", "last"]));
    assert_eq!(args("noted"), json!(["first", "hello", "last"]));
    forget_instances("graphomits.graphs.samplectl.test", &ns.0, &["blank", "noted"]);
}

/// An RGD whose resource is of a kind no one serves yet (here, the kind another RGD defines) is refused
/// in kro's words, tried again, and runs once that kind is served, with no restart (kro #1243).
#[test]
fn a_graph_waiting_for_a_kind_runs_once_it_is_served() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-later");
    let (outer, inner) = ("samplectl-it-later-outer", "samplectl-it-later-inner");
    forget_rgds(&[outer, inner]);
    let _ = kubectl(&["delete", "crd", "graphlaterinners.graphs.samplectl.test", "--ignore-not-found"]);
    let schema =
        |kind: &str| json!({"apiVersion": "v1alpha1", "kind": kind, "group": "graphs.samplectl.test", "spec": {}});
    apply(
        "default",
        &rgd(
            outer,
            &ns.0,
            schema("GraphLaterOuter"),
            json!([{"id": "inner", "template": {
            "apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphLaterInner",
            "metadata": {"name": "${schema.metadata.name}"}}}]),
        ),
    );
    let run = follow(&ns);
    let refused = eventually(SOON, "the outer RGD refused", || {
        let object = get("rgd", outer, None).ok_or("no RGD")?;
        match condition(&object, "GraphAccepted").filter(|c| c["status"] == "False") {
            Some(c) => Ok(c["message"].as_str().unwrap_or_default().to_owned()),
            None => Err(format!("{}", object["status"])),
        }
    });
    assert!(
        refused.starts_with(
            "failed to build resource \"inner\": failed to get schema for resource inner: cannot resolve group version"
        ),
        "{refused}"
    );
    assert!(refused.ends_with(": schema not found"), "{refused}");

    apply(
        "default",
        &rgd(
            inner,
            &ns.0,
            schema("GraphLaterInner"),
            json!([{"id": "note", "template": {"apiVersion": "v1",
            "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}-note"}}}]),
        ),
    );
    eventually(Duration::from_secs(75), "the outer RGD running", || {
        let object = get("rgd", outer, None).ok_or("no RGD")?;
        match object["status"]["state"] == "Active" {
            true => Ok(()),
            false => Err(format!("{}\n{}", object["status"], run.stderr())),
        }
    });
    drop(run);
    forget_rgds(&[outer, inner]);
}

/// Children an owner reference cannot reach, as kro makes them: a ConfigMap in another namespace and a
/// ClusterRole, both owned by their labels (no owner reference), found again across namespaces, and
/// deleted with the instance.
#[test]
fn children_in_other_namespaces_and_cluster_scoped_ones_are_owned_by_label() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-xns");
    let other = Namespace::new("rgd-xns-other");
    let name = "samplectl-it-xns".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphSpread", "group": "graphs.samplectl.test",
                        "spec": {"target": "string"}});
    let resources = json!([
        {"id": "elsewhere", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${schema.metadata.name}", "namespace": "${schema.spec.target}"},
            "data": {"from": "${schema.metadata.namespace}"}}},
        {"id": "role", "template": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "${schema.metadata.namespace + '-' + schema.metadata.name}"}, "rules": []}},
    ]);
    apply("default", &rgd(&name, &ns.0, schema, resources));
    // Every namespace: the children live outside the instance's.
    let label = format!("samplectl-test={}", ns.0);
    let run = Background::start(&["reconcile", "--from-cluster", "--target-label-selector", &label, "--watch"]);
    let spread = json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphSpread",
                        "metadata": {"name": "spread"}, "spec": {"target": other.0}});
    eventually(SOON, "the instance ACTIVE", || {
        let _ = crate::support::try_apply(&ns.0, &spread);
        let object = get("graphspreads.graphs.samplectl.test", "spread", Some(&ns.0)).ok_or("no instance")?;
        if object["status"]["state"] == "ACTIVE" {
            Ok(())
        } else {
            Err(format!("{}\n{}", object["status"], run.stderr()))
        }
    });
    let role_name = format!("{}-spread", ns.0);
    let config = get("configmap", "spread", Some(&other.0)).expect("the ConfigMap in the other namespace");
    let role = get("clusterrole", &role_name, None).expect("the ClusterRole");
    for child in [&config, &role] {
        assert!(child["metadata"].get("ownerReferences").is_none(), "{child}");
        assert_eq!(child["metadata"]["labels"]["kro.run/instance-namespace"], ns.0.as_str());
        assert_eq!(child["metadata"]["labels"]["app.kubernetes.io/managed-by"], "kro");
    }
    assert_eq!(config["data"]["from"], ns.0.as_str());
    // Found again: a hand edit is put back, without a second object.
    kubectl(&["patch", "configmap", "spread", "-n", &other.0, "--type=merge", "-p", r#"{"data":{"from":"edited"}}"#])
        .success();
    eventually(SOON, "the edit put back", || {
        let config = get("configmap", "spread", Some(&other.0)).ok_or("gone")?;
        if config["data"]["from"] == ns.0.as_str() { Ok(()) } else { Err(format!("{}", config["data"])) }
    });
    kubectl(&["delete", "graphspreads.graphs.samplectl.test", "spread", "-n", &ns.0, "--wait=false"]).success();
    eventually(SOON, "the children gone with the instance", || {
        let left = [get("configmap", "spread", Some(&other.0)), get("clusterrole", &role_name, None)];
        if left.iter().all(Option::is_none) { Ok(()) } else { Err(format!("{left:?}")) }
    });
    kubectl(&["delete", "rgd", &name, "--wait=true", "--timeout=30s"]).success();
    drop(run);
}

/// `reconcile -f` reads ResourceGraphDefinitions from files as it reads CompositeControllers: a good one
/// runs its instances; an unknown field and a reference to an unknown resource are refused with their
/// place and exit 1.
#[test]
fn graphs_are_read_from_files() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-file");
    let dir = tempfile::tempdir().unwrap();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphFromFile", "group": "graphs.samplectl.test", "spec": {"note": "string | default=\"hi\""}});
    let resources = json!([{"id": "note", "template": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "${schema.metadata.name}-note"}, "data": {"note": "${schema.spec.note}"}}}]);
    let write = |file: &str, rgd: &Value| {
        let path = dir.path().join(file);
        std::fs::write(&path, serde_yaml::to_string(rgd).unwrap()).unwrap();
        path.display().to_string()
    };
    let good = rgd("samplectl-it-file", "file", schema.clone(), resources.clone());
    let mut typo = good.clone();
    typo["spec"]["resources"][0]["readyWhenn"] = json!([]);
    let typo = write("typo.yaml", &typo);
    let refused = samplectl(&["reconcile", "-f", &typo, "-n", &ns.0, "--once"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(
        refused.stderr.contains(
            "ResourceGraphDefinition \"samplectl-it-file\": unknown field \"readyWhenn\" at spec.resources[0]"
        ),
        "{refused:#?}"
    );
    let mut unknown = good.clone();
    unknown["spec"]["resources"][0]["template"]["metadata"]["name"] = json!("${nothing.metadata.name}");
    let unknown = write("unknown.yaml", &unknown);
    let refused = samplectl(&["reconcile", "-f", &unknown, "-n", &ns.0, "--once"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.contains("references unknown identifiers: [nothing]"), "{refused:#?}");
    let mut conditions = good.clone();
    conditions["spec"]["schema"]["status"] = json!({"conditions": "${schema.spec.note}"});
    let conditions = write("conditions.yaml", &conditions);
    let refused = samplectl(&["reconcile", "-f", &conditions, "-n", &ns.0, "--once"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(
        refused.stderr.contains(
            "failed to build instance status schema: failed to extract conditions block: status.conditions must be a \
             list, got string"
        ),
        "{refused:#?}"
    );
    assert!(
        get("crd", "graphfromfiles.graphs.samplectl.test", None).is_none() || refused.stderr.contains("cannot run")
    );

    let good = write("good.yaml", &good);
    let run = Background::start(&["reconcile", "-f", &good, "-n", &ns.0, "--watch"]);
    let instance =
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphFromFile", "metadata": {"name": "n"}});
    eventually(SOON, "the instance ACTIVE", || {
        let _ = crate::support::try_apply(&ns.0, &instance);
        let object = get("graphfromfiles.graphs.samplectl.test", "n", Some(&ns.0)).ok_or("none")?;
        if object["status"]["state"] == "ACTIVE" {
            Ok(())
        } else {
            Err(format!("{}\n{}", object["status"], run.stderr()))
        }
    });
    assert_eq!(get("configmap", "n-note", Some(&ns.0)).unwrap()["data"]["note"], "hi");
    kubectl(&["delete", "graphfromfiles.graphs.samplectl.test", "n", "-n", &ns.0, "--wait=true", "--timeout=30s"])
        .success();
    drop(run);

    // One pass with --once --watch brings an instance to rest, through a resource that waits for another.
    let mut dependent = rgd("samplectl-it-file", "file", schema, resources);
    dependent["spec"]["resources"].as_array_mut().unwrap().push(json!({"id": "echo", "template": {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${note.metadata.name}-echo"},
        "data": {"note": "${note.data.note}"}}}));
    let dependent = write("dependent.yaml", &dependent);
    let instance =
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphFromFile", "metadata": {"name": "m"}});
    apply(&ns.0, &instance);
    let once = samplectl(&["reconcile", "-f", &dependent, "-n", &ns.0, "--once", "--watch"]);
    assert_eq!(once.code, 0, "{once:#?}");
    assert_eq!(get("configmap", "m-note-echo", Some(&ns.0)).unwrap()["data"]["note"], "hi");
    let m = get("graphfromfiles.graphs.samplectl.test", "m", Some(&ns.0)).unwrap();
    assert_eq!(m["status"]["state"], "ACTIVE", "{}", m["status"]);
    // And so does --once with the poll driver, a pass for each resource that waits for another.
    let polled =
        json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphFromFile", "metadata": {"name": "p"}});
    apply(&ns.0, &polled);
    let once = samplectl(&["reconcile", "-f", &dependent, "-n", &ns.0, "--once"]);
    assert_eq!(once.code, 0, "{once:#?}");
    assert_eq!(get("configmap", "p-note-echo", Some(&ns.0)).unwrap()["data"]["note"], "hi");
    let p = get("graphfromfiles.graphs.samplectl.test", "p", Some(&ns.0)).unwrap();
    assert_eq!(p["status"]["state"], "ACTIVE", "{}", p["status"]);
    // The ApplySet inventory names the children's kinds however they were read: a list's items come
    // without their type. An instance at rest is not written again by another pass.
    let kinds = "applyset.kubernetes.io/contains-group-kinds";
    assert_eq!(m["metadata"]["annotations"][kinds], "ConfigMap", "{}", m["metadata"]);
    assert_eq!(p["metadata"]["annotations"][kinds], "ConfigMap", "{}", p["metadata"]);
    let again = samplectl(&["reconcile", "-f", &dependent, "-n", &ns.0, "--once"]);
    assert_eq!(again.code, 0, "{again:#?}");
    let rested = get("graphfromfiles.graphs.samplectl.test", "p", Some(&ns.0)).unwrap();
    assert_eq!(rested["metadata"]["resourceVersion"], p["metadata"]["resourceVersion"], "{again:#?}");
    forget_instances("graphfromfiles.graphs.samplectl.test", &ns.0, &["p"]);
    kubectl(&[
        "patch",
        "graphfromfiles.graphs.samplectl.test",
        "m",
        "-n",
        &ns.0,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .success();
}

/// One RGD whose CRD never becomes Established (its names clash with another CRD's) waits for it in a
/// task of its own: another RGD applied after it is Active while the first still waits.
#[test]
fn a_stuck_graph_does_not_hold_up_another() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-stuck");
    // A CRD of the group that already claims the stuck RGD's plural as a short name.
    apply(
        "default",
        &json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "graphclaimers.graphs.samplectl.test"},
            "spec": {"group": "graphs.samplectl.test", "scope": "Namespaced",
                     "names": {"kind": "GraphClaimer", "plural": "graphclaimers", "shortNames": ["graphstucks"]},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
        }),
    );
    let cm = json!([{"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${schema.metadata.name}"}}}]);
    let schema =
        |kind: &str| json!({"apiVersion": "v1alpha1", "kind": kind, "group": "graphs.samplectl.test", "spec": {}});
    let (stuck, quick) = ("samplectl-it-stuck".to_owned(), "samplectl-it-quick".to_owned());
    apply("default", &rgd(&stuck, &ns.0, schema("GraphStuck"), cm.clone()));
    let run = follow(&ns);
    std::thread::sleep(Duration::from_secs(2));
    apply("default", &rgd(&quick, &ns.0, schema("GraphQuick"), cm));
    let started = std::time::Instant::now();
    eventually(Duration::from_secs(20), "the second RGD Active while the first waits", || {
        let object = get("rgd", &quick, None).ok_or("no RGD")?;
        if object["status"]["state"] == "Active" {
            Ok(())
        } else {
            Err(format!("{}\n{}", object["status"], run.stderr()))
        }
    });
    assert!(started.elapsed() < Duration::from_secs(20));
    let first = get("rgd", &stuck, None).unwrap();
    assert_ne!(first["status"]["state"], "Active", "{}", first["status"]);
    drop(run);
    forget_rgds(&[&stuck, &quick]);
    kubectl(&[
        "delete",
        "crd",
        "graphstucks.graphs.samplectl.test",
        "graphclaimers.graphs.samplectl.test",
        "--ignore-not-found",
        "--wait=false",
    ])
    .success();
}

/// A process that may not list any kind of controller object is told so in the API server's words
/// (exit 1), not that the APIs are missing.
#[test]
fn a_fleet_that_may_list_nothing_says_it_is_forbidden() {
    let _cluster = crate::support::shared();
    install_kro();
    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::user_kubeconfig(dir.path(), "fleet-nobody");
    let run = crate::support::samplectl_bare(&[
        "--kubeconfig",
        config.to_str().unwrap(),
        "reconcile",
        "--from-cluster",
        "--once",
    ]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains("Error from server (Forbidden)"), "{run:#?}");
    assert!(run.stderr.contains("User \"fleet-nobody\" cannot list resource"), "{run:#?}");
    assert!(!run.stderr.contains("are installed in this cluster"), "{run:#?}");
}

/// RGDs in a shard ring (`--from-cluster --shard-ring`): the member that coordinates writes the RGD's
/// own objects (finalizer, status, instance CRD, GraphRevision) once for all; every member runs the
/// instances, shared as any parents. The coordinator is killed: another member takes its place, and
/// instances changed and created meanwhile are served.
#[test]
fn a_shard_ring_runs_graphs_with_their_own_objects_written_by_the_coordinator() {
    let _cluster = crate::support::shared();
    install_kro();
    let ns = Namespace::new("rgd-sharded");
    // The CRD an RGD makes names it, and another RGD may not take it: one name across runs.
    let name = "samplectl-it-sharded".to_owned();
    let schema = json!({"apiVersion": "v1alpha1", "kind": "GraphSharded", "group": "graphs.samplectl.test",
                        "spec": {"value": "string | default=\"none\""}});
    let cm = json!({"id": "config", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "${schema.metadata.name}-config"}, "data": {"value": "${schema.spec.value}"}}});
    kubectl(&["delete", "crd", "graphshardeds.graphs.samplectl.test", "--ignore-not-found"]).success();
    apply("default", &rgd(&name, &ns.0, schema, json!([cm])));
    let label = format!("samplectl-test={}", ns.0);
    let member = |name: &str| {
        let mut args = vec!["reconcile", "--from-cluster", "--target-label-selector", &label, "-n", &ns.0, "--watch"];
        args.extend(["--shard-ring", &ns.0, "--shard-member", name, "--leader-election-namespace", &ns.0]);
        args.extend(crate::sharding::TIMINGS);
        Background::start(&args)
    };
    let mut members: std::collections::BTreeMap<&str, Background> =
        ["m1", "m2", "m3"].into_iter().map(|m| (m, member(m))).collect();
    let logs = |members: &std::collections::BTreeMap<&str, Background>| {
        members.values().map(Background::stderr).collect::<Vec<_>>().join("\n---\n")
    };
    let rgd_active = eventually(Duration::from_secs(60), "the RGD Active", || {
        let object = get("rgd", &name, None).ok_or("no RGD")?;
        match object["status"]["state"] == "Active" {
            true => Ok(object),
            false => Err(format!("{}\n{}", object["status"], logs(&members))),
        }
    });
    assert_eq!(rgd_active["metadata"]["finalizers"], json!(["kro.run/finalizer"]));
    let instances: Vec<String> = (0..12).map(|i| format!("g{i}")).collect();
    let set = |names: &[String], value: &str| {
        let items: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"apiVersion": "graphs.samplectl.test/v1alpha1", "kind": "GraphSharded",
                            "metadata": {"name": n}, "spec": {"value": value}})
            })
            .collect();
        apply(&ns.0, &json!({"apiVersion": "v1", "kind": "List", "items": items}));
    };
    set(&instances, "first");
    let ring_label = format!("shard.samplectl.io/{}", ns.0);
    // What is not right yet: an instance not ACTIVE, on no live member, or its ConfigMap not holding `value`.
    let wrong = |names: &[String], value: &str, live: &dyn Fn(&str) -> bool| -> Vec<String> {
        let listed = kubectl_json(&["get", "graphshardeds.graphs.samplectl.test", "-n", &ns.0]);
        let cms = kubectl_json(&["get", "configmaps", "-n", &ns.0]);
        names
            .iter()
            .filter_map(|n| {
                let item = listed["items"].as_array()?.iter().find(|i| i["metadata"]["name"] == n.as_str());
                let cm = cms["items"].as_array()?.iter().find(|c| c["metadata"]["name"] == format!("{n}-config"));
                let on = item.and_then(|i| i["metadata"]["labels"][&ring_label].as_str()).unwrap_or_default();
                let right = item.is_some_and(|i| i["status"]["state"] == "ACTIVE")
                    && live(on)
                    && cm.is_some_and(|c| c["data"]["value"] == value);
                (!right).then(|| format!("{n} on {on:?}"))
            })
            .collect()
    };
    let all = |m: &str| ["m1_", "m2_", "m3_"].iter().any(|p| m.starts_with(p));
    eventually(Duration::from_secs(60), "every instance ACTIVE with its ConfigMap", || {
        match wrong(&instances, "first", &all).as_slice() {
            [] => Ok(()),
            some => Err(format!("{some:?}\n{}", logs(&members))),
        }
    });
    let listed = kubectl_json(&["get", "graphshardeds.graphs.samplectl.test", "-n", &ns.0]);
    let holders: std::collections::BTreeSet<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["labels"][&ring_label].as_str()?.split_once('_').map(|(m, _)| m))
        .collect();
    assert!(holders.len() >= 2, "the instances are shared: {holders:?}");
    // The RGD's own objects, written once: by the coordinator only.
    let coordinator = kubectl_json(&["get", "lease", &ns.0, "-n", &ns.0])["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .split_once('_')
        .unwrap()
        .0
        .to_owned();
    for (m, process) in &members {
        let created = process.stderr().contains("created CustomResourceDefinition graphshardeds");
        assert_eq!(created, *m == coordinator, "{m}: {}", process.stderr());
    }

    // The coordinator killed; the others go on, and one of them takes its place.
    let (_, _) = members.remove(coordinator.as_str()).unwrap().stop("KILL", Duration::from_secs(5));
    set(&instances[..6], "second");
    let more: Vec<String> = (12..15).map(|i| format!("g{i}")).collect();
    set(&more, "third");
    let live = |m: &str| members.keys().any(|name| m.starts_with(&format!("{name}_")));
    eventually(Duration::from_secs(90), "every instance served by the members left", || {
        let mut left = wrong(&instances[..6], "second", &live);
        left.extend(wrong(&instances[6..], "first", &live));
        left.extend(wrong(&more, "third", &live));
        match left.as_slice() {
            [] => Ok(()),
            some => Err(format!("{some:?}\n{}", logs(&members))),
        }
    });
    eventually(SOON, "another member coordinates", || {
        match members.values().any(|m| m.stderr().contains("coordinating the shard ring")) {
            true => Ok(()),
            false => Err(logs(&members)),
        }
    });
    let object = get("rgd", &name, None).unwrap();
    assert_eq!(object["status"]["state"], "Active", "{object}");
    for (_, m) in members {
        let (code, logged) = m.stop("TERM", Duration::from_secs(15));
        assert_eq!(code, Some(0), "{logged}");
    }
    let names: Vec<&str> = instances.iter().chain(&more).map(String::as_str).collect();
    forget_instances("graphshardeds.graphs.samplectl.test", &ns.0, &names);
    forget_rgds(&[&name]);
}
