//! A cap on the connections a role's gRPC listener keeps: each accepted connection holds a
//! place while it is open, and one accepted with every place taken is closed at once (as the
//! Kafka listener's `max_connections`), said in a warning at most every 10 s with how many
//! were held back (the Kafka listener's [`security::audit::RateLimit`]). Each HTTP/2
//! connection holds state of its own (its streams, frames to send, bytes received ahead of
//! reading): without a cap, a client opening connections could make a role hold any amount.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::Connected;

/// How often refused connections are told in a warning at most.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A connection holding its place.
pub(crate) struct Capped<IO> {
    io: IO,
    _place: OwnedSemaphorePermit,
}

/// `incoming`'s connections, at most `max` open at once: one more is closed as it comes.
pub(crate) fn capped<IO, E>(
    incoming: impl Stream<Item = Result<IO, E>>,
    max: usize,
    role: &'static str,
) -> impl Stream<Item = Result<Capped<IO>, E>> {
    let places = Arc::new(Semaphore::new(max));
    let refused = security::audit::RateLimit::new(1, WARN_EVERY);
    incoming.filter_map(move |accepted| {
        let admitted = accepted.map(|io| match places.clone().try_acquire_owned() {
            Ok(place) => Some(Capped { io, _place: place }),
            Err(_) => {
                if let Some(held) = refused.allow() {
                    tracing::warn!(
                        role,
                        held_back = held,
                        max,
                        "gRPC connection closed at accept: {max} open (the role's cap)"
                    );
                }
                None
            }
        });
        std::future::ready(admitted.transpose())
    })
}

impl<IO: Connected> Connected for Capped<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Capped<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Capped<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
