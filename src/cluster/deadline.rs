//! A deadline under every request the controller's client sends (`ClientOptions::answer_limit`; `list`
//! and `watch` wait as kubectl does, until the server answers or Ctrl-C). kube sets no read timeout (a
//! watch may rightly stay silent for minutes), so without one a request on a half-open connection, or to
//! an API server that accepted it and froze, never ends: whatever waits for it (a list at start-up, an
//! access review for a scraper) waits for good. Here every request must get its response headers within
//! [`ANSWER_LIMIT`], and every response but a watch's must then keep its body coming: no gap between two
//! parts of it longer than the same limit. A watch's body is left to its reader, which knows how long
//! the server may rightly stay silent (`stream.rs`, the hub, kube's watcher: each reopens a watch silent
//! past its timeout). The engine bounds its own requests more tightly (`engine::request`); a request that
//! may rightly take longer (a hook called through the API server's service proxy, bounded by the hook's
//! own timeout) carries its own limit as an [`AnswerLimit`] extension.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use kube::client::DynBody;
use tokio::time::{Instant, Sleep};
use tower::{BoxError, Layer, Service};

/// How long the API server may take to start answering, and then stay silent within an answer.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// A request's own limit, in place of [`ANSWER_LIMIT`].
#[derive(Debug, Clone, Copy)]
pub struct AnswerLimit(pub Duration);

/// The error a request past its deadline ends with.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer within {}s", .0.as_secs())]
pub struct NoAnswer(pub Duration);

/// Whether a request's query makes it a watch (`watch=true` or `watch=1`, as the API server reads it).
pub fn is_watch(query: &str) -> bool {
    query.split('&').any(|pair| matches!(pair.split_once('='), Some(("watch", "true" | "1"))))
}

/// Puts a [`Deadline`] around the client's service.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    pub limit: Duration,
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner, limit: self.limit }
    }
}

#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    limit: Duration,
}

impl<S, B> Service<http::Request<B>> for Deadline<S>
where
    S: Service<http::Request<B>, Response = http::Response<Box<DynBody>>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = request.uri().query().is_some_and(is_watch);
        let limit = request.extensions().get::<AnswerLimit>().map_or(self.limit, |own| own.0);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = match tokio::time::timeout(limit, answer).await {
                Ok(response) => response.map_err(Into::into)?,
                Err(_) => return Err(NoAnswer(limit).into()),
            };
            Ok(match watch {
                true => response,
                false => response.map(|body| Box::new(Steady::new(body, limit)) as Box<DynBody>),
            })
        })
    }
}

/// A response body that fails once it has been silent for its limit.
struct Steady {
    inner: Box<DynBody>,
    limit: Duration,
    silence: Pin<Box<Sleep>>,
}

impl Steady {
    fn new(inner: Box<DynBody>, limit: Duration) -> Self {
        Steady { inner, limit, silence: Box::pin(tokio::time::sleep(limit)) }
    }
}

impl Body for Steady {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.silence.as_mut().reset(Instant::now() + this.limit);
            return Poll::Ready(frame);
        }
        ready!(this.silence.as_mut().poll(cx));
        Poll::Ready(Some(Err(NoAnswer(this.limit).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_are_told_apart_as_the_api_server_reads_the_query() {
        assert!(is_watch("watch=true&resourceVersion=5"));
        assert!(is_watch("labelSelector=a&watch=1"));
        assert!(!is_watch("watch=false"));
        assert!(!is_watch("limit=500"));
        assert!(!is_watch(""));
        assert!(!is_watch("labelSelector=watch%3Dtrue"));
    }

    fn body(parts: Vec<(u64, &'static str)>) -> Box<DynBody> {
        let stream = futures::stream::iter(parts).then(|(after_ms, text)| async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            Ok::<_, BoxError>(Frame::data(Bytes::from_static(text.as_bytes())))
        });
        Box::new(http_body_util::StreamBody::new(Box::pin(stream)))
    }

    async fn read(body: Box<DynBody>) -> Result<String, String> {
        use http_body_util::BodyExt;
        let mut steady = Steady::new(body, Duration::from_secs(30));
        let mut text = String::new();
        while let Some(frame) = steady.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            text.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
        }
        Ok(text)
    }

    use futures::StreamExt;

    #[tokio::test(start_paused = true)]
    async fn a_body_may_take_long_while_it_keeps_coming_but_not_stay_silent() {
        // 80 s in all, never 30 s without a part: read whole.
        let steady = body(vec![(20_000, "a"), (20_000, "b"), (20_000, "c"), (20_000, "d")]);
        assert_eq!(read(steady).await.unwrap(), "abcd");
        // Silent for 31 s after its first part: cut.
        let stalled = body(vec![(1_000, "a"), (31_000, "b")]);
        assert_eq!(read(stalled).await.unwrap_err(), "the API server did not answer within 30s");
    }
}
