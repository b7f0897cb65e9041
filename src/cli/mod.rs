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
use crate::logging::LogFormat;
use crate::output::color::ColorChoice;
use crate::output::sort::SortBy;

pub mod complete;
pub mod ids;
mod output_format;
mod plugin;
mod reconcile;
mod webhooks;

pub use output_format::{OUTPUT_FORMATS, OutputFormat};
pub use plugin::executable_name;
pub use reconcile::ReconcileArgs;

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
        ClientOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            agent: None,
            answer_limit: None,
        }
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
    #[arg(id = ids::ALL_NAMESPACES, short = 'A', long = "all-namespaces")]
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

    /// Install kro's CRDs (ResourceGraphDefinition in kro.run/v1alpha1, GraphRevision in
    /// internal.kro.run/v1alpha1) instead, for running ResourceGraphDefinitions on a cluster without kro
    #[arg(long, conflicts_with = "metacontroller")]
    pub kro: bool,

    /// How long to wait for the CRD to become Established (e.g. 30s, 2m, 500ms); 0 does not wait
    #[arg(long, default_value = "30s", value_parser = crate::duration::parse, value_name = "DURATION")]
    pub timeout: Duration,
}

/// A duration of at least `MS` milliseconds, for the flags that pace a loop.
pub(super) fn at_least<const MS: u64>(text: &str) -> Result<Duration, String> {
    crate::duration::at_least(text, Duration::from_millis(MS))
}

/// The command line's definition, named as it was invoked: run by kubectl as a plugin, help and usage
/// errors say `kubectl samplectl ...`, which is what was typed.
pub fn command() -> clap::Command {
    let command = Cli::command();
    match plugin::command_line(executable_name()) {
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
        assert_eq!(
            mistake(&["reconcile", "--gvr", "v1/configmaps", "--watch", "--once", "--hook-process", "./h"]),
            None
        );
        said(&["reconcile", "--child", "v1/configmaps"], "give --hook, --hook-process or --hook-url too");
        said(&["reconcile", "--finalize"], "give --hook, --hook-process or --hook-url too");
        said(&["reconcile", "--leader-elect", "--renew-deadline", "20s"], "--renew-deadline must be shorter");
        said(&["reconcile", "--leader-elect", "--retry-period", "10s"], "--retry-period must be shorter");
        assert_eq!(mistake(&["reconcile", "--renew-deadline", "20s"]), None, "only checked with --leader-elect");
    }

    #[test]
    fn all_namespaces_is_spelt_as_kubectl_spells_it() {
        for flag in ["-A", "--all-namespaces"] {
            let cli = Cli::try_parse_from(["samplectl", "list", "cm", flag]).unwrap();
            let Command::List(args) = cli.command else { panic!("list") };
            assert!(args.select.all_namespaces, "{flag}");
        }
    }
}
