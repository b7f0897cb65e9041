//! shell-operator's hooks run by `samplectl reconcile --hooks-dir`: a directory of executables found and
//! asked for their config as shell-operator does, run at start-up in order, on schedules and on
//! kubernetes events with shell-operator's binding contexts, their patch files applied and their
//! metrics files exported, failures retried holding their queue, and bad configs refused with the hook
//! and the field. The hooks write what they were given into files the test reads; kubectl is the witness
//! for what they changed.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Background, Namespace, eventually, free_port, http_get, kubectl, kubectl_json, samplectl, tail};

const SOON: Duration = Duration::from_secs(30);

/// A hooks directory of the test's own, with a directory beside it where hooks write what they saw.
struct Hooks {
    dir: tempfile::TempDir,
}

impl Hooks {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("hooks")).unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        Hooks { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("hooks")
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// An executable hook at `path` (under the hooks directory) answering `config` to `--config` and
    /// running `body` (bash, with `$OUT` the output directory) otherwise.
    fn hook(&self, path: &str, config: &str, body: &str) {
        let file = self.root().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let script = format!(
            "#!/usr/bin/env bash\nOUT='{}'\nif [[ $1 == --config ]]; then cat <<'CONFIG'\n{config}\nCONFIG\nexit 0\nfi\n{body}\n",
            self.out().display()
        );
        std::fs::write(&file, script).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn file(&self, path: &str, text: &str, mode: u32) {
        let file = self.root().join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn run(&self, extra: &[&str]) -> Background {
        Background::start(&self.args(extra).iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// The same, as the first process of a PID namespace of its own, as in a container without init.
    fn run_as_pid_one(&self, extra: &[&str]) -> Background {
        Background::start_as_pid_one(&self.args(extra).iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn args(&self, extra: &[&str]) -> Vec<String> {
        let (root, tmp) = (self.root(), self.tmp());
        let mut args: Vec<String> = vec!["reconcile".into(), "--hooks-dir".into(), root.display().to_string()];
        args.extend(["--tmp-dir".into(), tmp.display().to_string()]);
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    /// The lines hooks appended to `out/<name>`.
    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.out().join(name)).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Every binding context file a hook saved with `save` (below), in the order of the runs.
    fn contexts(&self, prefix: &str) -> Vec<Value> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.out())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{prefix}-")))
            .collect();
        files.sort();
        files.iter().map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()).collect()
    }
}

/// An onStartup hook `patch.sh` that writes `ops` to its patch file, then exits with `exit`.
fn patch_hook(hooks: &Hooks, ops: &[Value], exit: i32) {
    hooks.file("ops.json.in", &ops.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"), 0o644);
    let file = hooks.root().join("ops.json.in");
    let body = format!("cp '{}' \"$KUBERNETES_PATCH_PATH\"\necho done >> \"$OUT/done\"\nexit {exit}", file.display());
    hooks.hook("patch.sh", "configVersion: v1\nonStartup: 1", &body);
}

/// A hook body that saves its binding context as `out/<prefix>-<time>.json`.
fn save(prefix: &str) -> String {
    format!(r#"cp "$BINDING_CONTEXT_PATH" "$OUT/{prefix}-$(date +%s%N).json""#)
}

/// The object of a context item without what the API server sets.
fn bare(object: &Value) -> Value {
    json!({"name": object["metadata"]["name"], "data": object["data"]})
}

#[test]
fn hooks_run_at_start_up_in_order_then_on_schedules_as_shell_operator_runs_them() {
    let _cluster = crate::support::shared();
    let hooks = Hooks::new();
    let log = |what: &str| {
        format!(
            r#"echo "{what} $(pwd) ${{BINDING_CONTEXT_PATH:+ctx}}${{METRICS_PATH:+,metrics}}${{KUBERNETES_PATCH_PATH:+,patch}}" >> "$OUT/order""#
        )
    };
    let late =
        format!("{}\n{}\necho '{{\"level\":\"warn\",\"msg\":\"careful now\",\"x\":1}}'", log("late"), save("late"));
    hooks.hook("b-late.sh", "configVersion: v1\nonStartup: 20", &late);
    hooks.hook("a/early.py.sh", "{\"configVersion\": \"v1\", \"onStartup\": 10}", &log("early"));
    // Output that is not UTF-8, then much more: read to its end, logged, and the run succeeds.
    hooks.hook(
        "b-bytes.sh",
        "configVersion: v1\nonStartup: 12",
        r#"printf 'caf\xe9\n'; for i in $(seq 1 3000); do echo "line $i"; done; echo done >> "$OUT/bytes""#,
    );
    // v0: no configVersion; its contexts carry only the binding.
    hooks.hook("c-v0.sh", "onStartup: 15\nschedule:\n- crontab: '* * * * * *'\n  name: v0tick", &save("v0"));
    hooks.hook(
        "d/ticks.sh",
        "configVersion: v1\nschedule:\n- name: every second\n  crontab: '*/1 * * * * *'\n  queue: ticks",
        &format!("{}\necho tick >> \"$OUT/ticks\"", save("tick")),
    );
    // What shell-operator skips: not executable, hidden, in lib/, or named as data.
    hooks.file("notes.md", "#!/bin/sh\nexit 1", 0o755);
    hooks.file("values.yaml", "#!/bin/sh\nexit 1", 0o755);
    hooks.file(".hidden.sh", "#!/bin/sh\nexit 1", 0o755);
    hooks.file("lib/helper.sh", "#!/bin/sh\nexit 1", 0o755);
    hooks.file("plain.sh", "#!/bin/sh\nexit 1", 0o644);

    let runner = hooks.run(&[]);
    eventually(SOON, "the start-up hooks ran and the schedule ticked", || {
        match (hooks.lines("order").len(), hooks.lines("ticks").len()) {
            (2, n) if n >= 2 => Ok(()),
            other => Err(format!("{other:?}: {}", runner.stderr())),
        }
    });
    let root = hooks.root();
    assert_eq!(
        hooks.lines("order"),
        [
            format!("early {} ctx,metrics,patch", root.join("a").display()),
            format!("late {} ctx,metrics,patch", root.display()),
        ]
    );
    assert_eq!(hooks.contexts("late"), [json!([{"binding": "onStartup"}])]);
    let v0 = hooks.contexts("v0");
    assert_eq!(v0[0], json!([{"binding": "onStartup"}]));
    assert!(v0[1..].iter().all(|c| c == &json!([{"binding": "v0tick"}])), "{v0:?}");
    let ticks = hooks.contexts("tick");
    assert!(ticks.iter().all(|c| c == &json!([{"binding": "every second", "type": "Schedule"}])), "{ticks:?}");
    let (_, logged) = runner.stop("TERM", Duration::from_secs(10));
    // A JSON line a hook prints is logged as the record it is, at its level.
    assert!(logged.lines().any(|l| l.contains("WARN") && l.ends_with("careful now")), "{logged}");
    assert_eq!(hooks.lines("bytes"), ["done"], "{logged}");
    assert!(logged.contains("caf\u{fffd}") && logged.contains("line 3000"), "{logged}");
    assert!(logged.contains("file is skipped: plain.sh: no executable permissions, chmod +x is required"), "{logged}");
    for skipped in ["notes.md", "values.yaml", ".hidden.sh", "lib/helper.sh"] {
        assert!(!logged.contains(&format!("hook {skipped}")), "{skipped} was loaded: {logged}");
    }
    // Each run's files are gone once it is over.
    assert_eq!(std::fs::read_dir(hooks.tmp()).unwrap().count(), 0);
}

#[test]
fn kubernetes_bindings_give_shell_operators_binding_contexts() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-kube");
    kubectl(&["-n", &ns.0, "create", "configmap", "one", "--from-literal=a=1"]).success();
    kubectl(&["-n", &ns.0, "label", "configmap", "one", "pick=yes"]).success();
    kubectl(&["-n", &ns.0, "create", "secret", "generic", "s1", "--from-literal=x=y"]).success();
    let hooks = Hooks::new();
    let config = format!(
        "configVersion: v1
kubernetes:
- name: picked
  apiVersion: v1
  kind: ConfigMap
  namespace: {{nameSelector: {{matchNames: [{ns}]}}}}
  labelSelector: {{matchLabels: {{pick: 'yes'}}}}
  jqFilter: '{{name: .metadata.name, data: .data}}'
  keepFullObjectsInMemory: false
- name: secrets
  kind: secret
  namespace: {{nameSelector: {{matchNames: [{ns}]}}}}
  executeHookOnEvent: [Added, Deleted]
  includeSnapshotsFrom: [picked]",
        ns = ns.0
    );
    hooks.hook("watch.sh", &config, &save("ctx"));
    let runner = hooks.run(&[]);
    eventually(SOON, "both Synchronization runs", || match hooks.contexts("ctx").len() {
        2 => Ok(()),
        n => Err(format!("{n} runs: {}", runner.stderr())),
    });
    let contexts = hooks.contexts("ctx");
    assert_eq!(
        contexts[0],
        json!([{"binding": "picked", "type": "Synchronization",
                "objects": [{"filterResult": {"name": "one", "data": {"a": "1"}}}]}])
    );
    let sync = &contexts[1][0];
    assert_eq!((&sync["binding"], &sync["type"]), (&json!("secrets"), &json!("Synchronization")));
    assert_eq!(sync["objects"][0]["object"]["metadata"]["name"], "s1");
    assert_eq!(sync["objects"][0]["object"]["kind"], "Secret");
    assert_eq!(sync["snapshots"], json!({"picked": [{"filterResult": {"name": "one", "data": {"a": "1"}}}]}));

    // A change the filter does not see is no event; a change it sees is; so are an added and a deleted
    // object; a Modified secret is not asked for.
    kubectl(&["-n", &ns.0, "annotate", "configmap", "one", "x=y"]).success();
    kubectl(&["-n", &ns.0, "patch", "configmap", "one", "-p", r#"{"data":{"a":"2"}}"#]).success();
    kubectl(&["-n", &ns.0, "create", "configmap", "two", "--from-literal=b=2"]).success();
    kubectl(&["-n", &ns.0, "label", "configmap", "two", "pick=yes"]).success();
    kubectl(&["-n", &ns.0, "annotate", "secret", "s1", "x=y"]).success();
    kubectl(&["-n", &ns.0, "create", "secret", "generic", "s2", "--from-literal=x=y"]).success();
    kubectl(&["-n", &ns.0, "delete", "configmap", "one"]).success();
    eventually(SOON, "four events", || {
        let n = hooks.contexts("ctx").iter().map(|c| c.as_array().unwrap().len()).sum::<usize>();
        if n >= 6 { Ok(()) } else { Err(format!("{n} contexts: {}", runner.stderr())) }
    });
    std::thread::sleep(Duration::from_secs(1));
    // Runs of one hook waiting behind each other are combined: count contexts, not runs.
    let events: Vec<Value> = hooks.contexts("ctx")[2..].iter().flat_map(|c| c.as_array().unwrap().clone()).collect();
    let summary: Vec<(String, String, Value)> = events
        .iter()
        .map(|e| {
            let what = match &e["filterResult"] {
                Value::Null => bare(&e["object"]),
                result => result.clone(),
            };
            (e["binding"].as_str().unwrap().to_owned(), e["watchEvent"].as_str().unwrap().to_owned(), what)
        })
        .collect();
    // In order per binding (two watches may deliver in either order between them).
    let of = |binding: &str| summary.iter().filter(|(b, _, _)| b == binding).cloned().collect::<Vec<_>>();
    assert_eq!(
        of("picked"),
        [
            ("picked".into(), "Modified".into(), json!({"name": "one", "data": {"a": "2"}})),
            ("picked".into(), "Added".into(), json!({"name": "two", "data": {"b": "2"}})),
            ("picked".into(), "Deleted".into(), json!({"name": "one", "data": {"a": "2"}})),
        ]
    );
    assert_eq!(of("secrets"), [("secrets".into(), "Added".into(), json!({"name": "s2", "data": {"x": "eQ=="}}))]);
    // Without objects kept, an event carries none; with them, it does; and snapshots are read at the run.
    assert!(events[0].get("object").is_none(), "{}", events[0]);
    let secret_added = events.iter().find(|e| e["binding"] == "secrets").unwrap();
    assert_eq!(secret_added["type"], "Event");
    let picked = secret_added["snapshots"]["picked"].as_array().unwrap();
    assert!(picked.iter().any(|item| item["filterResult"]["name"] == "two"), "{secret_added}");
    drop(runner);
}

/// The children of `pid` that are jq workers, each with its state (`R` running, `S` sleeping...).
fn jq_workers(pid: u32) -> Vec<(u32, char)> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let mut workers = Vec::new();
    for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("__samplectl-jq-worker") {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).unwrap_or('?');
        workers.push((child, state));
    }
    workers
}

#[test]
fn a_jq_filter_that_never_ends_overflows_or_fills_memory_costs_its_own_event_only() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-jq-bounds");
    let hooks = Hooks::new();
    let binding = |name: &str, filter: &str| {
        format!(
            "- name: {name}\n  kind: ConfigMap\n  namespace: {{nameSelector: {{matchNames: [{ns}]}}}}\n  \
             labelSelector: {{matchLabels: {{filter: {name}}}}}\n  jqFilter: '{filter}'\n",
            ns = ns.0
        )
    };
    let bad = format!(
        "configVersion: v1\nkubernetes:\n{}{}{}",
        binding("endless", "last(range(1e15))"),
        binding("deep", "def f: [f]; f"),
        binding("greedy", "reduce range(40) as $i (\"x\"; . + .)")
    );
    hooks.hook("bad.sh", &bad, "echo ran >> \"$OUT/bad\"");
    hooks.hook("good.sh", &format!("configVersion: v1\nkubernetes:\n{}", binding("good", ".data")), &save("good"));
    // Time enough for a debug build on a busy machine to fill the worker's memory before the timeout.
    let mut runner = hooks.run(&["--jq-timeout", "3s"]);
    eventually(SOON, "both hooks' Synchronization runs", || {
        match (hooks.contexts("good").len(), hooks.lines("bad").len()) {
            (1, 1..) => Ok(()),
            n => Err(format!("{n:?} runs: {}", runner.stderr())),
        }
    });
    // Its three Synchronizations may run apart or combined.
    std::thread::sleep(Duration::from_secs(1));
    let synchronized = hooks.lines("bad").len();
    for (name, value) in [("endless", "1"), ("good", "1"), ("deep", "1"), ("greedy", "1"), ("good", "2")] {
        let object = format!("{name}-{value}");
        kubectl(&["-n", &ns.0, "create", "configmap", &object, &format!("--from-literal=v={value}")]).success();
        kubectl(&["-n", &ns.0, "label", "configmap", &object, &format!("filter={name}")]).success();
    }
    // The good hook sees both of its objects, whatever the bad filters did meanwhile.
    eventually(SOON, "the good hook's two events", || {
        let seen: Vec<Value> = hooks.contexts("good")[1..]
            .iter()
            .flat_map(|c| c.as_array().unwrap().clone())
            .map(|e| e["filterResult"].clone())
            .collect();
        match seen.len() {
            2 => {
                assert_eq!(seen, [json!({"v": "1"}), json!({"v": "2"})]);
                Ok(())
            }
            _ => Err(format!("{seen:?}: {}", runner.stderr())),
        }
    });
    // Each bad filter's event fails in the log, in words that say which filter and why.
    eventually(SOON, "the three filters' errors", || {
        let log = runner.stderr();
        let said = [
            "jqFilter \"last(range(1e15))\" was stopped after 3s: it ran longer than --jq-timeout allows",
            "jqFilter \"def f: [f]; f\" ended the process that ran it: ",
            "jqFilter \"reduce range(40) as $i (\\\"x\\\"; . + .)\" ended the process that ran it: memory allocation of",
        ];
        match said.iter().find(|words| !log.contains(*words)) {
            None => Ok(()),
            Some(missing) => Err(format!("no {missing:?} in: {log}")),
        }
    });
    let log = runner.stderr();
    // Rust's words for the overflow where its guard page catches it; a debug build's larger frames can
    // step past the guard, and then the kernel's signal is all there is to say.
    assert!(log.contains("overflowed its stack") || log.contains("SIGSEGV"), "{log}");
    assert!(log.contains("its memory is limited to 256 MiB"), "{log}");
    assert_eq!(hooks.lines("bad").len(), synchronized, "a failed filter made an event: {log}");
    // The engine lives on, and no worker is left running a filter: the endless one was ended.
    assert!(runner.child.try_wait().unwrap().is_none(), "the engine ended: {log}");
    eventually(SOON, "every jq worker idle", || {
        let workers = jq_workers(runner.child.id());
        match workers.iter().all(|(_, state)| *state == 'S') && workers.len() <= 4 {
            true => Ok(()),
            false => Err(format!("{workers:?}")),
        }
    });
    // A change the good filter sees is still an event.
    kubectl(&["-n", &ns.0, "patch", "configmap", "good-2", "-p", r#"{"data":{"v":"3"}}"#]).success();
    eventually(SOON, "the good hook's third event", || {
        let n = hooks.contexts("good")[1..].iter().map(|c| c.as_array().unwrap().len()).sum::<usize>();
        if n == 3 { Ok(()) } else { Err(format!("{n}: {}", runner.stderr())) }
    });
}

#[test]
fn patch_files_are_applied_with_every_operation() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-patch");
    crate::support::install_crd();
    kubectl(&["-n", &ns.0, "create", "configmap", "exists", "--from-literal=a=1"]).success();
    for name in ["merge", "json", "jq", "gone-fg", "gone-bg", "gone-orphan"] {
        kubectl(&["-n", &ns.0, "create", "configmap", name, "--from-literal=a=1"]).success();
    }
    crate::support::apply(&ns.0, &crate::support::sample("s", "x"));
    let ops = [
        json!({"operation": "Create", "object": {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "created", "namespace": ns.0}, "data": {"k": "v"}}}),
        json!({"operation": "CreateIfNotExists", "object": {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "exists", "namespace": ns.0}, "data": {"a": "changed"}}}),
        json!({"operation": "CreateOrUpdate", "object": format!(
               "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: replaced\n  namespace: {}\ndata:\n  r: '1'\n", ns.0)}),
        json!({"operation": "CreateOrUpdate", "object": {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "exists", "namespace": ns.0}, "data": {"b": "2"}}}),
        json!({"operation": "MergePatch", "kind": "ConfigMap", "namespace": ns.0, "name": "merge",
               "mergePatch": {"data": {"m": "1"}}}),
        json!({"operation": "JSONPatch", "kind": "configmap", "namespace": ns.0, "name": "json",
               "jsonPatch": [{"op": "add", "path": "/data/j", "value": "1"}]}),
        json!({"operation": "JQPatch", "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.0, "name": "jq",
               "jqFilter": ".data.q = \"1\""}),
        json!({"operation": "MergePatch", "apiVersion": "example.com/v1alpha1", "kind": "Sample", "namespace": ns.0,
               "name": "s", "subresource": "/status", "mergePatch": {"status": {"observedGeneration": 7}}}),
        json!({"operation": "MergePatch", "kind": "ConfigMap", "namespace": ns.0, "name": "missing",
               "ignoreMissingObject": true, "mergePatch": {"data": {"x": "1"}}}),
        json!({"operation": "Delete", "kind": "ConfigMap", "namespace": ns.0, "name": "gone-fg"}),
        json!({"operation": "DeleteInBackground", "kind": "ConfigMap", "namespace": ns.0, "name": "gone-bg"}),
        json!({"operation": "DeleteNonCascading", "kind": "ConfigMap", "namespace": ns.0, "name": "gone-orphan"}),
        json!({"operation": "Delete", "kind": "ConfigMap", "namespace": ns.0, "name": "never-was"}),
    ];
    let hooks = Hooks::new();
    patch_hook(&hooks, &ops, 0);
    let runner = hooks.run(&[]);
    eventually(SOON, "the patch run succeeded", || {
        if runner.stderr().contains("Hook executed successfully") { Ok(()) } else { Err(runner.stderr()) }
    });
    let data = |name: &str| kubectl_json(&["-n", &ns.0, "get", "configmap", name])["data"].clone();
    assert_eq!(data("created"), json!({"k": "v"}));
    assert_eq!(data("exists"), json!({"b": "2"}));
    assert_eq!(data("replaced"), json!({"r": "1"}));
    assert_eq!(data("merge"), json!({"a": "1", "m": "1"}));
    assert_eq!(data("json"), json!({"a": "1", "j": "1"}));
    assert_eq!(data("jq"), json!({"a": "1", "q": "1"}));
    let status = kubectl_json(&["-n", &ns.0, "get", "samples.example.com", "s"])["status"].clone();
    assert_eq!(status["observedGeneration"], 7);
    let left = kubectl(&["-n", &ns.0, "get", "configmaps", "-o", "name"]).success().stdout;
    for gone in ["gone-fg", "gone-bg", "gone-orphan", "missing"] {
        assert!(!left.contains(&format!("configmap/{gone}\n")), "{gone} is still there: {left}");
    }
    drop(runner);

    // One bad operation refuses the whole file: the run fails, nothing is sent, and it is retried.
    let hooks = Hooks::new();
    let bad = [
        json!({"operation": "Create", "object": {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "not-created", "namespace": ns.0}}}),
        json!({"operation": "Delete", "name": "no-kind"}),
    ];
    patch_hook(&hooks, &bad, 0);
    let runner = hooks.run(&[]);
    eventually(SOON, "the run failed", || {
        let log = runner.stderr();
        if log.contains("patch.sh FAILED") { Ok(log) } else { Err(log) }
    });
    let log = runner.stderr();
    assert!(
        log.contains("$KUBERNETES_PATCH_PATH: can't validate document") && log.contains("kind is required"),
        "{log}"
    );
    assert!(log.contains("tried again in 5s"), "{log}");
    assert!(kubectl(&["-n", &ns.0, "get", "configmap", "not-created"]).code != 0);
    drop(runner);

    // A hook that fails: of its patch file only the status patches marked ignoreHookError are applied,
    // as shell-operator documents (its code applies none).
    let hooks = Hooks::new();
    let on_failure = [
        json!({"operation": "MergePatch", "apiVersion": "example.com/v1alpha1", "kind": "Sample", "namespace": ns.0,
               "name": "s", "subresource": "/status", "ignoreHookError": true,
               "mergePatch": {"status": {"observedGeneration": 9}}}),
        json!({"operation": "MergePatch", "kind": "ConfigMap", "namespace": ns.0, "name": "merge",
               "ignoreHookError": true, "mergePatch": {"data": {"failed": "1"}}}),
    ];
    patch_hook(&hooks, &on_failure, 1);
    let runner = hooks.run(&[]);
    eventually(SOON, "the status patch applied despite the failure", || {
        let status = kubectl_json(&["-n", &ns.0, "get", "samples.example.com", "s"])["status"].clone();
        if status["observedGeneration"] == 9 { Ok(()) } else { Err(format!("{status}: {}", runner.stderr())) }
    });
    assert_eq!(data("merge"), json!({"a": "1", "m": "1"}));
}

#[test]
fn a_failing_hook_holds_its_queue_and_is_retried_unless_it_may_fail() {
    let _cluster = crate::support::shared();
    let hooks = Hooks::new();
    // Fails on its first run, succeeds on the second.
    hooks.hook(
        "a-flaky.sh",
        "configVersion: v1\nonStartup: 1",
        r#"if [[ ! -e "$OUT/flaky-failed" ]]; then touch "$OUT/flaky-failed"; echo "not yet" >&2; exit 3; fi
echo flaky >> "$OUT/order""#,
    );
    hooks.hook("b-after.sh", "configVersion: v1\nonStartup: 2", r#"echo after >> "$OUT/order""#);
    hooks.hook(
        "c-may-fail.sh",
        "configVersion: v1\nschedule:\n- crontab: '* * * * * *'\n  allowFailure: true\n  queue: other",
        r#"echo failing >> "$OUT/may-fail"; exit 1"#,
    );
    let started = std::time::Instant::now();
    let runner = hooks.run(&[]);
    eventually(SOON, "both start-up hooks ran", || match hooks.lines("order").len() {
        2 => Ok(()),
        n => Err(format!("{n}: {}", runner.stderr())),
    });
    let took = started.elapsed();
    // The second waited behind the first's retry, 5 s after its failure.
    assert_eq!(hooks.lines("order"), ["flaky", "after"]);
    assert!(took >= Duration::from_secs(5), "{took:?}");
    // The hook allowed to fail runs on every tick regardless (its schedule on once main got to it).
    eventually(SOON, "the failing schedule ran three times", || match hooks.lines("may-fail").len() {
        n if n >= 3 => Ok(()),
        n => Err(format!("{n}")),
    });
    let (_, log) = runner.stop("TERM", Duration::from_secs(10));
    assert!(log.contains("a-flaky.sh FAILED: not yet; tried again in 5s"), "{log}");
    assert!(log.contains("Hook failed, but allowed to fail: cmd run: exit status 1"), "{log}");
}

#[test]
fn metrics_files_are_exported_on_samplectls_metrics() {
    let _cluster = crate::support::shared();
    let hooks = Hooks::new();
    hooks.hook(
        "metrics.sh",
        "configVersion: v1\nschedule:\n- crontab: '* * * * * *'",
        r#"cat > "$METRICS_PATH" <<'M'
{"name": "hook_runs_total", "add": 1}
{"name": "temperature", "set": 21.5, "labels": {"room": "a"}}
{"name": "latency", "action": "observe", "value": 0.3, "buckets": [0.1, 1]}
M"#,
    );
    // A metrics file with a name Prometheus cannot carry fails its run (in a queue of its own).
    hooks.hook(
        "bad-metrics.sh",
        "configVersion: v1\nschedule:\n- crontab: '* * * * * *'\n  queue: bad",
        r#"echo '{"name": "bad-name", "set": 1}' > "$METRICS_PATH""#,
    );
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // A relative --tmp-dir: the hook, run from its own directory, still finds its files.
    let relative = format!("target/shell-hooks-tmp-{}", std::process::id());
    let (root, tmp) = (hooks.root(), relative.clone());
    let runner = Background::start(&[
        "reconcile",
        "--hooks-dir",
        root.to_str().unwrap(),
        "--tmp-dir",
        &tmp,
        "--metrics-addr",
        &addr,
    ]);
    let body = eventually(SOON, "two runs counted", || match http_get(port, "/metrics") {
        Some((200, body)) if body.contains("hook_runs_total{hook=\"metrics.sh\"} 2") => Ok(body),
        other => Err(format!("{other:?}: {}", runner.stderr())),
    });
    assert!(body.contains("temperature{hook=\"metrics.sh\",room=\"a\"} 21.5"), "{body}");
    assert!(body.contains("latency_bucket{hook=\"metrics.sh\",le=\"1\"}"), "{body}");
    assert!(body.contains("samplectl_reconcile_total{controller=\"metrics.sh\",result=\"success\"}"), "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert!(!body.contains("bad-name"), "{body}");
    let log = runner.stderr();
    assert!(
        log.contains("bad-metrics.sh FAILED: 1 error occurred:")
            && log.contains("'name' is not a Prometheus metric name"),
        "{log}"
    );
    drop(runner);
    let _ = std::fs::remove_dir_all(relative);
}

#[test]
fn bad_hook_configs_are_refused_with_the_hook_and_the_field() {
    let _cluster = crate::support::shared();
    let cases = [
        (
            "configVersion: v1\nschedule: {name: x}\nbogus: 1",
            vec!["schedule must be of type array: \"object\"", ".bogus is a forbidden property"],
        ),
        (
            "configVersion: v1\nkubernetes:\n- kind: Pod\n  allowFailure: 'yes'",
            vec!["kubernetes.allowFailure must be of type boolean: \"string\""],
        ),
        (
            "configVersion: v1\nschedule:\n- crontab: '* * *'",
            vec!["invalid schedule config [0]", "crontab is invalid: Expected 5 or 6 fields, found 3"],
        ),
        (
            "configVersion: v1\nkubernetes:\n- kind: Pod\n  jqFilter: '.a |'",
            vec!["invalid kubernetes config [0] jqFilter: cannot parse"],
        ),
        ("configVersion: v3\nonStartup: 1", vec!["'configVersion' value 'v3' is unsupported"]),
        (
            "configVersion: v1\nschedule:\n- crontab: '* * * * *'\n  includeSnapshotsFrom: [pods]",
            vec!["'pods' binding name not found"],
        ),
    ];
    for (config, wanted) in cases {
        let hooks = Hooks::new();
        hooks.hook("sub/bad.sh", config, "true");
        let run = samplectl(&[
            "reconcile",
            "--hooks-dir",
            hooks.root().to_str().unwrap(),
            "--tmp-dir",
            hooks.tmp().to_str().unwrap(),
        ]);
        assert_eq!(run.code, 1, "{config}: {}", run.stderr);
        assert!(run.stderr.contains("creating hook 'sub/bad.sh': load hook 'sub/bad.sh' config:"), "{}", run.stderr);
        for w in wanted {
            assert!(run.stderr.contains(w), "{config}: wanted {w:?} in {}", run.stderr);
        }
        assert!(run.stderr.contains("hook --config output:"), "{}", run.stderr);
    }
    // A hook that cannot say its config stops the start, named by its path.
    let hooks = Hooks::new();
    hooks.file("broken.sh", "#!/usr/bin/env bash\necho oops >&2\nexit 4\n", 0o755);
    let run = samplectl(&[
        "reconcile",
        "--hooks-dir",
        hooks.root().to_str().unwrap(),
        "--tmp-dir",
        hooks.tmp().to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    let path = hooks.root().join("broken.sh");
    assert!(
        run.stderr.contains(&format!("cannot get config for hook '{}': exit status 4", path.display())),
        "{}",
        run.stderr
    );
    // A hook whose config never ends: refused at 4 MiB, whatever it would go on printing.
    let hooks = Hooks::new();
    hooks.file("endless.sh", "#!/usr/bin/env bash\nexec yes configVersion\n", 0o755);
    let run = samplectl(&["reconcile", "--hooks-dir", hooks.root().to_str().unwrap()]);
    assert_eq!(run.code, 1);
    let path = hooks.root().join("endless.sh");
    let wanted = format!("cannot get config for hook '{}': printed more than 4 MiB", path.display());
    assert!(run.stderr.contains(&wanted), "{}", run.stderr);
    // A temp directory someone else could read or write: refused before any hook runs.
    let hooks = Hooks::new();
    hooks.hook("fine.sh", "configVersion: v1\nonStartup: 1", "true");
    std::os::unix::fs::symlink(hooks.tmp(), hooks.dir.path().join("tmp-link")).unwrap();
    let link = hooks.dir.path().join("tmp-link");
    let run =
        samplectl(&["reconcile", "--hooks-dir", hooks.root().to_str().unwrap(), "--tmp-dir", link.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let wanted = format!("error: --tmp-dir: {} is a symbolic link; give the directory itself", link.display());
    assert!(run.stderr.contains(&wanted), "{}", run.stderr);
    // A directory that is not there.
    let missing = Path::new("/nonexistent/hooks");
    let run = samplectl(&["reconcile", "--hooks-dir", missing.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("hooks directory: path '/nonexistent/hooks' not exist"), "{}", run.stderr);
    // Webhook bindings: a name the API server would refuse, and two hooks answering at one path.
    let hooks = Hooks::new();
    hooks.hook(
        "admit.sh",
        "configVersion: v1\nkubernetesValidating:\n- name: short.name\n  timeoutSeconds: 40",
        "true",
    );
    let run = hooks_run(&hooks, &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("creating hook 'admit.sh': load hook 'admit.sh' config: 2 errors occurred"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "webhooks[0].name: Invalid value: \"short.name\": should be a domain with at least three segments separated by dots"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("the timeout value must be between 1 and 30 seconds"), "{}", run.stderr);
    let hooks = Hooks::new();
    hooks.hook("a.sh", "configVersion: v1\nkubernetesValidating:\n- name: same.example.com", "true");
    hooks.hook("b.sh", "configVersion: v1\nkubernetesMutating:\n- name: same.example.com", "true");
    let run = hooks_run(&hooks, &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("hook 'b.sh': webhook \"same.example.com\" would be served at /hooks/same-example-com, as webhook \"same.example.com\" of hook 'a.sh' is"),
        "{}",
        run.stderr
    );
    // The server's certificate missing: said before anything is registered or run.
    let hooks = Hooks::new();
    hooks.hook("a.sh", "configVersion: v1\nkubernetesValidating:\n- name: good.example.com", "true");
    let missing = hooks.dir.path().join("none");
    let ca = hooks.dir.path().join("ca.crt");
    std::fs::write(&ca, "").unwrap();
    let (cert, key) = (missing.join("tls.crt"), missing.join("tls.key"));
    let run = hooks_run(
        &hooks,
        &[
            "--validating-webhook-ca",
            ca.to_str().unwrap(),
            "--validating-webhook-server-cert",
            cert.to_str().unwrap(),
            "--validating-webhook-server-key",
            key.to_str().unwrap(),
            "--validating-webhook-listen-port",
            &free_port().to_string(),
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("the admission webhook server's TLS: cannot read the certificate {}", cert.display())),
        "{}",
        run.stderr
    );
    // The CA to register missing; then a webhook the API server refuses to register (a mutating webhook's
    // name is not checked before, as in shell-operator): the start stops with the API server's words.
    let hooks = Hooks::new();
    let certs = hooks.dir.path().join("certs");
    certificates(&certs);
    hooks.hook("m.sh", "configVersion: v1\nkubernetesMutating:\n- name: Not_A.Valid.Name", "true");
    let configuration = format!("bad-{}", std::process::id());
    let _delete = Delete(vec![("mutatingwebhookconfiguration", format!("{configuration}-hooks"))]);
    let mut flags = webhook_flags("validating", &certs, free_port());
    flags.extend(["--validating-webhook-configuration-name".to_owned(), configuration]);
    let mut no_ca = flags.clone();
    let missing_ca = hooks.dir.path().join("no-ca.crt");
    no_ca[11] = missing_ca.to_str().unwrap().to_owned();
    let run = hooks_run(&hooks, &no_ca.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains(&format!("read CA bundle: {}", missing_ca.display())), "{}", run.stderr);
    let run = hooks_run(&hooks, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("register MutatingWebhookConfiguration"), "{}", run.stderr);
    assert!(run.stderr.contains("Not_A.Valid.Name"), "{}", run.stderr);
    // A --tmp-dir whose parent is missing.
    let hooks = Hooks::new();
    hooks.hook("ok.sh", "configVersion: v1\nonStartup: 1", "true");
    let run = samplectl(&["reconcile", "--hooks-dir", hooks.root().to_str().unwrap(), "--tmp-dir", "/nonexistent/tmp"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("--tmp-dir: cannot make /nonexistent/tmp"), "{}", run.stderr);
    // And flags that do not go with it, before anything is read.
    let run = crate::support::samplectl_bare(&[
        "reconcile",
        "--hooks-dir",
        "/tmp",
        "--feature-gates",
        "CELOmitFunction=true",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("they do nothing with --hooks-dir"), "{}", run.stderr);
    let run = crate::support::samplectl_bare(&["reconcile", "--hooks-dir", "/tmp", "--gvr", "v1/configmaps"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    // What a shard ring cannot share out: a webhook reading snapshots, namespaces picked by labels.
    let ring = ["--shard-ring", "r", "--shard-member", "m"];
    let hooks = Hooks::new();
    hooks.hook(
        "hook.sh",
        "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\nkubernetesValidating:\n- name: v.example.com\n  \
         includeSnapshotsFrom: [pods]\n  rules:\n  - operations: [CREATE]\n    apiVersions: [v1]\n    \
         resources: [pods]\n    apiGroups: ['']",
        "true",
    );
    let run = hooks_run(&hooks, &ring);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("hook 'hook.sh': webhook \"v.example.com\" reads snapshots"), "{}", run.stderr);
    let hooks = Hooks::new();
    hooks.hook(
        "hook.sh",
        "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\n  namespace:\n    labelSelector:\n      \
         matchLabels: {team: a}",
        "true",
    );
    let run = hooks_run(&hooks, &ring);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("kubernetes binding \"pods\" picks namespaces by labels"), "{}", run.stderr);
}

/// What shell-operator lacks: with `--leader-elect`, one replica runs the hooks and the others stand by;
/// when the one running is killed, another takes the Lease and starts them from the beginning
/// (onStartup first), and the one that stopped writes nothing more.
#[test]
fn with_leader_election_one_replica_runs_the_hooks_and_another_takes_over() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-lead");
    let hooks = Hooks::new();
    // Each line says which samplectl process ran the hook (the hook's parent).
    hooks.hook("start.sh", "configVersion: v1\nonStartup: 1", r#"echo "start $PPID" >> "$OUT/runs""#);
    hooks.hook(
        "tick.sh",
        "configVersion: v1\nschedule:\n- crontab: '* * * * * *'",
        r#"echo "tick $PPID" >> "$OUT/runs""#,
    );
    let lease = format!("shell-{}", ns.0);
    let mut elect = vec!["--leader-elect", "--leader-election-id", &lease];
    elect.extend(short_leases(&ns.0));
    let ran_by = |pid: u32| {
        let pid = pid.to_string();
        hooks.lines("runs").iter().filter(|l| l.ends_with(&format!(" {pid}"))).cloned().collect::<Vec<_>>()
    };
    let first = hooks.run(&elect);
    let first_pid = first.child.id();
    eventually(SOON, "the first replica runs the hooks", || match ran_by(first_pid).len() {
        n if n >= 2 => Ok(()),
        _ => Err(first.stderr()),
    });
    let second = hooks.run(&elect);
    let second_pid = second.child.id();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ran_by(second_pid), Vec::<String>::new(), "the standby ran hooks: {}", second.stderr());
    assert!(second.stderr().contains("waiting for the lease"), "{}", second.stderr());

    let (_, _) = first.stop("KILL", Duration::from_secs(5));
    eventually(SOON, "the standby takes over", || match ran_by(second_pid).first() {
        Some(line) if line.starts_with("start ") && ran_by(second_pid).len() >= 2 => Ok(()),
        _ => Err(second.stderr()),
    });
    let (code, logged) = second.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
    // Released on the way out: nobody holds the Lease.
    let held = kubectl_json(&["-n", &ns.0, "get", "lease", &lease]);
    assert!(held["spec"]["holderIdentity"].as_str().unwrap_or_default().is_empty(), "{held}");
}

/// A binding on a kind the cluster does not serve yet holds `main` and is tried again, as shell-operator
/// does, until its CRD is installed; then the binding runs.
#[test]
fn a_binding_on_a_kind_not_served_yet_runs_once_its_crd_is_installed() {
    let _cluster = crate::support::shared();
    let hooks = Hooks::new();
    let suffix = std::process::id();
    let (group, plural) = (format!("shell{suffix}.example.com"), format!("widgets{suffix}"));
    let config = format!("configVersion: v1\nkubernetes:\n- apiVersion: {group}/v1\n  kind: Widget{suffix}");
    hooks.hook("widgets.sh", &config, &save("ctx"));
    hooks.hook("z-later.sh", "configVersion: v1\nschedule:\n- crontab: '* * * * * *'", r#"echo tick >> "$OUT/ticks""#);
    let runner = hooks.run(&[]);
    eventually(SOON, "the missing kind reported", || {
        let log = runner.stderr();
        if log.contains("cannot start the kubernetes bindings of widgets.sh") { Ok(()) } else { Err(log) }
    });
    assert!(runner.stderr().contains(&format!("apiVersion '{group}/v1' kind 'Widget{suffix}'")), "{}", runner.stderr());
    // main is held: the next hook's schedules are not on yet.
    assert!(hooks.lines("ticks").is_empty());
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": plural, "singular": format!("widget{suffix}"), "kind": format!("Widget{suffix}")},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    crate::support::apply("default", &crd);
    eventually(Duration::from_secs(60), "the binding's Synchronization", || match hooks.contexts("ctx").first() {
        Some(ctx) => Ok(ctx.clone()),
        None => Err(runner.stderr()),
    });
    assert_eq!(hooks.contexts("ctx")[0], json!([{"binding": "kubernetes", "type": "Synchronization", "objects": []}]));
    eventually(SOON, "the next hook's schedule on", || {
        if hooks.lines("ticks").is_empty() { Err(String::new()) } else { Ok(()) }
    });
    kubectl(&["delete", "crd", &format!("{plural}.{group}"), "--wait=false"]).success();
}

/// Leases in `namespace` with short timings, so that a killed process is replaced within seconds.
fn short_leases(namespace: &str) -> [&str; 8] {
    [
        "--leader-election-namespace",
        namespace,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
    ]
}

/// `samplectl reconcile` on `hooks` with `extra` flags, to its end.
fn hooks_run(hooks: &Hooks, extra: &[&str]) -> crate::support::Run {
    let (root, tmp) = (hooks.root(), hooks.tmp());
    let mut args = vec!["reconcile", "--hooks-dir", root.to_str().unwrap(), "--tmp-dir", tmp.to_str().unwrap()];
    args.extend_from_slice(extra);
    samplectl(&args)
}

/// A CA and a server certificate it signed for 127.0.0.1, in `dir`: `ca.crt`, `tls.crt`, `tls.key`.
fn certificates(dir: &Path) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "samplectl test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
}

/// The flags that serve one kind of webhook (`validating` or `conversion`) on `port` with the
/// certificates in `certs`, registered by URL: the local API server reaches 127.0.0.1, not a Service.
fn webhook_flags(kind: &str, certs: &Path, port: u16) -> Vec<String> {
    let file = |name: &str| certs.join(name).to_str().unwrap().to_owned();
    [
        (format!("--{kind}-webhook-url"), format!("https://127.0.0.1:{port}")),
        (format!("--{kind}-webhook-listen-address"), "127.0.0.1".to_owned()),
        (format!("--{kind}-webhook-listen-port"), port.to_string()),
        (format!("--{kind}-webhook-server-cert"), file("tls.crt")),
        (format!("--{kind}-webhook-server-key"), file("tls.key")),
        (format!("--{kind}-webhook-ca"), file("ca.crt")),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag, value])
    .collect()
}

/// Cluster-scoped objects a test made, deleted when it ends however it ends.
struct Delete(Vec<(&'static str, String)>);

impl Drop for Delete {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = kubectl(&["delete", kind, name, "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// Validating and mutating bindings are registered in `<name>-hooks` configurations pointing at
/// samplectl's TLS server, and the API server's reviews are answered by the hooks: a refusal with the
/// hook's message, a warning, a JSON Patch applied, and a failing hook refusing with "Hook failed".
#[test]
fn admission_webhooks_are_registered_and_answered_by_the_hooks() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-admit");
    let hooks = Hooks::new();
    let certs = hooks.dir.path().join("certs");
    certificates(&certs);
    let _delete = Delete(vec![
        ("validatingwebhookconfiguration", format!("{}-hooks", ns.0)),
        ("mutatingwebhookconfiguration", format!("{}-hooks", ns.0)),
    ]);
    // Only this test's namespace is reviewed: the webhooks must not touch other tests' objects.
    let binding = |name: &str| {
        format!(
            "- name: {name}
  namespace: {{labelSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}}}
  rules:
  - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}}
  timeoutSeconds: 10",
            ns = ns.0
        )
    };
    let validate = r#"
cp "$BINDING_CONTEXT_PATH" "$OUT/validate-$(date +%s%N).json"
python3 - <<'PY'
import json, os, sys
request = json.load(open(os.environ["BINDING_CONTEXT_PATH"]))[0]["review"]["request"]
labels = request["object"]["metadata"].get("labels", {})
if labels.get("crash") == "yes":
    sys.exit(3)
answer = {"allowed": False, "message": "labelled deny=yes"} if labels.get("deny") == "yes" else {"allowed": True, "warnings": ["seen by the hook"]}
open(os.environ["VALIDATING_RESPONSE_PATH"], "w").write(json.dumps(answer))
PY"#;
    hooks.hook(
        "validate.sh",
        &format!("configVersion: v1\nkubernetesValidating:\n{}", binding("deny-labelled.samplectl.example.com")),
        validate,
    );
    let mutate = r#"PATCH=$(printf '[{"op":"add","path":"/metadata/annotations","value":{"mutated":"yes"}}]' | base64 -w 0)
echo "{\"allowed\":true,\"patch\":\"$PATCH\"}" > "$VALIDATING_RESPONSE_PATH""#;
    hooks.hook(
        "mutate.sh",
        &format!("configVersion: v1\nkubernetesMutating:\n{}", binding("annotate.config-maps.example.com")),
        mutate,
    );
    let port = free_port();
    let mut flags = webhook_flags("validating", &certs, port);
    flags.extend(["--validating-webhook-configuration-name".to_owned(), ns.0.clone()]);
    let runner = hooks.run(&flags.iter().map(String::as_str).collect::<Vec<_>>());

    // Registered when a refusal comes back (the API server picks a configuration up within a moment).
    let mut attempt = 0;
    let refused = eventually(SOON, "a labelled ConfigMap refused by the hook", || {
        // A new name each time: one made before the configuration was picked up is not reviewed again.
        attempt += 1;
        let name = format!("denied-{attempt}");
        let labelled = json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": name, "labels": {"deny": "yes"}}});
        let run = crate::support::try_apply(&ns.0, &labelled);
        match run.code {
            0 => Err(format!("created: {}", runner.stderr())),
            _ => Ok(run.stderr),
        }
    });
    assert!(
        refused.contains(
            "admission webhook \"deny-labelled.samplectl.example.com\" denied the request: labelled deny=yes"
        ),
        "{refused}"
    );

    // The mutating configuration may be picked up a moment after the validating one.
    let mut attempt = 0;
    let (made, kept) = eventually(SOON, "a ConfigMap annotated by the mutating hook", || {
        attempt += 1;
        let name = format!("kept-{attempt}");
        let made = kubectl(&["-n", &ns.0, "create", "configmap", &name, "--from-literal=a=1"]);
        if made.code != 0 {
            return Err(format!("{made:?}\n{}", runner.stderr()));
        }
        let kept = kubectl_json(&["-n", &ns.0, "get", "configmap", &name]);
        match kept["metadata"]["annotations"]["mutated"] == "yes" {
            true => Ok((made, kept)),
            false => Err(format!("{kept}\n{}", runner.stderr())),
        }
    });
    assert!(made.stderr.contains("seen by the hook"), "the hook's warning: {made:?}");
    let kept_name = kept["metadata"]["name"].clone();

    let crash =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "crash", "labels": {"crash": "yes"}}});
    let run = crate::support::try_apply(&ns.0, &crash);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("denied the request: Hook failed"), "{run:?}");

    // Registered as shell-operator registers: the binding's rules, its defaults, the path from its name.
    let mutating = kubectl_json(&["get", "mutatingwebhookconfiguration", &format!("{}-hooks", ns.0)]);
    let entry = &mutating["webhooks"][0];
    assert_eq!(entry["name"], "annotate.config-maps.example.com");
    assert_eq!(
        entry["clientConfig"]["url"],
        format!("https://127.0.0.1:{port}/hooks/annotate-config-maps-example-com")
    );
    assert_eq!(entry["failurePolicy"], "Fail");
    assert_eq!(entry["sideEffects"], "None");
    assert_eq!(entry["matchPolicy"], "Equivalent");
    assert_eq!(entry["admissionReviewVersions"], json!(["v1", "v1beta1"]));

    // The hook was given shell-operator's context: the binding, its type and the API server's request.
    let seen = hooks.contexts("validate");
    let kept_review = seen.iter().find(|c| c[0]["review"]["request"]["name"] == kept_name).expect("the review of kept");
    assert_eq!(kept_review[0]["binding"], "deny-labelled.samplectl.example.com");
    assert_eq!(kept_review[0]["type"], "Validating");
    assert_eq!(kept_review[0]["review"]["request"]["operation"], "CREATE");
    assert_eq!(kept_review[0]["review"]["request"]["object"]["metadata"]["annotations"]["mutated"], "yes");
    let (code, logged) = runner.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
}

/// An update of a custom resource of 1.3 MiB, whose review carries it twice (object and oldObject),
/// is reviewed by the hook and allowed: the review's body limit is sized from what the API server sends
/// (before, such a review was refused with a 413, and a `failurePolicy: Fail` webhook refused the write).
#[test]
fn an_update_of_a_large_object_is_reviewed_whole() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-large");
    let hooks = Hooks::new();
    let certs = hooks.dir.path().join("certs");
    certificates(&certs);
    let group = format!("{}.example.com", ns.0);
    let crd_name = format!("blobs.{group}");
    let _delete =
        Delete(vec![("validatingwebhookconfiguration", format!("{}-hooks", ns.0)), ("crd", crd_name.clone())]);
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    crate::support::apply(
        "default",
        &json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": crd_name},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
                     "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema}]}
        }),
    );
    crate::support::established(&[&format!("crd/{crd_name}")]);
    let config = format!(
        "configVersion: v1
kubernetesValidating:
- name: blobs.samplectl.example.com
  namespace: {{labelSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}}}
  rules:
  - {{apiGroups: ['{group}'], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [blobs], scope: Namespaced}}
  timeoutSeconds: 10",
        ns = ns.0
    );
    // Records the sizes it was given, and refuses only what is labelled deny=yes.
    let body = r#"export OUT
python3 - <<'PY'
import json, os, time
request = json.load(open(os.environ["BINDING_CONTEXT_PATH"]))[0]["review"]["request"]
sizes = {k: len(json.dumps(request.get(k) or {})) for k in ("object", "oldObject")}
open(os.path.join(os.environ["OUT"], "sizes-%d.json" % time.time_ns()), "w").write(json.dumps([{"operation": request["operation"], **sizes}]))
denied = request["object"]["metadata"].get("labels", {}).get("deny") == "yes"
open(os.environ["VALIDATING_RESPONSE_PATH"], "w").write(json.dumps({"allowed": not denied, "message": "labelled deny=yes"}))
PY"#;
    hooks.hook("large.sh", &config, body);
    let mut flags = webhook_flags("validating", &certs, free_port());
    flags.extend(["--validating-webhook-configuration-name".to_owned(), ns.0.clone()]);
    let runner = hooks.run(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let mut attempt = 0;
    eventually(SOON, "the webhook registered (a labelled Blob refused)", || {
        attempt += 1;
        let refused = json!({"apiVersion": format!("{group}/v1"), "kind": "Blob",
                             "metadata": {"name": format!("denied-{attempt}"), "labels": {"deny": "yes"}}});
        let run = crate::support::try_apply(&ns.0, &refused);
        match run.stderr.contains("denied the request: labelled deny=yes") {
            true => Ok(()),
            false => Err(format!("{run:?}\n{}", runner.stderr())),
        }
    });

    let large = |fill: &str| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "Blob", "metadata": {"name": "large"},
               "spec": {"data": fill.repeat(1_300_000)}})
    };
    crate::support::create(&ns.0, &large("a"));
    let file = hooks.dir.path().join("large.json");
    std::fs::write(&file, large("b").to_string()).unwrap();
    let replaced = kubectl(&["-n", &ns.0, "replace", "-f", file.to_str().unwrap()]);
    assert_eq!(replaced.code, 0, "{replaced:?}\n{}", tail(&runner.stderr(), 20));
    let stored = kubectl(&["-n", &ns.0, "get", "blob", "large", "-o", "jsonpath={.spec.data}"]);
    assert!(stored.stdout.len() == 1_300_000 && stored.stdout.starts_with('b'), "the update was stored");
    let update = hooks.contexts("sizes").into_iter().map(|c| c[0].clone()).find(|c| c["operation"] == "UPDATE");
    let update = update.expect("the hook reviewed the update");
    assert!(update["object"].as_u64().unwrap() > 1_300_000 && update["oldObject"].as_u64().unwrap() > 1_300_000);
    let (code, logged) = runner.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
}

/// `--webhook-runs-in-flight` caps one hook's runs from its webhooks: with one run in flight, a second
/// review waits until just before the API server's deadline (the `timeout` in its URL, less a second),
/// then is refused with code 429 in words, and the first is answered as its hook says.
#[test]
fn a_hooks_runs_in_flight_are_capped_and_the_next_review_refused_in_time() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-inflight");
    let hooks = Hooks::new();
    let certs = hooks.dir.path().join("certs");
    certificates(&certs);
    let _delete = Delete(vec![("validatingwebhookconfiguration", format!("{}-hooks", ns.0))]);
    // Registered for a namespace that does not exist: only the test's own reviews reach it.
    let config = "configVersion: v1
kubernetesValidating:
- name: slow.samplectl.example.com
  namespace: {labelSelector: {matchLabels: {kubernetes.io/metadata.name: samplectl-none}}}
  rules:
  - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}";
    hooks.hook(
        "slow.sh",
        config,
        r#"echo run >> "$OUT/runs"; sleep 4; echo '{"allowed": true}' > "$VALIDATING_RESPONSE_PATH""#,
    );
    let port = free_port();
    let mut flags = webhook_flags("validating", &certs, port);
    flags.extend(["--validating-webhook-configuration-name".to_owned(), ns.0.clone()]);
    flags.extend(["--webhook-runs-in-flight".to_owned(), "1".to_owned()]);
    let runner = hooks.run(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    eventually(SOON, "the webhook server listening", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).map(drop).map_err(|e| format!("{e}\n{}", runner.stderr()))
    });
    let review = |uid: &str| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": uid, "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "operation": "CREATE",
            "namespace": "samplectl-none", "name": "c",
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}}})
        .to_string()
    };
    let post = |uid: &str| {
        std::process::Command::new("curl")
            .args(["-s", "--cacert", certs.join("ca.crt").to_str().unwrap(), "-H", "Content-Type: application/json"])
            .args(["--data-binary", &review(uid)])
            .arg(format!("https://127.0.0.1:{port}/hooks/slow-samplectl-example-com?timeout=3s"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = post("first");
    eventually(SOON, "the first review's run started", || match hooks.lines("runs").len() {
        1 => Ok(()),
        n => Err(format!("{n} runs\n{}", runner.stderr())),
    });
    let started = std::time::Instant::now();
    let second = post("second").wait_with_output().unwrap();
    let waited = started.elapsed();
    let second: Value = serde_json::from_slice(&second.stdout).expect("a review answered");
    assert_eq!(second["response"]["uid"], "second");
    assert_eq!(second["response"]["allowed"], false, "{second}");
    assert_eq!(second["response"]["status"]["code"], 429, "{second}");
    let said = second["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("has 1 reviews in flight already; try again"), "{said}");
    assert!(waited >= Duration::from_millis(1500) && waited < Duration::from_secs(3), "waited {waited:?}");
    let first: Value = serde_json::from_slice(&first.wait_with_output().unwrap().stdout).expect("answered");
    assert_eq!(first["response"]["uid"], "first");
    assert_eq!(first["response"]["allowed"], true, "{first}");
    assert_eq!(hooks.lines("runs").len(), 1, "the refused review ran nothing");
    let (code, logged) = runner.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
}

/// A conversion binding points its CRD at samplectl's conversion server, and the API server's
/// conversions run the hook; the hook's own failedMessage reaches the client.
#[test]
fn conversion_webhooks_convert_between_a_crds_versions() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-convert");
    let hooks = Hooks::new();
    let certs = hooks.dir.path().join("certs");
    certificates(&certs);
    let group = format!("{}.example.com", ns.0);
    let crd_name = format!("crontabs.{group}");
    let _delete = Delete(vec![("crd", crd_name.clone())]);
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true, "schema": schema},
                              {"name": "v1alpha2", "served": true, "storage": false, "schema": schema}]}
    });
    crate::support::apply("default", &crd);
    let config = format!(
        "configVersion: v1
kubernetesCustomResourceConversion:
- name: alpha1_to_alpha2
  crdName: {crd_name}
  conversions:
  - {{fromVersion: {group}/v1alpha1, toVersion: {group}/v1alpha2}}
  - {{fromVersion: v1alpha2, toVersion: v1alpha1}}"
    );
    let body = format!(
        r#"cp "$BINDING_CONTEXT_PATH" "$OUT/convert-$(date +%s%N).json"
python3 - <<'PY'
import json, os
context = json.load(open(os.environ["BINDING_CONTEXT_PATH"]))[0]
out = []
for o in context["review"]["request"]["objects"]:
    cron = o.get("spec", {{}}).get("cron")
    if cron == ["fail"] or cron == "fail":
        open(os.environ["CONVERSION_RESPONSE_PATH"], "w").write(json.dumps({{"failedMessage": "cannot convert fail"}}))
        raise SystemExit(0)
    if context["toVersion"].endswith("v1alpha2"):
        o["apiVersion"] = "{group}/v1alpha2"
        o["spec"]["cron"] = " ".join(cron)
    else:
        o["apiVersion"] = "{group}/v1alpha1"
        o["spec"]["cron"] = cron.split(" ")
    out.append(o)
open(os.environ["CONVERSION_RESPONSE_PATH"], "w").write(json.dumps({{"convertedObjects": out}}))
PY"#
    );
    hooks.hook("convert.sh", &config, &body);
    let port = free_port();
    let flags = webhook_flags("conversion", &certs, port);
    let runner = hooks.run(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    eventually(SOON, "the CRD pointed at the conversion server", || {
        let crd = kubectl_json(&["get", "crd", &crd_name]);
        match crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"].as_str() {
            Some(url) if url == format!("https://127.0.0.1:{port}/{crd_name}") => Ok(()),
            _ => Err(format!("{}\n{}", crd["spec"]["conversion"], runner.stderr())),
        }
    });
    let stored = json!({"apiVersion": format!("{group}/v1alpha1"), "kind": "CronTab",
                        "metadata": {"name": "nightly", "namespace": ns.0},
                        "spec": {"cron": ["0", "3", "*", "*", "*"]}});
    crate::support::apply(&ns.0, &stored);
    let read = eventually(SOON, "the object read in v1alpha2", || {
        let run = kubectl(&["-n", &ns.0, "get", &format!("crontabs.v1alpha2.{group}"), "nightly", "-o", "json"]);
        match run.code {
            0 => Ok(serde_json::from_str::<Value>(&run.stdout).unwrap()),
            _ => Err(format!("{run:?}\n{}", runner.stderr())),
        }
    });
    assert_eq!(read["apiVersion"], format!("{group}/v1alpha2"));
    assert_eq!(read["spec"]["cron"], "0 3 * * *");
    // Written in v1alpha2, stored in v1alpha1: converted the other way.
    let written = json!({"apiVersion": format!("{group}/v1alpha2"), "kind": "CronTab",
                         "metadata": {"name": "hourly", "namespace": ns.0}, "spec": {"cron": "0 * * * *"}});
    crate::support::apply(&ns.0, &written);
    let back = kubectl_json(&["-n", &ns.0, "get", &format!("crontabs.v1alpha1.{group}"), "hourly"]);
    assert_eq!(back["spec"]["cron"], json!(["0", "*", "*", "*", "*"]));

    let contexts = hooks.contexts("convert");
    let first = &contexts[0][0];
    assert_eq!(first["binding"], "alpha1_to_alpha2");
    assert_eq!(first["type"], "Conversion");
    assert!(first["review"]["request"]["desiredAPIVersion"].is_string(), "{first}");

    let failing = json!({"apiVersion": format!("{group}/v1alpha1"), "kind": "CronTab",
                         "metadata": {"name": "broken", "namespace": ns.0}, "spec": {"cron": ["fail"]}});
    crate::support::apply(&ns.0, &failing);
    let run = kubectl(&["-n", &ns.0, "get", &format!("crontabs.v1alpha2.{group}"), "broken", "-o", "json"]);
    assert_ne!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("cannot convert fail"), "{run:?}");
    let (code, logged) = runner.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
}

/// Under `--leader-elect`, a standby serves reviews too (a Service may send them to any replica): a
/// binding that reads no snapshots is answered by its hook there, and one that does is refused with the
/// reason, since only the replica running the hooks has snapshots. The leader registers the URL of the
/// standby's server here, so that the API server's reviews reach the standby.
#[test]
fn a_standby_answers_reviews_that_need_no_snapshots() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-standby");
    let hooks = Hooks::new();
    let certs = hooks.dir.path().join("certs");
    certificates(&certs);
    let _delete = Delete(vec![("validatingwebhookconfiguration", format!("{}-hooks", ns.0))]);
    let config = format!(
        "configVersion: v1
kubernetes:
- {{name: maps, kind: ConfigMap, namespace: {{nameSelector: {{matchNames: [{ns}]}}}}, executeHookOnEvent: []}}
kubernetesValidating:
- name: plain.samplectl.example.com
  namespace: {{labelSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}}}
  labelSelector: {{matchLabels: {{check: plain}}}}
  rules: [{{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}}]
- name: snapshots.samplectl.example.com
  includeSnapshotsFrom: [maps]
  namespace: {{labelSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}}}
  labelSelector: {{matchLabels: {{check: snapshots}}}}
  rules: [{{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}}]",
        ns = ns.0
    );
    // The kubernetes binding's runs (on the leader) are not reviews.
    let body = r#"grep -q '"type":"Validating"' "$BINDING_CONTEXT_PATH" || exit 0
echo "$PPID" >> "$OUT/answered"
echo '{"allowed": false, "message": "refused by the hook"}' > "$VALIDATING_RESPONSE_PATH""#;
    hooks.hook("policy.sh", &config, body);
    let lease = format!("shell-{}", ns.0);
    let elect = ["--leader-elect", "--leader-election-id", &lease, "--leader-election-namespace", &ns.0];
    let (leader_port, standby_port) = (free_port(), free_port());
    // The leader registers the standby's address.
    let mut flags = webhook_flags("validating", &certs, leader_port);
    flags[1] = format!("https://127.0.0.1:{standby_port}");
    flags.extend(["--validating-webhook-configuration-name".to_owned(), ns.0.clone()]);
    let mut leader_flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    leader_flags.extend(elect);
    let leader = hooks.run(&leader_flags);
    eventually(SOON, "the first replica runs the hooks", || {
        if leader.stderr().contains("running 1 hooks") { Ok(()) } else { Err(leader.stderr()) }
    });
    let standby_flags = webhook_flags("validating", &certs, standby_port);
    let mut standby_flags: Vec<&str> = standby_flags.iter().map(String::as_str).collect();
    standby_flags.extend(elect);
    let standby = hooks.run(&standby_flags);
    let standby_pid = standby.child.id().to_string();

    let mut attempt = 0;
    let refused = eventually(SOON, "a review answered by the standby's hook", || {
        attempt += 1;
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": format!("plain-{attempt}"), "labels": {"check": "plain"}}});
        let run = crate::support::try_apply(&ns.0, &map);
        match run.code {
            0 => Err(format!("created\n{}", standby.stderr())),
            _ if run.stderr.contains("refused by the hook") => Ok(run.stderr),
            _ => Err(format!("{}\n{}", run.stderr, standby.stderr())),
        }
    });
    assert!(refused.contains("denied the request: refused by the hook"), "{refused}");
    assert!(hooks.lines("answered").iter().all(|pid| *pid == standby_pid), "{:?}", hooks.lines("answered"));
    assert!(!standby.stderr().contains("running 1 hooks"), "the standby ran the hooks: {}", standby.stderr());

    let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "with-snapshots", "labels": {"check": "snapshots"}}});
    let run = crate::support::try_apply(&ns.0, &map);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains(
            "binding \"snapshots.samplectl.example.com\" reads snapshots, and this replica does not run the hooks"
        ),
        "{}",
        run.stderr
    );
    let (code, logged) = standby.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
    let (code, logged) = leader.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{logged}");
}

/// Beyond shell-operator: with `--shard-ring`, each member's hooks see only its share of a binding's
/// objects. Members join and one is killed while the objects change; every change reaches some member's
/// hook (the last one is on every object at the end, as the hooks wrote it), no object is run by two
/// members at overlapping times, an object handed over is never said deleted, and an object deleted is
/// said deleted exactly once.
#[test]
fn a_shard_ring_shares_a_bindings_objects_and_hands_each_over_without_two_members_running_it() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("shell-ring");
    let hooks = Hooks::new();
    let config = format!(
        "configVersion: v1\nkubernetes:\n- apiVersion: v1\n  kind: ConfigMap\n  namespace:\n    nameSelector:\n      \
         matchNames: [{}]\n  labelSelector:\n    matchLabels:\n      app: ring\n  keepFullObjectsInMemory: false\n  \
         jqFilter: '{{name: .metadata.name, v: .data.v}}'",
        ns.0
    );
    // Each object a run carries: a line `name v event pid start end`, and the value written back as an
    // annotation, which kubectl then shows.
    let body = format!(
        r#"t0=$(date +%s%N)
items=$(jq -c '.[] | if .type == "Event" then [.filterResult.name, .filterResult.v, .watchEvent]
  elif .type == "Synchronization" then (.objects[] | [.filterResult.name, .filterResult.v, "Sync"]) else empty end' "$BINDING_CONTEXT_PATH")
sleep 1
t1=$(date +%s%N)
echo "$items" | while read -r item; do
  [ -z "$item" ] && continue
  name=$(jq -r '.[0]' <<<"$item"); v=$(jq -r '.[1]' <<<"$item"); ev=$(jq -r '.[2]' <<<"$item")
  echo "$name $v $ev $PPID $t0 $t1" >> "$OUT/runs"
  [ "$ev" = Deleted ] && continue
  jq -n --arg n "$name" --arg v "$v" '{{operation: "MergePatch", apiVersion: "v1", kind: "ConfigMap", namespace: "{ns}",
    name: $n, ignoreMissingObject: true, mergePatch: {{metadata: {{annotations: {{seen: $v}}}}}}}}' >> "$KUBERNETES_PATCH_PATH"
done"#,
        ns = ns.0
    );
    hooks.hook("objects.sh", &config, &body);
    let n = 24;
    let set = |i: usize, v: usize| {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm{i}"), "labels": {"app": "ring"}}, "data": {"v": v.to_string()}});
        crate::support::apply(&ns.0, &cm);
    };
    for i in 0..n {
        set(i, 0);
    }
    let ring = format!("hooks-{}", ns.0);
    let member = |name: &str| {
        let mut flags = vec!["--shard-ring", &ring, "--shard-member", name];
        flags.extend(short_leases(&ns.0));
        hooks.run(&flags)
    };
    let runs = || -> Vec<(String, String, String, u32, u128, u128)> {
        hooks
            .lines("runs")
            .iter()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                Some((
                    f[0].into(),
                    f[1].into(),
                    f[2].into(),
                    f[3].parse().ok()?,
                    f[4].parse().ok()?,
                    f[5].parse().ok()?,
                ))
            })
            .collect()
    };
    let seen = |wanted: &dyn Fn(usize) -> Option<String>| -> Result<(), String> {
        let listed = kubectl_json(&["-n", &ns.0, "get", "cm", "-l", "app=ring"]);
        let wrong: Vec<String> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|cm| {
                let name = cm["metadata"]["name"].as_str()?;
                let i: usize = name.trim_start_matches("cm").parse().ok()?;
                let has = cm["metadata"]["annotations"]["seen"].as_str().map(str::to_owned);
                (has != wanted(i)).then(|| format!("{name}: {has:?}"))
            })
            .collect();
        if wrong.is_empty() { Ok(()) } else { Err(format!("{wrong:?}")) }
    };

    let a = member("a");
    let b = member("b");
    eventually(Duration::from_secs(60), "every object run by a member", || {
        seen(&|_| Some("0".into())).map_err(|e| format!("{e}\n{}\n{}", a.stderr(), b.stderr()))
    });
    let pids = |runs: &[(String, String, String, u32, u128, u128)]| {
        runs.iter().map(|r| r.3).collect::<std::collections::BTreeSet<u32>>()
    };
    assert_eq!(pids(&runs()), [a.child.id(), b.child.id()].into(), "both members run objects");

    // A stream of changes, while a third member joins and the second is killed.
    let (a_pid, b_pid) = (a.child.id(), b.child.id());
    let mut b = Some(b);
    let mut b_log = String::new();
    let mut c = None;
    for round in 1..=6 {
        for i in 0..n {
            set(i, round);
        }
        if round == 2 {
            c = Some(member("c"));
        }
        if round == 4
            && let Some(b) = b.take()
        {
            b_log = b.stop("KILL", Duration::from_secs(5)).1;
        }
        std::thread::sleep(Duration::from_millis(700));
    }
    let c = c.unwrap();
    let c_pid = c.child.id();
    eventually(Duration::from_secs(60), "the last change on every object", || {
        seen(&|_| Some("6".into())).map_err(|e| format!("{e}\n{}\n{}", a.stderr(), c.stderr()))
    });
    assert!(pids(&runs()).contains(&c_pid), "the member that joined runs objects: {}", c.stderr());
    assert!(
        a.stderr().contains("handed over to shard member") || b_log.contains("handed over to shard member"),
        "{}\n{b_log}",
        a.stderr()
    );

    // Deletions are said once, by one member.
    for i in 0..4 {
        kubectl(&["-n", &ns.0, "delete", "cm", &format!("cm{i}")]).success();
    }
    eventually(SOON, "each deletion said", || {
        let deleted: Vec<_> = runs().into_iter().filter(|r| r.2 == "Deleted").collect();
        if deleted.len() >= 4 { Ok(()) } else { Err(format!("{deleted:?}")) }
    });
    std::thread::sleep(Duration::from_secs(2));
    let all = runs();
    let mut deleted: Vec<&str> = all.iter().filter(|r| r.2 == "Deleted").map(|r| r.0.as_str()).collect();
    deleted.sort();
    assert_eq!(deleted, ["cm0", "cm1", "cm2", "cm3"], "{all:?}");

    // No object run by two processes at overlapping times.
    let mut overlaps = Vec::new();
    for (i, x) in all.iter().enumerate() {
        for y in &all[i + 1..] {
            if x.0 == y.0 && x.3 != y.3 && x.4 < y.5 && y.4 < x.5 {
                overlaps.push(format!("{x:?} and {y:?}"));
            }
        }
    }
    assert!(overlaps.is_empty(), "{overlaps:?}");
    assert!(pids(&all).is_subset(&[a_pid, b_pid, c_pid].into()));
    for member in [a, c] {
        let (code, logged) = member.stop("TERM", Duration::from_secs(15));
        assert_eq!(code, Some(0), "{logged}");
    }
}

/// The zombies among `root`'s descendants, by pid.
fn zombies_below(root: u32) -> std::collections::BTreeSet<u32> {
    let mut parent = std::collections::HashMap::new();
    let mut zombie = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        if let (Some(state), Some(ppid)) = (fields.first(), fields.get(1).and_then(|p| p.parse::<u32>().ok())) {
            parent.insert(pid, ppid);
            if *state == "Z" {
                zombie.insert(pid);
            }
        }
    }
    let below = |mut pid: u32| {
        while let Some(&up) = parent.get(&pid) {
            if up == root {
                return true;
            }
            pid = up;
        }
        false
    };
    zombie.into_iter().filter(|&pid| below(pid)).collect()
}

#[test]
fn as_pid_one_samplectl_reaps_what_hooks_leave_behind() {
    let _cluster = crate::support::shared();
    let hooks = Hooks::new();
    // Each run leaves processes its shell never waits for; when the run ends they are given to PID 1.
    hooks.hook(
        "orphans.sh",
        "configVersion: v1\nschedule:\n- crontab: '*/1 * * * * *'",
        r#"( sleep 0.1 >/dev/null 2>&1 & ); ( sleep 0.1 >/dev/null 2>&1 & ); echo run >> "$OUT/runs""#,
    );
    let mut run = hooks.run_as_pid_one(&[]);
    eventually(SOON, "five runs", || match hooks.lines("runs").len() {
        n if n >= 5 => Ok(()),
        n => Err(format!("{n} runs")),
    });
    let unshare = run.child.id();
    let before = zombies_below(unshare);
    std::thread::sleep(Duration::from_secs(3));
    let after = zombies_below(unshare);
    let kept: Vec<_> = before.intersection(&after).collect();
    assert!(kept.is_empty(), "zombies left for 3 s: {kept:?}\n{}", run.stderr());
    // SIGTERM to PID 1 (as the kubelet sends it) reaches samplectl, which drains and exits 0, and PID 1
    // exits as samplectl did.
    let children = format!("/proc/{unshare}/task/{unshare}/children");
    let first = std::fs::read_to_string(&children).unwrap();
    let first = first.split_whitespace().next().expect("unshare's child, PID 1 of the namespace");
    let status = std::process::Command::new("kill").args(["-TERM", first]).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + SOON;
    let code = loop {
        if let Some(status) = run.child.try_wait().unwrap() {
            break status.code();
        }
        assert!(std::time::Instant::now() < deadline, "samplectl did not stop on SIGTERM:\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0), "{}", run.stderr());
}
