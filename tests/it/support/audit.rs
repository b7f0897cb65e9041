//! The API server's audit log as the witness of who wrote what for which parent, and when: the local
//! cluster logs every write to Samples, ConfigMaps and Leases (`scripts/local-cluster`). Shard members
//! name their incarnation in their User-Agent (`shard-member/<ring>/<member>_<id>`), so two processes
//! under one member name are told apart; only the writes the API server accepted count.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::cluster;

/// One write from the audit log.
#[derive(Debug, Clone)]
pub struct Write {
    /// The process: its incarnation (the member's name alone from a samplectl that had none).
    pub process: String,
    /// The object written (a Sample's ConfigMap bears its name; a Lease is `<ring>.<member>`).
    pub name: String,
    pub what: String,
    pub received: Timestamp,
    pub done: Timestamp,
    /// The API server's answer.
    pub code: u16,
    /// A write of a parent's sharding labels: the coordinator's, or a member letting go of the parent.
    pub labels: Option<Labels>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    Coordinator,
    Release,
}

impl Write {
    pub fn accepted(&self) -> bool {
        self.code < 300
    }

    fn is_lease(&self) -> bool {
        self.what.ends_with(" leases")
    }
}

/// Every write in `ns` by a member of `ring`, from the audit log, in the order the API server received them.
pub fn writes(ns: &str, ring: &str) -> Vec<Write> {
    writes_in(ring, &[ns], "samples")
}

/// Every write in these namespaces (`""` for cluster-scoped objects) by a member of `ring`, with the
/// parents' own label writes (of the resource `parents`) told apart, in the order the API server received
/// them.
pub fn writes_in(ring: &str, namespaces: &[&str], parents: &str) -> Vec<Write> {
    let dir = cluster().kubeconfig.parent().unwrap().to_owned();
    // audit.log, and the one backup the API server keeps when it rotates it (audit-<time>.log).
    let mut text = String::new();
    for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.starts_with("audit") && file.ends_with(".log") {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    assert!(!text.is_empty(), "the local cluster keeps no audit log: restart it (scripts/local-cluster down; up)");
    let marker = format!("shard-member/{ring}/");
    let mut writes: Vec<Write> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| namespaces.contains(&e["objectRef"]["namespace"].as_str().unwrap_or_default()))
        .filter_map(|e| {
            let agent = e["userAgent"].as_str()?;
            let process = agent.split(&marker).nth(1)?.split(' ').next()?.to_owned();
            let (resource, sub) = (e["objectRef"]["resource"].as_str()?, e["objectRef"]["subresource"].as_str());
            let verb = e["verb"].as_str()?;
            let by_coordinator = e["requestURI"].as_str()?.contains("fieldManager=samplectl-shard-coordinator");
            let labels = (resource == parents && sub.is_none() && verb == "patch").then_some(match by_coordinator {
                true => Labels::Coordinator,
                false => Labels::Release,
            });
            Some(Write {
                process,
                name: e["objectRef"]["name"].as_str()?.to_owned(),
                what: format!("{verb} {resource}{}", sub.map(|s| format!("/{s}")).unwrap_or_default()),
                received: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                done: e["stageTimestamp"].as_str()?.parse().ok()?,
                code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                labels,
            })
        })
        .collect();
    writes.sort_by_key(|w| w.received);
    writes
}

/// When `process` last wrote its member's Lease in `ring`, accepted: for a process that stopped on
/// SIGTERM, its release of the Lease, the last thing it does.
pub fn last_lease_write(writes: &[Write], ring: &str, process: &str) -> Option<Timestamp> {
    writes
        .iter()
        .filter(|w| w.is_lease() && w.accepted() && w.process == process)
        .filter(|w| w.name.strip_prefix(ring).is_some_and(|rest| rest.starts_with('.')))
        .map(|w| w.done)
        .max()
}

/// Per process, when its own fence had surely closed: `renew_deadline` after the API server received the
/// last renewal of its member's Lease that it accepted. (The process counts its deadline from when it sent
/// that renewal, which is earlier.) A member that lost its Lease, as members of a loaded test cluster do
/// when renewals time out, stops itself at that point and is let go of as surely as a killed one.
fn fenced(writes: &[Write], renew_deadline: Duration) -> HashMap<&str, Timestamp> {
    let deadline = jiff::SignedDuration::try_from(renew_deadline).unwrap();
    let mut fenced: HashMap<&str, Timestamp> = HashMap::new();
    for w in writes.iter().filter(|w| w.is_lease() && w.accepted()) {
        let member = w.process.split_once('_').map_or(w.process.as_str(), |(member, _)| member);
        if w.name.rsplit_once('.').is_some_and(|(_, leased)| leased == member) {
            let closed = w.received + deadline;
            fenced.entry(&w.process).and_modify(|at| *at = (*at).max(closed)).or_insert(closed);
        }
    }
    fenced
}

/// Per parent, each place where a process wrote after another one had, unless the other had let go of it
/// first: its release of the parent (its own accepted write of the sharding labels), its stop
/// (`stopped`: per process, when it surely wrote no more: its Lease released, or SIGKILL sent), or its
/// own fence's closing (`renew_deadline` after its last renewal, see `fenced`) came after its last write
/// and before the next process's first. Only writes the API server accepted count, so a late write it
/// refused is no interleaving, and one it took is.
pub fn interleavings(writes: &[Write], stopped: &HashMap<String, Timestamp>, renew_deadline: Duration) -> Vec<String> {
    let fenced = fenced(writes, renew_deadline);
    let mut by_parent: HashMap<&str, Vec<&Write>> = HashMap::new();
    for w in writes.iter().filter(|w| w.accepted() && !w.is_lease()) {
        by_parent.entry(&w.name).or_default().push(w);
    }
    let mut found = Vec::new();
    for (parent, ws) in by_parent {
        // The last process to write for this parent, its last write, and when it let go since.
        let mut last: Option<(&Write, Option<Timestamp>)> = None;
        for w in ws {
            match (w.labels, &mut last) {
                (Some(Labels::Release), Some((prev, released))) if prev.process == w.process => {
                    *released = Some(w.done)
                }
                (Some(_), _) => {}
                (None, Some((prev, released))) if prev.process != w.process => {
                    let let_go = [*released, stopped.get(&prev.process).copied(), fenced.get(&*prev.process).copied()]
                        .into_iter()
                        .flatten()
                        .min();
                    if !(prev.done <= w.received && let_go.is_some_and(|at| at <= w.received)) {
                        found.push(format!(
                            "{parent}: {} by {} (done {}) then {} by {} (received {})",
                            prev.what, prev.process, prev.done, w.what, w.process, w.received
                        ));
                    }
                    last = Some((w, None));
                }
                (None, _) => last = Some((w, None)),
            }
        }
    }
    found.sort();
    found
}

/// The incarnation a member process names in its log ("member m1 of the shard ring r as m1_k3x9qa"), or
/// the member's name when it names none.
pub fn incarnation_in(log: &str, member: &str) -> String {
    log.lines()
        .find_map(|line| {
            let rest = line.split(&format!("member {member} of the shard ring ")).nth(1)?;
            Some(rest.split(" as ").nth(1)?.split_whitespace().next()?.to_owned())
        })
        .unwrap_or_else(|| member.to_owned())
}
