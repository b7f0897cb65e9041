//! Churn: a seeded load generator creates, changes and deletes Samples (and now and then their
//! ConfigMaps) while both drivers reconcile, each in its own namespace. Afterwards, checked with kubectl:
//! every Sample has exactly one ConfigMap with its current testString and is Ready for its current
//! generation; no ConfigMap outlives its Sample once garbage collection has run; and ConfigMaps samplectl
//! does not own were never written. The seed is printed so a failure can be replayed
//! (SAMPLECTL_CHURN_SEED); SAMPLECTL_CHURN_SECONDS sets the length (default 180).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::{Background, Namespace, eventually, kubectl, kubectl_json, samplectl, tail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;

/// xorshift64*: small, seedable, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const IDS: u64 = 1000;

/// One worker's share of the load (ids ≡ worker mod workers), so the final state of each Sample is
/// known exactly. It talks to the API server through kube directly: kubectl processes would cap the load
/// at a dozen operations a second on two cores. Returns the testString each remaining Sample should end
/// with, and how many operations it made.
async fn churn(
    client: kube::Client,
    ns: String,
    seed: u64,
    worker: u64,
    workers: u64,
    until: Instant,
) -> (BTreeMap<String, String>, usize) {
    let ar = crate::support::sample_resource();
    let samples: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let configmaps: Api<ConfigMap> = Api::namespaced(client, &ns);
    let apply = PatchParams::apply("churn").force();
    let mut rng = Rng(seed ^ (worker + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    let mut ops = 0;
    while Instant::now() < until {
        let id = rng.below(IDS / workers) * workers + worker;
        let name = format!("s{id:04}");
        let roll = rng.below(100);
        ops += 1;
        // A failed operation (the server is busy) changes nothing; `live` follows only successes.
        match (live.contains_key(&name), roll) {
            (false, _) | (true, 0..=49) => {
                let value = format!("v{}", rng.below(1_000_000));
                let doc = json!({"apiVersion": "example.com/v1alpha1", "kind": "Sample", "metadata": {"name": name}, "testString": value});
                if samples.patch(&name, &apply, &Patch::Apply(&doc)).await.is_ok() {
                    live.insert(name, value);
                }
            }
            (true, 50..=79) => {
                if samples.delete(&name, &DeleteParams::default()).await.is_ok() {
                    live.remove(&name);
                }
            }
            // The ConfigMaps named s0000 and s0001 belong to someone else: never touched by the load.
            (true, _) if id < 2 => {}
            (true, 80..=89) => {
                let _ = configmaps.delete(&name, &DeleteParams::default()).await;
            }
            (true, _) => {
                let patch = json!({"data": {"testString": "edited by hand"}});
                let _ = configmaps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        }
    }
    (live, ops)
}

/// The Samples named like the foreign ConfigMaps can never have a ConfigMap of their own.
const FOREIGN_NAMED_LIKE_SAMPLES: [&str; 2] = ["s0000", "s0001"];

fn check(ns: &str, expected: &BTreeMap<String, String>) -> Result<(), String> {
    let conflict = |name: &str| FOREIGN_NAMED_LIKE_SAMPLES.contains(&name);
    let mut problems = Vec::new();
    let samples = kubectl_json(&["get", "samples", "-n", ns]);
    let mut names = Vec::new();
    for s in samples["items"].as_array().unwrap() {
        let name = s["metadata"]["name"].as_str().unwrap().to_owned();
        if !s["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let condition = &s["status"]["conditions"][0];
        let current = s["status"]["observedGeneration"] == s["metadata"]["generation"];
        let (status, reason) =
            if conflict(&name) { ("False", "ConfigMapConflict") } else { ("True", "ConfigMapReady") };
        if !current || condition["status"] != status || condition["reason"] != reason {
            problems.push(format!("{name}: status {}", s["status"]));
        }
        names.push(name);
    }
    if names.iter().collect::<Vec<_>>() != expected.keys().collect::<Vec<_>>() {
        problems.push(format!("{} Samples, expected {}", names.len(), expected.len()));
    }
    let cms = kubectl_json(&["get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let cms = cms["items"].as_array().unwrap();
    for cm in cms {
        let name = cm["metadata"]["name"].as_str().unwrap();
        match expected.get(name) {
            Some(value) if cm["data"]["testString"] == value.as_str() => {}
            Some(value) => problems.push(format!("{name}: ConfigMap holds {} not {value}", cm["data"]["testString"])),
            None => problems.push(format!("{name}: a ConfigMap without a Sample")),
        }
    }
    let owned = expected.keys().filter(|n| !conflict(n)).count();
    if cms.len() != owned {
        problems.push(format!("{} ConfigMaps for {owned} Samples", cms.len()));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

#[test]
fn churn_keeps_every_invariant() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let seed: u64 = std::env::var("SAMPLECTL_CHURN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    let seconds: u64 = std::env::var("SAMPLECTL_CHURN_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(180);
    eprintln!("churn seed {seed} ({seconds} s); replay with SAMPLECTL_CHURN_SEED={seed}");

    let runs: Vec<(Namespace, Background)> = ["poll", "watch"]
        .into_iter()
        .map(|driver| {
            let ns = Namespace::new(&format!("churn-{driver}"));
            for name in FOREIGN_NAMED_LIKE_SAMPLES.iter().chain(&["bystander"]) {
                kubectl(&["create", "configmap", name, "-n", &ns.0, "--from-literal=owner=someone-else"]).success();
            }
            let mut args = vec!["reconcile", "-n", &ns.0];
            if driver == "watch" {
                args.push("--watch");
            }
            let controller = Background::start(&args);
            (ns, controller)
        })
        .collect();
    let foreign_args = |ns: &str| -> Vec<String> {
        let mut args: Vec<String> = vec!["get".into(), "configmaps".into()];
        args.extend(FOREIGN_NAMED_LIKE_SAMPLES.iter().chain(&["bystander"]).map(|s| s.to_string()));
        args.extend(["-n".into(), ns.into(), "-o".into(), "json".into()]);
        args
    };
    let foreign_before: Vec<String> = runs
        .iter()
        .map(|(ns, _)| {
            let args = foreign_args(&ns.0);
            kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>()).success().stdout
        })
        .collect();

    let until = Instant::now() + Duration::from_secs(seconds);
    let workers = 4u64;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let results: Vec<(BTreeMap<String, String>, usize)> = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&crate::support::cluster().kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let tasks: Vec<_> = runs
            .iter()
            .flat_map(|(ns, _)| (0..workers).map(move |w| (ns.0.clone(), w)))
            .map(|(ns, w)| tokio::spawn(churn(client.clone(), ns, seed, w, workers, until)))
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    eprintln!("churn: {} operations", results.iter().map(|(_, n)| n).sum::<usize>());

    for (i, (ns, controller)) in runs.iter().enumerate() {
        let mut expected = BTreeMap::new();
        for (live, _) in &results[i * workers as usize..(i + 1) * workers as usize] {
            expected.extend(live.clone());
        }
        // Garbage collection of deleted Samples' ConfigMaps can take its 30 s discovery resync.
        eventually(Duration::from_secs(180), &format!("{} converged after churn (seed {seed})", ns.0), || {
            check(&ns.0, &expected).map_err(|e| format!("{e}\n{}", tail(&controller.stderr(), 20)))
        });
        let args = foreign_args(&ns.0);
        let after = kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>()).success().stdout;
        assert_eq!(after, foreign_before[i], "{}: ConfigMaps samplectl does not own were modified", ns.0);
    }
}
