//! Load shedding before a unary Append is read. Log storage bounds the appends it holds (the
//! buffer) and those waiting for room (an eighth of it), but a request costs memory from its
//! headers on: its stream and task, a receive buffer, its body as it arrives. With thousands
//! of requests arriving from many connections, the ones still being received held more than
//! the buffer did (measured: ~8,400 at once, 8 KiB of buffer and ~5 KiB of futures each). So
//! at most `slots` unary Appends are between their headers and storage's answer on admission;
//! one more is refused at once with RESOURCE_EXHAUSTED, before its body is read, and the
//! client backs off. With storage given ([`Reception::with_room`]), each also takes
//! [`RECEPTION_ROOM`] of the append buffer's room from its headers on (refused the same way
//! when the buffer has none), and once its message's length prefix arrives, room for the
//! whole message (the receive buffer is sized to it; refused with RESOURCE_EXHAUSTED, the rest
//! unread, when the buffer has no room). Its append's room then includes what it took: what
//! requests hold while they are received is inside `buffer_size`, not beside it. Streams
//! (AppendStream) are not gated: each holds at most one message waiting for room.

use parking_lot::Mutex;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::Frame;

use logstore::{LogError, LogStorage, Reserved};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Buffer room a unary Append takes from its headers on, while it is received and decoded:
/// its receive buffer (8 KiB, grown to the message: 16 KiB for a 10 kB append), the payload
/// copied out of it, futures, headers and stream. At admission it becomes part of the
/// append's room (what the append does not need goes back).
pub const RECEPTION_ROOM: usize = 32 << 10;

/// What a unary Append being received holds besides its receive buffer (futures, headers,
/// stream): with its message's length, the room it needs is that length and this.
const RECEIVING_OVERHEAD: usize = 8 << 10;

/// The gRPC message prefix: a compression flag and a 4-byte big-endian length.
const PREFIX_LEN: usize = 5;

/// The unary Append's path.
const APPEND_PATH: &str = "/lakelog.log.v1.LogService/Append";

/// A unary Append's place between its headers and its admission, and the buffer room taken
/// for it; the handler gives the room to its append and lets the place go once storage has
/// answered the admission (dropping the request lets both go too).
#[derive(Clone, Debug)]
pub struct Slot(Arc<Mutex<Held>>);

#[derive(Debug)]
struct Held {
    place: Option<OwnedSemaphorePermit>,
    room: Option<Reserved>,
}

impl Slot {
    pub fn release(&self) {
        self.0.lock().place.take();
    }

    /// The buffer room taken for the append (once), for `Conditions::reserved`.
    pub fn take_room(&self) -> Option<Reserved> {
        self.0.lock().room.take()
    }

    /// Holds at least `bytes` of buffer room, taking more from `storage` if needed (at once or
    /// not at all).
    fn grow(&self, storage: &LogStorage, bytes: usize) -> Result<(), LogError> {
        let mut held = self.0.lock();
        let has = held.room.as_ref().map_or(0, Reserved::bytes);
        if bytes > has {
            let more = storage.reserve(bytes - has)?;
            match held.room.as_mut() {
                Some(r) => r.merge(more),
                None => held.room = Some(more),
            }
        }
        Ok(())
    }
}

/// A unary Append's body as it arrives: once the message's length prefix is in, its slot takes
/// room for the whole message, or the body fails with RESOURCE_EXHAUSTED (the handler is never
/// called; the client backs off).
struct Metered {
    inner: tonic::body::Body,
    slot: Slot,
    storage: LogStorage,
    prefix: [u8; PREFIX_LEN],
    seen: usize,
}

impl http_body::Body for Metered {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => return Poll::Ready(other),
        };
        if this.seen < PREFIX_LEN
            && let Some(data) = frame.data_ref()
        {
            let n = (PREFIX_LEN - this.seen).min(data.len());
            this.prefix[this.seen..this.seen + n].copy_from_slice(&data[..n]);
            this.seen += n;
            if this.seen == PREFIX_LEN {
                let [_, a, b, c, d] = this.prefix;
                let len = u32::from_be_bytes([a, b, c, d]) as usize;
                let room = len.saturating_add(RECEIVING_OVERHEAD);
                if let Err(e) = this.slot.grow(&this.storage, room) {
                    return Poll::Ready(Some(Err(crate::status::to_status(e))));
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A gRPC service whose unary Appends pass through at most `slots` at a time (see the module).
#[derive(Clone)]
pub struct Reception<S> {
    inner: S,
    slots: Arc<Semaphore>,
    size: usize,
    storage: Option<LogStorage>,
}

impl<S> std::fmt::Debug for Reception<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reception").field("slots", &self.size).finish_non_exhaustive()
    }
}

impl<S> Reception<S> {
    pub fn new(inner: S, slots: usize) -> Self {
        Reception { inner, slots: Arc::new(Semaphore::new(slots)), size: slots, storage: None }
    }

    /// Each unary Append also takes [`RECEPTION_ROOM`] of `storage`'s buffer from its headers
    /// on (see the module).
    pub fn with_room(mut self, storage: LogStorage) -> Self {
        self.storage = Some(storage);
        self
    }

    /// Unary Appends being received or admitted now.
    pub fn in_reception(&self) -> usize {
        self.size - self.slots.available_permits()
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Reception<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<tonic::body::Body>> for Reception<S>
where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = futures::future::Either<
        S::Future,
        std::future::Ready<Result<http::Response<tonic::body::Body>, Infallible>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        if req.uri().path() == APPEND_PATH {
            let refused = |e: LogError| {
                let refused = crate::status::to_status(e).into_http();
                futures::future::Either::Right(std::future::ready(Ok(refused)))
            };
            let Ok(place) = self.slots.clone().try_acquire_owned() else {
                return refused(LogError::ResourceExhausted(format!(
                    "writer busy: {} appends already being received; retry later",
                    self.size
                )));
            };
            let Some(storage) = &self.storage else {
                let slot = Slot(Arc::new(Mutex::new(Held { place: Some(place), room: None })));
                req.extensions_mut().insert(slot);
                return futures::future::Either::Left(self.inner.call(req));
            };
            let room = match storage.reserve(RECEPTION_ROOM) {
                Ok(r) => r,
                Err(e) => return refused(e),
            };
            let slot = Slot(Arc::new(Mutex::new(Held { place: Some(place), room: Some(room) })));
            let (mut parts, body) = req.into_parts();
            parts.extensions.insert(slot.clone());
            let body = Metered {
                inner: body,
                slot,
                storage: storage.clone(),
                prefix: [0; PREFIX_LEN],
                seen: 0,
            };
            let req = http::Request::from_parts(parts, tonic::body::Body::new(body));
            return futures::future::Either::Left(self.inner.call(req));
        }
        futures::future::Either::Left(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_service::Service;

    /// An inner service that keeps each Append's slot until told, like a handler awaiting
    /// admission.
    #[derive(Clone, Default)]
    struct Holding(Arc<Mutex<Vec<Slot>>>);

    impl tonic::server::NamedService for Holding {
        const NAME: &'static str = "lakelog.log.v1.LogService";
    }

    impl tower_service::Service<http::Request<tonic::body::Body>> for Holding {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
            if let Some(s) = req.extensions().get::<Slot>() {
                self.0.lock().push(s.clone());
            }
            std::future::ready(Ok(http::Response::new(tonic::body::Body::default())))
        }
    }

    fn request(path: &str) -> http::Request<tonic::body::Body> {
        http::Request::builder().uri(path).body(tonic::body::Body::default()).unwrap()
    }

    fn code(resp: &http::Response<tonic::body::Body>) -> Option<(String, String)> {
        let h = resp.headers();
        let grpc = h.get("grpc-status")?.to_str().ok()?.to_owned();
        let ours = h.get(codes::CODE_KEY)?.to_str().ok()?.to_owned();
        Some((grpc, ours))
    }

    #[tokio::test]
    async fn appends_beyond_the_slots_are_refused_until_one_is_released() {
        let held = Holding::default();
        let mut svc = Reception::new(held.clone(), 2);
        for _ in 0..2 {
            let ok = svc.call(request(APPEND_PATH)).await.unwrap();
            assert_eq!(code(&ok), None);
        }
        assert_eq!(svc.in_reception(), 2);
        let refused = svc.call(request(APPEND_PATH)).await.unwrap();
        // RESOURCE_EXHAUSTED is gRPC code 8.
        assert_eq!(code(&refused), Some(("8".to_owned(), "RESOURCE_EXHAUSTED".to_owned())));
        // Other calls are not gated.
        let read = svc.call(request("/lakelog.log.v1.LogService/ReadEntries")).await.unwrap();
        assert_eq!(code(&read), None);
        // A handler releasing its slot (admission answered) lets the next one in.
        held.0.lock().remove(0).release();
        assert_eq!(svc.in_reception(), 1);
        let ok = svc.call(request(APPEND_PATH)).await.unwrap();
        assert_eq!(code(&ok), None);
        // So does dropping a request that never reached admission.
        held.0.lock().clear();
        assert_eq!(svc.in_reception(), 0);
    }
}
