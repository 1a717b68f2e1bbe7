//! Kafka's framing: a 4-byte big-endian size, then that many bytes (a request header and its
//! body). The size is checked against a cap before anything is read, and the buffer grows
//! only as bytes arrive, so a frame that claims more than it sends costs what it sent. A
//! listener's frames take their size from its [`RequestBudget`] before their body is read
//! (so their buffer is allocated whole, once: the budget holds its bytes already, and its pages
//! are only touched as bytes arrive), and a body must arrive within [`FRAME_DEADLINE`] of its
//! size.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::budget::{Held, RequestBudget};

/// How long a frame's body may take to arrive once its size has, by default (a client's own
/// request timeout is 30 s): a frame left half-sent holds its budget no longer.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(30);

/// The largest frame accepted by default (Kafka's `socket.request.max.bytes` is 100 MiB):
/// with its decoding allowance, it fits the default request budget.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// The buffer grows at most this much ahead of the bytes that arrived.
const GROW: usize = 64 << 10;

/// Why a connection's next frame could not be read. Each closes the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes: more than the {max} accepted")]
    TooLarge { size: i64, max: usize },
    #[error("frame size {0} is negative")]
    Negative(i32),
    #[error("connection closed inside a frame ({got} of {want} bytes)")]
    Truncated { got: usize, want: usize },
    #[error("a frame of {want} bytes not sent within {deadline:?}")]
    Slow { want: usize, deadline: Duration },
    #[error("a frame of {size} bytes can never fit the listener's request budget of {budget}")]
    OverBudget { size: usize, budget: usize },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The largest frame accepted: a number, or one read when a frame's size has arrived (a
/// connection's cap rises once it authenticates).
pub trait Limit {
    fn bytes(&self) -> usize;
}

impl Limit for usize {
    fn bytes(&self) -> usize {
        *self
    }
}

impl Limit for std::sync::Arc<std::sync::atomic::AtomicUsize> {
    fn bytes(&self) -> usize {
        self.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A frame read, and the budget it holds (its bytes).
#[derive(Debug)]
pub struct Frame {
    pub bytes: Bytes,
    pub held: Held,
}

/// The next frame (without the size), its bytes taken from `budget` once its size has arrived
/// and before its body is read, the body within `deadline` of the size; `None` when the peer
/// closed the connection between frames.
pub async fn read_frame_within<R: AsyncRead + Unpin>(
    r: &mut R,
    max: impl Limit,
    budget: &Arc<RequestBudget>,
    deadline: Duration,
) -> Result<Option<Frame>, FrameError> {
    let Some(want) = read_size(r, max).await? else { return Ok(None) };
    // Its bytes and what decoding it may allocate, taken at once (nothing held while waiting).
    let held = budget
        .take(want + crate::budget::decode_allowance(want))
        .await
        .ok_or(FrameError::OverBudget { size: want, budget: budget.bytes() })?;
    // Allocated whole (grown as bytes arrived, a 1 MiB produce was copied by each growth), or
    // a buffer of an earlier frame.
    let buf = budget.frame_buffer(want);
    let body = tokio::time::timeout(deadline, read_body(r, want, buf))
        .await
        .map_err(|_| FrameError::Slow { want, deadline })??;
    Ok(Some(Frame { bytes: budget.frame(body), held }))
}

/// The next frame's bytes (without the size), or `None` when the peer closed the connection
/// between frames. (No budget, no deadline: see [`read_frame_within`].)
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: impl Limit,
) -> Result<Option<Bytes>, FrameError> {
    match read_size(r, max).await? {
        None => Ok(None),
        Some(want) => {
            let body = read_body(r, want, Vec::with_capacity(want.min(GROW))).await?;
            Ok(Some(Bytes::from(body)))
        }
    }
}

/// A frame's size, checked against `max`; `None` when the peer closed the connection first.
async fn read_size<R: AsyncRead + Unpin>(
    r: &mut R,
    max: impl Limit,
) -> Result<Option<usize>, FrameError> {
    let mut size = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut size[got..]).await?;
        if n == 0 {
            return match got {
                0 => Ok(None),
                _ => Err(FrameError::Truncated { got, want: 4 }),
            };
        }
        got += n;
    }
    let size = i32::from_be_bytes(size);
    let want = usize::try_from(size).map_err(|_| FrameError::Negative(size))?;
    let max = max.bytes();
    if want > max {
        return Err(FrameError::TooLarge { size: i64::from(size), max });
    }
    Ok(Some(want))
}

/// A body of `want` bytes into `buf` (empty), grown as they arrive past its capacity.
async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    want: usize,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, FrameError> {
    while buf.len() < want {
        if buf.capacity() == buf.len() {
            buf.reserve((want - buf.len()).min(GROW));
        }
        let room = (want - buf.len()).min(buf.capacity() - buf.len());
        let n = (&mut *r).take(room as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return Err(FrameError::Truncated { got: buf.len(), want });
        }
    }
    Ok(buf)
}

/// The API key and version a frame starts with, read before its header is decoded (the
/// header's own encoding depends on them). `None` when the frame is shorter than that.
pub fn peek_api(frame: &Bytes) -> Option<(i16, i16)> {
    let mut b = frame.slice(..);
    if b.remaining() < 4 {
        return None;
    }
    Some((b.get_i16(), b.get_i16()))
}

/// The correlation id of a frame (bytes 4–8), to answer a request whose header is otherwise
/// unreadable.
pub fn peek_correlation_id(frame: &Bytes) -> Option<i32> {
    let b = frame.get(4..8)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8], max: usize) -> Result<Option<Bytes>, FrameError> {
        let mut r = bytes;
        read_frame(&mut r, max).await
    }

    #[tokio::test]
    async fn frames_are_read_whole_and_bounded() -> anyhow::Result<()> {
        let mut two = Vec::new();
        for body in [&b"hello"[..], b""] {
            two.extend_from_slice(&(body.len() as i32).to_be_bytes());
            two.extend_from_slice(body);
        }
        let mut r = &two[..];
        assert_eq!(read_frame(&mut r, 100).await?.as_deref(), Some(&b"hello"[..]));
        assert_eq!(read_frame(&mut r, 100).await?.as_deref(), Some(&b""[..]));
        assert!(read_frame(&mut r, 100).await?.is_none(), "clean end between frames");

        // A frame claiming 2 GiB: refused from its size alone, nothing read or allocated.
        let huge = [0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
        assert!(matches!(read(&huge, MAX_FRAME_BYTES).await, Err(FrameError::TooLarge { .. })));
        assert!(matches!(read(&(-5i32).to_be_bytes(), 100).await, Err(FrameError::Negative(-5))));
        // Truncated in the size and in the body.
        assert!(matches!(read(&[0, 0], 100).await, Err(FrameError::Truncated { got: 2, .. })));
        let short = [0, 0, 0, 10, 1, 2, 3];
        assert!(matches!(read(&short, 100).await, Err(FrameError::Truncated { got: 3, want: 10 })));
        Ok(())
    }

    #[tokio::test]
    async fn a_large_claim_cut_short_is_truncated() -> anyhow::Result<()> {
        // 60 MiB claimed, 10 bytes sent (the buffer grows 64 KiB at a time as bytes arrive).
        let mut claim = (60i32 << 20).to_be_bytes().to_vec();
        claim.extend_from_slice(&[7; 10]);
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        tokio::io::AsyncWriteExt::write_all(&mut client, &claim).await?;
        drop(client);
        let r = read_frame(&mut server, MAX_FRAME_BYTES).await;
        assert!(matches!(r, Err(FrameError::Truncated { got: 10, want }) if want == 60 << 20));
        Ok(())
    }

    /// A frame takes its bytes from the budget before its body is read: one that does not fit
    /// waits, unread, until room is given back; one larger than the whole budget is refused
    /// from its size; a body not sent within the deadline ends the connection.
    #[tokio::test]
    async fn frames_take_their_bytes_before_their_body_and_must_arrive_in_time()
    -> anyhow::Result<()> {
        const DEADLINE: Duration = Duration::from_millis(300);
        let budget = RequestBudget::new(8 << 20);
        let hog = budget.take(6 << 20).await.expect("fits");
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let mut frame = (200i32 << 10).to_be_bytes().to_vec();
        frame.extend_from_slice(&[1; 200 << 10]);
        let reading = tokio::spawn({
            let budget = budget.clone();
            async move {
                let f = read_frame_within(&mut server, MAX_FRAME_BYTES, &budget, DEADLINE).await;
                (f.map(|f| f.map(|f| (f.bytes.len(), f.held.bytes()))), server)
            }
        });
        tokio::io::AsyncWriteExt::write_all(&mut client, &frame[..4]).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!reading.is_finished(), "a frame that does not fit was read");
        assert_eq!(budget.held(), 6 << 20);
        drop(hog);
        tokio::io::AsyncWriteExt::write_all(&mut client, &frame[4..]).await?;
        let (got, mut server) = reading.await?;
        // Its bytes and what decoding it may allocate.
        let taken = (200 << 10) + crate::budget::decode_allowance(200 << 10);
        assert_eq!(got?, Some((200 << 10, taken)));
        assert_eq!(budget.held(), 0, "given back with the frame");
        // Larger than the whole budget: refused from its size.
        tokio::io::AsyncWriteExt::write_all(&mut client, &(2i32 << 20).to_be_bytes()).await?;
        let r = read_frame_within(&mut server, MAX_FRAME_BYTES, &budget, DEADLINE).await;
        assert!(matches!(r, Err(FrameError::OverBudget { .. })), "{r:?}");
        // Half sent, then silent: closed after the deadline.
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        tokio::io::AsyncWriteExt::write_all(&mut client, &[0, 0, 1, 0, 7, 7]).await?;
        let r = read_frame_within(&mut server, MAX_FRAME_BYTES, &budget, DEADLINE).await;
        assert!(matches!(r, Err(FrameError::Slow { want: 256, .. })), "{r:?}");
        assert_eq!(budget.held(), 0);
        Ok(())
    }

    /// Reads at most 64 KiB a call, and notes where in memory each read lands, less the bytes
    /// read before it: the start of the buffer the frame is read into.
    struct Trickle<'a> {
        left: &'a [u8],
        read: usize,
        starts: Vec<usize>,
    }

    impl tokio::io::AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.left.len().min(buf.remaining()).min(64 << 10);
            let at = buf.initialize_unfilled().as_ptr() as usize;
            let read = self.read;
            self.starts.push(at - read);
            buf.put_slice(&self.left[..n]);
            self.left = &self.left[n..];
            self.read += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A budgeted frame's body lands in one buffer as it arrives: never copied into a larger
    /// one as it grows (a produce of a megabyte was copied by each 64 KiB growth).
    #[tokio::test]
    async fn a_budgeted_frame_is_read_into_one_buffer() -> anyhow::Result<()> {
        let size: i32 = 1 << 20;
        let mut frame = size.to_be_bytes().to_vec();
        frame.extend((0..size).map(|i| i as u8));
        let mut r = Trickle { left: &frame, read: 0, starts: Vec::new() };
        let budget = RequestBudget::new(64 << 20);
        let got = read_frame_within(&mut r, MAX_FRAME_BYTES, &budget, FRAME_DEADLINE).await?;
        assert_eq!(got.map(|f| f.bytes), Some(Bytes::copy_from_slice(&frame[4..])));
        // The size's read lands elsewhere; the body's 16 reads all in one buffer.
        let body = &r.starts[1..];
        assert!(body.len() >= 16, "{} reads", body.len());
        assert!(body.iter().all(|s| *s == body[0]), "the buffer moved: {body:x?}");
        Ok(())
    }

    #[test]
    fn api_and_correlation_id_are_peeked() {
        let f = Bytes::from_static(&[0, 18, 0, 3, 0, 0, 0, 42, 0xff]);
        assert_eq!(peek_api(&f), Some((18, 3)));
        assert_eq!(peek_correlation_id(&f), Some(42));
        assert_eq!(peek_api(&Bytes::from_static(&[0, 1])), None);
        assert_eq!(peek_correlation_id(&Bytes::from_static(&[0, 1, 0, 0, 9])), None);
    }
}
