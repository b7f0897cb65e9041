//! samplectl never takes over a ConfigMap it did not create, under any interleaving: pairs of "create a
//! Sample" and "someone else creates a ConfigMap of the same name" are sent through keep-alive
//! connections at offsets swept across the controller's read-to-write window, in both orders, with both
//! drivers running. Afterwards no foreign ConfigMap carries samplectl's owner reference, labels or data,
//! every Sample whose name was taken says ConfigMapConflict, and deleting the Samples deletes none of the
//! foreign ConfigMaps.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::{Background, Namespace, cluster, eventually, kubectl, kubectl_json, samplectl};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

const PAIRS: usize = 200;

async fn client() -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cluster().kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

/// One pair: the Sample, and the foreign ConfigMap `offset_ms` after it (before it, when negative).
/// Returns whether the foreign create succeeded (the name was still free).
async fn pair(samples: &Api<DynamicObject>, configmaps: &Api<ConfigMap>, name: &str, offset_ms: f64) -> bool {
    let sample: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1alpha1", "kind": "Sample",
        "metadata": {"name": name}, "testString": "from the Sample",
    }))
    .unwrap();
    let foreign: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"owner": "someone-else"}},
        "data": {"mine": "yes"},
    }))
    .unwrap();
    let delay = Duration::from_micros((offset_ms.abs() * 1000.0) as u64);
    let sample_first = offset_ms >= 0.0;
    let create_sample = async {
        if !sample_first {
            tokio::time::sleep(delay).await;
        }
        samples.create(&PostParams::default(), &sample).await.unwrap();
    };
    let create_foreign = async {
        if sample_first {
            tokio::time::sleep(delay).await;
        }
        configmaps.create(&PostParams::default(), &foreign).await
    };
    match tokio::join!(create_sample, create_foreign).1 {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 409 => false,
        Err(err) => panic!("creating the foreign ConfigMap {name}: {err}"),
    }
}

fn apis(client: &kube::Client, ns: &str) -> (Api<DynamicObject>, Api<ConfigMap>) {
    (Api::namespaced_with(client.clone(), ns, &crate::support::sample_resource()), Api::namespaced(client.clone(), ns))
}

/// How long the controller takes from a Sample's create to its ConfigMap existing, on this machine
/// and build: the median of a few, each timed with a GET every millisecond.
async fn reaction(client: &kube::Client, ns: &str) -> Duration {
    let (samples, configmaps) = apis(client, ns);
    let mut took = Vec::new();
    for i in 0..5 {
        let name = format!("probe-{i}");
        let sample: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1alpha1", "kind": "Sample", "metadata": {"name": name}, "testString": "x",
        }))
        .unwrap();
        let started = std::time::Instant::now();
        samples.create(&PostParams::default(), &sample).await.unwrap();
        while configmaps.get_opt(&name).await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        took.push(started.elapsed());
    }
    took.sort();
    took[2]
}

/// The watch driver, pair after pair with the controller idle each time: the foreign ConfigMap is sent
/// from a fifth of the measured reaction time before the Sample to half as long again after it, the
/// span in which samplectl reads and writes.
async fn race_one_by_one(client: &kube::Client, ns: &str) -> HashMap<String, bool> {
    let (samples, configmaps) = apis(client, ns);
    let reaction = reaction(client, ns).await.as_secs_f64() * 1000.0;
    eprintln!("{ns}: the controller's ConfigMap appears {reaction:.1} ms after its Sample");
    let mut won = HashMap::new();
    for i in 0..PAIRS {
        let name = format!("race-{i:03}");
        let offset = reaction * (-0.2 + 1.7 * i as f64 / PAIRS as f64);
        won.insert(name.clone(), pair(&samples, &configmaps, &name, offset).await);
        tokio::time::sleep(Duration::from_secs_f64(reaction * 2.0 / 1000.0)).await;
    }
    won
}

/// The poll driver looks at a random moment of its one-second tick: all pairs at once, the foreign
/// ConfigMaps spread over two ticks, so that samplectl comes first for some and second for others.
async fn race_all_at_once(client: &kube::Client, ns: &str) -> HashMap<String, bool> {
    let (samples, configmaps) = apis(client, ns);
    let pairs = (0..PAIRS).map(|i| {
        let (samples, configmaps) = (&samples, &configmaps);
        async move {
            let name = format!("race-{i:03}");
            let won = pair(samples, configmaps, &name, -50.0 + 2100.0 * i as f64 / PAIRS as f64).await;
            (name, won)
        }
    });
    futures::future::join_all(pairs).await.into_iter().collect()
}

fn by_name(list: &Value) -> HashMap<String, Value> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["metadata"]["name"].as_str().unwrap().to_owned(), o.clone()))
        .collect()
}

fn is_foreign_and_untouched(cm: &Value) -> Result<(), String> {
    let name = &cm["metadata"]["name"];
    if cm["metadata"]["ownerReferences"].is_array() {
        return Err(format!("{name} has owner references: {}", cm["metadata"]["ownerReferences"]));
    }
    let labels = cm["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    if labels.len() != 1 || labels["owner"] != "someone-else" {
        return Err(format!("{name} has labels {labels:?}"));
    }
    if cm["data"] != json!({"mine": "yes"}) {
        return Err(format!("{name} has data {}", cm["data"]));
    }
    Ok(())
}

/// Waits until every Sample has a Ready condition for its generation, then checks each pair.
fn check(ns: &str, foreign_won: &HashMap<String, bool>, controller: &Background) {
    eventually(Duration::from_secs(120), &format!("every Sample in {ns} has a status"), || {
        let samples = kubectl_json(&["get", "samples", "-n", ns]);
        let pending = samples["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"]["observedGeneration"] != s["metadata"]["generation"])
            .count();
        if pending == 0 { Ok(()) } else { Err(format!("{pending} without status\n{}", controller.stderr())) }
    });
    let samples = by_name(&kubectl_json(&["get", "samples", "-n", ns]));
    let configmaps = by_name(&kubectl_json(&["get", "configmaps", "-n", ns]));
    let mut problems = Vec::new();
    let probes = samples.keys().filter(|n| n.starts_with("probe-"));
    for name in probes {
        if samples[name]["status"]["conditions"][0]["status"] != "True" {
            problems.push(format!("{name} is not Ready"));
        }
    }
    for (name, &foreign) in foreign_won {
        let sample = &samples[name];
        let condition = &sample["status"]["conditions"][0];
        let cm = &configmaps[name];
        if foreign {
            if let Err(e) = is_foreign_and_untouched(cm) {
                problems.push(format!("taken over: {e}"));
            }
            if condition["reason"] != "ConfigMapConflict" || condition["status"] != "False" {
                problems.push(format!("{name}: the foreign ConfigMap's Sample says {condition}"));
            }
        } else if condition["status"] != "True" || cm["data"]["testString"] != "from the Sample" {
            problems.push(format!("{name}: samplectl's ConfigMap {cm} with condition {condition}"));
        }
    }
    assert!(problems.is_empty(), "{ns}: {} problems:\n{}", problems.len(), problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_foreign_configmap_created_in_the_write_window_is_never_taken_over() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let (poll_ns, watch_ns) = (Namespace::new("takeover-poll"), Namespace::new("takeover-watch"));
    let poll = Background::start(&["reconcile", "-n", &poll_ns.0]);
    let watcher = Background::start(&["reconcile", "--watch", "-n", &watch_ns.0]);
    eventually(Duration::from_secs(20), "the watch driver has listed", || {
        let log = watcher.stderr();
        if log.contains("reconciling Samples") { Ok(()) } else { Err(log) }
    });
    std::thread::sleep(Duration::from_secs(1));
    let client = client().await;
    let watch_won = race_one_by_one(&client, &watch_ns.0).await;
    let poll_won = race_all_at_once(&client, &poll_ns.0).await;
    for (ns, won, controller) in [(&watch_ns, &watch_won, &watcher), (&poll_ns, &poll_won, &poll)] {
        let foreign = won.values().filter(|w| **w).count();
        eprintln!("{}: {foreign} of {PAIRS} foreign creates found the name free", ns.0);
        check(&ns.0, won, controller);
    }

    // Deleting the Samples garbage-collects samplectl's ConfigMaps, and none of the foreign ones.
    for (ns, won) in [(&watch_ns, &watch_won), (&poll_ns, &poll_won)] {
        kubectl(&["delete", "samples", "--all", "-n", &ns.0, "--wait=false"]).success();
        let ours = won.values().filter(|w| !**w).count();
        eventually(Duration::from_secs(120), &format!("samplectl's {ours} ConfigMaps collected in {}", ns.0), || {
            let left =
                kubectl_json(&["get", "configmaps", "-n", &ns.0, "-l", "app.kubernetes.io/managed-by=samplectl"]);
            match left["items"].as_array().unwrap().len() {
                0 => Ok(()),
                n => Err(format!("{n} left")),
            }
        });
        // The collector has had its turn at every ConfigMap it would delete; the foreign ones are all there.
        let configmaps = by_name(&kubectl_json(&["get", "configmaps", "-n", &ns.0]));
        for (name, _) in won.iter().filter(|(_, w)| **w) {
            let cm = configmaps.get(name).unwrap_or_else(|| panic!("the foreign ConfigMap {name} was deleted"));
            is_foreign_and_untouched(cm).unwrap();
        }
    }
}
