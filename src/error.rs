//! Turns any failure into the line a kubectl user expects on stderr, and an exit code; and the one place a
//! kube error is classified (which status, whether the server answered at all, whether it will pass). A
//! leaf: it depends on no other module of samplectl, so every layer words and sorts its errors here, and a
//! log line says what an error line would.

use std::error::Error as StdError;
use std::io;
use std::sync::OnceLock;

use kube::core::Status;

pub const EXIT_FAILURE: i32 = 1;

/// A failure already worded, one line per problem (several objects not found, say): printed as it is.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct Reported(pub Vec<String>);

/// The API server this process talks to, as kubectl names it in connection failures (`127.0.0.1:6443`).
static SERVER: OnceLock<String> = OnceLock::new();

/// Remembers the API server's address once a client is built, so that errors far from the client name it.
pub fn set_server(address: String) {
    let _ = SERVER.set(address);
}

pub fn server() -> Option<&'static str> {
    SERVER.get().map(String::as_str)
}

/// What to print and how to exit for a failed command. `None` means the failure is not one: the reader of
/// our stdout went away (`samplectl list | head`), which ends the command quietly with success. `server`
/// is the API server's address, named in connection failures as kubectl names it.
pub fn report(err: &anyhow::Error, server: Option<&str>) -> Option<(String, i32)> {
    if is_broken_pipe(err) {
        return None;
    }
    if let Some(reported) = err.downcast_ref::<Reported>() {
        return Some((reported.to_string(), EXIT_FAILURE));
    }
    Some((message(err, server.unwrap_or("the server")), EXIT_FAILURE))
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| cause.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

fn message(err: &anyhow::Error, server: &str) -> String {
    match worded(err.chain(), server) {
        Some(line) if line.starts_with("Error from server") || line.starts_with("error: ") => line,
        Some(line) => format!("error: {line}"),
        None => format!("error: {}", join_causes(err.chain())),
    }
}

/// kubectl's words for a failure somewhere in `causes`: what the API server sent back, or that it could
/// not be reached. `None` when no cause is either.
fn worded<'a>(causes: impl Iterator<Item = &'a (dyn StdError + 'static)> + Clone, server: &str) -> Option<String> {
    if let Some(status) = causes.clone().find_map(api_status) {
        return Some(from_server(status));
    }
    if causes
        .clone()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|e| e.kind() == io::ErrorKind::ConnectionRefused)
    {
        return Some(format!(
            "the connection to the server {server} was refused - did you specify the right host or port?"
        ));
    }
    if causes.clone().any(|c| c.downcast_ref::<kube::Error>().is_some_and(is_transport)) {
        let innermost = causes.last().map(ToString::to_string).unwrap_or_default();
        return Some(format!("unable to connect to the server {server}: {innermost}"));
    }
    None
}

fn api_status<'a>(cause: &'a (dyn StdError + 'static)) -> Option<&'a Status> {
    match cause.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => Some(status),
        _ => cause.downcast_ref::<Status>(),
    }
}

/// One kube error as a person reads it, with no Debug dump, in the words the command's error line would
/// use: kubectl's wording for what the API server sent back or for a server out of reach, else the error
/// and its causes on one line. Log lines use it, so a controller that lost its API server says so as
/// kubectl would.
pub fn describe(err: &kube::Error) -> String {
    let err: &(dyn StdError + 'static) = err;
    worded(causes(err), server().unwrap_or("the server")).unwrap_or_else(|| join_causes(causes(err)))
}

/// Any failure as a log line words it: what the command's error line would say, without `error: `.
pub fn describe_any(err: &anyhow::Error) -> String {
    match worded(err.chain(), server().unwrap_or("the server")) {
        Some(line) => line.strip_prefix("error: ").map(str::to_owned).unwrap_or(line),
        None => join_causes(err.chain()),
    }
}

/// An error and the errors that caused it, outermost first.
fn causes<'a>(err: &'a (dyn StdError + 'static)) -> impl Iterator<Item = &'a (dyn StdError + 'static)> + Clone {
    std::iter::successors(Some(err), |e: &&'a (dyn StdError + 'static)| (*e).source())
}

/// The HTTP status the API server answered a request with; `None` when it did not answer.
pub fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether any cause of `err` is the API server answering 404.
pub fn is_not_found(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| cause.downcast_ref::<kube::Error>().and_then(status_code) == Some(404))
}

/// Whether a failed request says the API server is out of reach: no answer at all, or a 5xx. A 4xx is
/// the server there and refusing.
pub fn out_of_reach(err: &kube::Error) -> bool {
    status_code(err).is_none_or(|code| code >= 500)
}

/// Whether a failure will pass by itself: the server is away, restarting or overloaded (a 5xx, 429, or
/// no answer). Anything else (forbidden, not found, bad request) would fail again the same way.
pub fn transient(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| match cause.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => status.code >= 500 || status.code == 429,
        Some(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
        Some(_) => false,
        None => cause.downcast_ref::<io::Error>().is_some(),
    })
}

/// kubectl's wording for errors the API server sent back (`Error from server (Reason): message`).
fn from_server(status: &Status) -> String {
    if status.code == 401 {
        return format!("error: You must be logged in to the server ({})", status.message);
    }
    match status.reason.as_str() {
        "" => format!("Error from server: {}", status.message),
        reason => format!("Error from server ({reason}): {}", status.message),
    }
}

fn is_transport(err: &kube::Error) -> bool {
    matches!(err, kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::RustlsTls(_))
}

/// An error and its causes as one line ("outer: inner: innermost"), dropping causes whose text the line
/// already holds (many errors repeat their source in their own message).
pub fn join_causes<'a>(causes: impl Iterator<Item = &'a (dyn StdError + 'static)>) -> String {
    let mut text = String::new();
    for cause in causes {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure(message, reason).with_code(code)))
    }

    #[test]
    fn server_errors_read_like_kubectl() {
        let err = anyhow::Error::new(status(403, "Forbidden", "samples.example.com is forbidden: User \"x\""))
            .context("cannot list samples");
        assert_eq!(
            report(&err, None),
            Some(("Error from server (Forbidden): samples.example.com is forbidden: User \"x\"".into(), 1))
        );
        let err = anyhow::Error::new(status(401, "Unauthorized", "Unauthorized"));
        assert_eq!(report(&err, None).unwrap().0, "error: You must be logged in to the server (Unauthorized)");
    }

    #[test]
    fn a_server_out_of_reach_reads_the_same_in_logs_as_in_error_lines() {
        let refused = || kube::Error::Service(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        let line = report(&anyhow::Error::new(refused()), Some("127.0.0.1:6443")).unwrap().0;
        assert_eq!(
            line,
            "error: the connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?"
        );
        assert!(describe(&refused()).ends_with("was refused - did you specify the right host or port?"));
        let closed = kube::Error::Service(Box::new(io::Error::other("connection closed before message completed")));
        assert!(describe(&closed).starts_with("unable to connect to the server "), "{}", describe(&closed));
        assert!(describe(&closed).ends_with(": connection closed before message completed"));
        let listing = anyhow::Error::new(closed).context("cannot list samples");
        assert!(describe_any(&listing).starts_with("unable to connect to the server "), "{}", describe_any(&listing));
        assert!(transient(&listing) && out_of_reach(&refused()));
    }

    #[test]
    fn statuses_are_sorted_once() {
        let forbidden = status(403, "Forbidden", "no");
        assert_eq!(status_code(&forbidden), Some(403));
        assert!(!out_of_reach(&forbidden) && out_of_reach(&status(503, "ServiceUnavailable", "later")));
        assert!(
            !transient(&anyhow::Error::new(forbidden)) && transient(&anyhow::Error::new(status(429, "TooMany", "")))
        );
        assert!(is_not_found(&anyhow::Error::new(status(404, "NotFound", "gone")).context("reading")));
    }

    #[test]
    fn broken_pipe_is_not_a_failure() {
        let err = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing output");
        assert_eq!(report(&err, None), None);
    }

    #[test]
    fn other_errors_keep_their_causes_once() {
        let err = Err::<(), _>(io::Error::other("disk on fire")).context("cannot write file").unwrap_err();
        assert_eq!(report(&err, None).unwrap().0, "error: cannot write file: disk on fire");
    }
}
