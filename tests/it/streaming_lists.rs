//! The watch driver's lists: streamed (the API server's WatchList: a watch that first sends every object)
//! where the API server serves them, and in pages where it refuses them, with the same result.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::hang::HangingProxy;
use crate::support::{Background, Namespace, apply_sample, eventually, sample_ready, samplectl};

fn all_ready(ns: &str, names: &[&str], controller: &Background) {
    eventually(Duration::from_secs(30), "every Sample Ready", || {
        match names.iter().filter(|n| !sample_ready(ns, n)).count() {
            0 => Ok(()),
            n => Err(format!("{n} not Ready\n{}", controller.stderr())),
        }
    });
}

#[test]
fn lists_are_streamed_and_paged_where_streaming_is_refused() {
    let _cluster = crate::support::shared();
    samplectl(&["install-crd"]).success();
    for refused in [false, true] {
        let ns = Namespace::new(if refused { "stream-refused" } else { "stream-served" });
        apply_sample(&ns.0, "before", "x");
        let proxy = HangingProxy::start();
        if refused {
            // What an API server without WatchList (before 1.27, or with the feature off) answers.
            proxy.refuse_requests_containing("sendInitialEvents=true");
        }
        let dir = tempfile::tempdir().unwrap();
        let controller = proxy.samplectl(dir.path(), &["reconcile", "-n", &ns.0, "--watch"]);
        all_ready(&ns.0, &["before"], &controller);
        // And the watch that follows the list works: a Sample created now is reconciled.
        apply_sample(&ns.0, "after", "y");
        all_ready(&ns.0, &["before", "after"], &controller);
        let (_, log) = controller.stop("TERM", Duration::from_secs(10));
        let totals = log.lines().find(|l| l.contains("requests sent")).unwrap_or_default().to_owned();
        let fell_back = log.contains("the API server does not stream lists of Samples; listing them in pages");
        match refused {
            false => {
                assert!(!fell_back && !totals.contains("list samples"), "streamed, not listed:\n{log}");
                assert_eq!(proxy.refused.load(Ordering::Relaxed), 0);
            }
            true => {
                assert!(fell_back, "{log}");
                assert!(totals.contains("list samples") && totals.contains("list configmaps"), "{totals}");
                assert!(proxy.refused.load(Ordering::Relaxed) >= 3, "each feed tried streaming once");
            }
        }
    }
}
