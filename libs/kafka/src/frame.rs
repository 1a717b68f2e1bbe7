//! Kafka's framing: a 4-byte big-endian size, then that many bytes (a request header and its
//! body). The size is checked against a cap before anything is read, and the buffer grows
//! only as bytes arrive, so a frame that claims more than it sends costs what it sent.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest frame accepted by default: Kafka's `socket.request.max.bytes` (100 MiB).
pub const MAX_FRAME_BYTES: usize = 100 << 20;

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

/// The next frame's bytes (without the size), or `None` when the peer closed the connection
/// between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: impl Limit,
) -> Result<Option<Bytes>, FrameError> {
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
    let mut buf = BytesMut::with_capacity(want.min(GROW));
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
    Ok(Some(buf.freeze()))
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
        // 90 MiB claimed, 10 bytes sent (the buffer grows 64 KiB at a time as bytes arrive).
        let mut claim = (90i32 << 20).to_be_bytes().to_vec();
        claim.extend_from_slice(&[7; 10]);
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        tokio::io::AsyncWriteExt::write_all(&mut client, &claim).await?;
        drop(client);
        let r = read_frame(&mut server, MAX_FRAME_BYTES).await;
        assert!(matches!(r, Err(FrameError::Truncated { got: 10, want }) if want == 90 << 20));
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
