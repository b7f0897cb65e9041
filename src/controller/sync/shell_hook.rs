//! One run of a shell-operator hook, as shell-operator runs it: its binding contexts written to a file,
//! the file's path and those of its output files in `BINDING_CONTEXT_PATH`, `METRICS_PATH`,
//! `KUBERNETES_PATCH_PATH`, `VALIDATING_RESPONSE_PATH` (also `ADMISSION_RESPONSE_PATH`) and
//! `CONVERSION_RESPONSE_PATH` on top of samplectl's own environment, from the hook's own directory,
//! with nothing on its input. Each line it prints is logged with the hook's name and binding; exit 0 is
//! success. The files go once the run is over. A run has no time limit, as in shell-operator; it ends
//! with every process it started (its process group) when its output closes, or when samplectl stops.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::process::group::Group;
use crate::process::lines::Lines;
use crate::process::private;

/// What a run is, for its log lines.
#[derive(Debug, Clone)]
pub struct RunLabels {
    pub hook: String,
    pub binding: String,
    /// The binding's type (`OnStartup`, `Schedule`, `Kubernetes`).
    pub event: &'static str,
    pub queue: String,
}

/// The files a run reads back after it succeeded.
#[derive(Debug, Default)]
pub struct Outputs {
    pub patches: Vec<u8>,
    pub metrics: Vec<u8>,
    /// `$VALIDATING_RESPONSE_PATH`, for an admission run.
    pub admission: Vec<u8>,
    /// `$CONVERSION_RESPONSE_PATH`, for a conversion run.
    pub conversion: Vec<u8>,
}

/// A run that failed: why, and what it had written to its patch file by then (operations marked
/// `ignoreHookError` are applied all the same).
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub patches: Vec<u8>,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure { message, patches: Vec::new() }
    }
}

/// Runs `path` with `contexts` (the context file's text); `tmp` holds the files.
pub async fn run(path: &Path, tmp: &Path, contexts: &str, labels: &RunLabels) -> Result<Outputs, Failure> {
    let safe = safe_name(&labels.hook);
    let id = unique();
    let file = |what: &str| tmp.join(format!("hook-{safe}-{what}-{id}"));
    let files = Files {
        context: file("binding-context").with_extension("json"),
        metrics: file("metrics").with_extension("json"),
        admission: file("admission-response").with_extension("json"),
        conversion: file("conversion-response").with_extension("json"),
        patch: tmp.join(format!("{safe}-object-patch-{id}")),
    };
    let result = files.run(path, contexts, labels).await;
    files.remove();
    result
}

struct Files {
    context: PathBuf,
    metrics: PathBuf,
    admission: PathBuf,
    conversion: PathBuf,
    patch: PathBuf,
}

impl Files {
    async fn run(&self, path: &Path, contexts: &str, labels: &RunLabels) -> Result<Outputs, Failure> {
        let write = |file: &Path, text: &str| {
            private::create(file, text.as_bytes()).map_err(|err| format!("cannot write {}: {err}", file.display()))
        };
        write(&self.context, contexts)?;
        for output in [&self.metrics, &self.admission, &self.conversion, &self.patch] {
            write(output, "")?;
        }
        let dir = path.parent().unwrap_or(Path::new("/"));
        let mut group = Group::spawn(
            tokio::process::Command::new(path)
                .current_dir(dir)
                .env("BINDING_CONTEXT_PATH", &self.context)
                .env("METRICS_PATH", &self.metrics)
                .env("KUBERNETES_PATCH_PATH", &self.patch)
                .env("VALIDATING_RESPONSE_PATH", &self.admission)
                .env("ADMISSION_RESPONSE_PATH", &self.admission)
                .env("CONVERSION_RESPONSE_PATH", &self.conversion)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .map_err(|err| format!("cannot be started: {err}"))?;
        let child = group.child();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (out_labels, err_labels) = (labels.clone(), labels.clone());
        let printed = tokio::spawn(async move { log_lines(stdout, "stdout", &out_labels, false).await });
        let said = tokio::spawn(async move { log_lines(stderr, "stderr", &err_labels, true).await });
        // As in shell-operator, the run lasts until its output closes: a process it left running with
        // the hook's output holds the run. Then whatever is left of its group ends with it; a run cut
        // short (samplectl stopping) kills the group when `group` is dropped.
        let _ = printed.await;
        let said = said.await.unwrap_or_default();
        let status = group.end().await.map_err(|err| format!("cannot be waited for: {err}"))?;
        if !status.success() {
            let message = match (said.trim(), status.code()) {
                (said, _) if !said.is_empty() => said.to_owned(),
                (_, Some(code)) => format!("cmd run: exit status {code}"),
                (_, None) => format!("cmd run: {status}"),
            };
            return Err(Failure { message, patches: private::read(&self.patch).unwrap_or_default() });
        }
        let read = |file: &Path| {
            private::read(file).map_err(|err| Failure::from(format!("cannot read {}: {err}", file.display())))
        };
        Ok(Outputs {
            patches: read(&self.patch)?,
            metrics: read(&self.metrics)?,
            admission: read(&self.admission)?,
            conversion: read(&self.conversion)?,
        })
    }

    fn remove(&self) {
        for file in [&self.context, &self.metrics, &self.admission, &self.conversion, &self.patch] {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Logs each non-empty line (cut at 10,000 characters, as shell-operator cuts them); keeps stderr's text
/// for the failure it may explain.
async fn log_lines(
    stream: impl tokio::io::AsyncRead + Unpin,
    output: &'static str,
    labels: &RunLabels,
    keep: bool,
) -> String {
    // Read to the end whatever it is (process/lines.rs), so that the hook never writes into a closed pipe.
    let mut lines = Lines::new(stream);
    let mut kept = String::new();
    while let Some(line) = lines.next().await {
        if line.is_empty() {
            continue;
        }
        if !log_json_line(&line, output, labels) {
            tracing::info!(
                hook = labels.hook.as_str(),
                binding = labels.binding.as_str(),
                event = labels.event,
                queue = labels.queue.as_str(),
                output,
                "{line}"
            );
        }
        if keep && kept.len() < 64 * 1024 {
            kept.push_str(&line);
            kept.push('\n');
        }
    }
    kept
}

/// A line that is a JSON object is logged as the record it is, as shell-operator logs it: at its
/// `level`, with its `msg` (`hook result` without one) and its other fields as `hook_fields`. False for
/// any other line.
fn log_json_line(line: &str, output: &'static str, labels: &RunLabels) -> bool {
    if !line.starts_with('{') {
        return false;
    }
    let Ok(serde_json::Value::Object(mut record)) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    let level = record.remove("level").and_then(|l| l.as_str().map(str::to_lowercase)).unwrap_or_default();
    let msg = match record.remove("msg") {
        Some(serde_json::Value::String(msg)) => msg,
        Some(other) => other.to_string(),
        None => "hook result".to_owned(),
    };
    let fields = serde_json::Value::Object(record).to_string();
    macro_rules! record {
        ($level:ident) => {
            tracing::$level!(
                hook = labels.hook.as_str(),
                binding = labels.binding.as_str(),
                event = labels.event,
                queue = labels.queue.as_str(),
                output,
                proxy_json_log = true,
                hook_fields = fields.as_str(),
                "{msg}"
            )
        };
    }
    match level.as_str() {
        "debug" | "trace" => record!(debug),
        "warn" | "warning" => record!(warn),
        "error" | "fatal" | "panic" => record!(error),
        _ => record!(info),
    }
    true
}

/// A hook's name made safe as part of a file name: what is not a letter, digit, `_` or `-` becomes `-`.
fn safe_name(name: &str) -> String {
    let mut safe = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' };
        if !(c == '-' && safe.ends_with('-')) {
            safe.push(c);
        }
    }
    safe
}

/// A random id in a UUID's form, so that runs of one hook in two queues never share files.
fn unique() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_safe() {
        assert_eq!(safe_name("001-onstartup-10/shell-hook.sh"), "001-onstartup-10-shell-hook-sh");
        assert_eq!(unique().len(), 36);
    }
}
