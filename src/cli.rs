//! Command-line surface: global flags shaped like kubectl's, one Args struct per subcommand.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "samplectl",
    version,
    about = "Work with any Kubernetes resource without generated types, and run a controller for Samples",
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,

    /// The namespace to work in (default: the context's namespace, else "default")
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,

    /// More log detail on stderr; repeat for more (-v, -vv, -vvv). RUST_LOG overrides it.
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log lines on stderr as text or as JSON objects (for machines)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,

    /// When to colour output; NO_COLOR in the environment means never for `auto`
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Install or update the Sample CRD (samples.example.com) with server-side apply and wait until it is Established
    InstallCrd(InstallCrdArgs),
    /// List any resource, printed the way kubectl prints it
    #[command(
        after_help = "Examples:\n  samplectl list --gvr example.com/v1alpha1/samples\n  samplectl list smp -A\n  \
                            samplectl list --gvr v1/configmaps -o yaml my-config\n  samplectl list deployments.apps -o wide"
    )]
    List(ListArgs),
    /// List, then stream ADDED / MODIFIED / DELETED changes to any resource, surviving disconnects
    #[command(after_help = "Examples:\n  samplectl watch --gvr example.com/v1alpha1/samples -A\n  \
                            samplectl watch --gvr v1/configmaps -o json --max-events 10")]
    Watch(WatchArgs),
    /// Run the controller: give each Sample a ConfigMap and a status, polling (default) or watch-driven;
    /// for any other --gvr, only report what changes
    #[command(after_help = "Examples:\n  samplectl reconcile                  # poll every second, all namespaces\n  \
                            samplectl reconcile --watch -n demo\n  samplectl reconcile --once          \
                            # one pass; exit 1 unless every Sample is Ready\n  \
                            samplectl reconcile --gvr v1/configmaps -n demo   # observe only")]
    Reconcile(ReconcileArgs),
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The resource to reconcile; anything but samples.example.com is only observed
    #[arg(long, value_name = "GVR", default_value = "example.com/v1alpha1/samples")]
    pub gvr: String,

    /// Driven by watch events instead of polling
    #[arg(long)]
    pub watch: bool,

    /// Time between polls (at least 100ms)
    #[arg(long, default_value = "1s", value_parser = at_least::<100>, value_name = "DURATION")]
    pub interval: Duration,

    /// Samples reconciled at the same time
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// With --watch, reconcile every Sample again after this long even without a change (at least 1s)
    #[arg(long, default_value = "10m", value_parser = at_least::<1000>, value_name = "DURATION")]
    pub resync: Duration,

    /// One full pass, then exit: 0 if every Sample is Ready, 1 otherwise
    #[arg(long)]
    pub once: bool,

    /// Also print the requests sent so far every minute (they are always printed on exit)
    #[arg(long)]
    pub stats: bool,

    /// Reconcile only while holding a coordination.k8s.io Lease, so that one of several replicas is active
    #[arg(long)]
    pub leader_elect: bool,

    /// The Lease's name
    #[arg(long, default_value = "samplectl-leader", value_name = "NAME")]
    pub leader_election_id: String,

    /// The Lease's namespace (default: the kubeconfig context's or the pod's namespace)
    #[arg(long, value_name = "NS")]
    pub leader_election_namespace: Option<String>,

    /// This replica's name in the Lease (default: POD_NAME or the hostname, with the process id)
    #[arg(long, value_name = "ID")]
    pub leader_election_identity: Option<String>,

    /// How long a Lease holds without renewal before a standby may take it (at least 1s); also how long
    /// the API server may be out of reach before /healthz fails
    #[arg(long, default_value = "15s", value_parser = at_least::<1000>, value_name = "DURATION")]
    pub lease_duration: Duration,

    /// How long the leader keeps leading while it cannot renew the Lease (shorter than --lease-duration)
    #[arg(long, default_value = "10s", value_parser = at_least::<100>, value_name = "DURATION")]
    pub renew_deadline: Duration,

    /// How often a candidate looks at the Lease, and the leader renews it (at least 100ms)
    #[arg(long, default_value = "2s", value_parser = at_least::<100>, value_name = "DURATION")]
    pub retry_period: Duration,

    /// On SIGTERM, how long to let the work in flight finish before abandoning it (keep it inside the
    /// pod's termination grace period); 0 abandons it at once
    #[arg(long, default_value = "20s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_timeout: Duration,

    /// Serve /healthz and /readyz on this address (e.g. 0.0.0.0:8081); off unless given
    #[arg(long, value_name = "ADDR")]
    pub health_addr: Option<std::net::SocketAddr>,

    /// Serve Prometheus metrics at /metrics on this address (e.g. 0.0.0.0:8080); off unless given
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,

    /// Serve /metrics over HTTPS, only to callers whose bearer token passes a TokenReview and a
    /// SubjectAccessReview for get on /metrics (controller-runtime's secure metrics)
    #[arg(long, requires = "metrics_addr")]
    pub metrics_secure: bool,

    /// With --metrics-secure, the directory holding tls.crt and tls.key (default: a self-signed
    /// certificate made at start-up)
    #[arg(long, value_name = "DIR", requires = "metrics_secure")]
    pub metrics_cert_dir: Option<std::path::PathBuf>,
}

/// What to read and how to print it; shared by `list` and `watch`.
#[derive(Debug, Args)]
pub struct SelectArgs {
    /// A resource name as kubectl takes it (samples, smp, Sample, deploy, deployments.apps), then
    /// optionally an object name; with --gvr, only the object name
    #[arg(value_name = "RESOURCE [NAME]", num_args = 0..=2)]
    pub names: Vec<String>,

    /// The resource as GROUP/VERSION/RESOURCE, or VERSION/RESOURCE for the core group
    /// (example.com/v1alpha1/samples, v1/configmaps)
    #[arg(long, value_name = "GVR")]
    pub gvr: Option<String>,

    /// Across all namespaces (adds a NAMESPACE column)
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,

    /// Output format; the default and wide use the server's columns
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,

    /// Only objects with these labels (e.g. app=web,tier!=db)
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,

    /// Only objects whose fields match (e.g. metadata.name=foo)
    #[arg(long, value_name = "SELECTOR")]
    pub field_selector: Option<String>,

    /// Leave out the header line
    #[arg(long)]
    pub no_headers: bool,

    /// Add a LABELS column
    #[arg(long)]
    pub show_labels: bool,

    /// Keep metadata.managedFields in json and yaml output
    #[arg(long)]
    pub show_managed_fields: bool,

    /// Objects per request; 0 asks for everything at once
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub chunk_size: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Wide,
    Json,
    Yaml,
    Name,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub select: SelectArgs,

    /// Print only changes, not the objects that exist when the watch starts
    #[arg(long)]
    pub watch_only: bool,

    /// Stop after this long (e.g. 30s, 5m) with exit 0
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// Stop after printing this many events with exit 0
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_events: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub select: SelectArgs,
}

#[derive(Debug, Args)]
pub struct InstallCrdArgs {
    /// Ask the server to validate and apply without persisting anything
    #[arg(long)]
    pub dry_run: bool,

    /// Print the embedded CRD as YAML and exit, without contacting a cluster
    #[arg(long, conflicts_with = "dry_run")]
    pub print: bool,

    /// How long to wait for the CRD to become Established (e.g. 30s, 2m, 500ms); 0 does not wait
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// A duration of at least `MS` milliseconds: zero or a few nanoseconds would make the loop it paces spin
/// against the API server.
pub fn at_least<const MS: u64>(text: &str) -> Result<Duration, String> {
    let value = parse_duration(text)?;
    let min = Duration::from_millis(MS);
    if value < min {
        let min = if MS.is_multiple_of(1000) { format!("{}s", MS / 1000) } else { format!("{MS}ms") };
        return Err(format!("{text:?} is too short: the smallest value allowed is {min}"));
    }
    Ok(value)
}

/// Parses durations the way kubectl's flags take them: a number followed by ms, s, m or h, and combinations
/// such as `1m30s`. A bare `0` is allowed because "0 means do not wait" is a common request.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?}: use a number with a unit, such as 500ms, 30s, 2m or 1h");
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => value.checked_mul(60).map(Duration::from_secs).ok_or_else(bad)?,
            "h" => value.checked_mul(3600).map(Duration::from_secs).ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn pacing_durations_have_a_floor() {
        assert_eq!(at_least::<100>("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(at_least::<1000>("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(at_least::<100>("0").unwrap_err(), "\"0\" is too short: the smallest value allowed is 100ms");
        assert_eq!(at_least::<1000>("999ms").unwrap_err(), "\"999ms\" is too short: the smallest value allowed is 1s");
        assert!(at_least::<100>("fast").unwrap_err().contains("invalid duration"));
    }

    #[test]
    fn durations_rejected() {
        for bad in ["", "30", "s", "-1s", "1.5s", "3d", "10 s", "ms5", "99999999999999999999h"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("invalid duration"), "{bad:?} gave {err}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_duration_text_parses_or_is_refused(text in "\\PC{0,30}") {
            let _ = parse_duration(&text);
        }

        /// Sums of parts with units parse to exactly their total.
        #[test]
        fn composed_durations_add_up(h in 0u64..100, m in 0u64..1000, s in 0u64..100_000, ms in 0u64..100_000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let want = Duration::from_secs(h * 3600 + m * 60 + s) + Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_duration(&text), Ok(want));
        }
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
