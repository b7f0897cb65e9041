//! Calling a sync hook: a local command (the request on its stdin, the answer on its stdout, its stderr
//! passed to the log line by line with the parent's name), a long-running process (a request per line,
//! `process.rs`) or an HTTP URL (the request POSTed, the answer in a 200 response, as metacontroller's
//! webhooks). Each call has a deadline; whenever a call ends (answered, past its deadline, or dropped
//! by a reconcile's deadline or a stop), the command's whole process group ends with it, so a shell
//! hook's pipeline cannot linger.

use std::process::Stdio;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Version;
use super::process::Pool;
use super::security::{Https, Secured};
use crate::cluster::deadline::AnswerLimit;
use crate::process::group::Group;

/// An answer larger than this is refused: a hook that prints without end must not exhaust memory.
const MAX_ANSWER: usize = 64 << 20;

/// Where a hook lives.
#[derive(Clone)]
pub enum Address {
    /// A program and its arguments, split as a shell would split the words but run without one.
    Command(Vec<String>),
    /// The same, started once and given a request per line (`--hook-process`).
    Process(Vec<String>),
    Url(http::Uri),
    /// A Service reached through the API server's service proxy
    /// (`/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy/PATH`), for a controller object's
    /// `webhook.service` when samplectl runs outside the cluster, where the Service's DNS name means
    /// nothing; the API server forwards the call with the kubeconfig's credentials.
    ServiceProxy {
        client: kube::Client,
        path: String,
        shown: String,
    },
}

impl PartialEq for Address {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Address::Command(a), Address::Command(b)) | (Address::Process(a), Address::Process(b)) => a == b,
            (Address::Url(a), Address::Url(b)) => a == b,
            (Address::ServiceProxy { path: a, .. }, Address::ServiceProxy { path: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl Eq for Address {}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Command(words) => f.debug_tuple("Command").field(words).finish(),
            Address::Process(words) => f.debug_tuple("Process").field(words).finish(),
            Address::Url(uri) => f.debug_tuple("Url").field(uri).finish(),
            Address::ServiceProxy { path, .. } => f.debug_tuple("ServiceProxy").field(path).finish(),
        }
    }
}

impl Address {
    /// `--hook`'s value: words split as a POSIX shell splits them (quotes, backslashes), never run through
    /// a shell; write `sh -c '...'` to have one.
    pub fn command(line: &str) -> Result<Self, String> {
        words(line).map(Address::Command)
    }

    /// `--hook-process`'s value, split as `--hook`'s.
    pub fn process(line: &str) -> Result<Self, String> {
        words(line).map(Address::Process)
    }

    /// `--hook-url`'s value: an http or https URL.
    pub fn url(url: &str) -> Result<Self, String> {
        let uri: http::Uri = url.parse().map_err(|err| format!("{url:?} is not a URL: {err}"))?;
        match (uri.scheme_str(), uri.authority()) {
            (Some("http" | "https"), Some(_)) => Ok(Address::Url(uri)),
            _ => Err(format!("{url:?} is not an http:// or https:// URL")),
        }
    }
}

/// Starts a command hook with piped stdin, stdout and stderr, leading a process group of its own.
pub(super) fn spawn(words: &[String]) -> Result<Group, String> {
    Group::spawn(
        tokio::process::Command::new(&words[0])
            .args(&words[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .map_err(|err| format!("cannot be started: {err}"))
}

fn words(line: &str) -> Result<Vec<String>, String> {
    match shlex::split(line) {
        Some(words) if !words.is_empty() => Ok(words),
        Some(_) => Err("the hook command is empty".into()),
        None => Err(format!("cannot split {line:?} into words (an unclosed quote?)")),
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Command(words) | Address::Process(words) => {
                write!(f, "{}", shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" ")))
            }
            Address::Url(uri) => write!(f, "{uri}"),
            Address::ServiceProxy { shown, .. } => write!(f, "{shown}"),
        }
    }
}

/// A hook with its deadline and the shape of its requests and answers, ready to be called.
pub struct Hook {
    pub target: Address,
    pub timeout: Duration,
    pub version: Version,
    /// Answers with a field the protocol does not have are refused.
    pub strict: bool,
    client: Option<Client<Https, Full<bytes::Bytes>>>,
    /// A long-running hook's processes.
    pool: Option<Pool>,
    /// A CA, a client certificate or an Authorization header, read from the cluster.
    security: Option<Secured>,
}

impl Hook {
    /// A v1 hook, reading answers loosely, as `--hook` and `--hook-url` run one.
    pub fn new(target: Address, timeout: Duration) -> anyhow::Result<Self> {
        Self::versioned(target, timeout, Version::V1, false)
    }

    pub fn versioned(target: Address, timeout: Duration, version: Version, strict: bool) -> anyhow::Result<Self> {
        let client = match &target {
            Address::Command(_) | Address::Process(_) | Address::ServiceProxy { .. } => None,
            Address::Url(_) => {
                let https = super::security::plain_https().map_err(|err| anyhow::anyhow!("TLS: {err}"))?;
                Some(Client::builder(TokioExecutor::new()).build(https))
            }
        };
        let pool = match &target {
            Address::Process(words) => Some(Pool::new(words.clone(), 1)),
            _ => None,
        };
        Ok(Hook { target, timeout, version, strict, client, pool, security: None })
    }

    /// Lets a long-running hook run up to `most` processes at once (one unless told).
    pub fn processes(mut self, most: usize) -> Self {
        if let Address::Process(words) = &self.target {
            self.pool = Some(Pool::new(words.clone(), most));
        }
        self
    }

    /// Calls the hook with the CA, client certificate and Authorization header `security` names.
    pub fn secured(mut self, security: Secured) -> Self {
        self.security = Some(security);
        self
    }

    /// Calls the hook for the parent `object` (`namespace/name`, for the log) with `request`, and reads
    /// its answer with `read` (given the body and whether to read it strictly).
    pub async fn call<T>(
        &self,
        object: &str,
        request: &serde_json::Value,
        read: impl FnOnce(&[u8], bool) -> Result<T, String>,
    ) -> Result<T, String> {
        let body = serde_json::to_vec(request).expect("a request is JSON");
        let answer = match &self.target {
            Address::Command(words) => self.run(words, object, body).await?,
            Address::Process(_) => {
                let pool = self.pool.as_ref().expect("a long-running hook has a pool");
                pool.call(object, &body, self.timeout, MAX_ANSWER).await?
            }
            Address::Url(uri) => self.post(uri, body).await?,
            Address::ServiceProxy { client, path, .. } => self.proxy(client, path, body).await?,
        };
        read(&answer, self.strict)
    }

    async fn run(&self, words: &[String], object: &str, stdin: Vec<u8>) -> Result<Vec<u8>, String> {
        let mut group = spawn(words)?;
        let child = group.child();
        let (mut input, mut output, errors) = (
            child.stdin.take().expect("stdin is piped"),
            child.stdout.take().expect("stdout is piped"),
            child.stderr.take().expect("stderr is piped"),
        );
        let object = object.to_owned();
        let stderr = tokio::spawn(async move {
            let mut last = String::new();
            crate::process::lines::each_line(errors, |line| {
                tracing::info!(object = object.as_str(), "{object}: hook: {line}");
                last = line;
            })
            .await;
            last
        });
        let work = async {
            // A hook may answer without reading all of its input: a broken pipe here is not its failure.
            let writing = async move {
                let _ = input.write_all(&stdin).await;
                drop(input);
            };
            let mut answer = Vec::new();
            let reading =
                async { (&mut output).take(MAX_ANSWER as u64 + 1).read_to_end(&mut answer).await.map(|_| ()) };
            let ((), read) = tokio::join!(writing, reading);
            read.map_err(|err| format!("cannot be read: {err}"))?;
            // Whatever it left running ends with it.
            let status = group.end().await.map_err(|err| format!("cannot be waited for: {err}"))?;
            Ok::<_, String>((status, answer))
        };
        let outcome = tokio::time::timeout(self.timeout, work).await;
        // Past its deadline, the whole group is killed here (a call dropped early kills it in `Drop`).
        drop(group);
        let last_line = match tokio::time::timeout(Duration::from_secs(1), stderr).await {
            Ok(Ok(line)) => line,
            _ => String::new(),
        };
        let said = if last_line.is_empty() { String::new() } else { format!(": {last_line}") };
        let (status, answer) = match outcome {
            Ok(result) => result?,
            Err(_) => return Err(format!("did not answer within {}", crate::duration::format(self.timeout))),
        };
        if answer.len() > MAX_ANSWER {
            return Err(format!("answered more than {} MiB", MAX_ANSWER >> 20));
        }
        if !status.success() {
            return Err(match status.code() {
                Some(code) => format!("exited with status {code}{said}"),
                None => format!("was killed ({status}){said}"),
            });
        }
        Ok(answer)
    }

    #[allow(clippy::disallowed_methods)] // a hook called through the API server's service proxy: no object is written
    async fn proxy(&self, client: &kube::Client, path: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let mut request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|err| err.to_string())?;
        // The hook's own timeout bounds it, not the client's usual limit.
        request.extensions_mut().insert(AnswerLimit(self.timeout));
        let exchange = async {
            match client.request_text(request).await {
                Ok(text) => Ok(text.into_bytes()),
                Err(kube::Error::Api(status)) => Err(format!(
                    "answered HTTP {} through the API server's service proxy: {}",
                    status.code, status.message
                )),
                Err(err) => Err(format!(
                    "cannot be reached through the API server's service proxy: {}",
                    crate::error::describe(&err)
                )),
            }
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(format!("did not answer within {}", crate::duration::format(self.timeout))),
        }
    }

    async fn post(&self, uri: &http::Uri, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let resolved = match &self.security {
            Some(security) => Some(security.resolved().await?),
            None => None,
        };
        let client = match &resolved {
            Some(resolved) => &resolved.http,
            None => self.client.as_ref().expect("a URL hook has a client"),
        };
        let mut request = http::Request::post(uri.clone()).header(http::header::CONTENT_TYPE, "application/json");
        if let Some(header) = resolved.as_ref().and_then(|r| r.header.as_deref()) {
            request = request.header(http::header::AUTHORIZATION, header);
        }
        let request = request.body(Full::new(bytes::Bytes::from(body))).map_err(|err| err.to_string())?;
        let exchange = async {
            let response = client.request(request).await.map_err(|err| {
                let mut message = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(cause) = source {
                    message = format!("{message}: {cause}");
                    source = cause.source();
                }
                format!("cannot be reached: {message}")
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|err| format!("answer cannot be read: {err}"))?
                .to_bytes();
            if status != http::StatusCode::OK {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned();
                return Err(format!("answered HTTP {status}: {text}"));
            }
            Ok(body.to_vec())
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(format!("did not answer within {}", crate::duration::format(self.timeout))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controller::sync::{Answer, Shape, parse_answer};

    fn answer(body: &[u8], strict: bool) -> Result<Answer, String> {
        parse_answer(body, strict, Shape::Composite)
    }

    #[test]
    fn commands_are_split_like_a_shell_but_not_run_by_one() {
        assert_eq!(
            Address::command(r#"python3 "my hook.py" --flag='a b'"#).unwrap(),
            Address::Command(vec!["python3".into(), "my hook.py".into(), "--flag=a b".into()])
        );
        assert!(Address::command("  ").unwrap_err().contains("empty"));
        assert!(Address::command("sh -c 'unclosed").unwrap_err().contains("unclosed quote"));
        assert!(Address::url("ftp://x/").unwrap_err().contains("not an http"));
        assert!(Address::url("http://127.0.0.1:8080/sync").is_ok());
    }

    fn hook(line: &str, timeout_ms: u64) -> Hook {
        Hook::new(Address::command(line).unwrap(), Duration::from_millis(timeout_ms)).unwrap()
    }

    #[tokio::test]
    async fn a_command_hook_answers_fails_or_times_out() {
        let request = json!({"parent": {"metadata": {"name": "p"}}});
        let echo = hook(r#"sh -c 'cat >/dev/null; echo "{\"status\": {\"n\": 1}}"'"#, 5000);
        assert_eq!(echo.call("ns/p", &request, answer).await.unwrap().status, Some(json!({"n": 1})));

        let failing = hook("sh -c 'echo broken >&2; exit 3'", 5000);
        assert_eq!(failing.call("ns/p", &request, answer).await.unwrap_err(), "exited with status 3: broken");

        let slow = hook("sh -c 'sleep 30 | cat'", 300);
        let started = std::time::Instant::now();
        assert_eq!(slow.call("ns/p", &request, answer).await.unwrap_err(), "did not answer within 300ms");
        assert!(started.elapsed() < Duration::from_secs(5), "the pipeline was killed");

        let garbage = hook("echo not-json", 5000);
        assert!(garbage.call("ns/p", &request, answer).await.unwrap_err().starts_with("answered invalid JSON"));
        let missing = hook("/nonexistent/hook", 5000);
        assert!(missing.call("ns/p", &request, answer).await.unwrap_err().starts_with("cannot be started"));
    }

    #[tokio::test]
    async fn a_hook_that_logs_invalid_bytes_or_endless_lines_still_answers() {
        // Before stderr was read as bytes, the reader stopped at the first invalid byte and closed the
        // pipe, and the hook's next write to stderr killed it with SIGPIPE.
        let request = json!({"parent": {"metadata": {"name": "p"}}});
        let noisy = hook(
            r#"sh -c 'printf "bad \377 byte\n" >&2; sleep 0.2; head -c 3000000 /dev/zero | tr "\0" x >&2; printf "\nlast\n" >&2; cat >/dev/null; echo "{\"status\": {\"n\": 2}}"'"#,
            20_000,
        );
        assert_eq!(noisy.call("ns/p", &request, answer).await.unwrap().status, Some(json!({"n": 2})));
        let failing = hook(r#"sh -c 'printf "\377 gave up\n" >&2; exit 4'"#, 20_000);
        assert_eq!(failing.call("ns/p", &request, answer).await.unwrap_err(), "exited with status 4: \u{fffd} gave up");
    }

    #[tokio::test]
    async fn what_a_command_hook_leaves_running_ends_with_its_call() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let line = format!(
            r#"sh -c 'sleep 60 >/dev/null 2>&1 & echo $! > {}; cat >/dev/null; echo "{{}}"'"#,
            pidfile.display()
        );
        let request = json!({"parent": {}});
        hook(&line, 20_000).call("ns/p", &request, answer).await.unwrap();
        let pid = std::fs::read_to_string(&pidfile).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let mut gone = false;
        for _ in 0..3000 {
            gone = std::fs::read_to_string(&stat)
                .map_or(true, |s| s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
            if gone {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(gone, "the background sleep was killed with the hook's group");
    }
}
