//! Decompressing a batch's records (Kafka's codecs as its clients write them): gzip, snappy
//! (raw, or in the xerial framing Java's client writes), LZ4 frames, zstd frames. Decoding
//! only: the stores keep batches as sent. Untrusted input: the output is capped, and a
//! claimed size beyond the cap is refused before anything is allocated for it.

use std::io::Read;

use crate::{BatchError, Compression};

/// The most bytes a batch's records may decompress to. A batch is at most a few MiB on the
/// wire (`max.message.bytes`); this bounds what a decompression bomb can cost.
pub const MAX_DECOMPRESSED: usize = 64 << 20;

fn too_large(cap: usize) -> BatchError {
    BatchError::TooLarge(format!("records decompress to more than {cap} bytes"))
}

fn corrupt(c: Compression, e: impl std::fmt::Display) -> BatchError {
    BatchError::Corrupt(format!("{c:?} records: {e}"))
}

/// Reads `r` to its end, at most `cap` bytes.
fn read_capped(
    c: Compression,
    r: impl Read,
    cap: usize,
    out: &mut Vec<u8>,
) -> Result<(), BatchError> {
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let before = out.len();
    r.take(limit).read_to_end(out).map_err(|e| corrupt(c, e))?;
    if out.len() - before > cap {
        return Err(too_large(cap));
    }
    Ok(())
}

/// The records of a batch compressed with `c`, decompressed (at most `cap` bytes).
pub fn decompress(c: Compression, data: &[u8], cap: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    match c {
        Compression::None => {
            if data.len() > cap {
                return Err(too_large(cap));
            }
            out.extend_from_slice(data);
        }
        Compression::Gzip => read_capped(c, flate2::read::GzDecoder::new(data), cap, &mut out)?,
        Compression::Lz4 => {
            read_capped(c, lz4_flex::frame::FrameDecoder::new(data), cap, &mut out)?
        }
        Compression::Zstd => {
            // Java's and librdkafka's writers make one frame; concatenated frames are read too.
            let mut rest = data;
            while !rest.is_empty() {
                let left = cap - out.len();
                let frame = ruzstd::decoding::StreamingDecoder::new(&mut rest)
                    .map_err(|e| corrupt(c, e))?;
                read_capped(c, frame, left, &mut out)?;
            }
        }
        Compression::Snappy => snappy(data, cap, &mut out)?,
    }
    Ok(out)
}

/// Java's snappy framing: this magic, a version and a compatible version (i32 each), then
/// blocks of a length (i32) and raw snappy bytes.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";

fn snappy(data: &[u8], cap: usize, out: &mut Vec<u8>) -> Result<(), BatchError> {
    let c = Compression::Snappy;
    let raw = |block: &[u8], out: &mut Vec<u8>| -> Result<(), BatchError> {
        let n = snap::raw::decompress_len(block).map_err(|e| corrupt(c, e))?;
        if n > cap - out.len() {
            return Err(too_large(cap));
        }
        let at = out.len();
        out.resize(at + n, 0);
        snap::raw::Decoder::new().decompress(block, &mut out[at..]).map_err(|e| corrupt(c, e))?;
        Ok(())
    };
    let Some(mut rest) = data.strip_prefix(XERIAL_MAGIC.as_slice()) else {
        return raw(data, out);
    };
    rest = rest.get(8..).ok_or_else(|| corrupt(c, "xerial header cut short"))?;
    while !rest.is_empty() {
        let (len, tail) =
            rest.split_at_checked(4).ok_or_else(|| corrupt(c, "block length cut short"))?;
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        let len = usize::try_from(len).map_err(|_| corrupt(c, "negative block length"))?;
        let (block, tail) =
            tail.split_at_checked(len).ok_or_else(|| corrupt(c, "block longer than the batch"))?;
        raw(block, out)?;
        rest = tail;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snappy_raw_and_xerial_framed_decode_alike() {
        let text = b"lakelog lakelog lakelog lakelog".repeat(10);
        let raw = snap::raw::Encoder::new().compress_vec(&text).expect("compresses");
        assert_eq!(decompress(Compression::Snappy, &raw, 1 << 20).expect("raw"), text);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1i32.to_be_bytes());
        framed.extend_from_slice(&1i32.to_be_bytes());
        for half in [&raw[..], &raw[..]] {
            framed.extend_from_slice(&(half.len() as i32).to_be_bytes());
            framed.extend_from_slice(half);
        }
        let twice = [text.clone(), text.clone()].concat();
        assert_eq!(decompress(Compression::Snappy, &framed, 1 << 20).expect("framed"), twice);
        // A block claiming more than the batch holds, or a claim past the cap.
        let mut cut = framed.clone();
        cut.truncate(framed.len() - 3);
        assert!(decompress(Compression::Snappy, &cut, 1 << 20).is_err());
        assert!(matches!(decompress(Compression::Snappy, &raw, 10), Err(BatchError::TooLarge(_))));
    }

    #[test]
    fn gzip_output_is_capped() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&vec![0u8; 1 << 20]).expect("writes");
        let bomb = enc.finish().expect("finishes");
        assert!(bomb.len() < 10_000);
        assert_eq!(decompress(Compression::Gzip, &bomb, 1 << 20).map(|v| v.len()), Ok(1 << 20));
        assert!(matches!(decompress(Compression::Gzip, &bomb, 1000), Err(BatchError::TooLarge(_))));
        assert!(decompress(Compression::Gzip, b"not gzip", 1000).is_err());
    }

    #[test]
    fn garbage_is_an_error_for_every_codec() {
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            assert!(decompress(c, &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3], 1000).is_err(), "{c:?}");
        }
    }
}
