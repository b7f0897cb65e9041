//! Shard rings stay safe when a process is not unique, fast, and alive or dead: two processes under one
//! member name, a member restarted in place during a stream of updates, a member whose requests come
//! back long after it was given up on, a member killed before it could relabel a child its parent
//! no longer wants, and a child create that arrives after its parent was taken in, labelled for a
//! process given up on. The API server's audit log is the witness, processes told apart by the incarnation
//! in their User-Agent, and only accepted writes counted (`support::audit`).
//!
//! Each scenario runs once in the suite; `SAMPLECTL_FENCING_ROUNDS=N` runs each N times.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::sharding::{RENEW_DEADLINE, TIMINGS, create_samples, labels, update_samples};
use crate::support::audit::{self, incarnation_in, interleavings, last_lease_write};
use crate::support::hang::HangingProxy;
use crate::support::{Background, Namespace, converged, eventually, kubectl, kubectl_json, samplectl};

fn rounds() -> usize {
    std::env::var("SAMPLECTL_FENCING_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(1)
}

const PATIENCE: Duration = Duration::from_secs(90);

/// A member of the ring `samples` in `ns`, with the watch driver.
fn member(ns: &str, name: &str) -> Background {
    member_with(ns, name, &["--watch"])
}

/// A member of the ring `samples` in `ns`, with the further arguments `extra` (the poll driver without
/// `--watch`).
fn member_with(ns: &str, name: &str, extra: &[&str]) -> Background {
    let mut args = vec!["reconcile", "-n", ns, "--shard-ring", "samples", "--shard-member", name];
    args.extend(["--leader-election-namespace", ns]);
    args.extend(TIMINGS);
    args.extend(extra);
    Background::start(&args)
}

/// Every Sample labelled for one of `processes`, none being drained.
fn all_on(ns: &str, processes: &[&str]) -> Result<(), String> {
    let (members, draining) = labels(ns);
    let elsewhere: Vec<_> = members.iter().filter(|(_, m)| !processes.contains(&m.as_str())).collect();
    match (elsewhere.is_empty(), draining) {
        (true, 0) => Ok(()),
        _ => Err(format!("{} Samples elsewhere ({:?}...), {draining} draining", elsewhere.len(), elsewhere.first())),
    }
}

/// How many children a member's log says it created.
fn created(log: &str) -> usize {
    log.lines().filter(|l| l.contains("configmap created")).count()
}

fn logs(members: &[&Background]) -> String {
    members.iter().map(|m| m.stderr()).collect::<Vec<_>>().join("\n---\n")
}

/// Waits until `process`'s log names its incarnation (it holds its member's Lease).
pub fn joined(process: &Background, name: &str) -> String {
    eventually(Duration::from_secs(30), &format!("{name} holds its Lease"), || {
        let log = process.stderr();
        match log.contains(&format!("member {name} of the shard ring")) {
            true => Ok(incarnation_in(&log, name)),
            false => Err(log),
        }
    })
}

/// Asserts from the audit log that no process of the ring `samples` in `ns` wrote for a Sample after
/// another without the other letting go first, `stopped` having stopped once its Lease release went
/// through; returns the writes.
fn no_interleaving(ns: &str, stopped: &str, round: usize) -> Vec<audit::Write> {
    let writes = audit::writes(ns, "samples");
    let released = last_lease_write(&writes, "samples", stopped).expect("the stopped process's Lease writes");
    let found = interleavings(&writes, &HashMap::from([(stopped.to_owned(), released)]), RENEW_DEADLINE);
    assert!(
        found.is_empty(),
        "round {round}: {} interleaved writes, e.g. {:?}",
        found.len(),
        &found[..found.len().min(5)]
    );
    writes
}

#[test]
fn a_second_process_under_a_taken_member_name_stands_by_until_the_first_lets_go() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for round in 0..rounds() {
        let ns = Namespace::new("shard-twins");
        let first = member(&ns.0, "twin");
        let first_id = joined(&first, "twin");
        let second = member(&ns.0, "twin");
        let other = member(&ns.0, "other");
        let other_id = joined(&other, "other");
        let n = 60;
        let names = || (0..n).map(|i| format!("t{i:03}"));
        create_samples(&ns.0, names(), "first");
        eventually(PATIENCE, "every Sample Ready on the first twin or the other member", || {
            all_on(&ns.0, &[&first_id, &other_id])?;
            converged(&ns.0, |_| "first".into(), n).map_err(|e| format!("{e}\n{}", logs(&[&first, &second, &other])))
        });
        assert_eq!(created(&second.stderr()), 0, "round {round}: the second twin wrote:\n{}", second.stderr());
        assert!(second.stderr().contains("standing by"), "round {round}: {}", second.stderr());

        // The first lets go (SIGTERM): the second takes the name over, as a new incarnation.
        let (code, first_log) = first.stop("TERM", Duration::from_secs(30));
        assert_eq!(code, Some(0), "{first_log}");
        let second_id = joined(&second, "twin");
        assert_ne!(second_id, first_id);
        update_samples(&ns.0, names(), "second");
        eventually(PATIENCE, "every Sample Ready on the second twin or the other member", || {
            all_on(&ns.0, &[&second_id, &other_id])?;
            converged(&ns.0, |_| "second".into(), n).map_err(|e| format!("{e}\n{}", logs(&[&second, &other])))
        });
        let writes = no_interleaving(&ns.0, &first_id, round);
        assert!(writes.iter().any(|w| w.process == second_id && w.accepted()), "the second twin wrote once it held");
    }
}

#[test]
fn a_member_restarted_under_its_own_name_during_updates_never_writes_beside_another() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for round in 0..rounds() {
        let ns = Namespace::new("shard-restart");
        let stable = member(&ns.0, "stable");
        let restarting = member(&ns.0, "restarting");
        let (stable_id, old_id) = (joined(&stable, "stable"), joined(&restarting, "restarting"));
        let n = 60;
        let names = || (0..n).map(|i| format!("r{i:03}"));
        create_samples(&ns.0, names(), "v0");
        eventually(PATIENCE, "every Sample Ready", || converged(&ns.0, |_| "v0".into(), n));

        // A stream of updates, one Sample every 50 ms, while the member restarts in place.
        let running = Arc::new(AtomicBool::new(true));
        let stream = {
            let (ns, running) = (ns.0.clone(), running.clone());
            std::thread::spawn(move || {
                let mut last: BTreeMap<String, String> = BTreeMap::new();
                let mut k = 0;
                while running.load(Ordering::Relaxed) {
                    let name = format!("r{:03}", (k * 7) % n);
                    update_samples(&ns, std::iter::once(name.clone()), &format!("v{k}"));
                    last.insert(name, format!("v{k}"));
                    k += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                last
            })
        };
        std::thread::sleep(Duration::from_secs(2));
        let (code, old_log) = restarting.stop("TERM", Duration::from_secs(30));
        assert_eq!(code, Some(0), "{old_log}");
        let restarted = member(&ns.0, "restarting");
        let new_id = joined(&restarted, "restarting");
        assert_ne!(new_id, old_id, "a new process is a new incarnation");
        std::thread::sleep(Duration::from_secs(4));
        running.store(false, Ordering::Relaxed);
        let last = stream.join().unwrap();
        let expected = |name: &str| last.get(name).cloned().unwrap_or_else(|| "v0".into());
        eventually(PATIENCE, "every Sample Ready with its latest value, on the two members", || {
            all_on(&ns.0, &[&stable_id, &new_id])?;
            converged(&ns.0, expected, n).map_err(|e| format!("{e}\n{}", logs(&[&stable, &restarted])))
        });
        no_interleaving(&ns.0, &old_id, round);
    }
}

/// A Sample's generation and the generation its status says it observed.
fn generations(ns: &str, name: &str) -> (i64, i64) {
    let sample = kubectl_json(&["get", "sample", name, "-n", ns]);
    (
        sample["metadata"]["generation"].as_i64().unwrap_or(0),
        sample["status"]["observedGeneration"].as_i64().unwrap_or(-1),
    )
}

#[test]
fn a_write_held_past_the_lease_and_let_through_is_refused() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for round in 0..rounds() {
        let ns = Namespace::new("shard-late");
        let proxy = HangingProxy::start();
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["reconcile", "-n", &ns.0, "--watch", "--shard-ring", "samples", "--shard-member", "cut"];
        args.extend(["--leader-election-namespace", &ns.0]);
        args.extend(TIMINGS);
        let cut_off = proxy.samplectl(dir.path(), &args);
        let cut_id = joined(&cut_off, "cut");
        let names = || (0..12).map(|i| format!("l{i:02}"));
        create_samples(&ns.0, names(), "v1");
        eventually(PATIENCE, "every Sample Ready", || converged(&ns.0, |_| "v1".into(), 12));
        let direct = member(&ns.0, "direct");
        let direct_id = joined(&direct, "direct");
        // The ring gives about half to the new member; one left on the member behind the proxy is the
        // target. Shared out once the new member holds some and none is being drained: the coordinator
        // drains every Sample that moves in one pass, so none is about to move after that.
        let target = eventually(PATIENCE, "the Samples shared out", || {
            all_on(&ns.0, &[&cut_id, &direct_id])?;
            converged(&ns.0, |_| "v1".into(), 12)?;
            let (members, draining) = labels(&ns.0);
            if !members.values().any(|m| *m == direct_id) {
                return Err(format!("nothing moved yet: {members:?}"));
            }
            // A Sample still being drained is on its way out: its member writes nothing more for it.
            if draining > 0 {
                return Err(format!("{draining} still draining: {members:?}"));
            }
            members.iter().find(|(_, m)| **m == cut_id).map(|(s, _)| s.clone()).ok_or_else(|| format!("{members:?}"))
        });

        // The target's status write is held, and everything the member sends after it.
        proxy.hold_everything_after(&format!(
            "PATCH /apis/example.com/v1alpha1/namespaces/{}/samples/{target}/status",
            ns.0
        ));
        update_samples(&ns.0, std::iter::once(target.clone()), "v2");
        eventually(Duration::from_secs(30), "the status write held", || match proxy.holding() {
            true => Ok(()),
            false => Err(cut_off.stderr()),
        });
        // Cut off, the member steps down; the other one takes the target over and writes it.
        eventually(PATIENCE, "the target taken over and written", || {
            let (members, _) = labels(&ns.0);
            let (generation, observed) = generations(&ns.0, &target);
            match (members.get(&target) == Some(&direct_id), observed == generation) {
                (true, true) => Ok(()),
                _ => Err(format!("{:?} {generation} {observed}\n{}", members.get(&target), direct.stderr())),
            }
        });
        update_samples(&ns.0, std::iter::once(target.clone()), "v3");
        let expected = |name: &str| if name == target { "v3".into() } else { "v1".into() };
        eventually(PATIENCE, "the new owner's value", || converged(&ns.0, expected, 12));

        // Now what was held goes through.
        proxy.release_held();
        let late = eventually(Duration::from_secs(30), "the held status write reaches the API server", || {
            let writes = audit::writes(&ns.0, "samples");
            let taken_over = writes.iter().find(|w| w.process == direct_id && w.name == target && w.labels.is_none());
            let taken_over = taken_over.map(|w| w.received).ok_or("no write by the new owner")?;
            let late: Vec<_> = writes
                .into_iter()
                .filter(|w| w.process == cut_id && w.name == target && w.received > taken_over)
                .filter(|w| w.what == "patch samples/status")
                .collect();
            if late.is_empty() { Err("not yet".to_owned()) } else { Ok(late) }
        });
        let accepted: Vec<_> = late.iter().filter(|w| w.accepted()).collect();
        assert!(accepted.is_empty(), "round {round}: late writes the API server took: {accepted:#?}");
        eventually(PATIENCE, "the new owner's value kept", || converged(&ns.0, expected, 12));
        let (generation, observed) = generations(&ns.0, &target);
        assert_eq!(observed, generation);
        let (code, log) = cut_off.stop("TERM", Duration::from_secs(10));
        assert_ne!(code, Some(0), "a member cut off from its Lease exits 1:\n{log}");
    }
}

pub fn greeting(name: &str, message: &str) -> Value {
    json!({"apiVersion": "hooks.example.com/v1", "kind": "Greeting", "metadata": {"name": name}, "spec": {"message": message}})
}

/// Each Greeting's member and its ConfigMaps' names.
pub fn greetings(ns: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let list = kubectl_json(&["get", "greetings", "-n", ns]);
    let cms = kubectl_json(&["get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let mut by_owner: HashMap<String, Vec<String>> = HashMap::new();
    for cm in cms["items"].as_array().unwrap() {
        let owner = cm["metadata"]["ownerReferences"][0]["name"].as_str().unwrap_or_default().to_owned();
        by_owner.entry(owner).or_default().push(cm["metadata"]["name"].as_str().unwrap().to_owned());
    }
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let name = g["metadata"]["name"].as_str().unwrap().to_owned();
            let member = g["metadata"]["labels"]["shard.samplectl.io/greetings"].as_str().unwrap_or("-").to_owned();
            let mut children = by_owner.remove(&name).unwrap_or_default();
            children.sort();
            (name, (member, children))
        })
        .collect()
}

#[test]
fn a_child_renamed_after_its_member_was_killed_is_deleted_by_the_next_one() {
    let _cluster = crate::support::shared();
    crate::hooks::example_crds();
    for round in 0..rounds() {
        let ns = Namespace::new("shard-leak");
        let hook_member = |name: &str| {
            let mut args = vec!["reconcile", "-n", &ns.0, "--watch", "--gvr", "hooks.example.com/v1/greetings"];
            args.extend(["--child", "v1/configmaps", "--hook", "python3 tests/fixtures/named-child-hook.py"]);
            args.extend(["--shard-ring", "greetings", "--shard-member", name, "--leader-election-namespace", &ns.0]);
            args.extend(TIMINGS);
            Background::start(&args)
        };
        let doomed = hook_member("doomed");
        let doomed_id = joined(&doomed, "doomed");
        let names: Vec<String> = (0..6).map(|i| format!("g{i}")).collect();
        let items: Vec<Value> = names.iter().map(|n| greeting(n, "one")).collect();
        crate::support::create(&ns.0, &json!({"apiVersion": "v1", "kind": "List", "items": items}));
        let named = |message: &str, on: &str| {
            let all = greetings(&ns.0);
            match all.values().all(|(member, children)| member == on && children.len() == 1)
                && all.iter().all(|(name, (_, children))| children[0] == format!("{name}-{message}"))
            {
                true => Ok(()),
                false => Err(format!("{all:?}")),
            }
        };
        eventually(PATIENCE, "each Greeting's child made by the first member", || named("one", &doomed_id));
        let heir = hook_member("heir");
        let heir_id = joined(&heir, "heir");
        // Killed before anything moved to the new member: every child still carries the dead one's label.
        let (_, doomed_log) = doomed.stop("KILL", Duration::from_secs(5));
        for name in &names {
            kubectl(&["patch", "greeting", name, "-n", &ns.0, "--type=merge", "-p", r#"{"spec":{"message":"two"}}"#])
                .success();
        }
        eventually(PATIENCE, &format!("round {round}: each Greeting on the heir with only its renamed child"), || {
            named("two", &heir_id).map_err(|e| format!("{e}\n{}\n--- killed member:\n{doomed_log}", heir.stderr()))
        });
    }
}

/// A child of Sample `name` in `ns` as a process of `incarnation` would have written it, created now: a
/// create it sent before it froze, let through after the Sample was taken in by another. Its name.
fn create_late_child(ns: &str, name: &str, incarnation: &str) -> String {
    let (_, child) = only_child(ns, name).unwrap();
    let late_name = format!("{}-late", child["metadata"]["name"].as_str().unwrap());
    let mut late = child.clone();
    late["metadata"] = json!({
        "name": late_name,
        "labels": child["metadata"]["labels"],
        "ownerReferences": child["metadata"]["ownerReferences"],
    });
    late["metadata"]["labels"]["shard.samplectl.io/samples"] = json!(incarnation);
    crate::support::create(ns, &late);
    late_name
}

/// Whether the ConfigMap `name` in `ns` is gone.
fn configmap_gone(ns: &str, name: &str) -> bool {
    let left = kubectl(&["get", "configmap", name, "-n", ns, "--ignore-not-found", "-o", "name"]).success();
    left.stdout.trim().is_empty()
}

/// The one child of Sample `name` in `ns`, labelled with the Sample's uid: its uid, and the child whole.
fn only_child(ns: &str, name: &str) -> Result<(String, Value), String> {
    let sample = kubectl_json(&["get", "sample", name, "-n", ns]);
    let parent = sample["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
    let selector = format!("parent.shard.samplectl.io/uid={parent}");
    let children = kubectl_json(&["get", "configmaps", "-n", ns, "-l", &selector]);
    match children["items"].as_array().map(Vec::as_slice) {
        Some([child]) => Ok((child["metadata"]["uid"].as_str().unwrap_or_default().to_owned(), child.clone())),
        other => Err(format!("children of {name}: {other:?}")),
    }
}

#[test]
fn a_child_created_late_for_a_process_given_up_on_is_deleted_at_the_next_resync() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for round in 0..rounds() {
        for watch in [true, false] {
            let ns = Namespace::new("shard-stray");
            let m0 = match watch {
                true => member_with(&ns.0, "m0", &["--resync", "2s", "--watch"]),
                false => member_with(&ns.0, "m0", &["--resync", "2s"]),
            };
            joined(&m0, "m0");
            create_samples(&ns.0, ["s0".to_owned()].into_iter(), "one");
            let (child_uid, _) = eventually(PATIENCE, "s0's ConfigMap", || only_child(&ns.0, "s0"));
            // What a process frozen past its Lease sends when it goes on: a child of s0 labelled for
            // itself, arriving long after m0 took s0 in and looked for its children.
            let late = create_late_child(&ns.0, "s0", "m9_frozen1");
            eventually(
                Duration::from_secs(60),
                &format!("round {round}, watch {watch}: the late child deleted"),
                || match configmap_gone(&ns.0, &late) {
                    true => Ok(()),
                    false => Err(m0.stderr()),
                },
            );
            let (still, _) = only_child(&ns.0, "s0").unwrap();
            assert_eq!(still, child_uid, "round {round}, watch {watch}: s0's own child was left as it was");
            assert!(m0.stderr().contains("have children labelled for no live shard member"), "{}", m0.stderr());
        }
    }
}

#[test]
fn a_late_child_of_a_member_killed_and_forgotten_is_deleted_by_a_member_that_did_not_coordinate() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for round in 0..rounds() {
        let ns = Namespace::new("shard-forgot");
        let start = |name: &str| member_with(&ns.0, name, &["--resync", "2s", "--watch"]);
        let mut members: Vec<(String, Background)> =
            ["m0", "m1", "m2"].iter().map(|n| (n.to_string(), start(n))).collect();
        let ids: Vec<String> = members.iter().map(|(name, process)| joined(process, name)).collect();
        // Enough that each member gets some (12 left one with none in one run of ten).
        create_samples(&ns.0, (0..30).map(|i| format!("s{i:02}")), "one");
        eventually(PATIENCE, "the Samples shared by all three", || {
            let (on, draining) = labels(&ns.0);
            let used: std::collections::BTreeSet<&String> = on.values().collect();
            match used.len() == 3 && ids.iter().all(|id| used.contains(id)) && draining == 0 {
                true => Ok(()),
                false => Err(format!("{on:?}")),
            }
        });
        // Kill a member that does not coordinate: the one left that does not either must still see it go.
        let coordinator = kubectl_json(&["get", "lease", "samples", "-n", &ns.0])["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let others: Vec<usize> = (0..3).filter(|i| ids[*i] != coordinator).collect();
        let (killed, bystander) = (others[0], others[1]);
        let (_, process) = members.remove(killed);
        let (_, killed_log) = process.stop("KILL", Duration::from_secs(5));
        let survivors = [ids[bystander].as_str(), coordinator.as_str()];
        eventually(PATIENCE, "every Sample on the survivors", || all_on(&ns.0, &survivors));
        let lease = format!("samples.{}", ["m0", "m1", "m2"][killed]);
        eventually(Duration::from_secs(90), "the killed member's Lease deleted", || {
            let left = kubectl(&["get", "lease", &lease, "-n", &ns.0, "--ignore-not-found", "-o", "name"]).success();
            if left.stdout.trim().is_empty() { Ok(()) } else { Err(left.stdout) }
        });
        let (on, _) = labels(&ns.0);
        let sample = on.iter().find(|(_, member)| **member == ids[bystander]).map(|(name, _)| name.clone()).unwrap();
        eventually(PATIENCE, "its child relabelled", || {
            let (_, child) = only_child(&ns.0, &sample)?;
            match child["metadata"]["labels"]["shard.samplectl.io/samples"] == json!(ids[bystander]) {
                true => Ok(()),
                false => Err(format!("{child}")),
            }
        });
        let late = create_late_child(&ns.0, &sample, &ids[killed]);
        let bystander_name = ["m0", "m1", "m2"][bystander];
        let process = &members.iter().find(|(name, _)| name == bystander_name).unwrap().1;
        eventually(
            Duration::from_secs(60),
            &format!("round {round}: the late child deleted"),
            || match configmap_gone(&ns.0, &late) {
                true => Ok(()),
                false => Err(format!("{}\n--- killed member:\n{killed_log}", process.stderr())),
            },
        );
    }
}
