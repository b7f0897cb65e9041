//! samplectl as its users deploy it: the image, `kubectl apply -k manifests/` unchanged, and pods on a
//! real node (kubelet, containerd, runc, kube-proxy; `scripts/local-cluster up --node`). The kubelet's
//! probes, the API server reached at the `kubernetes` Service, the Lease handed over when a pod is
//! deleted, and /metrics scraped through its Service with a ServiceAccount's token. kubectl and the API
//! server's audit log are the witnesses.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::eventually;
use crate::support::node::{Node, node};

const NS: &str = "samplectl-system";
const ROLLOUT: Duration = Duration::from_secs(180);

/// The shipped manifests applied as a user applies them, and removed again when the test ends.
struct Installed<'a> {
    node: &'a Node,
    kustomization: &'static str,
}

impl<'a> Installed<'a> {
    fn apply(node: &'a Node) -> Self {
        Self::apply_from(node, "manifests/")
    }

    fn apply_from(node: &'a Node, kustomization: &'static str) -> Self {
        node.kubectl(&["apply", "-k", kustomization]).success();
        node.kubectl(&["-n", NS, "rollout", "status", "deployment/samplectl", "--timeout=180s"]).success();
        Installed { node, kustomization }
    }
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        let delete = ["delete", "-k", self.kustomization, "--ignore-not-found", "--wait=true", "--timeout=120s"];
        let _ = self.node.kubectl(&delete);
    }
}

/// The pods of the Deployment by name, each with whether the kubelet finds it Ready.
fn pods(node: &Node) -> BTreeMap<String, bool> {
    let list = node.json(&["-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=samplectl"]);
    let mut pods = BTreeMap::new();
    for pod in list["items"].as_array().unwrap() {
        if pod["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let ready = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        pods.insert(pod["metadata"]["name"].as_str().unwrap().to_owned(), ready);
    }
    pods
}

/// The pod that holds the Lease (its identity is `<pod>_<incarnation>`), and the incarnation.
fn leader(node: &Node) -> Option<(String, String)> {
    let lease = node.kubectl(&["-n", NS, "get", "lease", "samplectl-leader", "-o", "jsonpath={.spec.holderIdentity}"]);
    let holder = lease.stdout.trim();
    let (pod, incarnation) = holder.rsplit_once('_')?;
    Some((pod.to_owned(), incarnation.to_owned()))
}

/// What a pod's port answers, through the API server's proxy (the API server reaches pods' addresses).
fn through_proxy(node: &Node, pod: &str, port: u16, path: &str) -> String {
    node.kubectl(&["get", "--raw", &format!("/api/v1/namespaces/{NS}/pods/{pod}:{port}/proxy{path}")]).stdout
}

/// `count` Samples from `from` in `ns`, each with its own testString.
fn samples(node: &Node, ns: &str, from: usize, count: usize) {
    let mut yaml = String::new();
    for i in from..from + count {
        yaml.push_str(&format!(
            "---\napiVersion: example.com/v1alpha1\nkind: Sample\nmetadata: {{name: s{i}, namespace: {ns}}}\ntestString: v{i}\n"
        ));
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), yaml).unwrap();
    node.kubectl(&["apply", "-f", file.path().to_str().unwrap()]).success();
}

/// Each Sample's ConfigMap holds its testString.
fn all_synced(node: &Node, ns: &str, count: usize) -> Result<(), String> {
    let list = node.json(&["-n", ns, "get", "configmaps"]);
    let data: BTreeMap<String, Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cm| (cm["metadata"]["name"].as_str().unwrap().to_owned(), cm["data"].clone()))
        .collect();
    let missing: Vec<usize> = (0..count)
        .filter(|i| !data.values().any(|d| d.as_object().is_some_and(|d| d.values().any(|v| v == &format!("v{i}")))))
        .collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(format!("no ConfigMap for Samples {missing:?}")),
    }
}

/// The processes whose writes to ConfigMaps in `ns` the API server accepted, in the order it received
/// them, one entry per run of writes by one process.
fn writers(node: &Node, ns: &str) -> Vec<String> {
    let mut writes: Vec<(String, String)> = node
        .audit()
        .into_iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "configmaps"
                && e["objectRef"]["namespace"] == ns
                && e["responseStatus"]["code"].as_u64().is_some_and(|c| c < 300)
                && ["create", "update", "patch", "delete"].contains(&e["verb"].as_str().unwrap_or(""))
        })
        .filter_map(|e| {
            let agent = e["userAgent"].as_str()?;
            let process = agent.split_whitespace().find(|w| w.starts_with("process/"))?.to_owned();
            Some((e["requestReceivedTimestamp"].as_str()?.to_owned(), process))
        })
        .collect();
    writes.sort();
    let mut runs: Vec<String> = Vec::new();
    for (_, process) in writes {
        if runs.last() != Some(&process) {
            runs.push(process);
        }
    }
    runs
}

#[test]
fn the_shipped_manifests_run_a_leader_and_a_standby_that_takes_over_when_its_pod_is_deleted() {
    let node = node();
    let installed = Installed::apply(&node);
    let node = installed.node;
    // Both replicas Ready as their probes say, one leading; the standby's /readyz says it stands by.
    eventually(ROLLOUT, "two Ready pods and a leader", || {
        let pods = pods(node);
        match (pods.len(), pods.values().all(|r| *r), leader(node)) {
            (2, true, Some((pod, _))) if pods.contains_key(&pod) => Ok(()),
            other => Err(format!("{other:?} {pods:?}")),
        }
    });
    let (first, first_incarnation) = leader(node).unwrap();
    let standby = pods(node).into_keys().find(|p| *p != first).unwrap();
    assert_eq!(through_proxy(node, &first, 8081, "/readyz"), "ok");
    assert_eq!(through_proxy(node, &standby, 8081, "/readyz"), "ok: standing by for the lease");
    assert_eq!(through_proxy(node, &standby, 8081, "/healthz"), "ok");

    let ns = format!("node-ha-{}", std::process::id());
    node.kubectl(&["create", "namespace", &ns]).success();
    samples(node, &ns, 0, 20);
    eventually(ROLLOUT, "the first Samples synced", || all_synced(node, &ns, 20));

    // The leader's pod deleted while Samples change: another replica leads within the lease duration
    // and the retry period (15 s + 2 s, the manifest's). The leader gives the Lease up on SIGTERM, so
    // the standby, asking every retry period, and the pod made to replace the deleted one, asking as it
    // starts, race for it: either may win, one only.
    node.kubectl(&["-n", NS, "delete", "pod", &first, "--wait=false"]).success();
    let deleted = Instant::now();
    samples(node, &ns, 20, 20);
    let mut took = None;
    eventually(Duration::from_secs(60), "a new leader", || match leader(node) {
        Some((pod, incarnation)) if incarnation != first_incarnation => {
            took.get_or_insert((deleted.elapsed(), pod));
            Ok(())
        }
        other => Err(format!("{other:?}")),
    });
    let (took, new) = took.unwrap();
    eprintln!("the Lease moved from {first} to {new} {took:?} after the pod's deletion");
    assert_ne!(new, first, "the deleted pod leads again");
    assert!(took <= Duration::from_secs(17), "took {took:?}, more than the lease duration and the retry period");
    samples(node, &ns, 40, 10);
    eventually(ROLLOUT, "every Sample synced", || all_synced(node, &ns, 50));
    // No two writers: the old leader's writes all came before the new one's first.
    let runs = writers(node, &ns);
    assert!(runs.len() <= 2 && runs.first().is_some_and(|p| p.ends_with(&first_incarnation)), "{runs:?}");
    // The Deployment made a new standby, Ready as its probe says.
    eventually(ROLLOUT, "two Ready pods again", || {
        let pods = pods(node);
        match pods.len() == 2 && pods.values().all(|r| *r) && !pods.contains_key(&first) {
            true => Ok(()),
            false => Err(format!("{pods:?}")),
        }
    });
    node.kubectl(&["delete", "namespace", &ns, "--wait=false"]).success();
}

#[test]
fn metrics_are_scraped_through_their_service_with_a_token_allowed_to_and_refused_without() {
    let node = node();
    let installed = Installed::apply(&node);
    let node = installed.node;
    let ns = format!("node-scrape-{}", std::process::id());
    node.kubectl(&["create", "namespace", &ns]).success();
    for sa in ["scraper", "stranger"] {
        node.kubectl(&["-n", &ns, "create", "serviceaccount", sa]).success();
    }
    node.kubectl(&[
        "create",
        "clusterrolebinding",
        &format!("{ns}-scraper"),
        "--clusterrole=samplectl-metrics-reader",
        &format!("--serviceaccount={ns}:scraper"),
    ])
    .success();
    let token = |sa: &str| node.kubectl(&["-n", &ns, "create", "token", sa]).success().stdout.trim().to_owned();
    let service = node.json(&["-n", NS, "get", "service", "samplectl-metrics"]);
    let ip = service["spec"]["clusterIP"].as_str().unwrap().to_owned();
    // From this machine to the Service's address, as a scraper in the cluster reaches it: kube-proxy's
    // rules pick a pod.
    let scrape = |token: Option<&str>| {
        let mut args = vec!["-sk".to_owned(), "-o".into(), "-".into(), "-w".into(), "\n%{http_code}".into()];
        if let Some(token) = token {
            args.extend(["-H".into(), format!("Authorization: Bearer {token}")]);
        }
        args.push(format!("https://{ip}:8443/metrics"));
        let out = std::process::Command::new("curl").args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "000"));
        (code.to_owned(), body.to_owned())
    };
    let allowed = token("scraper");
    eventually(ROLLOUT, "metrics with the reader's token", || match scrape(Some(&allowed)) {
        (code, body) if code == "200" && body.contains("samplectl_") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert_eq!(scrape(None).0, "401", "no token");
    assert_eq!(scrape(Some(&token("stranger"))).0, "403", "a token without samplectl-metrics-reader");
    node.kubectl(&["delete", "clusterrolebinding", &format!("{ns}-scraper")]).success();
    node.kubectl(&["delete", "namespace", &ns, "--wait=false"]).success();
}

/// An eviction of `pod`, as `kubectl drain` asks for it: the API server's answer code.
fn evict(node: &Node, pod: &str) -> (i32, String) {
    let eviction = serde_json::json!({
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS}
    });
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), eviction.to_string()).unwrap();
    let path = format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction");
    let run = node.kubectl(&["create", "--raw", &path, "-f", file.path().to_str().unwrap()]);
    (run.code, run.stderr)
}

#[test]
fn an_eviction_respects_the_disruption_budget() {
    let node = node();
    let installed = Installed::apply(&node);
    let node = installed.node;
    let allowed =
        || node.kubectl(&["-n", NS, "get", "pdb", "samplectl", "-o", "jsonpath={.status.disruptionsAllowed}"]).stdout;
    eventually(ROLLOUT, "one disruption allowed", || match (allowed().as_str(), pods(node)) {
        ("1", pods) if pods.len() == 2 && pods.values().all(|r| *r) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let names: Vec<String> = pods(node).into_keys().collect();
    // The first replica may go; the second may not while the first's replacement is not Ready yet.
    let (code, said) = evict(node, &names[0]);
    assert_eq!(code, 0, "the first eviction: {said}");
    let (code, said) = evict(node, &names[1]);
    assert_ne!(code, 0, "the second eviction was let through");
    assert!(said.contains("disruption budget"), "{said}");
    // Once the replacement is Ready, the budget lets the second go too.
    eventually(ROLLOUT, "the second eviction allowed", || match evict(node, &names[1]) {
        (0, _) => Ok(()),
        (_, said) => Err(said),
    });
    eventually(ROLLOUT, "two Ready replicas again", || {
        let pods = pods(node);
        match pods.len() == 2 && pods.values().all(|r| *r) && names.iter().all(|n| !pods.contains_key(n)) {
            true => Ok(()),
            false => Err(format!("{pods:?}")),
        }
    });
}

#[test]
fn a_rolling_restart_during_a_stream_of_changes_loses_nothing_and_never_has_two_writers() {
    let node = node();
    let installed = Installed::apply(&node);
    let node = installed.node;
    eventually(ROLLOUT, "a leader", || leader(node).map(drop).ok_or_else(|| "no leader".to_owned()));
    let ns = format!("node-restart-{}", std::process::id());
    node.kubectl(&["create", "namespace", &ns]).success();
    node.kubectl(&["-n", NS, "rollout", "restart", "deployment/samplectl"]).success();
    // Samples keep coming while the rollout replaces both pods, one at a time.
    let mut made = 0;
    let started = Instant::now();
    loop {
        samples(node, &ns, made, 5);
        made += 5;
        let done = node.kubectl(&["-n", NS, "rollout", "status", "deployment/samplectl", "--timeout=1s"]).code == 0;
        if (done && made >= 30) || started.elapsed() > ROLLOUT {
            break;
        }
    }
    node.kubectl(&["-n", NS, "rollout", "status", "deployment/samplectl", "--timeout=180s"]).success();
    samples(node, &ns, made, 5);
    made += 5;
    eventually(ROLLOUT, "every Sample synced", || all_synced(node, &ns, made));
    // Writers came one after another: no incarnation wrote again after another had.
    let runs = writers(node, &ns);
    eprintln!("{made} Samples; ConfigMaps written by {runs:?}, in turn");
    let distinct: std::collections::BTreeSet<&String> = runs.iter().collect();
    assert_eq!(distinct.len(), runs.len(), "an incarnation wrote between another's writes: {runs:?}");
    node.kubectl(&["delete", "namespace", &ns, "--wait=false"]).success();
}

/// Each Sample in `ns` by the member its shard label names (`<pod>_<incarnation>`: the pod's name).
fn shares(node: &Node, ns: &str) -> BTreeMap<String, String> {
    let list = node.json(&["-n", ns, "get", "samples"]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let label = s["metadata"]["labels"]["shard.samplectl.io/samples"].as_str().unwrap_or("");
            let member = label.rsplit_once('_').map_or(label, |(pod, _)| pod).to_owned();
            (s["metadata"]["name"].as_str().unwrap().to_owned(), member)
        })
        .collect()
}

#[test]
fn the_sharded_manifests_run_three_members_and_serve_a_deleted_members_samples_again() {
    let node = node();
    let installed = Installed::apply_from(&node, "manifests/sharded/");
    let node = installed.node;
    let ns = format!("node-shards-{}", std::process::id());
    node.kubectl(&["create", "namespace", &ns]).success();
    samples(node, &ns, 0, 30);
    eventually(ROLLOUT, "every Sample synced", || all_synced(node, &ns, 30));
    // Every Sample shared out to one of the three pods, each a member.
    let members: std::collections::BTreeSet<String> = pods(node).into_keys().collect();
    assert_eq!(members.len(), 3, "{members:?}");
    eventually(ROLLOUT, "each Sample labelled with a member", || {
        let shares = shares(node, &ns);
        match shares.values().all(|m| members.contains(m)) {
            true => Ok(()),
            false => Err(format!("{shares:?}")),
        }
    });
    let shares = shares(node, &ns);
    let (gone, _) = shares.iter().next().map(|(_, m)| (m.clone(), ())).unwrap();
    let its: Vec<String> = shares.iter().filter(|(_, m)| **m == gone).map(|(s, _)| s.clone()).collect();
    eprintln!("deleting member {gone}, which serves {} of the 30 Samples", its.len());
    // Gone for good (the process has exited): its Samples are handed to the members still there (the
    // pod made to replace it among them, under a name of its own), and served by them.
    node.kubectl(&["-n", NS, "delete", "pod", &gone, "--wait=true", "--timeout=120s"]).success();
    eventually(ROLLOUT, "the deleted member's Samples handed over", || {
        let now = self::shares(node, &ns);
        let left: Vec<&String> = its.iter().filter(|s| now[*s] == gone || now[*s].is_empty()).collect();
        match left.is_empty() {
            true => Ok(()),
            false => Err(format!("not handed over yet: {left:?}")),
        }
    });
    for sample in &its {
        let patch = format!(r#"{{"testString":"again-{sample}"}}"#);
        node.kubectl(&["-n", &ns, "patch", "sample", sample, "--type=merge", "-p", &patch]).success();
    }
    eventually(ROLLOUT, "the deleted member's Samples served again", || {
        let list = node.json(&["-n", &ns, "get", "configmaps"]);
        let values: Vec<String> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|cm| {
                cm["data"].as_object().into_iter().flatten().map(|(_, v)| v.as_str().unwrap_or("").to_owned())
            })
            .collect();
        let waiting: Vec<&String> = its.iter().filter(|s| !values.contains(&format!("again-{s}"))).collect();
        match waiting.is_empty() {
            true => Ok(()),
            false => Err(format!("not yet: {waiting:?}")),
        }
    });
    node.kubectl(&["delete", "namespace", &ns, "--wait=false"]).success();
}

/// The processes on this machine that run in `pod`'s samplectl container (its init and samplectl
/// proper), found by the POD_NAME the manifest gives them.
fn processes_of(pod: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let ours = environ.split(|b| *b == 0).any(|v| v == format!("POD_NAME={pod}").as_bytes());
        if ours && String::from_utf8_lossy(&cmdline).contains("reconcile") {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_frozen_leader_is_restarted_by_its_liveness_probe_and_its_lease_not_used_again() {
    let node = node();
    let installed = Installed::apply(&node);
    let node = installed.node;
    eventually(ROLLOUT, "two Ready pods and a leader", || {
        match (pods(node).values().filter(|r| **r).count(), leader(node)) {
            (2, Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let (frozen, incarnation) = leader(node).unwrap();
    let ns = format!("node-frozen-{}", std::process::id());
    node.kubectl(&["create", "namespace", &ns]).success();
    samples(node, &ns, 0, 10);
    eventually(ROLLOUT, "the first Samples synced", || all_synced(node, &ns, 10));
    // SIGSTOP to the container's processes: alive to the kernel, silent to its probes and its Lease.
    let pids = processes_of(&frozen);
    assert!(!pids.is_empty(), "no process of {frozen} found");
    for pid in &pids {
        assert!(std::process::Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success());
    }
    let stopped = Instant::now();
    samples(node, &ns, 10, 10);
    // The standby leads once the frozen leader's Lease has run out (15 s) and it next asks (2 s).
    let mut took = None;
    eventually(Duration::from_secs(90), "another leader", || match leader(node) {
        Some((pod, other)) if other != incarnation => {
            took.get_or_insert((stopped.elapsed(), pod));
            Ok(())
        }
        other => Err(format!("{other:?}")),
    });
    let (took, new) = took.unwrap();
    eprintln!("{new} led {took:?} after {frozen} was frozen");
    assert_ne!(new, frozen);
    eventually(ROLLOUT, "every Sample synced", || all_synced(node, &ns, 20));
    // The kubelet's liveness probe fails, and the container is killed and started again.
    eventually(Duration::from_secs(180), "the frozen container restarted", || {
        let pod = node.json(&["-n", NS, "get", "pod", &frozen]);
        let status = &pod["status"]["containerStatuses"][0];
        match (status["restartCount"].as_u64(), status["ready"].as_bool()) {
            (Some(n), Some(true)) if n >= 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let events = node.json(&["-n", NS, "get", "events", "--field-selector", &format!("involvedObject.name={frozen}")]);
    let said: Vec<&str> = events["items"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str()).collect();
    assert!(said.iter().any(|m| m.starts_with("Liveness probe failed")), "{said:?}");
    assert!(said.iter().any(|m| m.contains("failed liveness probe, will be restarted")), "{said:?}");
    eprintln!("restarted {:?} after it was frozen", stopped.elapsed());
    // The new container is a new incarnation, standing by: the frozen one's Lease is not taken up again.
    let (now, holder) = leader(node).unwrap();
    assert!(now != frozen || holder != incarnation, "the frozen incarnation leads");
    let restarted = through_proxy(node, &frozen, 8081, "/readyz");
    assert_eq!(restarted, "ok: standing by for the lease");
    // And it never wrote after the new leader began.
    let runs = writers(node, &ns);
    let distinct: std::collections::BTreeSet<&String> = runs.iter().collect();
    assert_eq!(distinct.len(), runs.len(), "{runs:?}");
    node.kubectl(&["delete", "namespace", &ns, "--wait=false"]).success();
}
