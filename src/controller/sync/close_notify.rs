//! A hook server that closes its connection without TLS's close_notify, as Python's `http.server` over
//! `ssl` does after an HTTP/1.0 answer with no Content-Length (metacontroller's webhook-auth example
//! answers so): rustls reports the close as an error, and hyper, reading the body to the connection's
//! end, then loses the answer. Go's crypto/tls takes the close as the end of the stream when it falls
//! between TLS records, so metacontroller reads such answers. Here too: a read that ends for want of
//! close_notify is the stream's end. Only whole records were ever delivered, so nothing truncated
//! inside a record is read; a body that declares its length is still checked against it by hyper.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

type Inner = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;
type InnerStream = hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The HTTPS-or-HTTP connector whose streams end where the server closes them.
#[derive(Clone)]
pub struct Lenient(pub Inner);

/// A stream of [`Lenient`].
pub struct Stream(InnerStream);

impl tower::Service<Uri> for Lenient {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move { connecting.await.map(Stream) })
    }
}

impl Read for Stream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.0).poll_read(cx, buf) {
            // Nothing was put in `buf`: hyper reads this as the end of the stream.
            Poll::Ready(Err(err)) if err.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

impl Write for Stream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        self.0.connected()
    }
}
