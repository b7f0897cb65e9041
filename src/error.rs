//! Turns any failure into the line a kubectl user expects on stderr, and an exit code. A leaf: it depends
//! on no other module of samplectl, so every layer can word its errors through it.

use std::io;

use kube::core::Status;

pub const EXIT_FAILURE: i32 = 1;

/// A failure already worded, one line per problem (several objects not found, say): printed as it is.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct Reported(pub Vec<String>);

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
    if let Some(status) = err.chain().find_map(api_status) {
        return from_server(status);
    }
    if let Some(io_err) = err.chain().find_map(|c| c.downcast_ref::<io::Error>())
        && io_err.kind() == io::ErrorKind::ConnectionRefused
    {
        return format!(
            "error: the connection to the server {server} was refused - did you specify the right host or port?"
        );
    }
    if err.chain().any(|c| c.downcast_ref::<kube::Error>().is_some_and(is_transport)) {
        return format!("error: unable to connect to the server {server}: {}", innermost(err));
    }
    format!("error: {}", join_causes(err.chain()))
}

fn api_status<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a Status> {
    match cause.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) => Some(status),
        _ => cause.downcast_ref::<Status>(),
    }
}

/// One kube error as a person reads it, with no Debug dump: kubectl's wording for what the API server
/// sent back, else the error and its causes on one line.
pub fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => from_server(status),
        other => join_causes(std::iter::successors(Some(other as &(dyn std::error::Error + 'static)), |e| e.source())),
    }
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

fn innermost(err: &anyhow::Error) -> String {
    err.chain().last().map(ToString::to_string).unwrap_or_default()
}

/// An error and its causes as one line ("outer: inner: innermost"), dropping causes whose text the line
/// already holds (many errors repeat their source in their own message).
pub fn join_causes<'a>(causes: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
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
