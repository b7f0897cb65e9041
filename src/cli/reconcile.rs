//! `reconcile`'s flags, and the checks of them that clap's attributes cannot express.

use std::time::Duration;

use clap::{Args, ValueHint};
use clap_complete::engine::ArgValueCompleter;

use super::{at_least, complete, ids};
use crate::cluster::resolve::Gvr;
use crate::controller::crd::serves_samples;
use crate::controller::leader::Election;
use crate::controller::leader::{default_member, incarnation};
use crate::controller::rules::graph::rgd::Features;
use crate::controller::rules::shard::{Member, check_member, check_ring};
use crate::controller::sync::hook::Address;

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The resource to reconcile; anything but samples.example.com is only observed unless given a hook
    #[arg(id = ids::GVR, long, value_name = "GVR", default_value = "example.com/v1alpha1/samples",
          value_parser = Gvr::parse, add = ArgValueCompleter::new(complete::gvrs))]
    pub gvr: Gvr,

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

    /// The namespace of the Lease (and of a shard ring's Leases) (default: the kubeconfig context's or
    /// the pod's namespace)
    #[arg(long, value_name = "NS", add = ArgValueCompleter::new(complete::namespaces))]
    pub leader_election_namespace: Option<String>,

    /// This replica's name in the Lease (default: POD_NAME or the hostname); a random id of the process is
    /// added to it, so that a second process under the same name stands by rather than leads too
    #[arg(long, value_name = "ID")]
    pub leader_election_identity: Option<String>,

    /// Share the parents among every replica started with this ring name: each holds a Lease of its own
    /// and reconciles the parents labelled for it; one of them labels each parent by consistent hashing
    /// and moves parents as replicas come and go (in place of --leader-elect); with --hooks-dir, the
    /// objects of the hooks' kubernetes bindings, each member's hooks seeing only its share
    #[arg(long, value_name = "NAME", conflicts_with_all = ["leader_elect", "once"])]
    pub shard_ring: Option<String>,

    /// This replica's name in the ring and on its Lease (default: POD_NAME, or the hostname); the labels
    /// name it with a random id of the process, so that a process restarted under the same name starts
    /// with nothing of the one before it, and a second one under a taken name stands by
    #[arg(long, value_name = "NAME", requires = "shard_ring")]
    pub shard_member: Option<String>,

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
    #[arg(long, default_value = "20s", value_parser = crate::duration::parse, value_name = "DURATION")]
    pub shutdown_timeout: Duration,

    /// Connections each port samplectl serves (probes, /metrics, webhooks) keeps open at once; past it a
    /// new connection is closed at once
    #[arg(long, default_value_t = crate::limits::Limits::DEFAULT.max_connections as u32, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..), help_heading = "Limits")]
    pub max_connections: u32,

    /// Runs of one shell hook its webhooks start at once; past it a review waits until just before the
    /// API server's deadline, then is refused with code 429
    #[arg(long, default_value_t = crate::limits::Limits::DEFAULT.webhook_runs_in_flight as u32, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..), help_heading = "Limits")]
    pub webhook_runs_in_flight: u32,

    /// Steps one of kro's CEL expressions may take (an element of a comprehension, 10 bytes of a value
    /// built); past it the expression fails with cel-go's words, in its instance's conditions
    #[arg(long, default_value_t = crate::limits::Limits::DEFAULT.cel_cost_limit, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..), help_heading = "Limits")]
    pub cel_cost_limit: u64,

    /// How long a shell hook's jqFilter may take over one object; past it the filter's process is ended
    /// and that object's event fails with the filter's name in the log (filters run in processes of
    /// their own, limited to 256 MiB, so that none can stall or end the engine)
    #[arg(long, default_value = "5s", value_parser = at_least::<10>, value_name = "DURATION", help_heading = "Limits")]
    pub jq_timeout: Duration,

    /// kro's feature gates for ResourceGraphDefinitions, as kro takes them (e.g. CELOmitFunction=true);
    /// all off unless given. samplectl has CELOmitFunction
    #[arg(long, value_name = "GATES", value_parser = feature_gates)]
    pub feature_gates: Option<Features>,

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
    #[arg(long, value_name = "DIR", requires = "metrics_secure", value_hint = ValueHint::DirPath)]
    pub metrics_cert_dir: Option<std::path::PathBuf>,

    /// Reconcile --gvr with this command as its sync hook (metacontroller's CompositeController protocol):
    /// the request on its stdin, the answer on its stdout; split into words like a shell, run without one
    #[arg(long, value_name = "COMMAND", value_parser = Address::command, conflicts_with_all = ["hook_url", "hook_process"],
          help_heading = "Hooks", value_hint = ValueHint::ExecutablePath)]
    pub hook: Option<Address>,

    /// Reconcile --gvr with the sync hook at this URL: the request POSTed as JSON, the answer in a 200 response
    #[arg(long, value_name = "URL", value_parser = Address::url, conflicts_with = "hook_process", help_heading = "Hooks")]
    pub hook_url: Option<Address>,

    /// Reconcile --gvr with this command as a long-running sync hook: started once, given one request per
    /// line on its stdin, answering each with one line of JSON on its stdout
    #[arg(long, value_name = "COMMAND", value_parser = Address::process, help_heading = "Hooks",
          value_hint = ValueHint::ExecutablePath)]
    pub hook_process: Option<Address>,

    /// With --hook-process: how many of its processes may run at once, each serving one call at a time;
    /// more are started only while every one is busy (default: --concurrency)
    // clap counts a required flag as given when it conflicts with one given, hence both.
    #[arg(long, value_name = "N", requires = "hook_process", conflicts_with_all = ["hook", "hook_url"],
          value_parser = clap::value_parser!(u16).range(1..), help_heading = "Hooks")]
    pub hook_processes: Option<u16>,

    /// A child type the hook may manage, as GROUP/VERSION/RESOURCE (v1/configmaps, apps/v1/deployments);
    /// repeat for each
    #[arg(long = "child", value_name = "GVR", value_parser = Gvr::parse, help_heading = "Hooks",
          add = ArgValueCompleter::new(complete::gvrs))]
    pub children: Vec<Gvr>,

    /// How long one call of the hook may take
    #[arg(long, default_value = "10s", value_parser = at_least::<100>, value_name = "DURATION", help_heading = "Hooks")]
    pub hook_timeout: Duration,

    /// Put a finalizer on each parent, and call the hook with `finalizing: true` when one is deleted until
    /// it answers `finalized: true`
    #[arg(long, help_heading = "Hooks")]
    pub finalize: bool,

    /// Run every CompositeController and DecoratorController (metacontroller.k8s.io/v1alpha1) and every
    /// ResourceGraphDefinition (kro.run/v1alpha1) in these manifests, in place of --gvr: a file, a
    /// directory (its .yaml, .yml and .json files), or - for stdin; repeat for more. Other kinds in them
    /// are skipped
    #[arg(short = 'f', long = "filename", value_name = "PATH", help_heading = "Controllers",
          conflicts_with_all = [ids::GVR, "hook", "hook_url", "hook_process", "children", "finalize"], value_hint = ValueHint::AnyPath)]
    pub filenames: Vec<std::path::PathBuf>,

    /// Run every CompositeController, DecoratorController and ResourceGraphDefinition stored in the
    /// cluster, and start, change and stop each one as its object is created, updated and deleted, as
    /// metacontroller and kro do
    #[arg(long, help_heading = "Controllers",
          conflicts_with_all = [ids::GVR, "hook", "hook_url", "hook_process", "children", "finalize", "filenames"])]
    pub from_cluster: bool,

    /// Run shell-operator's hooks in this directory, in place of --gvr: every executable below it is
    /// asked for its bindings with --config, then run with binding contexts at start-up and on schedules
    #[arg(long, env = "SHELL_OPERATOR_HOOKS_DIR", value_name = "DIR", help_heading = "Controllers",
          conflicts_with_all = [ids::GVR, "hook", "hook_url", "hook_process", "children", "finalize", "filenames", "from_cluster",
                                "once"],
          value_hint = ValueHint::DirPath)]
    pub hooks_dir: Option<std::path::PathBuf>,

    /// With --hooks-dir: where each hook run's binding context and output files are written (made if
    /// missing, its parent must exist)
    #[arg(long, env = "SHELL_OPERATOR_TMP_DIR", value_name = "DIR", default_value = "/tmp/shell-operator",
          help_heading = "Controllers", value_hint = ValueHint::DirPath)]
    pub tmp_dir: std::path::PathBuf,

    /// With --from-cluster: only the controller objects with these labels (metacontroller's
    /// --target-label-selector), so that several instances can split them
    #[arg(long, value_name = "SELECTOR", requires = "from_cluster", help_heading = "Controllers")]
    pub target_label_selector: Option<String>,

    #[command(flatten)]
    pub webhooks: super::webhooks::WebhookArgs,
}

impl ReconcileArgs {
    /// This replica's member of the shard ring, with `--shard-ring`.
    pub fn member(&self) -> Option<Member> {
        let ring = self.shard_ring.clone()?;
        let name = self.shard_member.clone().unwrap_or_else(default_member);
        Some(Member::new(ring, name, incarnation()))
    }

    /// `--hook`, `--hook-url` or `--hook-process`, whichever was given.
    pub fn hook_target(&self) -> Option<&Address> {
        self.hook.as_ref().or(self.hook_url.as_ref()).or(self.hook_process.as_ref())
    }

    pub(super) fn mistake(&self) -> Option<String> {
        let hooked =
            self.hook_target().is_some() || !self.filenames.is_empty() || self.from_cluster || self.hooks_dir.is_some();
        if self.watch && self.once && !serves_samples(&self.gvr) && !hooked {
            return Some(
                "--once with --watch applies to Samples and hooks only; use --once without --watch to observe once"
                    .into(),
            );
        }
        if !hooked && !self.children.is_empty() {
            return Some("--child names a hook's child types; give --hook, --hook-process or --hook-url too".into());
        }
        if !hooked && self.finalize {
            return Some("--finalize calls a hook on deletion; give --hook, --hook-process or --hook-url too".into());
        }
        if self.hooks_dir.is_some() && self.feature_gates.is_some() {
            return Some(
                "--feature-gates are kro's, for ResourceGraphDefinitions; they do nothing with --hooks-dir".into(),
            );
        }
        if self.feature_gates.is_some() && self.filenames.is_empty() && !self.from_cluster {
            return Some(
                "--feature-gates are kro's, for ResourceGraphDefinitions; give -f or --from-cluster too".into(),
            );
        }
        if let Some(ring) = &self.shard_ring {
            if let Err(problem) = check_ring(ring) {
                return Some(problem);
            }
            if let Some(Err(problem)) = self.member().map(|member| check_member(&member.name)) {
                return Some(problem);
            }
        }
        if self.leader_elect || self.shard_ring.is_some() {
            return Election::check_timing(self.lease_duration, self.renew_deadline, self.retry_period).err();
        }
        None
    }
}

/// `--feature-gates`: `Name=bool` pairs, comma-separated, as kro (and every Kubernetes component) reads
/// them.
fn feature_gates(text: &str) -> Result<Features, String> {
    let mut features = Features::default();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!("missing bool value for {pair}"));
        };
        let on = match value.trim() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            other => return Err(format!("invalid value of {name}={other}: not a bool")),
        };
        match name.trim() {
            "CELOmitFunction" => features.omit = on,
            "InstanceConditionEvents" | "InstanceConditionMetrics" => {
                return Err(format!("kro's feature gate {name} is not one samplectl has"));
            }
            other => return Err(format!("unrecognized feature gate: {other}")),
        }
    }
    Ok(features)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_are_read_as_kro_reads_them() {
        assert_eq!(feature_gates("CELOmitFunction=true"), Ok(Features { omit: true }));
        assert_eq!(feature_gates("CELOmitFunction=true, CELOmitFunction=false"), Ok(Features { omit: false }));
        assert_eq!(feature_gates(""), Ok(Features::default()));
        assert_eq!(feature_gates("CELOmitFunction").unwrap_err(), "missing bool value for CELOmitFunction");
        assert_eq!(
            feature_gates("CELOmitFunction=maybe").unwrap_err(),
            "invalid value of CELOmitFunction=maybe: not a bool"
        );
        assert_eq!(feature_gates("Omit=true").unwrap_err(), "unrecognized feature gate: Omit");
        assert_eq!(
            feature_gates("InstanceConditionEvents=true").unwrap_err(),
            "kro's feature gate InstanceConditionEvents is not one samplectl has"
        );
    }
}
