//! Command-line surface: global flags shaped like kubectl's, one Args struct per subcommand, and every
//! check of what was typed. clap stops here: nothing below `cli` and `commands` sees a clap type, and
//! every usage mistake ends in [`Cli::parse_checked`] with exit 2 and clap's message, before any
//! kubeconfig is read or request sent.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueHint};
use clap_complete::engine::ArgValueCompleter;
use clap_complete::env::Shells;

use crate::cluster::client::ClientOptions;
use crate::cluster::resolve::{Gvr, check_resource_name};
use crate::controller::crd::serves_samples;
use crate::controller::leader::Election;
use crate::controller::leader::{default_member, incarnation};
use crate::controller::rules::shard::{Member, check_member, check_ring};
use crate::controller::sync::hook::Target as HookTarget;
use crate::logging::LogFormat;
use crate::output::color::ColorChoice;
use crate::output::columns::Columns;
use crate::output::jsonpath::Template;
use crate::output::sort::SortBy;
use crate::output::template::TemplateFormat;

pub mod complete;
pub mod ids;

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
    #[arg(id = ids::KUBECONFIG, long, global = true, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use
    #[arg(id = ids::CONTEXT, long, global = true, value_name = "NAME", add = ArgValueCompleter::new(complete::contexts))]
    pub context: Option<String>,

    /// The namespace to work in (default: the context's namespace, else "default")
    #[arg(id = ids::NAMESPACE, short = 'n', long, global = true, value_name = "NS",
          add = ArgValueCompleter::new(complete::namespaces))]
    pub namespace: Option<String>,

    /// More log detail on stderr; repeat for more (-v, -vv, -vvv). RUST_LOG overrides it.
    #[arg(short = 'v', long = "verbose", global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log lines on stderr as text or as JSON objects (for machines)
    #[arg(long, global = true, value_name = "FORMAT", default_value = "text", value_parser = log_format())]
    pub log_format: LogFormat,

    /// When to colour output; NO_COLOR in the environment means never for `auto`
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto", value_parser = color_choice())]
    pub color: ColorChoice,
}

impl GlobalArgs {
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions { kubeconfig: self.kubeconfig.clone(), context: self.context.clone(), agent: None }
    }
}

fn log_format() -> impl TypedValueParser<Value = LogFormat> {
    clap::builder::PossibleValuesParser::new(["text", "json"])
        .map(|v| if v == "json" { LogFormat::Json } else { LogFormat::Text })
}

fn color_choice() -> impl TypedValueParser<Value = ColorChoice> {
    clap::builder::PossibleValuesParser::new(["auto", "always", "never"]).map(|v| match v.as_str() {
        "always" => ColorChoice::Always,
        "never" => ColorChoice::Never,
        _ => ColorChoice::Auto,
    })
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
                            samplectl watch --gvr v1/configmaps -o json --max-events 10",
              name = ids::WATCH)]
    Watch(WatchArgs),
    /// Run the controller: give each Sample a ConfigMap and a status, polling (default) or watch-driven;
    /// reconcile any other --gvr with a sync hook (--hook), or only report what changes
    #[command(after_help = "Examples:\n  samplectl reconcile                  # poll every second, all namespaces\n  \
                            samplectl reconcile --watch -n demo\n  samplectl reconcile --once          \
                            # one pass; exit 1 unless every Sample is Ready\n  \
                            samplectl reconcile --gvr v1/configmaps -n demo   # observe only\n  \
                            samplectl reconcile --gvr hooks.example.com/v1/notes --child v1/configmaps \\\n      \
                            --hook examples/hooks/shell/sync.sh --watch   # any resource, logic in a hook")]
    Reconcile(Box<ReconcileArgs>),
    /// Print the script that gives a shell completion for samplectl: subcommands and flags, and from the
    /// cluster resource types, object names, namespaces and contexts
    #[command(after_help = "Examples:\n  \
        source <(samplectl completion bash)        # bash, in this shell; add it to ~/.bashrc to keep it\n  \
        source <(samplectl completion zsh)         # zsh (~/.zshrc)\n  \
        samplectl completion fish | source         # fish (~/.config/fish/config.fish)\n  \
        samplectl completion powershell | Out-String | Invoke-Expression   # PowerShell ($PROFILE)\n\n\
        As a kubectl plugin: put samplectl on PATH as kubectl-samplectl, and as kubectl_complete-samplectl\n\
        (a link to the same binary) for `kubectl samplectl ...` to complete through kubectl's completion.")]
    Completion(CompletionArgs),
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to print the script for
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(Shells::builtins().names()))]
    pub shell: String,
}

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
    /// and moves parents as replicas come and go (in place of --leader-elect)
    #[arg(long, value_name = "NAME", conflicts_with_all = ["leader_elect", "once", "from_cluster"])]
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
    #[arg(long, value_name = "COMMAND", value_parser = HookTarget::command, conflicts_with = "hook_url", help_heading = "Hooks",
          value_hint = ValueHint::ExecutablePath)]
    pub hook: Option<HookTarget>,

    /// Reconcile --gvr with the sync hook at this URL: the request POSTed as JSON, the answer in a 200 response
    #[arg(long, value_name = "URL", value_parser = HookTarget::url, help_heading = "Hooks")]
    pub hook_url: Option<HookTarget>,

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

    /// Run every CompositeController and DecoratorController (metacontroller.k8s.io/v1alpha1) in these
    /// manifests, in place of --gvr: a file, a directory (its .yaml, .yml and .json files), or - for
    /// stdin; repeat for more. Other kinds in them are skipped
    #[arg(short = 'f', long = "filename", value_name = "PATH", help_heading = "Controllers",
          conflicts_with_all = [ids::GVR, "hook", "hook_url", "children", "finalize"], value_hint = ValueHint::AnyPath)]
    pub filenames: Vec<std::path::PathBuf>,

    /// Run every CompositeController and DecoratorController stored in the cluster, and start, change and
    /// stop each one as its object is created, updated and deleted, as metacontroller does
    #[arg(long, help_heading = "Controllers",
          conflicts_with_all = [ids::GVR, "hook", "hook_url", "children", "finalize", "filenames"])]
    pub from_cluster: bool,

    /// With --from-cluster: only the controller objects with these labels (metacontroller's
    /// --target-label-selector), so that several instances can split them
    #[arg(long, value_name = "SELECTOR", requires = "from_cluster", help_heading = "Controllers")]
    pub target_label_selector: Option<String>,
}

/// What to read and how to print it; shared by `list` and `watch`.
#[derive(Debug, Args)]
pub struct SelectArgs {
    /// A resource name as kubectl takes it (samples, smp, Sample, deploy, deployments.apps), then
    /// optionally object names; with --gvr, only object names
    #[arg(id = ids::NAMES, value_name = "RESOURCE [NAME]", add = ArgValueCompleter::new(complete::resources_and_names))]
    pub names: Vec<String>,

    /// The resource as GROUP/VERSION/RESOURCE, or VERSION/RESOURCE for the core group
    /// (example.com/v1alpha1/samples, v1/configmaps)
    #[arg(id = ids::GVR, long, value_name = "GVR", value_parser = Gvr::parse, add = ArgValueCompleter::new(complete::gvrs))]
    pub gvr: Option<Gvr>,

    /// Across all namespaces (adds a NAMESPACE column)
    #[arg(id = ids::ALL_NAMESPACES, short = 'A', long)]
    pub all_namespaces: bool,

    /// Output format: wide, json, yaml, name, jsonpath=TEMPLATE, jsonpath-file=FILE,
    /// jsonpath-as-json=TEMPLATE, custom-columns=NAME:PATH,..., custom-columns-file=FILE; the default and
    /// wide use the server's columns
    #[arg(short = 'o', long, value_name = "FORMAT", value_parser = OutputFormat::parse,
          add = ArgValueCompleter::new(complete::output_formats))]
    pub output: Option<OutputFormat>,

    /// Sort by the value at this JSONPath in each object (e.g. .metadata.name, '{.spec.replicas}'), as
    /// kubectl 1.34 sorts: numbers by value, strings byte by byte or as quantities; asks for everything at
    /// once, as kubectl does
    #[arg(long, value_name = "JSONPATH", value_parser = SortBy::parse)]
    pub sort_by: Option<SortBy>,

    /// With false, a key that a jsonpath template names but an object lacks is an error
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    pub allow_missing_template_keys: bool,

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

    /// A column for the value of each of these labels (repeatable, or comma-separated), headed by the
    /// key's last segment in capitals, as kubectl's -L
    #[arg(short = 'L', long = "label-columns", value_name = "KEY", value_delimiter = ',')]
    pub label_columns: Vec<String>,

    /// On a terminal, print long cells whole rather than cut (with …) to fit its width; piped output
    /// is never cut
    #[arg(long)]
    pub wide_cells: bool,

    /// Keep metadata.managedFields in json and yaml output
    #[arg(long)]
    pub show_managed_fields: bool,

    /// Objects per request; 0 asks for everything at once
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub chunk_size: u32,
}

/// What `-o` takes, for completion: in kubectl's order, with `=` where a value must follow.
pub const OUTPUT_FORMATS: [&str; 9] = [
    "json",
    "yaml",
    "name",
    "jsonpath=",
    "jsonpath-as-json=",
    "jsonpath-file=",
    "custom-columns=",
    "custom-columns-file=",
    "wide",
];

#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    Wide,
    Json,
    Yaml,
    Name,
    Template(TemplateFormat),
}

impl OutputFormat {
    /// `-o`'s value, as kubectl reads it; a template is read (and its file too) and parsed here, so that
    /// a mistake in it is a usage error in kubectl's words.
    fn parse(value: &str) -> Result<Self, String> {
        let (format, argument) = match value.split_once('=') {
            Some((format, argument)) => (format, Some(argument)),
            None => (value, None),
        };
        let read = |path: &str, what: &str| {
            std::fs::read_to_string(path).map_err(|err| format!("error reading {what} {path}, {err}"))
        };
        let jsonpath = |text: &str| {
            if text.is_empty() {
                return Err("template format specified but no template given".to_owned());
            }
            Template::parse(text).map_err(|err| format!("error parsing jsonpath {text}, {err}"))
        };
        Ok(match (format, argument) {
            ("wide", None) => OutputFormat::Wide,
            ("json", None) => OutputFormat::Json,
            ("yaml", None) => OutputFormat::Yaml,
            ("name", None) => OutputFormat::Name,
            ("jsonpath", text) => OutputFormat::Template(TemplateFormat::JsonPath(jsonpath(text.unwrap_or(""))?)),
            ("jsonpath-as-json", text) => {
                OutputFormat::Template(TemplateFormat::JsonPathAsJson(jsonpath(text.unwrap_or(""))?))
            }
            ("jsonpath-file", path) => {
                let path = path.filter(|p| !p.is_empty()).ok_or("template format specified but no template given")?;
                OutputFormat::Template(TemplateFormat::JsonPath(jsonpath(&read(path, "--template")?)?))
            }
            ("custom-columns", spec) => {
                OutputFormat::Template(TemplateFormat::Columns(Columns::from_spec(spec.unwrap_or(""))?))
            }
            ("custom-columns-file", path) => {
                let path = path
                    .filter(|p| !p.is_empty())
                    .ok_or("custom-columns format specified but no custom columns given")?;
                OutputFormat::Template(TemplateFormat::Columns(Columns::from_file_text(&read(path, "template")?)?))
            }
            _ => {
                return Err(format!(
                    "unable to match a printer suitable for the output format {value:?}, allowed formats are: \
                     custom-columns,custom-columns-file,json,jsonpath,jsonpath-as-json,jsonpath-file,name,wide,yaml"
                ));
            }
        })
    }

    /// The name kubectl gives this format in its messages.
    pub fn name(&self) -> &'static str {
        match self {
            OutputFormat::Wide => "wide",
            OutputFormat::Json => "json",
            OutputFormat::Yaml => "yaml",
            OutputFormat::Name => "name",
            OutputFormat::Template(template) => template.name(),
        }
    }
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub select: SelectArgs,

    /// Print only changes, not the objects that exist when the watch starts
    #[arg(long)]
    pub watch_only: bool,

    /// Stop after this long (e.g. 30s, 5m) with exit 0
    #[arg(long, value_parser = crate::duration::parse, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// Stop after printing this many events with exit 0
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_events: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub select: SelectArgs,

    /// Objects named but not found are passed over silently (exit 0), as with kubectl get
    #[arg(long)]
    pub ignore_not_found: bool,

    /// The subresource of the named objects to get (status, scale), as kubectl get --subresource
    #[arg(long, value_name = "NAME", add = ArgValueCompleter::new(complete::subresources))]
    pub subresource: Option<String>,
}

impl ListArgs {
    fn mistake(&self) -> Option<String> {
        let (_, names) = self.select.resource();
        if self.subresource.is_some() && names.is_empty() {
            return Some("subresource cannot be used when bulk resources are specified".to_owned());
        }
        None
    }
}

#[derive(Debug, Args)]
pub struct InstallCrdArgs {
    /// Ask the server to validate and apply without persisting anything
    #[arg(long)]
    pub dry_run: bool,

    /// Print the embedded CRD as YAML and exit, without contacting a cluster
    #[arg(long, conflicts_with = "dry_run")]
    pub print: bool,

    /// Install metacontroller's CRDs (CompositeController, DecoratorController, ControllerRevision in
    /// metacontroller.k8s.io/v1alpha1) instead, for `reconcile -f` on a cluster without metacontroller
    #[arg(long)]
    pub metacontroller: bool,

    /// How long to wait for the CRD to become Established (e.g. 30s, 2m, 500ms); 0 does not wait
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse, value_name = "DURATION")]
    pub timeout: Duration,
}

/// A duration of at least `MS` milliseconds, for the flags that pace a loop.
fn at_least<const MS: u64>(text: &str) -> Result<Duration, String> {
    crate::duration::at_least(text, Duration::from_millis(MS))
}

/// The file name this binary was started by, without a directory or `.exe`: `samplectl`; or
/// `kubectl-samplectl` when kubectl runs it as its plugin, or `kubectl_complete-samplectl` when kubectl
/// asks that plugin to complete a word.
pub fn executable_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let argv0 = std::env::args_os().next().unwrap_or_default();
        let stem = std::path::Path::new(&argv0).file_stem().map(|s| s.to_string_lossy().into_owned());
        stem.filter(|s| !s.is_empty()).unwrap_or_else(|| "samplectl".to_owned())
    })
}

/// How a plugin's file name reads on kubectl's command line: `kubectl-samplectl` is `kubectl samplectl`,
/// and, as kubectl maps them, `_` in a plugin's name is `-` on the command line.
fn plugin_command_line(file_name: &str) -> Option<String> {
    let plugin = file_name.strip_prefix("kubectl-")?;
    Some(format!("kubectl {}", plugin.replace('-', " ").replace('_', "-")))
}

/// The command line's definition, named as it was invoked: run by kubectl as a plugin, help and usage
/// errors say `kubectl samplectl ...`, which is what was typed.
pub fn command() -> clap::Command {
    let command = Cli::command();
    match plugin_command_line(executable_name()) {
        Some(bin_name) => command.bin_name(bin_name),
        None => command,
    }
}

impl Cli {
    /// Parses the command line and checks what clap's attributes cannot say, exiting 2 with clap's
    /// message on any mistake, as clap does for its own.
    pub fn parse_checked() -> Self {
        let mut command = command();
        let matches = command.get_matches_mut();
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.format(&mut command).exit());
        if let Err(err) = cli.check() {
            err.exit();
        }
        cli
    }

    /// Flag combinations that make no sense, told apart here rather than after a request.
    pub fn check(&self) -> Result<(), clap::Error> {
        let (subcommand, mistake) = match &self.command {
            Command::List(args) => ("list", args.select.mistake().or_else(|| args.mistake())),
            Command::Watch(args) => ("watch", args.select.mistake().or_else(|| args.mistake())),
            Command::Reconcile(args) => ("reconcile", args.mistake()),
            Command::InstallCrd(_) | Command::Completion(_) => return Ok(()),
        };
        let Some(mistake) = mistake else { return Ok(()) };
        let mut command = command();
        command.build();
        let command = command.find_subcommand_mut(subcommand).expect("the subcommand exists");
        Err(command.error(ErrorKind::ArgumentConflict, mistake))
    }
}

impl WatchArgs {
    fn mistake(&self) -> Option<String> {
        let (resource, names) = self.select.resource();
        if let Resource::Name(resource) = resource
            && resource.contains(',')
        {
            return Some(format!("watch follows one resource type; {resource:?} names several"));
        }
        (names.len() > 1).then(|| {
            format!(
                "watch is only supported on individual resources and resource collections, but {} resources were found",
                names.len()
            )
        })
    }
}

impl SelectArgs {
    /// The resource named, and the object names given after it (or all of them, with --gvr).
    pub fn resource(&self) -> (Resource<'_>, &[String]) {
        match (&self.gvr, self.names.as_slice()) {
            (Some(gvr), names) => (Resource::Gvr(gvr), names),
            (None, [resource, rest @ ..]) => (Resource::Name(resource), rest),
            (None, []) => (Resource::Missing, &[]),
        }
    }

    fn mistake(&self) -> Option<String> {
        let (resource, names) = self.resource();
        match resource {
            Resource::Missing => {
                return Some(
                    "name a resource: --gvr GROUP/VERSION/RESOURCE (e.g. --gvr example.com/v1alpha1/samples) or a \
                     resource name (e.g. samples)"
                        .to_owned(),
                );
            }
            Resource::Name(resource) => {
                if let Some(why) = resource.split(',').find_map(|part| check_resource_name(part).err()) {
                    return Some(why);
                }
                if resource.contains(',') && !names.is_empty() {
                    return Some(format!(
                        "{resource:?} names several resource types; object names go with one type only"
                    ));
                }
            }
            Resource::Gvr(_) => {}
        }
        if self.all_namespaces && !names.is_empty() {
            return Some("a resource cannot be retrieved by name across all namespaces".to_owned());
        }
        match &self.output {
            Some(
                format @ (OutputFormat::Json | OutputFormat::Yaml | OutputFormat::Name | OutputFormat::Template(_)),
            ) if self.show_labels => {
                Some(format!("--show-labels option cannot be used with {} printer", format.name()))
            }
            _ => None,
        }
    }
}

/// How the resource was named on the command line.
#[derive(Debug, Clone, Copy)]
pub enum Resource<'a> {
    Gvr(&'a Gvr),
    Name(&'a str),
    Missing,
}

impl ReconcileArgs {
    /// This replica's member of the shard ring, with `--shard-ring`.
    pub fn member(&self) -> Option<Member> {
        let ring = self.shard_ring.clone()?;
        let name = self.shard_member.clone().unwrap_or_else(default_member);
        Some(Member::new(ring, name, incarnation()))
    }

    /// `--hook` or `--hook-url`, whichever was given.
    pub fn hook_target(&self) -> Option<&HookTarget> {
        self.hook.as_ref().or(self.hook_url.as_ref())
    }

    fn mistake(&self) -> Option<String> {
        let hooked = self.hook_target().is_some() || !self.filenames.is_empty() || self.from_cluster;
        if self.watch && self.once && !serves_samples(&self.gvr) && !hooked {
            return Some(
                "--once with --watch applies to Samples and hooks only; use --once without --watch to observe once"
                    .into(),
            );
        }
        if !hooked && !self.children.is_empty() {
            return Some("--child names a hook's child types; give --hook or --hook-url too".into());
        }
        if !hooked && self.finalize {
            return Some("--finalize calls a hook on deletion; give --hook or --hook-url too".into());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn mistake(args: &[&str]) -> Option<String> {
        let cli = Cli::try_parse_from(std::iter::once("samplectl").chain(args.iter().copied())).unwrap();
        cli.check().err().map(|err| err.to_string())
    }

    #[test]
    fn output_formats_are_read_as_kubectl_reads_them() {
        let err = |value: &str| OutputFormat::parse(value).unwrap_err();
        assert!(matches!(
            OutputFormat::parse("jsonpath={.a}"),
            Ok(OutputFormat::Template(TemplateFormat::JsonPath(_)))
        ));
        assert_eq!(OutputFormat::parse("wide"), Ok(OutputFormat::Wide));
        assert!(err("xml").starts_with("unable to match a printer suitable for the output format \"xml\""));
        assert_eq!(err("jsonpath"), "template format specified but no template given");
        assert_eq!(err("jsonpath={.a"), "error parsing jsonpath {.a, unclosed action");
        assert!(err("jsonpath-file=/nonexistent/t").starts_with("error reading --template /nonexistent/t, "));
        assert!(err("custom-columns-file=/nonexistent/c").starts_with("error reading template /nonexistent/c, "));
        assert_eq!(err("custom-columns-file="), "custom-columns format specified but no custom columns given");
        // Through the command line: a usage error, exit 2.
        let parsed = Cli::try_parse_from(["samplectl", "list", "cm", "-o", "jsonpath={.a"]).unwrap_err();
        assert_eq!(parsed.exit_code(), 2);
        assert!(parsed.to_string().contains("error parsing jsonpath {.a, unclosed action"), "{parsed}");
    }

    #[test]
    fn flag_combinations_are_checked_before_any_request() {
        assert_eq!(mistake(&["list", "samples"]), None);
        assert_eq!(mistake(&["list", "--gvr", "v1/configmaps", "x"]), None);
        assert_eq!(mistake(&["list", "cm", "a", "b", "c"]), None);
        assert_eq!(mistake(&["list", "--gvr", "v1/configmaps", "a", "b"]), None);
        let said = |args: &[&str], what: &str| {
            let got = mistake(args).unwrap_or_default();
            assert!(got.contains(what), "{args:?}: {got}");
        };
        said(&["list"], "name a resource");
        said(&["watch", "--gvr", "v1/configmaps", "a", "b"], "watch is only supported on individual resources");
        said(&["watch", "cm", "a", "b", "c"], "but 3 resources were found");
        said(&["watch", "cm,sa"], "watch follows one resource type");
        said(
            &["list", "deploy", "--subresource", "scale"],
            "subresource cannot be used when bulk resources are specified",
        );
        assert_eq!(mistake(&["list", "deploy", "web", "--subresource", "scale"]), None);
        said(&["list", "cm,sa", "a"], "object names go with one type only");
        said(&["list", "cm,"], "invalid resource name \"\"");
        assert_eq!(mistake(&["list", "cm,sa,deploy.apps"]), None);
        said(&["watch", "sam ples"], "invalid resource name \"sam ples\"");
        said(&["list", "samples", "x", "-A"], "cannot be retrieved by name across all namespaces");
        said(&["list", "samples", "-o", "json", "--show-labels"], "--show-labels option cannot be used with json");
        said(&["reconcile", "--gvr", "v1/configmaps", "--watch", "--once"], "applies to Samples and hooks only");
        assert_eq!(mistake(&["reconcile", "--gvr", "v1/configmaps", "--watch", "--once", "--hook", "./h"]), None);
        said(&["reconcile", "--child", "v1/configmaps"], "give --hook or --hook-url too");
        said(&["reconcile", "--finalize"], "give --hook or --hook-url too");
        said(&["reconcile", "--leader-elect", "--renew-deadline", "20s"], "--renew-deadline must be shorter");
        said(&["reconcile", "--leader-elect", "--retry-period", "10s"], "--retry-period must be shorter");
        assert_eq!(mistake(&["reconcile", "--renew-deadline", "20s"]), None, "only checked with --leader-elect");
    }
}
