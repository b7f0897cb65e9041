//! A shell-operator hooks directory read as shell-operator reads it: every executable below it (not
//! following symbolic links inside it; skipping hidden files and directories, `lib` directories, files
//! ending `.yaml`, `.json`, `.md` or `.txt`, and files no one may execute, each with a warning), in the
//! byte order of their paths; each run once with `--config` from the directory itself, with no input,
//! and its answer read by `rules::shell::config`. Any hook that cannot say its config, or says a bad
//! one, stops the start with shell-operator's words and the hook's path.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Result, anyhow, bail};

use tokio::io::AsyncReadExt;

use crate::controller::rules::shell::config::{self, HookConfig};
use crate::process::group::Group;
use crate::process::lines;

/// One hook: its name (its path inside the directory), where it is, and what it is bound to.
#[derive(Debug)]
pub struct ShellHook {
    pub name: String,
    pub path: PathBuf,
    pub config: HookConfig,
}

/// The hooks of `dir`, in order, with their configs.
pub async fn load(dir: &Path) -> Result<Vec<ShellHook>> {
    let root = std::path::absolute(dir).map_err(|err| anyhow!("hooks directory: {}: {err}", dir.display()))?;
    if !root.is_dir() {
        bail!("hooks directory: path '{}' not exist", root.display());
    }
    let mut paths = Vec::new();
    walk(&root, &root, &mut paths)?;
    // Byte order of the whole path, as Go sorts the strings: `a-b` < `a.b` < `a/b`.
    paths.sort_by(|a, b| a.as_os_str().as_encoded_bytes().cmp(b.as_os_str().as_encoded_bytes()));
    let mut hooks = Vec::with_capacity(paths.len());
    for path in paths {
        let name = path.strip_prefix(&root).unwrap_or(&path).to_string_lossy().into_owned();
        tracing::info!(hook = name.as_str(), "loading the config of hook {name}");
        let output = config_output(&root, &path).await?;
        let config = config::parse(&output).map_err(|err| {
            anyhow!(
                "creating hook '{name}': load hook '{name}' config: {err}\nhook --config output: {}",
                String::from_utf8_lossy(&output)
            )
        })?;
        hooks.push(ShellHook { name, path, config });
    }
    check_webhook_paths(&hooks)?;
    if hooks.is_empty() {
        tracing::warn!("no hooks found in {}", root.display());
    }
    Ok(hooks)
}

/// Two admission bindings answered at one path would take each other's requests (shell-operator lets
/// the last loaded win without a word): refused, naming both.
fn check_webhook_paths(hooks: &[ShellHook]) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, (&str, &str)> = Default::default();
    for hook in hooks {
        for binding in &hook.config.admission {
            if let Some((other, other_binding)) = seen.insert(&binding.id, (&hook.name, &binding.name)) {
                bail!(
                    "hook '{}': webhook {:?} would be served at /hooks/{}, as webhook {other_binding:?} of hook '{other}' is",
                    hook.name,
                    binding.name,
                    binding.id
                );
            }
        }
    }
    Ok(())
}

/// In a shard ring each member's hooks see only its share of the kubernetes bindings' objects. Refused
/// there: a webhook that reads snapshots (a review may reach any member, whose snapshots hold only its
/// share), and a binding that picks namespaces by labels (its objects cannot be told from their
/// metadata alone, which is what the ring's coordinator follows).
pub fn check_shardable(hooks: &[ShellHook]) -> Result<()> {
    for hook in hooks {
        let config = &hook.config;
        let webhooks = config.admission.iter().map(|a| (&a.name, &a.include_snapshots));
        let conversions = config.conversion.iter().map(|c| (&c.name, &c.include_snapshots));
        if let Some((name, _)) = webhooks.chain(conversions).find(|(_, snapshots)| !snapshots.is_empty()) {
            bail!(
                "hook '{}': webhook {name:?} reads snapshots, which --shard-ring shares out among the members \
                 (a review may reach any member); run it with --leader-elect instead",
                hook.name
            );
        }
        if let Some(binding) = config
            .kubernetes
            .iter()
            .find(|k| matches!(k.namespaces, crate::controller::rules::shell::config::Namespaces::Labelled(_)))
        {
            bail!(
                "hook '{}': kubernetes binding {:?} picks namespaces by labels (namespace.labelSelector), which \
                 --shard-ring does not share out; name the namespaces, or run it with --leader-elect instead",
                hook.name,
                binding.name
            );
        }
    }
    Ok(())
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|err| anyhow!("hooks directory: {}: {err}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|err| anyhow!("hooks directory: {}: {err}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        // The entry itself, not what a link points to (a ConfigMap's mounted files are links).
        let meta = std::fs::symlink_metadata(&path).map_err(|err| anyhow!("{}: {err}", path.display()))?;
        if meta.is_dir() {
            if name.starts_with('.') || name == "lib" {
                continue;
            }
            walk(root, &path, found)?;
            continue;
        }
        if name.starts_with('.') || [".yaml", ".json", ".md", ".txt"].iter().any(|ext| name.ends_with(ext)) {
            continue;
        }
        if meta.permissions().mode() & 0o111 == 0 {
            let relative = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            tracing::warn!(
                path = relative.as_str(),
                "file is skipped: {relative}: no executable permissions, chmod +x is required to run this hook"
            );
            continue;
        }
        found.push(path);
    }
    Ok(())
}

/// The most a hook's `--config` may print: a config is a page of YAML, and a hook that prints without
/// end must not take the engine's memory with it.
const MAX_CONFIG: u64 = 4 << 20;

/// How long a hook has to print its config: a start waits for every hook's, in turn.
const CONFIG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The hook's answer to `--config`, run from the hooks directory with nothing on its input, in a
/// process group of its own that ends with the run.
async fn config_output(root: &Path, path: &Path) -> Result<Vec<u8>> {
    let cannot = |why: String| anyhow!("cannot get config for hook '{}': {why}", path.display());
    let mut group = Group::spawn(
        tokio::process::Command::new(path)
            .arg("--config")
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|err| cannot(err.to_string()))?;
    let child = group.child();
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let logged = path.display().to_string();
    let errors = tokio::spawn(async move {
        let mut failed = Vec::new();
        lines::each_line(stderr, |line| {
            if !line.is_empty() && failed.len() < 100 {
                failed.push(line);
            }
        })
        .await;
        failed
    });
    let run = async {
        let mut output = Vec::new();
        (&mut stdout).take(MAX_CONFIG + 1).read_to_end(&mut output).await.map_err(|err| cannot(err.to_string()))?;
        if output.len() as u64 > MAX_CONFIG {
            return Err(cannot(format!("printed more than {} MiB", MAX_CONFIG >> 20)));
        }
        let status = group.end().await.map_err(|err| cannot(err.to_string()))?;
        Ok((status, output))
    };
    let (status, output) = match tokio::time::timeout(CONFIG_TIMEOUT, run).await {
        Ok(done) => done?,
        Err(_) => return Err(cannot(format!("did not answer within {}", crate::duration::format(CONFIG_TIMEOUT)))),
    };
    drop(group);
    if !status.success() {
        for line in errors.await.unwrap_or_default() {
            tracing::error!(hook = logged.as_str(), "hook --config stderr: {line}");
        }
        let status = match status.code() {
            Some(code) => format!("exit status {code}"),
            None => format!("{status}"),
        };
        bail!("cannot get config for hook '{}': {status}", path.display());
    }
    Ok(output)
}
