//! Every request the engine sends is bounded in time and fails in words: kube sets no read timeout, so
//! without a bound a request on a half-open connection (or to a frozen API server) would never end and
//! would hold its concurrency slot for good.

use std::time::Duration;

/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one request with [`REQUEST_TIMEOUT`].
pub async fn bounded<T>(request: impl Future<Output = kube::Result<T>>) -> Result<T, Failed> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(Failed::Api(err)),
        Err(_) => Err(Failed::TimedOut),
    }
}

/// A request that did not succeed.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.message())]
pub enum Failed {
    Api(kube::Error),
    TimedOut,
    /// Not sent: this process's Lease was not renewed within its renew deadline (`fence`).
    Fenced,
}

impl Failed {
    /// For /healthz: no answer, or a 5xx (a 4xx is the server refusing, not being away).
    pub fn out_of_reach(&self) -> bool {
        match self {
            Failed::Api(err) => crate::error::out_of_reach(err),
            Failed::TimedOut => true,
            Failed::Fenced => false,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Failed::Api(err) => crate::error::status_code(err),
            Failed::TimedOut | Failed::Fenced => None,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Failed::Api(err) => crate::error::describe(err),
            Failed::TimedOut => format!("the API server did not answer within {}s", REQUEST_TIMEOUT.as_secs()),
            Failed::Fenced => "not sent: this process's Lease was not renewed within its renew deadline".to_owned(),
        }
    }
}
