//! Responses that carry stored record batches without copying them (issue 18's "large
//! responses stream without a second buffer"). A Fetch response is encoded by the protocol
//! crate into one buffer, records included; here each partition's records field is given a
//! stand-in of the right length — a slice of a zeroed static that is never read — and the
//! buffer the response is encoded into ([`Splicer`]) recognises the stand-in when the encoder
//! copies it, and puts the partition's stored batches there instead, by reference: each
//! batch's base offset (8 bytes, outside its CRC) is written, the rest of it is a slice of the
//! bytes as read. The frame goes out as a list of parts ([`Outgoing`]) in vectored writes.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

use crate::StoredBatch;

/// The largest records field spliced: one partition's records above it are copied into one
/// buffer as before (clients ask 1 MiB a partition by default).
pub(crate) const MAX_SPLICED: usize = 64 << 20;

/// Never read or written: its slices stand in for records spliced in later. Zeroed and in the
/// zero-initialised data segment, its pages are never touched and take no memory.
static STAND_IN: [u8; MAX_SPLICED] = [0; MAX_SPLICED];

/// A batch's rest smaller than this is copied into the response's own buffer rather than sent
/// as a part of its own (a part costs an I/O vector and a reference).
const SMALL: usize = 16 << 10;

/// A response frame, its size prefix included, as parts written one after another.
#[derive(Debug)]
pub struct Outgoing {
    parts: Vec<Bytes>,
}

impl Outgoing {
    /// A frame in one piece.
    pub(crate) fn whole(frame: Bytes) -> Self {
        Outgoing { parts: vec![frame] }
    }

    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The frame's bytes, size prefix included.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame in one buffer (a copy; for tests and small frames).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [one] => one.clone(),
            parts => parts.concat().into(),
        }
    }
}

/// The records field for `batches`, and whether it is a stand-in to splice: a stand-in of
/// their length when they fit [`MAX_SPLICED`], else the batches copied into one buffer.
pub(crate) fn records_field(batches: &[StoredBatch]) -> (Bytes, bool) {
    let len: usize = batches.iter().map(StoredBatch::len).sum();
    if len == 0 {
        return (Bytes::new(), false);
    }
    if len <= MAX_SPLICED {
        return (Bytes::from_static(&STAND_IN[..len]), true);
    }
    let mut out = BytesMut::with_capacity(len);
    for b in batches {
        b.put_wire(&mut out);
    }
    (out.freeze(), false)
}

/// Whether `s` is (part of) a records stand-in.
fn is_stand_in(s: &[u8]) -> bool {
    let (start, end) = (STAND_IN.as_ptr() as usize, STAND_IN.as_ptr() as usize + MAX_SPLICED);
    let at = s.as_ptr() as usize;
    !s.is_empty() && at >= start && at < end
}

/// The buffer a spliced response is encoded into: what the encoder writes goes into `tail`;
/// a stand-in it copies is replaced by the next batches of `pending`.
pub(crate) struct Splicer {
    /// The response so far, before `tail`.
    parts: Vec<Bytes>,
    /// Bytes in `parts`.
    frozen: usize,
    tail: BytesMut,
    /// Each spliced partition's batches, in the order the encoder writes partitions.
    pending: VecDeque<Vec<StoredBatch>>,
    /// Why the splice went wrong, if it did (a write the splice cannot honour): the response
    /// is then refused rather than sent wrong.
    broken: Option<String>,
    /// Where a write into bytes already frozen goes (and is dropped) once broken.
    scratch: Vec<u8>,
}

impl Splicer {
    pub(crate) fn new(pending: VecDeque<Vec<StoredBatch>>) -> Self {
        Splicer {
            parts: Vec::new(),
            frozen: 0,
            tail: BytesMut::with_capacity(4096),
            pending,
            broken: None,
            scratch: Vec::new(),
        }
    }

    fn freeze_tail(&mut self) {
        if !self.tail.is_empty() {
            let t = self.tail.split().freeze();
            self.frozen += t.len();
            self.parts.push(t);
        }
    }

    fn splice(&mut self, stand_in: &[u8]) {
        let Some(batches) = self.pending.pop_front() else {
            self.broken = Some("a records stand-in with no batches left to splice".to_owned());
            return;
        };
        let len: usize = batches.iter().map(StoredBatch::len).sum();
        if len != stand_in.len() {
            self.broken = Some(format!(
                "a records stand-in of {} bytes for batches of {len}",
                stand_in.len()
            ));
            return;
        }
        for b in &batches {
            if b.bytes.len() < 8 + SMALL {
                b.put_wire(&mut self.tail);
            } else {
                self.tail.put_i64(b.base_offset);
                self.freeze_tail();
                self.frozen += b.bytes.len() - 8;
                self.parts.push(b.bytes.slice(8..));
            }
        }
    }

    /// The frame: a size prefix, then what was encoded.
    pub(crate) fn finish(mut self) -> Result<Outgoing, String> {
        if let Some(why) = self.broken {
            return Err(why);
        }
        if !self.pending.is_empty() {
            return Err(format!("{} partitions' batches never spliced", self.pending.len()));
        }
        self.freeze_tail();
        let size = i32::try_from(self.frozen).map_err(|_| "a response over 2 GiB".to_owned())?;
        let mut parts = Vec::with_capacity(self.parts.len() + 1);
        parts.push(Bytes::copy_from_slice(&size.to_be_bytes()));
        parts.append(&mut self.parts);
        Ok(Outgoing { parts })
    }
}

// SAFETY: every method hands over to `tail`, a `BytesMut`, whose `BufMut` contract this keeps:
// `chunk_mut` is its spare capacity and `advance_mut` its, unchanged. Only `put_slice` is
// overridden, and it writes through `tail`'s safe methods.
#[allow(unsafe_code)]
unsafe impl BufMut for Splicer {
    fn remaining_mut(&self) -> usize {
        self.tail.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is `tail`'s.
        unsafe { self.tail.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.tail.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if is_stand_in(src) {
            self.splice(src);
        } else {
            self.tail.put_slice(src);
        }
    }
}

impl ByteBufMut for Splicer {
    fn offset(&self) -> usize {
        self.frozen + self.tail.len()
    }

    fn seek(&mut self, offset: usize) {
        match offset.checked_sub(self.frozen) {
            Some(in_tail) => self.tail.resize(in_tail, 0),
            None => self.broken = Some(format!("a seek back to byte {offset}, already sent")),
        }
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let tail = self.tail.len();
        match (r.start.checked_sub(self.frozen), r.end.checked_sub(self.frozen)) {
            (Some(s), Some(e)) if s <= e && e <= tail => &mut self.tail[s..e],
            _ => {
                self.broken = Some(format!("a write into bytes {r:?}, already sent"));
                self.scratch = vec![0; r.len()];
                &mut self.scratch
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, fill: u8, len: usize) -> StoredBatch {
        let mut b = vec![fill; len];
        b[..8].copy_from_slice(&99i64.to_be_bytes());
        StoredBatch { base_offset: base, bytes: Bytes::from(b) }
    }

    #[test]
    fn stored_batches_are_spliced_in_by_reference_with_their_base_offsets() {
        let (small, large) = (batch(5, 1, 100), batch(6, 2, 100_000));
        let batches = vec![small.clone(), large.clone()];
        let (field, spliced) = records_field(&batches);
        assert!(spliced);
        let mut s = Splicer::new(VecDeque::from([batches.clone()]));
        s.put_slice(b"head");
        s.put_slice(&field);
        s.put_slice(b"end");
        let out = s.finish().expect("spliced");
        let whole = out.to_bytes();
        let mut want = Vec::new();
        for b in &batches {
            want.extend_from_slice(&b.base_offset.to_be_bytes());
            want.extend_from_slice(&b.bytes[8..]);
        }
        let body = [b"head".as_slice(), &want, b"end"].concat();
        assert_eq!(&whole[..4], &(body.len() as i32).to_be_bytes());
        assert_eq!(&whole[4..], &body[..]);
        // The large batch went out as its own bytes, not a copy.
        assert!(out.parts().iter().any(|p| p.as_ptr() == large.bytes[8..].as_ptr()));
        assert!(!out.parts().iter().any(|p| p.as_ptr() == small.bytes[8..].as_ptr()));
    }

    #[test]
    fn a_splice_that_cannot_be_honoured_is_refused_not_sent() {
        let batches = vec![batch(0, 1, 64)];
        let (field, _) = records_field(&batches);
        // A stand-in of another length than its batches.
        let mut s = Splicer::new(VecDeque::from([vec![batch(0, 1, 65)]]));
        s.put_slice(&field);
        assert!(s.finish().is_err());
        // Batches never spliced.
        let s = Splicer::new(VecDeque::from([batches.clone()]));
        assert!(s.finish().is_err());
        // A write back into bytes already frozen.
        let mut s = Splicer::new(VecDeque::from([vec![batch(0, 1, 100_000)]]));
        s.put_slice(b"x");
        let (field, _) = records_field(&[batch(0, 1, 100_000)]);
        s.put_slice(&field);
        s.range(0..1)[0] = 7;
        assert!(s.finish().is_err());
    }
}
