//! How much review work a webhook server takes on at once. The bytes of the request bodies being read
//! and answered are held to a budget, taken before a body is read: a body is read whole and parsed
//! before its hook runs, so without it, N concurrent reviews cost N bodies of memory in a container of
//! 256 MiB. A request that cannot have its share before the API server stops waiting for it is answered
//! 429 at once, which the API server reads as the webhook's failure (its `failurePolicy` decides),
//! rather than queued past the point where an answer reaches anyone.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The API server's wait for a webhook when its call says none (`timeoutSeconds` defaults to 10).
const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// Left of the API server's wait for the answer to travel back.
const MARGIN: Duration = Duration::from_secs(1);

pub struct Budget {
    bytes: Arc<Semaphore>,
    /// What one request may take: its body limit.
    most: usize,
}

impl Budget {
    /// A budget of `total` bytes, for requests of at most `most` bytes each (`total >= most`).
    pub fn new(total: usize, most: usize) -> Self {
        Budget { bytes: Arc::new(Semaphore::new(total.max(most))), most }
    }

    /// A request's body, read whole within the budget and held to it until the permit is dropped; or
    /// the answer that refuses it: 429 when the budget has no room for it before the API server stops
    /// waiting (`wait_for`), 413 past the most one body may be.
    pub async fn read(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<(Bytes, OwnedSemaphorePermit), Response> {
        let Some(share) = self.enter(headers, wait_for(uri)).await else {
            return Err((StatusCode::TOO_MANY_REQUESTS, "too many reviews in flight; try again").into_response());
        };
        match axum::body::to_bytes(body, self.most).await {
            Ok(bytes) => Ok((bytes, share)),
            Err(_) => Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the review cannot be read whole (at most {} MiB)", self.most >> 20),
            )
                .into_response()),
        }
    }

    /// The share of a request whose headers are `headers` (its Content-Length, or the most a body may
    /// be), waited for no longer than `wait`; None past it.
    async fn enter(&self, headers: &HeaderMap, wait: Duration) -> Option<OwnedSemaphorePermit> {
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(self.most)
            .clamp(1, self.most);
        let share = u32::try_from(length).unwrap_or(u32::MAX);
        tokio::time::timeout(wait, self.bytes.clone().acquire_many_owned(share)).await.ok()?.ok()
    }
}

/// How long a request may wait for its turn: the API server's own timeout for the call (the
/// `timeout` its webhook client puts in the URL, as Go prints a duration: `10s`, `1m0s`), less a
/// margin.
pub fn wait_for(uri: &Uri) -> Duration {
    let given = uri
        .query()
        .into_iter()
        .flat_map(|query| query.split('&'))
        .find_map(|pair| pair.strip_prefix("timeout="))
        .and_then(go_duration)
        .unwrap_or(DEFAULT_WAIT);
    given.saturating_sub(MARGIN).max(MARGIN)
}

fn go_duration(text: &str) -> Option<Duration> {
    match crate::duration::parse_go(text) {
        Ok((false, wait)) if !wait.is_zero() => Some(wait),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_timeout_is_read_from_the_url() {
        let uri = |u: &str| u.parse::<Uri>().unwrap();
        assert_eq!(wait_for(&uri("/validate?timeout=10s")), Duration::from_secs(9));
        assert_eq!(wait_for(&uri("/v?x=1&timeout=1m0s")), Duration::from_secs(59));
        assert_eq!(wait_for(&uri("/v?timeout=1s")), MARGIN, "never less than the margin");
        assert_eq!(wait_for(&uri("/v")), Duration::from_secs(9));
        assert_eq!(wait_for(&uri("/v?timeout=garbage")), Duration::from_secs(9));
    }

    #[tokio::test]
    async fn a_request_past_the_budget_waits_then_is_refused() {
        let budget = Budget::new(100, 80);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, "80".parse().unwrap());
        let first = budget.enter(&headers, Duration::from_millis(10)).await;
        assert!(first.is_some());
        assert!(budget.enter(&headers, Duration::from_millis(50)).await.is_none(), "80 + 80 > 100");
        let small = {
            let mut small = HeaderMap::new();
            small.insert(header::CONTENT_LENGTH, "20".parse().unwrap());
            small
        };
        assert!(budget.enter(&small, Duration::from_millis(10)).await.is_some(), "80 + 20 fit");
        drop(first);
        assert!(budget.enter(&HeaderMap::new(), Duration::from_millis(10)).await.is_some(), "no length: the most");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_413_and_a_full_budget_429() {
        let budget = Budget::new(3 << 20, 2 << 20);
        let uri: Uri = "/review?timeout=2s".parse().unwrap();
        let (read, held) = budget.read(&uri, &HeaderMap::new(), Body::from(vec![b'x'; 1 << 20])).await.unwrap();
        assert_eq!(read.len(), 1 << 20);
        // No Content-Length: the most a body may be (2 MiB) is taken; 1 MiB of the 3 is left.
        let refused = budget.read(&uri, &HeaderMap::new(), Body::from("{}")).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        drop(held);
        let mut huge = HeaderMap::new();
        huge.insert(header::CONTENT_LENGTH, (3u64 << 20).to_string().parse().unwrap());
        let refused = budget.read(&uri, &huge, Body::from(vec![b'x'; 3 << 20])).await.unwrap_err();
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let text = axum::body::to_bytes(refused.into_body(), 1024).await.unwrap();
        assert_eq!(text, "the review cannot be read whole (at most 2 MiB)");
    }
}
