//! An entry's checksum from a checksum its caller computed already.
//!
//! A Kafka batch arrives with a CRC-32C of its bytes from its attributes on, which the front
//! end checks. The entry holding it is checksummed over its header and the whole batch: read
//! again, that is a second pass over every byte produced. CRC-32C is linear, so the entry's
//! checksum follows from the checksum of the bytes before the known part and the known part's
//! own: `crc(A ‖ B) = crc(A) · x^(8·|B|) + crc(B)` modulo the polynomial. Here that costs a
//! few dozen carry-less multiplications, whatever the batch's size.

/// The CRC-32C of a payload's bytes from `from` to its end, which the caller computed and
/// checked against those bytes: the entry's checksum is derived from it, not computed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownCrc {
    /// Where the checksummed bytes begin in the payload.
    pub from: usize,
    /// CRC-32C (Castagnoli, as `crc32c::crc32c`) of `payload[from..]`.
    pub crc: u32,
}

/// CRC-32C's polynomial with its bits reversed (bit 31 is x^0, bit 0 is x^31), as the checksum
/// itself is laid out.
const POLY: u32 = 0x82F6_3B78;

/// `a · b` modulo the polynomial, both in the reversed layout.
const fn multiply(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut term = 1u32 << 31;
    while term != 0 {
        if a & term != 0 {
            product ^= b;
        }
        // b · x: one place towards x^31, reduced when x^32 appears.
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        term >>= 1;
    }
    product
}

/// How many [`SQUARES`]: a length's bits, each a power of eight bits (x^(2^(k+3)) for bit k).
const POWERS: usize = 3 + u64::BITS as usize;

/// `x^(2^k)` modulo the polynomial for each `k` below [`POWERS`] (reversed layout).
const SQUARES: [u32; POWERS] = {
    let mut t = [0u32; POWERS];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < POWERS {
        t[k] = multiply(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// The CRC-32C of `A ‖ B` from `crc(A)`, `crc(B)` and `B`'s length in bytes.
pub fn combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    // x^(8·len_b): one factor x^(2^(k+3)) per bit k set in len_b.
    let (mut shift, mut len, mut k) = (1u32 << 31, len_b as u64, 3);
    while len != 0 {
        if len & 1 != 0 {
            shift = multiply(shift, SQUARES[k]);
        }
        len >>= 1;
        k += 1;
    }
    multiply(shift, crc_a) ^ crc_b
}

/// CRC-32C of `head ‖ payload`, using `known` for the payload's tail when it lies within it
/// (a debug build checks it against the bytes: a false one would store an entry that never
/// decodes).
pub(crate) fn of_entry(head: &[u8], payload: &[u8], known: Option<KnownCrc>) -> u32 {
    let start = crc32c::crc32c(head);
    match known {
        Some(k) if k.from <= payload.len() => {
            // The caller's word, checked wherever tests run.
            debug_assert_eq!(
                crc32c::crc32c(&payload[k.from..]),
                k.crc,
                "a known checksum is false"
            );
            let before = crc32c::crc32c_append(start, &payload[..k.from]);
            combine(before, k.crc, payload.len() - k.from)
        }
        _ => crc32c::crc32c_append(start, payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn combining_gives_the_checksum_of_the_whole() {
        for (a, b) in [(&b""[..], &b""[..]), (b"x", b""), (b"", b"y"), (b"head", b"the rest")] {
            let whole = [a, b].concat();
            let got = combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len());
            assert_eq!(got, crc32c::crc32c(&whole), "{a:?} {b:?}");
        }
        // Any length has its power: the longest one a usize holds too.
        let _ = combine(1, 2, usize::MAX);
        let big = vec![0xa5u8; (1 << 20) + 3];
        let got = combine(crc32c::crc32c(b"header"), crc32c::crc32c(&big), big.len());
        assert_eq!(got, crc32c::crc32c(&[&b"header"[..], &big].concat()));
    }

    proptest! {
        #[test]
        fn an_entry_checksum_from_a_known_tail_is_the_one_computed_whole(
            head in proptest::collection::vec(any::<u8>(), 0..24),
            payload in proptest::collection::vec(any::<u8>(), 0..5000),
            from in 0usize..6000,
        ) {
            let whole = crc32c::crc32c_append(crc32c::crc32c(&head), &payload);
            let known = (from <= payload.len())
                .then(|| KnownCrc { from, crc: crc32c::crc32c(&payload[from..]) });
            prop_assert_eq!(of_entry(&head, &payload, known), whole);
            prop_assert_eq!(of_entry(&head, &payload, None), whole);
        }
    }
}
