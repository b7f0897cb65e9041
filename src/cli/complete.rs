//! Shell completion, as kubectl completes: subcommands and flags from the command line's definition, and
//! from the cluster the resource types (`kubectl api-resources -o name`), the object names of the type
//! already typed, namespaces for `-n`, served `GROUP/VERSION/RESOURCE`s for `--gvr`, and the kubeconfig's
//! contexts for `--context`.
//!
//! Three ways in, one engine (clap_complete's):
//! - `samplectl completion SHELL` prints the script a shell sources;
//! - that script calls samplectl back with `COMPLETE=SHELL` on each TAB;
//! - kubectl calls `kubectl_complete-samplectl ARGS... WORD` on a TAB after `kubectl samplectl`, and reads
//!   one candidate per line and a last line `:DIRECTIVE` (cobra's protocol for plugins).

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use clap::ArgMatches;
use clap_complete::engine::{CompletionCandidate, PathCompleter, ValueCompleter};
use clap_complete::env::{CompleteEnv, Shells};
use kube::api::ListParams;

use crate::cli::{self, Resource, ids};
use crate::cluster::client::{self, ClientOptions, Connection};
use crate::cluster::read::{ReadAs, Target, list_all};
use crate::cluster::resolve::{Gvr, gvr_names, resolve_gvr, resolve_names, resource_names};

/// The variable the shell scripts set when they call samplectl back, as `COMPLETE=bash samplectl` does.
const ENV_VAR: &str = "COMPLETE";

/// How long one TAB may wait for the API server: a completion that hangs the shell is worse than one that
/// offers nothing.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(5);

/// cobra's directives for kubectl: no file names; and no space after a value that wants more (`jsonpath=`).
const NO_FILE_COMP: u8 = 4;
const NO_SPACE: u8 = 2;

/// The words typed before the one being completed, binary name first: clap_complete hands a completer
/// only the current word, and what to offer depends on the others (the resource type, `-n`, `--context`).
static TYPED: Mutex<Vec<OsString>> = Mutex::new(Vec::new());

fn remember(words: &[OsString]) {
    *TYPED.lock().unwrap_or_else(|e| e.into_inner()) = words.to_vec();
}

/// If this run is a completion request, answers it and exits; otherwise returns at once. Called first in
/// `main`, before anything is printed.
pub fn answer_if_asked() {
    if cli::executable_name().starts_with("kubectl_complete-") {
        let words: Vec<OsString> = std::env::args_os().skip(1).collect();
        let current_dir = std::env::current_dir().ok();
        let code = match plugin_completions(&words, current_dir.as_deref(), &mut std::io::stdout().lock()) {
            Ok(()) => 0,
            Err(_) => 1,
        };
        std::process::exit(code);
    }
    if std::env::var_os(ENV_VAR).is_none_or(|v| v.is_empty() || v == "0") {
        return;
    }
    let words: Vec<OsString> = std::env::args_os().skip_while(|a| a != "--").skip(1).collect();
    let index = std::env::var("_CLAP_COMPLETE_INDEX")
        .ok()
        .and_then(|i| i.parse::<usize>().ok())
        .unwrap_or(words.len().saturating_sub(1));
    remember(&words[..index.min(words.len())]);
    let nothing_typed = words.get(index).is_none_or(|word| word.is_empty());
    CompleteEnv::with_factory(move || definition(nothing_typed)).var(ENV_VAR).bin(cli::executable_name()).complete();
}

/// The command line to complete against. On an empty word kubectl offers what may come next (a
/// subcommand, a resource type, a name), and flags only once a `-` is typed; clap_complete offers both.
/// Its engine drops hidden candidates whenever others remain, so on an empty word the flags are hidden:
/// they are still offered where nothing else is.
fn definition(nothing_typed: bool) -> clap::Command {
    fn hide_flags(command: clap::Command) -> clap::Command {
        command.mut_args(|arg| if arg.is_positional() { arg } else { arg.hide(true) }).mut_subcommands(hide_flags)
    }
    let mut command = cli::command();
    if !nothing_typed {
        return command;
    }
    // Built first, so that --help and --version, which building adds, are hidden too.
    command.build();
    hide_flags(command)
}

/// kubectl's plugin completion: `words` are what follows `kubectl samplectl`, the last one being completed.
fn plugin_completions(words: &[OsString], current_dir: Option<&Path>, out: &mut impl Write) -> Result<()> {
    let mut all = vec![OsString::from("samplectl")];
    all.extend_from_slice(words);
    if all.len() == 1 {
        all.push(OsString::new());
    }
    let index = all.len() - 1;
    remember(&all[..index]);
    let nothing_typed = all[index].is_empty();
    let candidates = clap_complete::engine::complete(&mut definition(nothing_typed), all, index, current_dir)?;
    let shown: Vec<&CompletionCandidate> = candidates.iter().filter(|c| !c.is_hide_set()).collect();
    for candidate in &shown {
        let value = candidate.get_value().to_string_lossy();
        match candidate.get_help().map(|help| help.to_string()) {
            Some(help) => writeln!(out, "{value}\t{}", help.lines().next().unwrap_or_default())?,
            None => writeln!(out, "{value}")?,
        }
    }
    let wants_more = !shown.is_empty() && shown.iter().all(|c| c.get_value().to_string_lossy().ends_with(['=', '/']));
    writeln!(out, ":{}", if wants_more { NO_FILE_COMP | NO_SPACE } else { NO_FILE_COMP })?;
    Ok(())
}

/// `samplectl completion SHELL`: the same script `COMPLETE=SHELL samplectl` prints, calling back this
/// binary by the path it was run as.
pub fn print_script(shell: &str, out: &mut impl Write) -> Result<()> {
    let shells = Shells::builtins();
    let completer = shells.completer(shell).expect("clap takes only the shells clap_complete knows");
    let mut path = PathBuf::from(std::env::args_os().next().unwrap_or_else(|| "samplectl".into()));
    if path.components().count() > 1
        && let Ok(dir) = std::env::current_dir()
    {
        path = dir.join(path);
    }
    let name = cli::command().get_name().to_owned();
    completer.write_registration(ENV_VAR, &name, cli::executable_name(), &path.to_string_lossy(), out)?;
    Ok(())
}

/// What the words typed so far say, read by clap as far as they go.
#[derive(Debug, Default)]
struct Typed {
    client: ClientOptions,
    namespace: Option<String>,
    all_namespaces: bool,
    subcommand: String,
    gvr: Option<Gvr>,
    /// The positional words: a resource type and object names, or (with --gvr) object names.
    positionals: Vec<String>,
}

impl Typed {
    fn read(words: &[OsString]) -> Typed {
        let Ok(matches) = cli::command().ignore_errors(true).try_get_matches_from(words) else {
            return Typed::default();
        };
        let Some((subcommand, sub)) = matches.subcommand() else {
            return Typed::default();
        };
        // clap hands a global flag to the subcommand wherever it was typed, before the subcommand or after.
        Typed {
            client: ClientOptions {
                kubeconfig: one(sub, ids::KUBECONFIG),
                context: one(sub, ids::CONTEXT),
                agent: None,
                // Completion gives up after its own 5 s.
                answer_limit: None,
            },
            namespace: one(sub, ids::NAMESPACE),
            all_namespaces: one::<bool>(sub, ids::ALL_NAMESPACES).unwrap_or(false),
            subcommand: subcommand.to_owned(),
            gvr: one::<Gvr>(sub, ids::GVR),
            positionals: sub.try_get_many::<String>(ids::NAMES).ok().flatten().into_iter().flatten().cloned().collect(),
        }
    }

    fn now() -> Typed {
        Typed::read(&TYPED.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn one<T: Clone + Send + Sync + 'static>(matches: &ArgMatches, id: &str) -> Option<T> {
    matches.try_get_one::<T>(id).ok().flatten().cloned()
}

/// Runs `ask` against the cluster the typed words point at, giving up quietly after CLUSTER_TIMEOUT or on
/// any error: a completion has nowhere to report one.
fn from_cluster<T, F>(typed: &Typed, ask: impl FnOnce(Connection) -> F) -> Option<T>
where
    F: Future<Output = Result<T>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    runtime.block_on(async {
        let work = async {
            let conn = Connection::new(&typed.client, std::sync::Arc::new(|_: &str| {})).await?;
            ask(conn).await
        };
        tokio::time::timeout(CLUSTER_TIMEOUT, work).await.ok()?.ok()
    })
}

fn candidates<'a>(values: impl IntoIterator<Item = String> + 'a, prefix: &'a str) -> Vec<CompletionCandidate> {
    values.into_iter().filter(|v| v.starts_with(prefix)).map(CompletionCandidate::new).collect()
}

/// The object names of a resource, in the namespace typed (or the context's) when it is namespaced, as
/// kubectl's completion lists them; nothing for several types at once.
async fn object_names(conn: Connection, resource: Resource<'_>, namespace: Option<&str>) -> Result<Vec<String>> {
    let resolved = match resource {
        Resource::Gvr(gvr) => resolve_gvr(&conn.client, gvr).await?,
        Resource::Name(name) => match resolve_names(&conn.client, name).await?.as_slice() {
            [one] => one.clone(),
            _ => return Ok(Vec::new()),
        },
        Resource::Missing => return Ok(Vec::new()),
    };
    let namespace = resolved.namespaced.then(|| namespace.unwrap_or(&conn.default_namespace).to_owned());
    let target = Target { resolved, namespace };
    let page = list_all(&conn.client, &target, &ListParams::default().limit(500), ReadAs::Table).await?;
    Ok(page.items.into_iter().map(|item| item.name).collect())
}

/// The `RESOURCE [NAME]...` words of `list` and `watch`: a resource type (several, comma-separated, for
/// `list`), then object names not typed yet; with --gvr, only names. `watch` takes one name at most, and
/// no names go with -A.
pub fn resources_and_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let typed = Typed::now();
    let one_name = typed.subcommand == ids::WATCH;
    let (resource, typed_names) = match (&typed.gvr, typed.positionals.as_slice()) {
        (Some(gvr), names) => (Resource::Gvr(gvr), names),
        (None, [resource, names @ ..]) if !resource.contains(',') => (Resource::Name(resource), names),
        (None, [_, ..]) => return Vec::new(),
        (None, []) => return resource_types(&typed, &current, !one_name),
    };
    if typed.all_namespaces || (one_name && !typed_names.is_empty()) {
        return Vec::new();
    }
    let namespace = typed.namespace.as_deref();
    let names = from_cluster(&typed, |conn| object_names(conn, resource, namespace)).unwrap_or_default();
    candidates(names.into_iter().filter(|n| !typed_names.contains(n)), &current)
}

/// Resource types, as `kubectl api-resources -o name --verbs=get`; after a comma, the last one of the
/// list being typed (`cm,se` → `cm,secrets`, `cm,services`), as kubectl completes several types.
fn resource_types(typed: &Typed, current: &str, several: bool) -> Vec<CompletionCandidate> {
    let (done, last) = match current.rsplit_once(',') {
        Some(_) if !several => return Vec::new(),
        Some((done, last)) => (format!("{done},"), last),
        None => (String::new(), current),
    };
    let types =
        from_cluster(typed, |conn| async move { resource_names(&conn.client, "get").await }).unwrap_or_default();
    candidates(types.into_iter().map(|t| format!("{done}{t}")), &format!("{done}{last}"))
}

/// `-n`: the namespaces of the cluster (core v1, so one discovery request rather than a search of all).
pub fn namespaces(current: &OsStr) -> Vec<CompletionCandidate> {
    let typed = Typed::now();
    let gvr = Gvr { group: String::new(), version: "v1".into(), resource: "namespaces".into() };
    let names = from_cluster(&typed, |conn| object_names(conn, Resource::Gvr(&gvr), None)).unwrap_or_default();
    candidates(names, &current.to_string_lossy())
}

/// `--gvr` and `--child`: every served GROUP/VERSION/RESOURCE that can be listed.
pub fn gvrs(current: &OsStr) -> Vec<CompletionCandidate> {
    let typed = Typed::now();
    let gvrs = from_cluster(&typed, |conn| async move { gvr_names(&conn.client, "list").await }).unwrap_or_default();
    candidates(gvrs, &current.to_string_lossy())
}

/// `--context`: the contexts of the kubeconfig that would be read.
pub fn contexts(current: &OsStr) -> Vec<CompletionCandidate> {
    let typed = Typed::now();
    let names = client::context_names(typed.client.kubeconfig.as_deref()).unwrap_or_default();
    candidates(names, &current.to_string_lossy())
}

/// `-o`: the formats, with file names after `jsonpath-file=` and `custom-columns-file=`.
pub fn output_formats(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    for format in ["jsonpath-file=", "custom-columns-file="] {
        if let Some(path) = current.strip_prefix(format) {
            let files = PathCompleter::file().complete(OsStr::new(path));
            return files.into_iter().map(|c| c.add_prefix(format)).collect();
        }
    }
    candidates(cli::OUTPUT_FORMATS.iter().map(|f| f.to_string()), &current)
}

/// `--subresource`: the common ones, as kubectl offers them.
pub fn subresources(current: &OsStr) -> Vec<CompletionCandidate> {
    candidates(["status", "scale", "resize"].map(String::from), &current.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(words: &[&str]) -> Typed {
        let words: Vec<OsString> = words.iter().map(OsString::from).collect();
        Typed::read(&words)
    }

    #[test]
    fn the_words_typed_are_read_as_far_as_they_go() {
        let t = typed(&["samplectl", "--kubeconfig", "/k", "list", "cm", "a", "-n", "ns", "--context", "c"]);
        assert_eq!(t.subcommand, "list");
        assert_eq!(t.client.kubeconfig.as_deref(), Some(Path::new("/k")));
        assert_eq!(t.client.context.as_deref(), Some("c"));
        assert_eq!(t.namespace.as_deref(), Some("ns"));
        assert_eq!(t.positionals, ["cm", "a"]);
        // A flag still waiting for its value, as when its value is the word being completed.
        let t = typed(&["samplectl", "watch", "--gvr", "v1/configmaps", "-n"]);
        assert_eq!(t.subcommand, "watch");
        assert_eq!(t.gvr.map(|g| g.to_string()).as_deref(), Some("v1/configmaps"));
        assert_eq!(t.namespace, None);
        let t = typed(&["samplectl", "-n", "early", "list", "-A"]);
        assert_eq!(t.namespace.as_deref(), Some("early"));
        assert!(t.all_namespaces);
        assert!(typed(&["samplectl"]).subcommand.is_empty());
        assert!(typed(&["samplectl", "lis"]).subcommand.is_empty());
    }

    #[test]
    fn output_formats_complete_as_kubectl_names_them() {
        let values = |current: &str| -> Vec<String> {
            output_formats(OsStr::new(current)).iter().map(|c| c.get_value().to_string_lossy().into_owned()).collect()
        };
        assert_eq!(values("js"), ["json", "jsonpath=", "jsonpath-as-json=", "jsonpath-file="]);
        assert_eq!(values("").len(), cli::OUTPUT_FORMATS.len());
        assert_eq!(values("y"), ["yaml"]);
        assert!(values("x").is_empty());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cols.txt"), "NAME\n.metadata.name\n").unwrap();
        let current = format!("custom-columns-file={}/co", dir.path().display());
        assert_eq!(values(&current), [format!("custom-columns-file={}/cols.txt", dir.path().display())]);
    }

    #[test]
    fn kubectl_hears_one_candidate_a_line_and_a_directive() {
        let run = |words: &[&str]| {
            let words: Vec<OsString> = words.iter().map(OsString::from).collect();
            let mut out = Vec::new();
            plugin_completions(&words, None, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let subcommands = run(&["li"]);
        assert!(subcommands.starts_with("list\tList any resource"), "{subcommands}");
        assert!(subcommands.ends_with("\n:4\n"), "{subcommands}");
        assert_eq!(run(&["list", "-o", "jsonpath-"]), "jsonpath-as-json=\njsonpath-file=\n:6\n");
        assert_eq!(run(&["list", "--subresource", ""]), "status\nscale\nresize\n:4\n");
        assert_eq!(run(&["list", "--no-head"]), "--no-headers\tLeave out the header line\n:4\n");
    }
}
