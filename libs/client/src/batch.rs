//! The record-batch encoding: what the SDK and CLI put in an entry's payload (ARCHITECTURE
//! §5b). Storage treats payloads as opaque; this format gives records keys, headers and
//! timestamps, and a checksum of its own.
//!
//! ```text
//! batch   := version:u8 (=1) record_count:u32 crc:u32 record*      crc = CRC32C(record*)
//! record  := flags:u8 [key_len:u32 key] [timestamp_ms:i64] header_count:u16 header*
//!            value_len:u32 value                 flags: bit 0 key present, bit 1 timestamp
//! header  := name_len:u16 name value_len:u32 value
//! ```
//! Little-endian. Every length is checked against the bytes present before anything is
//! allocated; a batch that fails its checksum or ends early is an error, never records.

use bytes::{BufMut, Bytes, BytesMut};

const VERSION: u8 = 1;

/// One record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Bytes>,
    pub timestamp_ms: Option<i64>,
    pub headers: Vec<(String, Bytes)>,
    pub value: Bytes,
}

impl Record {
    /// A record holding only a value.
    pub fn value(v: impl Into<Bytes>) -> Self {
        Record { value: v.into(), ..Default::default() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch: {0}")]
    Corrupt(String),
    #[error("record batch: {0}")]
    TooLarge(String),
}

fn too_large(what: &str, n: usize) -> BatchError {
    BatchError::TooLarge(format!("{what} of {n} bytes is too large"))
}

/// Encodes records into one payload.
pub fn encode(records: &[Record]) -> Result<Bytes, BatchError> {
    let mut body = BytesMut::new();
    for r in records {
        let flags = u8::from(r.key.is_some()) | (u8::from(r.timestamp_ms.is_some()) << 1);
        body.put_u8(flags);
        if let Some(k) = &r.key {
            body.put_u32_le(u32::try_from(k.len()).map_err(|_| too_large("key", k.len()))?);
            body.put_slice(k);
        }
        if let Some(ts) = r.timestamp_ms {
            body.put_i64_le(ts);
        }
        body.put_u16_le(
            u16::try_from(r.headers.len())
                .map_err(|_| too_large("header list", r.headers.len()))?,
        );
        for (name, value) in &r.headers {
            body.put_u16_le(
                u16::try_from(name.len()).map_err(|_| too_large("header name", name.len()))?,
            );
            body.put_slice(name.as_bytes());
            body.put_u32_le(
                u32::try_from(value.len()).map_err(|_| too_large("header value", value.len()))?,
            );
            body.put_slice(value);
        }
        body.put_u32_le(
            u32::try_from(r.value.len()).map_err(|_| too_large("value", r.value.len()))?,
        );
        body.put_slice(&r.value);
    }
    let mut out = BytesMut::with_capacity(body.len() + 9);
    out.put_u8(VERSION);
    out.put_u32_le(u32::try_from(records.len()).map_err(|_| too_large("batch", records.len()))?);
    out.put_u32_le(crc32c::crc32c(&body));
    out.put_slice(&body);
    Ok(out.freeze())
}

struct Cursor {
    b: Bytes,
    at: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> Result<Bytes, BatchError> {
        if n > self.b.len() - self.at {
            return Err(BatchError::Corrupt(format!(
                "ends early: {n} bytes wanted at {}",
                self.at
            )));
        }
        let s = self.b.slice(self.at..self.at + n);
        self.at += n;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], BatchError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&s);
        Ok(a)
    }
}

/// Decodes a payload into records.
pub fn decode(payload: &Bytes) -> Result<Vec<Record>, BatchError> {
    let mut c = Cursor { b: payload.clone(), at: 0 };
    let [version] = c.array::<1>()?;
    if version != VERSION {
        return Err(BatchError::Corrupt(format!("unknown version {version}")));
    }
    let count = u32::from_le_bytes(c.array()?) as usize;
    let crc = u32::from_le_bytes(c.array()?);
    if crc32c::crc32c(&payload[c.at..]) != crc {
        return Err(BatchError::Corrupt("checksum mismatch".to_owned()));
    }
    // Each record takes at least 7 bytes: no allocation beyond what the payload can hold.
    let mut out = Vec::with_capacity(count.min(payload.len() / 7));
    for _ in 0..count {
        let [flags] = c.array::<1>()?;
        let key = if flags & 1 != 0 {
            let n = u32::from_le_bytes(c.array()?) as usize;
            Some(c.take(n)?)
        } else {
            None
        };
        let timestamp_ms = if flags & 2 != 0 { Some(i64::from_le_bytes(c.array()?)) } else { None };
        let n_headers = u16::from_le_bytes(c.array()?) as usize;
        let mut headers = Vec::with_capacity(n_headers.min(payload.len() / 6));
        for _ in 0..n_headers {
            let n = u16::from_le_bytes(c.array()?) as usize;
            let name = String::from_utf8(c.take(n)?.to_vec())
                .map_err(|_| BatchError::Corrupt("header name is not UTF-8".to_owned()))?;
            let n = u32::from_le_bytes(c.array()?) as usize;
            headers.push((name, c.take(n)?));
        }
        let n = u32::from_le_bytes(c.array()?) as usize;
        out.push(Record { key, timestamp_ms, headers, value: c.take(n)? });
    }
    if c.at != payload.len() {
        return Err(BatchError::Corrupt(format!(
            "{} bytes after the last record",
            payload.len() - c.at
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = Record> {
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            proptest::option::of(any::<i64>()),
            proptest::collection::vec(
                ("[a-z]{0,5}", proptest::collection::vec(any::<u8>(), 0..5)),
                0..3,
            ),
            proptest::collection::vec(any::<u8>(), 0..20),
        )
            .prop_map(|(k, ts, h, v)| Record {
                key: k.map(Bytes::from),
                timestamp_ms: ts,
                headers: h.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
                value: Bytes::from(v),
            })
    }

    proptest! {
        #[test]
        fn batches_round_trip(records in proptest::collection::vec(record(), 0..6)) {
            let b = encode(&records)?;
            prop_assert_eq!(decode(&b)?, records);
        }

        #[test]
        fn flipped_bits_and_truncation_are_errors(records in proptest::collection::vec(record(), 1..4), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let b = encode(&records)?;
            let mut bad = b.to_vec();
            let i = at.index(bad.len());
            bad[i] ^= 1 << bit;
            prop_assert!(decode(&Bytes::from(bad)).is_err());
            prop_assert!(decode(&b.slice(..at.index(b.len()))).is_err());
        }
    }

    #[test]
    fn hostile_count_does_not_allocate_and_fails() {
        let mut b = vec![VERSION];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&[]).to_le_bytes());
        assert!(decode(&Bytes::from(b)).is_err());
    }
}
