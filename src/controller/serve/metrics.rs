//! The controller's Prometheus metrics, named in Prometheus style under `samplectl_`: reconciles by
//! result, their duration, errors, work in flight and waiting, leadership, and the API requests samplectl
//! sent by verb and resource (from the client's request counter).

use std::fmt::Write as _;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cluster::requests::RequestCounter;
use crate::controller::rules::shell::metrics::Series;

/// A reconcile's labels: which controller (`samples`, `hook`, or a controller object's name, as
/// controller-runtime labels its metrics) and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub controller: String,
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    requests: RequestCounter,
    reconciles: Family<ResultLabel, Counter>,
    errors: Counter,
    duration: Histogram,
    pub in_flight: Gauge,
    pub backlog: Gauge,
    pub leader: Gauge,
    /// What shell-operator hooks wrote to their metrics files.
    pub hooks: std::sync::Mutex<Series>,
}

impl Metrics {
    pub fn new(requests: RequestCounter) -> Self {
        let mut registry = Registry::with_prefix("samplectl");
        let reconciles = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reconcile",
            "Reconciles (and shell-operator hook runs) by controller and result (ready, not_ready, deleting, ignored, success, error)",
            reconciles.clone(),
        );
        let errors = Counter::default();
        registry.register("reconcile_errors", "Reconciles that failed and were retried with backoff", errors.clone());
        // 5 ms to about 40 s, as controller-runtime's reconcile_time_seconds spans.
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register("reconcile_duration_seconds", "Time one reconcile of a Sample took", duration.clone());
        let in_flight = Gauge::default();
        registry.register("reconcile_in_flight", "Reconciles running now", in_flight.clone());
        let backlog = Gauge::default();
        registry.register("reconcile_backlog", "Samples the last poll pass found out of date", backlog.clone());
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader lease (or runs without election)",
            leader.clone(),
        );
        Metrics {
            registry,
            requests,
            reconciles,
            errors,
            duration,
            in_flight,
            backlog,
            leader,
            hooks: Default::default(),
        }
    }

    pub fn reconciled(&self, controller: &str, result: &'static str, took: Duration) {
        self.reconciles.get_or_create(&ResultLabel { controller: controller.to_owned(), result }).inc();
        if result == "error" {
            self.errors.inc();
        }
        self.duration.observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if encode(&mut text, &self.registry).is_err() {
            return String::new();
        }
        // The request tallies live in the client's counter; they go in before the OpenMetrics end marker.
        let body = text.strip_suffix("# EOF\n").unwrap_or(&text).to_owned();
        let mut requests = String::from(
            "# HELP samplectl_api_requests Requests samplectl sent to the API server, by verb and resource.\n\
             # TYPE samplectl_api_requests counter\n",
        );
        for ((verb, resource), n) in self.requests.snapshot().0 {
            let _ = writeln!(requests, "samplectl_api_requests_total{{verb=\"{verb}\",resource=\"{resource}\"}} {n}");
        }
        let hooks = self.hooks.lock().unwrap_or_else(|e| e.into_inner()).render();
        format!("{body}{requests}{hooks}# EOF\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text_with_request_counts() {
        let requests = RequestCounter::default();
        requests.record(&http::Request::get("/api/v1/namespaces/a/configmaps").body(()).unwrap());
        let metrics = Metrics::new(requests);
        metrics.reconciled("samples", "ready", Duration::from_millis(12));
        metrics.reconciled("samples", "error", Duration::from_millis(3));
        metrics.leader.set(1);
        let text = metrics.render();
        assert!(text.contains("samplectl_reconcile_total{controller=\"samples\",result=\"ready\"} 1"), "{text}");
        assert!(text.contains("samplectl_reconcile_errors_total 1"), "{text}");
        assert!(text.contains("samplectl_reconcile_duration_seconds_count 2"), "{text}");
        assert!(text.contains("samplectl_leader 1"), "{text}");
        assert!(text.contains("samplectl_api_requests_total{verb=\"list\",resource=\"configmaps\"} 1"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(text.matches("# EOF").count(), 1);
    }
}
