//! The records of a stream's entries (ARCHITECTURE §5b): each entry is one Kafka
//! RecordBatch v2 (the `recordbatch` crate), what Kafka clients produce and consume too, so a
//! record sent by the SDK or `lakelog produce` reads back in kcat and the other way round.
//! [`encode`] writes an uncompressed batch (a record without a timestamp gets the time of
//! encoding); [`decode`] reads one, and still reads the payloads of Lakelog's first record
//! format (version byte 1), which earlier releases wrote.
//!
//! Kafka's null value and null header values read as empty bytes here. A Kafka transaction's
//! marker (a control batch) reads as no record; a transaction's records read as they were
//! written, aborted or not (the SDK reads uncommitted, as a Kafka consumer does by default).

use bytes::Bytes;

/// The version byte of the first format (before RecordBatch v2).
const V1: u8 = 1;

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

pub use recordbatch::BatchError;

#[cfg(test)]
fn too_large(what: &str, n: usize) -> BatchError {
    BatchError::TooLarge(format!("{what} of {n} bytes is too large"))
}

/// Encodes records as one Kafka RecordBatch v2 (uncompressed, not idempotent).
pub fn encode(records: &[Record]) -> Result<Bytes, BatchError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let records: Vec<recordbatch::Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| recordbatch::Record {
            offset_delta: i as u32,
            timestamp_ms: r.timestamp_ms.unwrap_or(now),
            key: r.key.clone(),
            value: Some(r.value.clone()),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (Bytes::copy_from_slice(k.as_bytes()), Some(v.clone())))
                .collect(),
        })
        .collect();
    recordbatch::encode(&records, recordbatch::ProducerFields::NONE)
}

/// Decodes an entry's payload into its records, in offset order.
pub fn decode(payload: &Bytes) -> Result<Vec<Record>, BatchError> {
    Ok(decode_at(payload)?.into_iter().map(|(_, r)| r).collect())
}

/// Decodes an entry's payload into its records, each with its offset from the entry's first
/// (in a compacted log's entry some offsets hold no record any more), in offset order.
pub fn decode_at(payload: &Bytes) -> Result<Vec<(u64, Record)>, BatchError> {
    if payload.first() == Some(&V1) {
        return Ok(decode_v1(payload)?
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i as u64, r))
            .collect());
    }
    let (header, records) = recordbatch::decode(payload)?;
    // A transaction's commit or abort marker (a Kafka control batch) holds no record of the
    // stream's: its offset is skipped, as a Kafka consumer skips it.
    if header.is_control() {
        return Ok(Vec::new());
    }
    records
        .into_iter()
        .map(|r| {
            let at = u64::from(r.offset_delta);
            let headers = r
                .headers
                .into_iter()
                .map(|(k, v)| {
                    let name = String::from_utf8(k.to_vec())
                        .map_err(|_| BatchError::Corrupt("a header key is not UTF-8".to_owned()))?;
                    Ok((name, v.unwrap_or_default()))
                })
                .collect::<Result<_, BatchError>>()?;
            Ok((
                at,
                Record {
                    key: r.key,
                    timestamp_ms: Some(r.timestamp_ms),
                    headers,
                    value: r.value.unwrap_or_default(),
                },
            ))
        })
        .collect()
}

/// Encodes records in the first format (tests of the reading of old payloads).
#[cfg(test)]
fn encode_v1(records: &[Record]) -> Result<Bytes, BatchError> {
    use bytes::{BufMut, BytesMut};
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
    out.put_u8(V1);
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

/// Decodes a payload of the first format.
fn decode_v1(payload: &Bytes) -> Result<Vec<Record>, BatchError> {
    let mut c = Cursor { b: payload.clone(), at: 0 };
    let [version] = c.array::<1>()?;
    if version != V1 {
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
            any::<i64>(),
            proptest::collection::vec(
                ("[a-z]{0,5}", proptest::collection::vec(any::<u8>(), 0..5)),
                0..3,
            ),
            proptest::collection::vec(any::<u8>(), 0..20),
        )
            .prop_map(|(k, ts, h, v)| Record {
                key: k.map(Bytes::from),
                timestamp_ms: Some(ts),
                headers: h.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
                value: Bytes::from(v),
            })
    }

    proptest! {
        #[test]
        fn batches_round_trip_as_kafka_record_batches(records in proptest::collection::vec(record(), 1..6)) {
            let b = encode(&records)?;
            prop_assert!(recordbatch::validate(&b).is_ok());
            prop_assert_eq!(decode(&b)?, records);
        }

        #[test]
        fn payloads_of_the_first_format_still_read(records in proptest::collection::vec(record(), 0..6)) {
            prop_assert_eq!(decode(&encode_v1(&records)?)?, records);
        }

        #[test]
        fn flipped_bits_and_truncation_of_the_first_format_are_errors(records in proptest::collection::vec(record(), 1..4), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let b = encode_v1(&records)?;
            let mut bad = b.to_vec();
            let i = 1 + at.index(bad.len() - 1);
            bad[i] ^= 1 << bit;
            prop_assert!(decode(&Bytes::from(bad)).is_err());
            prop_assert!(decode(&b.slice(..at.index(b.len()))).is_err());
        }
    }

    #[test]
    fn a_record_without_a_timestamp_gets_the_time_of_encoding() -> Result<(), BatchError> {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let got = decode(&encode(&[Record::value("v")])?)?;
        let ts = got[0].timestamp_ms.unwrap_or(0);
        assert!(ts >= before && ts < before + 60_000, "{ts} vs {before}");
        assert!(encode(&[]).is_err(), "a batch holds at least one record");
        Ok(())
    }

    #[test]
    fn a_transaction_marker_holds_no_record() -> Result<(), BatchError> {
        for commit in [true, false] {
            let marker = recordbatch::encode_marker(7, 1, commit, 0, 1_000)?;
            assert_eq!(decode_at(&marker)?, Vec::new());
        }
        Ok(())
    }

    #[test]
    fn hostile_count_does_not_allocate_and_fails() {
        let mut b = vec![V1];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&[]).to_le_bytes());
        assert!(decode(&Bytes::from(b)).is_err());
    }
}
