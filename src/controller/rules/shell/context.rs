//! Binding contexts: what a hook run is told, in shell-operator's shapes. A context waits in a queue as
//! a `Pending` (which binding, what happened) and is rendered when its run starts, with the snapshots
//! as they are then, as shell-operator renders them. Also the rules of a queue that are pure: the
//! combining of runs waiting behind each other, and the delay before a failed run is tried again.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::config::WatchEvent;

/// One binding context, as queued.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub binding: String,
    pub what: What,
    pub group: Option<String>,
    /// The kubernetes bindings whose snapshots it carries (its own and its group's).
    pub snapshots: Vec<String>,
    /// A v0 hook's context: `binding` and v0's resource fields only.
    pub v0: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum What {
    OnStartup,
    Schedule,
    /// A kubernetes binding's first full list; its objects are the snapshot when the run starts.
    Synchronization,
    /// One change of one object: its JSON (`None` unless objects are kept) and its filter result.
    Event {
        event: WatchEvent,
        object: Option<Value>,
        filter_result: Option<Value>,
        key: ObjectKey,
    },
    /// An admission review (`request` is the API server's `AdmissionRequest`, as sent).
    Admission {
        mutating: bool,
        request: Value,
    },
    /// One step of a conversion: `from` and `to` as the binding declares them; `request` is the
    /// `ConversionRequest`, its objects as the previous step left them.
    Conversion {
        from: String,
        to: String,
        request: Value,
    },
}

/// Where an object is, for v0's contexts and for sorting snapshots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

/// One object of a snapshot, as a context carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotItem {
    pub key: ObjectKey,
    pub object: Option<Value>,
    /// Present when the binding has a jqFilter.
    pub filter_result: Option<Value>,
}

impl SnapshotItem {
    fn to_json(&self) -> Value {
        let mut item = Map::new();
        if let Some(object) = &self.object {
            item.insert("object".into(), object.clone());
        }
        if let Some(result) = &self.filter_result {
            item.insert("filterResult".into(), result.clone());
        }
        Value::Object(item)
    }
}

/// Sorts a snapshot as shell-operator does: by namespace then name, or by `namespace/kind/name` when
/// objects are not kept (the same order for one kind).
pub fn sort(items: &mut [SnapshotItem]) {
    let id = |item: &SnapshotItem| match item.object {
        Some(_) => (item.key.namespace.clone(), item.key.name.clone()),
        None => (format!("{}/{}/{}", item.key.namespace, item.key.kind, item.key.name), String::new()),
    };
    items.sort_by_cached_key(id);
}

impl Pending {
    /// The context as the hook reads it; `snapshot` gives a kubernetes binding's objects at this moment.
    pub fn render(&self, snapshot: &mut dyn FnMut(&str) -> Vec<SnapshotItem>) -> Value {
        let mut context = Map::new();
        context.insert("binding".into(), json!(self.binding));
        if self.v0 {
            if let What::Event { event, key, .. } = &self.what {
                let word = match event {
                    WatchEvent::Added => "add",
                    WatchEvent::Modified => "update",
                    WatchEvent::Deleted => "delete",
                };
                context.insert("resourceEvent".into(), json!(word));
                context.insert("resourceNamespace".into(), json!(key.namespace));
                context.insert("resourceKind".into(), json!(key.kind));
                context.insert("resourceName".into(), json!(key.name));
            }
            return Value::Object(context);
        }
        // A webhook's context keeps its own type in a group, as shell-operator's does.
        if let Some(group) = &self.group
            && !matches!(self.what, What::OnStartup | What::Admission { .. } | What::Conversion { .. })
        {
            context.insert("type".into(), json!("Group"));
            context.insert("groupName".into(), json!(group));
            // A group of schedules alone has no snapshots, and no `snapshots` key.
            if !self.snapshots.is_empty() {
                context.insert("snapshots".into(), self.snapshots_json(snapshot));
            }
            return Value::Object(context);
        }
        match &self.what {
            What::OnStartup => return Value::Object(context),
            What::Schedule => {
                context.insert("type".into(), json!("Schedule"));
            }
            What::Synchronization => {
                context.insert("type".into(), json!("Synchronization"));
                let objects: Vec<Value> = snapshot(&self.binding).iter().map(SnapshotItem::to_json).collect();
                context.insert("objects".into(), Value::Array(objects));
            }
            What::Event { event, object, filter_result, .. } => {
                context.insert("type".into(), json!("Event"));
                context.insert("watchEvent".into(), json!(event.as_str()));
                if let Some(object) = object {
                    context.insert("object".into(), object.clone());
                }
                if let Some(result) = filter_result {
                    context.insert("filterResult".into(), result.clone());
                }
            }
            What::Admission { mutating, request } => {
                context.insert("type".into(), json!(if *mutating { "Mutating" } else { "Validating" }));
                context.insert("review".into(), json!({ "request": request }));
            }
            What::Conversion { from, to, request } => {
                context.insert("type".into(), json!("Conversion"));
                context.insert("fromVersion".into(), json!(from));
                context.insert("toVersion".into(), json!(to));
                context.insert("review".into(), json!({ "request": request }));
            }
        }
        if !self.snapshots.is_empty() {
            context.insert("snapshots".into(), self.snapshots_json(snapshot));
        }
        Value::Object(context)
    }

    fn snapshots_json(&self, snapshot: &mut dyn FnMut(&str) -> Vec<SnapshotItem>) -> Value {
        let mut all = Map::new();
        for name in &self.snapshots {
            let items: Vec<Value> = snapshot(name).iter().map(SnapshotItem::to_json).collect();
            all.insert(name.clone(), Value::Array(items));
        }
        Value::Object(all)
    }
}

/// The contexts of runs combined into one, in queue order, each run of same-group contexts cut to its
/// last (a group's context carries only snapshots, so the last says everything the others did).
pub fn compact(contexts: Vec<Pending>) -> Vec<Pending> {
    let mut kept: Vec<Pending> = Vec::with_capacity(contexts.len());
    let mut contexts = contexts.into_iter().peekable();
    while let Some(context) = contexts.next() {
        let same_group_next = match (&context.group, contexts.peek()) {
            (Some(group), Some(next)) => next.group.as_ref() == Some(group),
            _ => false,
        };
        if !same_group_next {
            kept.push(context);
        }
    }
    kept
}

/// The contexts of many runs merged into one (a long queue compacted): the ungrouped ones in order,
/// then the last of each group, in the order the groups first appeared.
pub fn compact_all(contexts: Vec<Pending>) -> Vec<Pending> {
    let mut ungrouped = Vec::new();
    let mut groups: Vec<(String, Pending)> = Vec::new();
    for context in contexts {
        match context.group.clone() {
            None => ungrouped.push(context),
            Some(group) => match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, last)) => *last = context,
                None => groups.push((group, context)),
            },
        }
    }
    ungrouped.extend(groups.into_iter().map(|(_, c)| c));
    ungrouped
}

/// Whether a queued run may take in the runs behind it: every one but an ungrouped Synchronization (so
/// each kubernetes binding's first list is a run of its own) and a v0 hook's.
pub fn combinable(first: &Pending) -> bool {
    let first_list = matches!(first.what, What::Synchronization) && first.group.is_none();
    !(first.v0 || first_list)
}

/// The wait before a failed run is tried again, after `failures` failures in a row (1 or more), with
/// `jitter` (0 to 1 s): 5 s after the first, then 5 s plus 1, 2, 4, 8 or 16 s and the jitter, rounded
/// down to 100 ms, and never more than 32 s.
pub fn retry_delay(failures: u32, jitter: Duration) -> Duration {
    const INITIAL: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(32);
    let retries = failures.saturating_sub(1);
    if retries == 0 {
        return INITIAL;
    }
    let growth = if retries <= 5 { Duration::from_secs(1 << (retries - 1)) } else { MAX };
    let delay = INITIAL + growth + jitter.min(Duration::from_millis(999));
    let delay = Duration::from_millis(delay.as_millis() as u64 / 100 * 100);
    delay.min(MAX)
}

/// The context file's text: one line, keys sorted, as shell-operator writes it.
pub fn file_text(contexts: &[Value]) -> String {
    let mut text = serde_json::to_string(contexts).expect("JSON values serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(binding: &str, what: What, group: Option<&str>) -> Pending {
        Pending { binding: binding.into(), what, group: group.map(Into::into), snapshots: vec![], v0: false }
    }

    #[test]
    fn webhook_contexts_keep_their_type_in_a_group_and_carry_snapshots() {
        let request = json!({"uid": "u", "operation": "CREATE"});
        let mut admission = pending("check", What::Admission { mutating: true, request: request.clone() }, Some("g"));
        admission.snapshots = vec!["pods".into()];
        let mut snapshot = |_: &str| Vec::new();
        assert_eq!(
            admission.render(&mut snapshot),
            json!({"binding": "check", "type": "Mutating", "review": {"request": request}, "snapshots": {"pods": []}})
        );
        let what = What::Conversion { from: "v1".into(), to: "g/v2".into(), request: json!({"objects": []}) };
        assert_eq!(
            pending("up", what, None).render(&mut snapshot),
            json!({"binding": "up", "type": "Conversion", "fromVersion": "v1", "toVersion": "g/v2",
                   "review": {"request": {"objects": []}}})
        );
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey { namespace: "ns".into(), kind: "Pod".into(), name: name.into() }
    }

    #[test]
    fn contexts_in_shell_operators_shapes() {
        let mut none = |_: &str| Vec::new();
        let render =
            |p: &Pending, s: &mut dyn FnMut(&str) -> Vec<SnapshotItem>| serde_json::to_string(&p.render(s)).unwrap();
        assert_eq!(render(&pending("onStartup", What::OnStartup, None), &mut none), r#"{"binding":"onStartup"}"#);
        assert_eq!(
            render(&pending("every 5 sec", What::Schedule, None), &mut none),
            r#"{"binding":"every 5 sec","type":"Schedule"}"#
        );
        assert_eq!(
            render(&pending("pods", What::Synchronization, None), &mut none),
            r#"{"binding":"pods","objects":[],"type":"Synchronization"}"#
        );
        let mut snapshot = |name: &str| {
            vec![SnapshotItem { key: key(name), object: Some(json!({"n": name})), filter_result: Some(Value::Null) }]
        };
        let mut grouped = pending("s", What::Schedule, Some("g"));
        grouped.snapshots = vec!["pods".into()];
        assert_eq!(
            render(&grouped, &mut snapshot),
            r#"{"binding":"s","groupName":"g","snapshots":{"pods":[{"filterResult":null,"object":{"n":"pods"}}]},"type":"Group"}"#
        );
        let event = What::Event {
            event: WatchEvent::Modified,
            object: None,
            filter_result: Some(json!({"a": 1})),
            key: key("p"),
        };
        let mut with_snapshots = pending("pods", event.clone(), None);
        with_snapshots.snapshots = vec!["pods".into()];
        assert_eq!(
            render(&with_snapshots, &mut |_| vec![SnapshotItem { key: key("p"), object: None, filter_result: None }]),
            r#"{"binding":"pods","filterResult":{"a":1},"snapshots":{"pods":[{}]},"type":"Event","watchEvent":"Modified"}"#
        );
        let mut v0 = pending("onKubernetesEvent", event, None);
        v0.v0 = true;
        assert_eq!(
            render(&v0, &mut none),
            r#"{"binding":"onKubernetesEvent","resourceEvent":"update","resourceKind":"Pod","resourceName":"p","resourceNamespace":"ns"}"#
        );
        assert_eq!(file_text(&[json!({"b": 1, "a": 2})]), "[{\"a\":2,\"b\":1}]\n");
    }

    #[test]
    fn a_run_of_one_groups_contexts_keeps_its_last() {
        let names = |ps: Vec<Pending>| ps.into_iter().map(|p| p.binding).collect::<Vec<_>>();
        let contexts = vec![
            pending("a", What::Schedule, Some("g")),
            pending("b", What::Schedule, Some("g")),
            pending("c", What::Schedule, None),
            pending("d", What::Schedule, Some("g")),
            pending("e", What::Schedule, Some("h")),
            pending("f", What::Schedule, Some("h")),
        ];
        assert_eq!(names(compact(contexts.clone())), ["b", "c", "d", "f"]);
        assert_eq!(names(compact_all(contexts)), ["c", "d", "f"]);
        assert!(!combinable(&pending("a", What::Synchronization, None)));
        assert!(combinable(&pending("a", What::Synchronization, Some("g"))));
        assert!(combinable(&pending("a", What::Schedule, None)));
    }

    #[test]
    fn retries_wait_longer_up_to_32_seconds() {
        let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n, Duration::from_millis(250)).as_millis() as u64).collect();
        assert_eq!(delays, [5000, 6200, 7200, 9200, 13200, 21200, 32000, 32000]);
        assert_eq!(retry_delay(2, Duration::ZERO), Duration::from_secs(6));
    }

    #[test]
    fn snapshots_sort_by_namespace_then_name() {
        let item = |ns: &str, name: &str| SnapshotItem {
            key: ObjectKey { namespace: ns.into(), kind: "Pod".into(), name: name.into() },
            object: None,
            filter_result: None,
        };
        let mut items = vec![item("b", "a"), item("a", "z"), item("a", "b"), item("a-b", "c")];
        sort(&mut items);
        let order: Vec<_> = items.iter().map(|i| format!("{}/{}", i.key.namespace, i.key.name)).collect();
        // Without objects, by the text `namespace/Kind/name`: `a-b/...` before `a/...`.
        assert_eq!(order, ["a-b/c", "a/b", "a/z", "b/a"]);
        let mut items: Vec<SnapshotItem> = [("a", "z"), ("a-b", "c")]
            .iter()
            .map(|(ns, name)| SnapshotItem { object: Some(json!({})), ..item(ns, name) })
            .collect();
        sort(&mut items);
        assert_eq!(items[0].key.namespace, "a");
    }
}
