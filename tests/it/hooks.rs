//! `samplectl reconcile --hook`: the examples in examples/hooks run end to end with both drivers, every way
//! a hook can fail (and that a failure changes nothing), conflicts with objects the parent does not
//! control, finalizers, URL hooks, the refusals at start-up, and the Sample controller written as a hook
//! agreeing with the built-in one. Checked with kubectl.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Background, Namespace, apply, apply_sample, established, eventually, free_port, http_get, kubectl, kubectl_json,
    samplectl,
};

const SOON: Duration = Duration::from_secs(30);
const PYTHON: &str = "python3 examples/hooks/python/sync.py";
const SHELL: &str = "examples/hooks/shell/sync.sh";
const MODES: &str = "tests/fixtures/hook-modes.sh";
const GREETINGS: &str = "hooks.example.com/v1/greetings";
const NOTES: &str = "hooks.example.com/v1/notes";

#[derive(Clone, Copy, Debug)]
enum Driver {
    Poll,
    Watch,
}

impl Driver {
    fn args<'a>(self, ns: &'a str, gvr: &'a str, hook: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["reconcile", "-n", ns, "--gvr", gvr, "--child", "v1/configmaps", "--hook", hook];
        if let Driver::Watch = self {
            args.push("--watch");
        }
        args.extend_from_slice(extra);
        args
    }

    fn start(self, ns: &str, gvr: &str, hook: &str, extra: &[&str]) -> Background {
        Background::start(&self.args(ns, gvr, hook, extra))
    }

    fn once(self, ns: &str, gvr: &str, hook: &str, extra: &[&str]) -> crate::support::Run {
        let mut args = self.args(ns, gvr, hook, extra);
        args.push("--once");
        samplectl(&args)
    }
}

/// The example CRDs are cluster-wide and shared by every test here: applied once per run (tests applying
/// the same CRD side by side could race), never deleted.
pub fn example_crds() {
    static APPLIED: std::sync::Once = std::sync::Once::new();
    APPLIED.call_once(apply_example_crds);
}

fn apply_example_crds() {
    for crd in ["examples/hooks/python/crd.yaml", "examples/hooks/shell/crd.yaml"] {
        kubectl(&["apply", "-f", crd]).success();
    }
    for crd in ["greetings.hooks.example.com", "notes.hooks.example.com"] {
        established(&[&format!("crd/{crd}")]);
    }
}

fn get(ns: &str, kind: &str, name: &str) -> Option<Value> {
    let run = kubectl(&["get", kind, name, "-n", ns, "-o", "json", "--ignore-not-found"]).success();
    (!run.stdout.trim().is_empty()).then(|| serde_json::from_str(&run.stdout).unwrap())
}

fn configmaps(ns: &str) -> Vec<String> {
    let list = kubectl_json(&["get", "configmaps", "-n", ns, "-l", "app.kubernetes.io/managed-by=samplectl"]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cm| cm["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn events(ns: &str, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let list = kubectl_json(&["get", "events.events.k8s.io", "-n", ns]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == name && e["regarding"]["kind"] == kind)
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (text("type"), text("reason"), text("note"))
        })
        .collect()
}

fn ready(object: &Value) -> Option<&Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")
}

/// Waits until the parent's Ready condition has `status` and `reason`, for its current generation.
fn wait_ready(ns: &str, kind: &str, name: &str, status: &str, reason: &str) -> Value {
    eventually(SOON, &format!("{kind} {ns}/{name} Ready={status} ({reason})"), || {
        let object = get(ns, kind, name).ok_or("not there".to_owned())?;
        let observed = object["status"]["observedGeneration"] == object["metadata"]["generation"];
        match ready(&object) {
            Some(c) if c["status"] == status && c["reason"] == reason && observed => Ok(object.clone()),
            _ => Err(format!("status: {}", object["status"])),
        }
    })
}

fn greeting(name: &str, message: &str, copies: u32) -> Value {
    json!({"apiVersion": "hooks.example.com/v1", "kind": "Greeting", "metadata": {"name": name},
           "spec": {"message": message, "copies": copies}})
}

fn note(name: &str, text: &str) -> Value {
    json!({"apiVersion": "hooks.example.com/v1", "kind": "Note", "metadata": {"name": name}, "spec": {"text": text}})
}

/// The Python example: children created, updated and deleted as the Greeting changes, each labelled and
/// controlled by it; with --finalize, deleting the Greeting runs the hook until it says it is done.
fn python_example(driver: Driver) {
    example_crds();
    let ns = Namespace::new(&format!("hook-py-{driver:?}").to_lowercase());
    apply(&ns.0, &greeting("hello", "hello, world", 2));
    let controller = driver.start(&ns.0, GREETINGS, PYTHON, &["--finalize"]);

    let hello = wait_ready(&ns.0, "greeting", "hello", "True", "AllCopies");
    assert_eq!(hello["status"]["copies"], 2);
    assert_eq!(hello["metadata"]["finalizers"], json!(["samplectl.io/finalizer"]));
    assert_eq!(configmaps(&ns.0), ["hello-0", "hello-1"]);
    let child = get(&ns.0, "configmap", "hello-0").unwrap();
    assert_eq!(child["data"]["message"], "hello, world");
    assert_eq!(child["metadata"]["labels"]["greeting"], "hello", "the hook's own labels are kept");
    let owner = &child["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["uid"].as_str()), (Some("Greeting"), hello["metadata"]["uid"].as_str()));
    assert_eq!((owner["controller"].as_bool(), owner["blockOwnerDeletion"].as_bool()), (Some(true), Some(true)));

    apply(&ns.0, &greeting("hello", "bye", 1));
    eventually(SOON, "one ConfigMap saying bye", || {
        let data = get(&ns.0, "configmap", "hello-0").map(|cm| cm["data"]["message"].clone());
        match (configmaps(&ns.0).as_slice(), data) {
            ([only], Some(message)) if only == "hello-0" && message == "bye" => Ok(()),
            (names, message) => Err(format!("{names:?} {message:?}")),
        }
    });
    wait_ready(&ns.0, "greeting", "hello", "True", "AllCopies");
    let seen = events(&ns.0, "Greeting", "hello");
    for reason in ["ConfigMapCreated", "ConfigMapUpdated", "ConfigMapDeleted"] {
        assert!(seen.iter().any(|(t, r, _)| t == "Normal" && r == reason), "{reason} in {seen:?}");
    }

    kubectl(&["delete", "greeting", "hello", "-n", &ns.0, "--wait=false"]).success();
    eventually(SOON, "the Greeting finalized and gone", || {
        match (get(&ns.0, "greeting", "hello"), configmaps(&ns.0).is_empty()) {
            (None, true) => Ok(()),
            (greeting, _) => {
                Err(format!("{:?} {:?}", greeting.map(|g| g["metadata"]["finalizers"].clone()), configmaps(&ns.0)))
            }
        }
    });
    let (_, stderr) = controller.stop("TERM", Duration::from_secs(10));
    assert!(stderr.contains(&format!("{}/hello: hook: finalizing: 1 ConfigMaps left", ns.0)), "{stderr}");
    assert!(stderr.contains(&format!("{}/hello: finalized", ns.0)), "{stderr}");
}

#[test]
fn python_example_poll() {
    let _cluster = crate::support::shared();
    python_example(Driver::Poll);
}

#[test]
fn python_example_watch() {
    let _cluster = crate::support::shared();
    python_example(Driver::Watch);
}

/// The shell example: its ConfigMap is put back when edited or deleted, and its status holds the length.
fn shell_example(driver: Driver) {
    example_crds();
    let ns = Namespace::new(&format!("hook-sh-{driver:?}").to_lowercase());
    apply(&ns.0, &note("shopping", "eggs, milk, bread"));
    let controller = driver.start(&ns.0, NOTES, SHELL, &[]);
    let holds = |text: &str| {
        let text = text.to_owned();
        let ns = ns.0.clone();
        move || match get(&ns, "configmap", "note-shopping") {
            Some(cm) if cm["data"]["text"] == text.as_str() => Ok(cm),
            other => Err(format!("{other:?}")),
        }
    };
    eventually(SOON, "note-shopping", holds("eggs, milk, bread"));
    eventually(SOON, "the length in the status", || {
        let note = get(&ns.0, "note", "shopping").unwrap();
        if note["status"] == json!({"length": 17, "observedGeneration": 1}) {
            Ok(())
        } else {
            Err(note["status"].to_string())
        }
    });

    kubectl(&[
        "patch",
        "configmap",
        "note-shopping",
        "-n",
        &ns.0,
        "--type",
        "merge",
        "-p",
        r#"{"data":{"text":"by hand"}}"#,
    ])
    .success();
    eventually(SOON, "the edit undone", holds("eggs, milk, bread"));
    kubectl(&["delete", "configmap", "note-shopping", "-n", &ns.0]).success();
    eventually(SOON, "the ConfigMap put back", holds("eggs, milk, bread"));
    apply(&ns.0, &note("shopping", "tea"));
    eventually(SOON, "the new text", holds("tea"));
    let (code, stderr) = controller.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn shell_example_poll() {
    let _cluster = crate::support::shared();
    shell_example(Driver::Poll);
}

#[test]
fn shell_example_watch() {
    let _cluster = crate::support::shared();
    shell_example(Driver::Watch);
}

/// Each way a hook fails: exit 1 for `--once`, a log line and a Warning event naming the hook and the
/// problem, nothing changed for that parent, and the other parent still reconciled.
fn failures_change_nothing(driver: Driver) {
    example_crds();
    let ns = Namespace::new(&format!("hook-fail-{driver:?}").to_lowercase());
    apply(&ns.0, &note("good", "ok"));
    apply(&ns.0, &note("bad", "ok"));
    driver.once(&ns.0, NOTES, MODES, &[]).success();
    let before = get(&ns.0, "note", "bad").unwrap();
    assert_eq!(before["status"]["length"], 2);

    for (mode, problem) in [
        ("exit", "exited with status 3: something broke"),
        ("sleep", "did not answer within 5s"),
        ("garbage", "answered invalid JSON"),
        (
            "secret",
            "answered a child samplectl refuses: child Secret note-bad is a Secret.v1, which is not a --child type (they are: ConfigMap.v1)",
        ),
        (
            "elsewhere",
            "answered a child samplectl refuses: child ConfigMap note-bad is in namespace default, not in its parent's namespace",
        ),
    ] {
        apply(&ns.0, &note("bad", mode));
        apply(&ns.0, &note("good", &format!("fine {mode}")));
        // 5 s, not less: on a busy machine a hook that answers at once can take a second to start.
        let run = driver.once(&ns.0, NOTES, MODES, &["--hook-timeout", "5s"]);
        assert_eq!(run.code, 1, "{mode}: {run:#?}");
        let expected = format!("{}/bad: syncing: hook {MODES} {problem}", ns.0);
        assert!(run.stderr.contains(&expected), "{mode}: wanted {expected:?} in {run:#?}");
        assert!(
            run.stderr.contains(&format!("error: 1 Note is not Ready: {}/bad (syncing: hook {MODES}", ns.0)),
            "{run:#?}"
        );

        let bad = get(&ns.0, "note", "bad").unwrap();
        assert_eq!(bad["status"], before["status"], "{mode}: the status is left as it was");
        assert_eq!(get(&ns.0, "configmap", "note-bad").unwrap()["data"]["text"], "ok", "{mode}");
        assert!(get(&ns.0, "secret", "note-bad").is_none(), "{mode}");
        assert_eq!(get(&ns.0, "configmap", "note-good").unwrap()["data"]["text"], format!("fine {mode}"), "{mode}");
        eventually(SOON, "a SyncError event", || {
            let seen = events(&ns.0, "Note", "bad");
            let found = seen.iter().any(|(t, r, note)| {
                t == "Warning" && r == "SyncError" && note.starts_with("Sync error: ") && note.contains(problem)
            });
            if found { Ok(()) } else { Err(format!("{seen:?}")) }
        });
    }
    assert!(
        kubectl(&["get", "configmap", "note-bad", "-n", "default", "--ignore-not-found"]).success().stdout.is_empty(),
        "nothing was written to another namespace"
    );
}

#[test]
fn failures_change_nothing_poll() {
    let _cluster = crate::support::shared();
    failures_change_nothing(Driver::Poll);
}

#[test]
fn failures_change_nothing_watch() {
    let _cluster = crate::support::shared();
    failures_change_nothing(Driver::Watch);
}

/// An object of a child's name that the parent does not control is never touched: the parent's Ready
/// says ConfigMapConflict, with a Warning event; once it is gone, the child is made and the hook's own
/// Ready is back.
fn conflict(driver: Driver) {
    example_crds();
    let ns = Namespace::new(&format!("hook-conflict-{driver:?}").to_lowercase());
    kubectl(&["create", "configmap", "taken-0", "-n", &ns.0, "--from-literal=mine=yes"]).success();
    apply(&ns.0, &greeting("taken", "hi", 1));
    let controller = driver.start(&ns.0, GREETINGS, PYTHON, &[]);
    let blocked = wait_ready(&ns.0, "greeting", "taken", "False", "ConfigMapConflict");
    let message = ready(&blocked).unwrap()["message"].as_str().unwrap().to_owned();
    assert_eq!(
        message,
        format!("ConfigMap {}/taken-0 exists and is not controlled by this Greeting; samplectl leaves it alone", ns.0)
    );
    let theirs = get(&ns.0, "configmap", "taken-0").unwrap();
    assert_eq!(theirs["data"], json!({"mine": "yes"}));
    assert!(theirs["metadata"]["ownerReferences"].is_null());
    eventually(SOON, "a ConfigMapConflict event", || {
        let seen = events(&ns.0, "Greeting", "taken");
        if seen.iter().any(|(t, r, _)| t == "Warning" && r == "ConfigMapConflict") {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    });

    kubectl(&["delete", "configmap", "taken-0", "-n", &ns.0]).success();
    wait_ready(&ns.0, "greeting", "taken", "True", "AllCopies");
    assert_eq!(get(&ns.0, "configmap", "taken-0").unwrap()["data"], json!({"message": "hi"}));
    drop(controller);
}

#[test]
fn conflict_poll() {
    let _cluster = crate::support::shared();
    conflict(Driver::Poll);
}

#[test]
fn conflict_watch() {
    let _cluster = crate::support::shared();
    conflict(Driver::Watch);
}

/// The same hook served over HTTP (`sync.py --serve`), and a URL where nothing answers.
#[test]
fn a_url_hook_is_posted_to() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-url");
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .args(["examples/hooks/python/sync.py", "--serve", &port.to_string()])
        .spawn()
        .unwrap();
    eventually(SOON, "the hook server", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())
    });
    apply(&ns.0, &greeting("web", "over http", 1));
    let url = format!("http://127.0.0.1:{port}/sync");
    let args = ["reconcile", "-n", &ns.0, "--gvr", GREETINGS, "--child", "v1/configmaps", "--hook-url", &url, "--once"];
    let first = samplectl(&args);
    // The hook's Ready is False until it sees its ConfigMap, on the next pass.
    assert!(first.stderr.contains("configmap web-0 created"), "{first:#?}");
    samplectl(&args).success();
    assert_eq!(get(&ns.0, "configmap", "web-0").unwrap()["data"]["message"], "over http");
    let _ = server.kill();
    let _ = server.wait();

    let nowhere = format!("http://127.0.0.1:{}/sync", free_port());
    let args =
        ["reconcile", "-n", &ns.0, "--gvr", GREETINGS, "--child", "v1/configmaps", "--hook-url", &nowhere, "--once"];
    let run = samplectl(&args);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains(&format!("{}/web: syncing: hook {nowhere} cannot be reached", ns.0)), "{run:#?}");
}

/// What cannot work is refused before anything is written, with exit 1 and the reason.
#[test]
fn impossible_hook_controllers_are_refused() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-refused");
    let plain = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "plains.hooks.example.com"},
        "spec": {"group": "hooks.example.com", "scope": "Namespaced",
                 "names": {"kind": "Plain", "plural": "plains", "singular": "plain"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    apply(&ns.0, &plain);
    established(&["crd/plains.hooks.example.com"]);
    for (args, message) in [
        (
            vec!["--gvr", "hooks.example.com/v1/plains", "--hook", SHELL],
            "error: plains.hooks.example.com has no status subresource: writing a hook's status to it would bump its \
             generation and loop",
        ),
        (
            vec!["--gvr", NOTES, "--hook", SHELL, "--child", "rbac.authorization.k8s.io/v1/clusterroles"],
            "error: cannot reconcile with these child types: notes.hooks.example.com is namespaced and \
             clusterroles.rbac.authorization.k8s.io is not",
        ),
        (
            vec!["--gvr", NOTES, "--hook", SHELL, "--child", "v1/nothings"],
            "error: the server doesn't have a resource type \"v1/nothings\"",
        ),
    ] {
        let mut full = vec!["reconcile", "-n", ns.0.as_str(), "--once"];
        full.extend(args);
        let run = samplectl(&full);
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(run.stderr.contains(message), "wanted {message:?} in {run:#?}");
    }
    for (args, message) in [
        (vec!["--hook", "sh -c 'unclosed"], "cannot split"),
        (vec!["--hook-url", "ftp://x/"], "is not an http:// or https:// URL"),
        (vec!["--hook", SHELL, "--hook-url", "http://x/"], "cannot be used with"),
        (vec!["--hook-process", "  "], "the hook command is empty"),
        (vec!["--hook-process", SHELL, "--hook", SHELL], "cannot be used with"),
        (vec!["--hook", SHELL, "--hook-processes", "2"], "cannot be used with '--hook-processes <N>'"),
        (vec!["--hook-processes", "2"], "required arguments were not provided"),
        (vec!["--hook-process", SHELL, "--hook-processes", "0"], "0 is not in 1..=65535"),
    ] {
        let mut full = vec!["reconcile", "--gvr", NOTES];
        full.extend(args);
        let run = samplectl(&full);
        assert_eq!(run.code, 2, "{run:#?}");
        assert!(run.stderr.contains(message), "wanted {message:?} in {run:#?}");
    }
    kubectl(&["delete", "crd", "plains.hooks.example.com", "--wait=false"]).success();
}

/// The Sample controller written as a hook (examples/hooks/sample) and the built-in sync agree exactly:
/// after either one, the other has nothing to write.
#[test]
fn the_sample_hook_and_the_built_in_sync_agree() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    // The same hook once a process per call, once long-running.
    let forms = [
        ("--hook", "python3 examples/hooks/sample/sync.py"),
        ("--hook-process", "python3 examples/hooks/sample/sync.py --lines"),
    ];
    let writes = |run: &crate::support::Run| {
        let totals = run.stderr.lines().find(|l| l.contains("requests sent:")).unwrap_or_default().to_owned();
        totals.split_once('(').map(|(_, rest)| rest.split(' ').next().unwrap().to_owned()).unwrap_or(totals)
    };
    for (n, (flag, hook)) in forms.into_iter().enumerate() {
        let hooked = |ns: &str| {
            let gvr = "example.com/v1alpha1/samples";
            samplectl(&["reconcile", "-n", ns, "--gvr", gvr, "--child", "v1/configmaps", flag, hook, "--once"])
        };
        let ns = Namespace::new(&format!("hook-sample-a{n}"));
        apply_sample(&ns.0, "a", "one");
        apply_sample(&ns.0, "b", "");
        let first = hooked(&ns.0).success();
        assert_ne!(writes(&first), "0", "{flag}: {first:#?}");
        let built_in = samplectl(&["reconcile", "-n", &ns.0, "--once"]).success();
        assert_eq!(writes(&built_in), "0", "{flag}: the built-in sync found nothing to change: {built_in:#?}");

        let ns = Namespace::new(&format!("hook-sample-b{n}"));
        apply_sample(&ns.0, "c", "two");
        samplectl(&["reconcile", "-n", &ns.0, "--once"]).success();
        let after = hooked(&ns.0).success();
        assert_eq!(writes(&after), "0", "{flag}: the hook found nothing to change: {after:#?}");
    }
}

/// `--hook-process`: one process serves parent after parent, and each way it can fail fails only the
/// parent it was serving, while the other processes serve the rest.
#[test]
fn a_long_running_hook_serves_parent_after_parent_and_fails_one_at_a_time() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-process");
    let hook = "python3 tests/fixtures/hook-process-modes.py";
    let once = |extra: &[&str]| {
        let mut args = vec!["reconcile", "-n", &ns.0, "--gvr", NOTES, "--child", "v1/configmaps"];
        args.extend_from_slice(&["--hook-process", hook, "--once"]);
        args.extend_from_slice(extra);
        samplectl(&args)
    };
    let names = ["a", "b", "c", "d"];
    for name in names {
        apply(&ns.0, &note(name, &format!("text {name}")));
    }
    once(&["--hook-processes", "1"]).success();
    let served: Vec<Value> = names
        .iter()
        .map(|name| {
            let child = get(&ns.0, "configmap", &format!("note-{name}")).unwrap();
            assert_eq!(child["data"]["text"], format!("text {name}"), "each parent its own answer");
            assert_eq!(get(&ns.0, "note", name).unwrap()["status"]["length"], 6);
            child["data"]["pid"].clone()
        })
        .collect();
    assert!(served.iter().all(|pid| *pid == served[0]), "one process served them all: {served:?}");

    let before = get(&ns.0, "note", "a").unwrap();
    for (mode, problem) in [
        ("exit", "exited with status 3: something broke"),
        ("sleep", "did not answer within 5s"),
        ("garbage", "answered invalid JSON"),
        ("chatty", "answered invalid JSON"),
    ] {
        apply(&ns.0, &note("a", mode));
        for name in &names[1..] {
            apply(&ns.0, &note(name, &format!("{mode} {name}")));
        }
        // 5 s, not less: on a busy machine a hook process can take a second to start and answer.
        let run = once(&["--hook-timeout", "5s"]);
        assert_eq!(run.code, 1, "{mode}: {run:#?}");
        let expected = format!("{}/a: syncing: hook {hook} {problem}", ns.0);
        assert!(run.stderr.contains(&expected), "{mode}: wanted {expected:?} in {run:#?}");
        assert_eq!(get(&ns.0, "note", "a").unwrap()["status"], before["status"], "{mode}: left as it was");
        assert_eq!(get(&ns.0, "configmap", "note-a").unwrap()["data"]["text"], "text a", "{mode}");
        for name in &names[1..] {
            let child = get(&ns.0, "configmap", &format!("note-{name}")).unwrap();
            assert_eq!(child["data"]["text"], format!("{mode} {name}"), "{mode}: {name} got its own answer");
        }
    }
}

/// A hook's child is created with a POST, so its fields are first owned by that create; before its first
/// apply they are made samplectl's applied ones, so that the apply drops what the hook no longer answers
/// (here the Service's old port, which would otherwise stay beside the new one).
#[test]
fn a_hook_childs_first_apply_drops_what_its_create_wrote() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-first-apply");
    let hook = "python3 tests/fixtures/hook-service.py";
    let once =
        || samplectl(&["reconcile", "-n", &ns.0, "--gvr", NOTES, "--child", "v1/services", "--hook", hook, "--once"]);
    let ports = || {
        let service = get(&ns.0, "service", "note-n").expect("the Service");
        let ports: Vec<Value> =
            service["spec"]["ports"].as_array().unwrap().iter().map(|p| p["port"].clone()).collect();
        (ports, service)
    };
    apply(&ns.0, &note("n", "ab"));
    once().success();
    let (created, service) = ports();
    assert_eq!(created, [json!(1002)]);
    let managers = |service: &Value| -> Vec<(String, String)> {
        service["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["manager"].as_str().unwrap().to_owned(), e["operation"].as_str().unwrap().to_owned()))
            .collect()
    };
    let with_fields = kubectl_json(&["get", "service", "note-n", "-n", &ns.0, "--show-managed-fields"]);
    assert_eq!(managers(&with_fields), [("samplectl".to_owned(), "Update".to_owned())], "{service}");

    apply(&ns.0, &note("n", "abcd"));
    let run = once();
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(ports().0, [json!(1004)], "the old port is gone");
    let with_fields = kubectl_json(&["get", "service", "note-n", "-n", &ns.0, "--show-managed-fields"]);
    assert_eq!(managers(&with_fields), [("samplectl".to_owned(), "Apply".to_owned())]);
    assert_eq!(get(&ns.0, "note", "n").unwrap()["status"]["length"], 4);
}

/// Leader election, metrics and JSON logs work with a hook as with the built-in sync.
#[test]
fn hooks_run_with_leader_election_metrics_and_json_logs() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-lead");
    apply(&ns.0, &note("n", "abc"));
    let port = free_port().to_string();
    let metrics = format!("127.0.0.1:{port}");
    let controller = Background::start(&[
        "--log-format",
        "json",
        "reconcile",
        "-n",
        &ns.0,
        "--gvr",
        NOTES,
        "--child",
        "v1/configmaps",
        "--hook",
        SHELL,
        "--watch",
        "--leader-elect",
        "--leader-election-namespace",
        &ns.0,
        "--metrics-addr",
        &metrics,
    ]);
    eventually(SOON, "note-n", || get(&ns.0, "configmap", "note-n").ok_or("not yet".to_owned()));
    let lease = kubectl_json(&["get", "lease", "samplectl-leader", "-n", &ns.0]);
    assert!(lease["spec"]["holderIdentity"].is_string(), "{lease}");
    let (status, text) = http_get(port.parse().unwrap(), "/metrics").expect("metrics answer");
    assert_eq!(status, 200);
    assert!(text.contains("samplectl_leader 1"), "{text}");
    assert!(text.contains(r#"samplectl_reconcile_total{controller="hook",result="ready"}"#), "{text}");
    let (code, stderr) = controller.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    let created = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["outcome"] == "created" || l["outcome"] == "created");
    let created = created.unwrap_or_else(|| panic!("no created line in {stderr}"));
    let field = |k: &str| created.get(k).or_else(|| created["fields"].get(k)).cloned().unwrap_or(Value::Null);
    assert_eq!(
        (field("namespace"), field("name"), field("child")),
        (json!(ns.0), json!("n"), json!(format!("{}/note-n", ns.0)))
    );
}

/// Takes nothing: the hook stops wanting a child at the moment someone takes that child over (removes
/// its owner reference). However the two interleave, a child that was taken over is never deleted: the
/// delete is preconditioned on the version samplectl read, and a child no longer the parent's is left.
/// SAMPLECTL_HOOK_RACES sets the number of rounds (default 40).
#[test]
fn a_child_taken_over_as_it_is_dropped_is_never_deleted() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-takeover");
    let rounds: usize = std::env::var("SAMPLECTL_HOOK_RACES").ok().and_then(|n| n.parse().ok()).unwrap_or(40);
    apply(&ns.0, &greeting("race", "x", 2));
    let controller = Driver::Watch.start(&ns.0, GREETINGS, PYTHON, &[]);
    let (mut taken, mut deleted_first) = (0, 0);
    for round in 0..rounds {
        eventually(SOON, "two controlled ConfigMaps", || {
            let owned = ["race-0", "race-1"]
                .iter()
                .filter(|name| {
                    get(&ns.0, "configmap", name).is_some_and(|cm| cm["metadata"]["ownerReferences"].is_array())
                })
                .count();
            if owned == 2 { Ok(()) } else { Err(format!("round {round}: {owned} owned\n{}", controller.stderr())) }
        });
        let ns_a = ns.0.clone();
        let drop_it = std::thread::spawn(move || apply(&ns_a, &greeting("race", "x", 1)));
        // Either may come first: the takeover waits 0 to 600 ms, past the hook's reaction.
        std::thread::sleep(Duration::from_millis(150 * (round as u64 % 5)));
        let take = kubectl(&[
            "patch",
            "configmap",
            "race-1",
            "-n",
            &ns.0,
            "--type",
            "json",
            "-p",
            r#"[{"op": "remove", "path": "/metadata/ownerReferences"}]"#,
        ]);
        drop_it.join().unwrap();
        // Settled: the hook's one ConfigMap is Ready (or the parent waits on nothing more).
        eventually(SOON, "the Greeting settled", || {
            let race = get(&ns.0, "greeting", "race").unwrap();
            let observed = race["status"]["observedGeneration"] == race["metadata"]["generation"];
            if observed && race["status"]["copies"] == 1 { Ok(()) } else { Err(race["status"].to_string()) }
        });
        let left = get(&ns.0, "configmap", "race-1");
        if take.code == 0 {
            taken += 1;
            let left = left.unwrap_or_else(|| panic!("round {round}: a ConfigMap taken over was deleted"));
            assert!(left["metadata"]["ownerReferences"].is_null(), "round {round}: it was taken back: {left}");
            kubectl(&["delete", "configmap", "race-1", "-n", &ns.0]).success();
        } else {
            deleted_first += 1;
            assert!(left.is_none(), "round {round}: dropped but not deleted");
        }
        apply(&ns.0, &greeting("race", "x", 2));
    }
    eprintln!("{rounds} rounds: taken over first {taken}, deleted first {deleted_first}");
}

/// A status field the parent's schema does not declare (here `observedGeneration`) is pruned by the API
/// server, as on any update, rather than refused, and the pruned status is not written again and again.
#[test]
fn a_status_the_schema_prunes_is_written_once() {
    let _cluster = crate::support::shared();
    let ns = Namespace::new("hook-prune");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "tersenotes.hooks.example.com"},
        "spec": {"group": "hooks.example.com", "scope": "Namespaced",
                 "names": {"kind": "TerseNote", "plural": "tersenotes", "singular": "tersenote"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "properties": {"text": {"type": "string"}}},
                                   "status": {"type": "object", "properties": {"length": {"type": "integer"}}}}}}}]},
    });
    apply(&ns.0, &crd);
    established(&["crd/tersenotes.hooks.example.com"]);
    let terse = json!({"apiVersion": "hooks.example.com/v1", "kind": "TerseNote", "metadata": {"name": "t"},
                       "spec": {"text": "abcd"}});
    apply(&ns.0, &terse);
    let controller = Driver::Watch.start(&ns.0, "hooks.example.com/v1/tersenotes", SHELL, &[]);
    eventually(SOON, "the pruned status", || {
        let status = get(&ns.0, "tersenote", "t").unwrap()["status"].clone();
        if status == json!({"length": 4}) { Ok(()) } else { Err(status.to_string()) }
    });
    // Long enough for a write loop to show: every status write comes back as a watch event.
    std::thread::sleep(Duration::from_secs(3));
    let (code, stderr) = controller.stop("TERM", Duration::from_secs(10));
    assert_eq!(code, Some(0), "{stderr}");
    let totals = stderr.lines().find(|l| l.contains("requests sent:")).unwrap();
    assert!(totals.contains("patch tersenotes/status 1,"), "one status write: {totals}");
    assert!(stderr.contains("Warning: unknown field \"status.observedGeneration\""), "{stderr}");
}

/// A hook controller sharded (`--shard-ring`): Notes and their ConfigMaps follow their member as the ring
/// grows and a member leaves, each ConfigMap labelled for the member its Note is labelled for.
#[test]
fn shell_example_sharded() {
    let _cluster = crate::support::shared();
    example_crds();
    let ns = Namespace::new("hook-sharded");
    let member = |name: &str, driver: Driver| {
        let extra = [
            "--shard-ring",
            "notes",
            "--shard-member",
            name,
            "--leader-election-namespace",
            &ns.0,
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "500ms",
        ];
        driver.start(&ns.0, NOTES, SHELL, &extra)
    };
    let items = |text: &str| {
        let items: Vec<Value> = (0..12).map(|i| note(&format!("n{i:02}"), &format!("{text} {i}"))).collect();
        json!({"apiVersion": "v1", "kind": "List", "items": items})
    };
    let mut members = vec![member("a", Driver::Watch), member("b", Driver::Poll)];
    apply(&ns.0, &items("first"));
    let settled = |text: &str, live: &[&str]| {
        let notes = crate::support::kubectl_json(&["get", "notes", "-n", &ns.0]);
        let mut wrong = Vec::new();
        for n in notes["items"].as_array().unwrap() {
            let name = n["metadata"]["name"].as_str().unwrap();
            let owner = n["metadata"]["labels"]["shard.samplectl.io/notes"].as_str().unwrap_or("-");
            let cm = get(&ns.0, "configmap", &format!("note-{name}"));
            let cm_owner = cm.as_ref().and_then(|c| c["metadata"]["labels"]["shard.samplectl.io/notes"].as_str());
            let want = format!("{text} {}", name[1..].parse::<usize>().unwrap());
            let right = cm.as_ref().is_some_and(|c| c["data"]["text"] == want.as_str());
            // Labelled for a member's incarnation: its name, '_' and its process's id.
            let member = owner.split('_').next().unwrap_or_default();
            if !live.contains(&member) || cm_owner != Some(owner) || !right {
                wrong.push(format!("{name} on {owner}, its ConfigMap on {cm_owner:?}, right: {right}"));
            }
        }
        match wrong.is_empty() {
            true => Ok(()),
            false => Err(wrong.join("; ")),
        }
    };
    eventually(Duration::from_secs(60), "the Notes on a and b", || settled("first", &["a", "b"]));
    members.push(member("c", Driver::Watch));
    apply(&ns.0, &items("second"));
    eventually(Duration::from_secs(60), "the Notes on a, b and c", || {
        settled("second", &["a", "b", "c"])?;
        let owners = crate::support::kubectl(&["get", "notes", "-n", &ns.0, "-L", "shard.samplectl.io/notes"]).stdout;
        match owners.lines().any(|l| l.split_whitespace().last().is_some_and(|m| m.starts_with("c_"))) {
            true => Ok(()),
            false => Err(format!("c holds none yet:\n{owners}")),
        }
    });
    let (code, log) = members.remove(0).stop("TERM", Duration::from_secs(15));
    assert_eq!(code, Some(0), "{log}");
    apply(&ns.0, &items("third"));
    eventually(Duration::from_secs(60), "the Notes on b and c", || settled("third", &["b", "c"]));
}
