//! Requests that never get an answer (a half-open connection, a wedged API server) cannot stall the
//! controller: every request and every reconcile has a deadline, in both drivers, and a Sample whose
//! requests hang holds one concurrency slot for a bounded time, never the others' progress.

use std::time::Duration;

use crate::support::hang::HangingProxy;
use crate::support::{
    Background, Namespace, create, eventually, free_port, http_get, kubectl, kubectl_json, sample, sample_ready,
    samplectl,
};
use serde_json::json;

fn create_samples(ns: &str, names: &[String]) {
    let items: Vec<_> = names.iter().map(|n| sample(n, "x")).collect();
    create(ns, &json!({"apiVersion": "v1", "kind": "List", "items": items}));
}

/// Ready, and its ConfigMap there.
fn ready(ns: &str, name: &str) -> bool {
    sample_ready(ns, name) && kubectl(&["get", "configmap", name, "-n", ns]).code == 0
}

fn started(controller: &Background) {
    eventually(Duration::from_secs(20), "the controller started", || {
        let log = controller.stderr();
        if log.contains("reconciling Samples") { Ok(()) } else { Err(log) }
    });
}

/// Eight Samples whose every request hangs (as many as the controller's concurrency), then healthy ones:
/// the healthy ones become Ready while the hung ones are still failing.
#[test]
fn samples_whose_requests_hang_do_not_stop_the_others() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let proxy = HangingProxy::start();
    proxy.hang_requests_containing("hang-me-");
    let dir = tempfile::tempdir().unwrap();
    for driver in ["watch", "poll"] {
        let ns = Namespace::new(&format!("hung-{driver}"));
        let mut args = vec!["reconcile", "-n", &ns.0, "--concurrency", "8"];
        if driver == "watch" {
            args.push("--watch");
        }
        let controller = proxy.samplectl(dir.path(), &args);
        started(&controller);
        let hung: Vec<String> = (0..8).map(|i| format!("hang-me-{i}")).collect();
        let before = proxy.hung.load(std::sync::atomic::Ordering::Relaxed);
        create_samples(&ns.0, &hung);
        eventually(Duration::from_secs(20), "eight requests hang", || {
            match proxy.hung.load(std::sync::atomic::Ordering::Relaxed) - before {
                n if n >= 8 => Ok(()),
                n => Err(format!("{n} hung")),
            }
        });
        let healthy: Vec<String> = (0..3).map(|i| format!("healthy-{i}")).collect();
        create_samples(&ns.0, &healthy);
        eventually(Duration::from_secs(40), &format!("{driver}: healthy Samples Ready"), || {
            match healthy.iter().filter(|n| !ready(&ns.0, n)).count() {
                0 => Ok(()),
                n => Err(format!("{n} not Ready\n{}", controller.stderr())),
            }
        });
        assert!(hung.iter().all(|n| !ready(&ns.0, n)), "the hung Samples cannot have been reconciled");
        let log = controller.stderr();
        assert!(log.contains("did not answer within 10s"), "{driver}: requests time out:\n{log}");
    }
}

/// The poll driver does not wait for its slowest reconcile before it looks at the next Samples: with one
/// Sample's request hanging, a Sample created just after the hang began is Ready before that hung
/// request has reached its own 10 s deadline.
#[test]
fn a_slow_sample_does_not_hold_up_the_poll_drivers_next_tick() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let proxy = HangingProxy::start();
    proxy.hang_requests_containing("slow-one");
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("slow-poll");
    let controller = proxy.samplectl(dir.path(), &["reconcile", "-n", &ns.0]);
    started(&controller);
    create_samples(&ns.0, &["slow-one".to_owned()]);
    let hung_at = eventually(Duration::from_secs(20), "the slow Sample's request hangs", || {
        match proxy.hung.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Err("none yet".into()),
            _ => Ok(std::time::Instant::now()),
        }
    });
    create_samples(&ns.0, &["quick-one".to_owned()]);
    eventually(Duration::from_secs(60), "the quick Sample is Ready", || {
        if ready(&ns.0, "quick-one") { Ok(()) } else { Err(controller.stderr()) }
    });
    let waited = hung_at.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "the quick Sample was Ready only {waited:?} after the slow one's request hung: it waited for it\n{}",
        controller.stderr()
    );
}

/// A managed ConfigMap deleted while only the ConfigMap watch is down, and that watch answered 410
/// Expired when it comes back, as after a compaction: the watcher relists, so the deletion never arrives
/// as an event, and the Samples' own watch saw nothing. The ConfigMap is recreated within seconds all the
/// same, not at the next resync (an hour here).
#[test]
fn a_configmap_deleted_while_its_watch_relists_is_recreated() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let proxy = HangingProxy::start();
    let dir = tempfile::tempdir().unwrap();
    let ns = Namespace::new("relist-cm");
    let controller = proxy.samplectl(dir.path(), &["reconcile", "-n", &ns.0, "--watch", "--resync", "1h"]);
    started(&controller);
    let names: Vec<String> = ["kept", "deleted"].map(String::from).to_vec();
    create_samples(&ns.0, &names);
    eventually(Duration::from_secs(20), "both Samples Ready", || {
        match names.iter().filter(|n| !ready(&ns.0, n)).count() {
            0 => Ok(()),
            n => Err(format!("{n} not Ready\n{}", controller.stderr())),
        }
    });

    // The watch of samplectl's labelled ConfigMaps (not the metadata-only one of all other ConfigMaps).
    let watch = [&*format!("/namespaces/{}/configmaps?", ns.0), "watch=true", "managed-by%3Dsamplectl"];
    // Its request may follow the first list by a moment on a busy machine.
    eventually(Duration::from_secs(10), "the ConfigMap watch is open", || match proxy.connections_containing(&watch) {
        0 => Err(controller.stderr()),
        _ => Ok(()),
    });
    let expiry = proxy.expire_next_request_containing(&watch);
    // At least the live watch; an earlier one the server ended may sit idle in the client's pool. The log
    // line checked at the end shows that the live one was among those cut.
    let cut = proxy.cut_connections_containing(&watch);
    assert!(cut >= 1, "no connection holds the watch of the labelled ConfigMaps");
    eventually(Duration::from_secs(20), "the watch reconnects and is held", || {
        if expiry.held() { Ok(()) } else { Err(controller.stderr()) }
    });
    let cm = kubectl_json(&["get", "configmap", "deleted", "-n", &ns.0]);
    kubectl(&["delete", "configmap", "deleted", "-n", &ns.0]).success();
    expiry.release();

    let recreated = eventually(Duration::from_secs(15), "the deleted ConfigMap recreated", || {
        let now = kubectl(&["get", "configmap", "deleted", "-n", &ns.0, "-o=jsonpath={.metadata.uid}"]);
        match now.code {
            0 if !now.stdout.is_empty() => Ok(now.stdout),
            _ => Err(controller.stderr()),
        }
    });
    assert_ne!(recreated, cm["metadata"]["uid"].as_str().unwrap(), "a new ConfigMap, not the old one");
    let log = controller.stderr();
    assert!(log.contains("the watch of ConfigMaps was cut"), "the relist is what happened:\n{log}");
    assert!(ready(&ns.0, "kept") && ready(&ns.0, "deleted"), "{log}");
}

/// `--from-cluster` lists the controller objects before it follows them: a list that never gets an
/// answer ends at the client's deadline and is tried again, so the fleet comes up once the API server
/// answers (it waited for good before).
#[test]
fn a_hung_list_of_controller_objects_is_tried_again() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd", "--metacontroller"]).success();
    let ns = Namespace::new("hung-fleet");
    let proxy = HangingProxy::start();
    let list = "/compositecontrollers?";
    proxy.hang_requests_containing(list);
    let dir = tempfile::tempdir().unwrap();
    let health = free_port();
    let label = format!("samplectl-test={}", ns.0);
    let fleet = proxy.samplectl(
        dir.path(),
        &[
            "reconcile",
            "--from-cluster",
            "--target-label-selector",
            &label,
            "-n",
            &ns.0,
            "--watch",
            "--health-addr",
            &format!("127.0.0.1:{health}"),
        ],
    );
    eventually(Duration::from_secs(20), "the list of CompositeControllers hangs", || {
        match proxy.hung.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Err(fleet.stderr()),
            _ => Ok(()),
        }
    });
    proxy.stop_hanging(list);
    let hung_at = std::time::Instant::now();
    eventually(Duration::from_secs(60), "/readyz ok once the list is answered", || match http_get(health, "/readyz") {
        Some((200, body)) if body == "ok" => Ok(()),
        other => Err(format!("{other:?}\n{}", fleet.stderr())),
    });
    let log = fleet.stderr();
    assert!(log.contains("did not answer within 30s"), "the hung list ended at its deadline:\n{log}");
    eprintln!("ready {:.1}s after the API server answered again", hung_at.elapsed().as_secs_f64());
}

/// `--metrics-secure` asks the API server who a scraper is: a review that never gets an answer ends at
/// the client's deadline with a 500 that says so, rather than holding the scrape (and a task) for good,
/// and the next scrape is decided once the API server answers.
#[test]
fn a_hung_access_review_does_not_hold_a_scrape() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    let ns = Namespace::new("hung-review");
    let proxy = HangingProxy::start();
    proxy.hang_requests_containing("/tokenreviews");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let controller = proxy.samplectl(
        dir.path(),
        &["reconcile", "-n", &ns.0, "--watch", "--metrics-addr", &format!("127.0.0.1:{port}"), "--metrics-secure"],
    );
    eventually(Duration::from_secs(20), "metrics served", || {
        let log = controller.stderr();
        if log.contains("metrics on https://") { Ok(()) } else { Err(log) }
    });
    let scrape = move |token: &str| scrape_metrics(port, token);
    // As many callers with new tokens as reviews may be in flight: each review hangs.
    let started = std::time::Instant::now();
    let hung: Vec<_> = (0..8)
        .map(|n| std::thread::spawn(move || scrape_metrics(port, &format!("a-token-nobody-can-check-{n}"))))
        .collect();
    eventually(Duration::from_secs(20), "eight reviews in flight", || {
        match proxy.connections_containing(&["/tokenreviews"]) {
            8.. => Ok(()),
            n => Err(format!("{n} in flight")),
        }
    });
    // One more new token: no room, told so at once rather than queued behind them.
    let (code, body) = scrape("one-too-many");
    assert_eq!((code, body.as_str()), (429, "Too Many Requests"));
    for caller in hung {
        let (code, body) = caller.join().unwrap();
        assert_eq!(code, 500, "{body}\n{}", controller.stderr());
        // The API server's words stay in the log: the caller is not authenticated.
        assert_eq!(body, "Internal Server Error");
    }
    let waited = started.elapsed();
    assert!(controller.stderr().contains("did not answer within 30s"), "{}", controller.stderr());
    assert!(waited < Duration::from_secs(60), "answered after {waited:?}");
    proxy.stop_hanging("/tokenreviews");
    let (code, body) = scrape("another-token-nobody-knows");
    assert_eq!((code, body.as_str()), (401, "Unauthorized"), "decided once the API server answers");
}

/// `/metrics` scraped over HTTPS with `token`: the status code and the body.
fn scrape_metrics(port: u16, token: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "90", "-w", "\n%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("https://127.0.0.1:{port}/metrics"))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').map(|(b, c)| (b.to_owned(), c.to_owned())).unwrap_or_default();
    (code.trim().parse::<u16>().unwrap_or(0), body)
}
