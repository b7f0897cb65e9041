//! Client configuration the way kubectl finds it: `--kubeconfig`, else `KUBECONFIG`, else
//! `~/.kube/config`, else the in-cluster service account.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use tower::util::{MapRequestLayer, MapResponseLayer};

use super::deadline::DeadlineLayer;
use super::requests::{LastAnswer, RequestCounter};
use crate::error::join_causes;

/// Where the client configuration comes from, as kubectl's `--kubeconfig` and `--context` say it.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Said after samplectl's name in the User-Agent: which replica this is, where that matters (a
    /// shard member, so that an audit log tells the members' requests apart).
    pub agent: Option<String>,
    /// A deadline under every request (`deadline.rs`). The controller sets one, so that nothing it waits
    /// for can hang it; `list` and `watch` wait as kubectl does, until the server answers or Ctrl-C.
    pub answer_limit: Option<Duration>,
}

/// A client and what commands need to know about where it points.
#[derive(Clone)]
pub struct Connection {
    pub client: kube::Client,
    /// The namespace of the kubeconfig context (or of the pod, in-cluster), else "default".
    pub default_namespace: String,
    /// Every request this client sends, by verb and resource.
    pub requests: RequestCounter,
    /// When the API server last answered.
    pub answered: LastAnswer,
}

/// What samplectl calls itself in requests, as `kubectl/v1.34.4 (linux/amd64)` does.
pub fn user_agent() -> String {
    format!("samplectl/{} ({}/{})", env!("CARGO_PKG_VERSION"), std::env::consts::OS, std::env::consts::ARCH)
}

/// Receives each warning the API server sends (a deprecated API version, say), once per text.
pub type WarningHandler = Arc<dyn Fn(&str) + Send + Sync>;

/// The API server's `Warning` response headers, as client-go reads them: code 299 only, the text
/// unquoted. Each distinct text goes to the handler once, as kubectl deduplicates them.
#[derive(Clone)]
struct Warnings {
    seen: Arc<Mutex<HashSet<String>>>,
    handler: WarningHandler,
}

impl Warnings {
    fn record<B>(&self, response: &http::Response<B>) {
        for value in response.headers().get_all(http::header::WARNING) {
            let Some(text) = value.to_str().ok().and_then(parse_warning) else { continue };
            if self.seen.lock().unwrap_or_else(|e| e.into_inner()).insert(text.clone()) {
                (self.handler)(&text);
            }
        }
    }
}

/// The text of an RFC 7234 warning header (`299 - "text"`, optionally followed by a date), or `None`
/// for another code or a malformed value, as client-go's `ParseWarningHeader` reads it.
pub fn parse_warning(header: &str) -> Option<String> {
    let rest = header.trim().strip_prefix("299 ")?;
    let (_agent, rest) = rest.split_once(' ')?;
    let mut chars = rest.strip_prefix('"')?.chars();
    let mut text = String::new();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => text.push(chars.next()?),
            c => text.push(c),
        }
    }
    (!text.is_empty()).then_some(text)
}

impl Connection {
    /// A client for `options`; every warning the API server sends goes to `on_warning`, once per text.
    pub async fn new(options: &ClientOptions, on_warning: WarningHandler) -> Result<Self> {
        let mut config = load_config(options.kubeconfig.as_deref(), options.context.as_deref()).await?;
        // kube sends no User-Agent of its own; kubectl and client-go name themselves, and audit logs and
        // API priority and fairness debugging rely on it.
        let agent = match &options.agent {
            Some(who) => format!("{} {who}", user_agent()),
            None => user_agent(),
        };
        if let Ok(value) = http::HeaderValue::from_str(&agent) {
            config.headers.push((http::header::USER_AGENT, value));
        }
        let authority = config.cluster_url.authority().map(|a| a.to_string());
        // Kept so that an error far from the client (connection refused, TLS failure) names the server
        // the way kubectl does.
        crate::error::set_server(authority.unwrap_or_else(|| config.cluster_url.to_string()));
        let default_namespace = config.default_namespace.clone();
        let requests = RequestCounter::default();
        let counter = requests.clone();
        let answered = LastAnswer::default();
        let last = answered.clone();
        let warnings = Warnings { seen: Arc::default(), handler: on_warning };
        let client = super::transport::client_builder(config)
            .context("cannot build a Kubernetes client")?
            .with_layer(&MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
                counter.record(&req);
                req
            }))
            .with_layer(&MapResponseLayer::new(move |res: http::Response<Box<kube::client::DynBody>>| {
                last.record(res.status());
                warnings.record(&res);
                res
            }))
            .with_layer(&tower::util::option_layer(options.answer_limit.map(|limit| DeadlineLayer { limit })))
            .build();
        Ok(Self { client, default_namespace, requests, answered })
    }
}

/// Problems with the client configuration itself, worded for the person who wrote the kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read kubeconfig {path:?}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("kubeconfig {path:?} is not valid: {reason}")]
    Invalid { path: String, reason: String },
    #[error("context {0:?} does not exist in the kubeconfig")]
    UnknownContext(String),
    #[error("the kubeconfig has no current context; pass --context or run `kubectl config use-context`")]
    NoCurrentContext,
    #[error(
        "no Kubernetes configuration found: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or run inside a cluster"
    )]
    NotFound,
}

async fn load_config(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<kube::Config> {
    let options = KubeConfigOptions { context: context.map(str::to_owned), ..Default::default() };
    if let Some(path) = kubeconfig {
        let file = read_kubeconfig(path)?;
        return kube::Config::from_custom_kubeconfig(file, &options)
            .await
            .map_err(|e| explain(e, &path.display().to_string()).into());
    }
    let from_env = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    let home_config = home_kubeconfig().filter(|p| p.exists());
    if from_env.is_some() || home_config.is_some() || context.is_some() {
        let source = match (&from_env, &home_config) {
            (Some(v), _) => v.to_string_lossy().into_owned(),
            (None, Some(p)) => p.display().to_string(),
            (None, None) => "~/.kube/config".to_owned(),
        };
        return kube::Config::from_kubeconfig(&options).await.map_err(|e| explain(e, &source).into());
    }
    kube::Config::incluster().map_err(|_| ConfigError::NotFound.into())
}

/// The context names of the kubeconfig samplectl would read (`--kubeconfig`, else KUBECONFIG's files
/// merged, else ~/.kube/config), sorted, for completing `--context`.
pub fn context_names(kubeconfig: Option<&Path>) -> Result<Vec<String>> {
    let config = match kubeconfig {
        Some(path) => read_kubeconfig(path)?,
        None => Kubeconfig::read().map_err(|e| explain(e, "the kubeconfig"))?,
    };
    let mut names: Vec<String> = config.contexts.into_iter().map(|context| context.name).collect();
    names.sort();
    names.dedup();
    Ok(names)
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig> {
    // `read_from`, not `from_yaml`: it resolves relative certificate paths against the file's directory,
    // as kubectl does.
    Kubeconfig::read_from(path).map_err(|e| explain(e, &path.display().to_string()).into())
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".kube").join("config"))
}

fn explain(err: KubeconfigError, source: &str) -> ConfigError {
    match err {
        KubeconfigError::LoadContext(name) => ConfigError::UnknownContext(name),
        KubeconfigError::CurrentContextNotSet => ConfigError::NoCurrentContext,
        KubeconfigError::ReadConfig(source, path) => ConfigError::Read { path, source },
        other => ConfigError::Invalid {
            path: source.to_owned(),
            reason: join_causes(std::iter::successors(Some(&other as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            })),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_read_as_client_go_reads_them() {
        let text = parse_warning(r#"299 - "example.com/v1beta1 Thing is deprecated; use example.com/v1 Thing""#);
        assert_eq!(text.as_deref(), Some("example.com/v1beta1 Thing is deprecated; use example.com/v1 Thing"));
        assert_eq!(
            parse_warning(r#"299 kube-apiserver "a \"quoted\" word" "Mon, 23 Nov 2026 10:00:00 GMT""#).as_deref(),
            Some(r#"a "quoted" word"#)
        );
        for bad in ["", "299", r#"199 - "other code""#, r#"299 - unquoted"#, r#"299 - "unterminated"#, r#"299 - """#] {
            assert_eq!(parse_warning(bad), None, "{bad:?}");
        }
    }
}
