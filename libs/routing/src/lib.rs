//! Routing: which partition a key goes to, and which writer serves a partition
//! (ARCHITECTURE §3 "Owner selection and zones"). Pure functions, no dependencies: the
//! catalog, a writer taking a slot and the client SDK all evaluate the same ones.

/// Kafka's murmur2 (the 32-bit variant in `org.apache.kafka.common.utils.Utils`): seed
/// 0x9747b28c, little-endian 4-byte blocks. Chosen so Lakelog and a Kafka client's default
/// partitioner put a key in the same partition.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = 0x9747_b28c ^ (len as u32);
    let mut blocks = data.chunks_exact(4);
    for b in &mut blocks {
        let mut k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = blocks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a key among `partitions` (≥ 1): `(murmur2(key) & 0x7fffffff) % partitions`,
/// Kafka's default partitioner for keyed records.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) as u32) & 0x7fff_ffff) % partitions.max(1)
}

/// A live writer as the member registry lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub zone: String,
    pub address: String,
    /// Where Kafka clients reach it, `host:port`; empty when it serves no Kafka.
    pub kafka: String,
    /// Its Kafka node id: stable for its member id; -1 when it has none.
    pub node_id: i32,
}

/// The writer that owns (stream identity, partition): live writers sorted by id, restricted
/// to `zone` while any writer of that zone lives (else all), indexed by a hash of the stream's
/// identity and the partition. Deterministic for a member set; `None` when none lives.
pub fn choose_owner<'a>(
    members: &'a [Member],
    stream_identity: &str,
    partition: u32,
    zone: Option<&str>,
) -> Option<&'a Member> {
    let mut candidates: Vec<&Member> = match zone {
        Some(z) if members.iter().any(|m| m.zone == z) => {
            members.iter().filter(|m| m.zone == z).collect()
        }
        _ => members.iter().collect(),
    };
    if candidates.is_empty() {
        return None;
    }
    candidates.sort_by(|a, b| a.id.cmp(&b.id));
    let mut key = stream_identity.as_bytes().to_vec();
    key.extend_from_slice(&partition.to_be_bytes());
    let i = partition_for_key(&key, candidates.len() as u32) as usize;
    candidates.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        // Kafka's UtilsTest values: a key partitions the same here and in a Kafka client.
        for (key, want) in [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            ("abc", 479_470_107),
        ] {
            assert_eq!(murmur2(key.as_bytes()), want, "{key}");
        }
    }

    fn members(n: usize, zones: &[&str]) -> Vec<Member> {
        (0..n)
            .map(|i| Member {
                id: format!("w{i:02}"),
                zone: zones[i % zones.len()].to_owned(),
                address: String::new(),
                kafka: String::new(),
                node_id: -1,
            })
            .collect()
    }

    proptest! {
        #[test]
        fn owner_is_live_deterministic_and_order_independent(n in 1usize..12, p in 0u32..64, id in "[a-f0-9]{8}", rot in 0usize..12) {
            let ms = members(n, &["a", "b"]);
            let owner = choose_owner(&ms, &id, p, None).cloned();
            let mut rotated = ms.clone();
            rotated.rotate_left(rot % n);
            prop_assert_eq!(choose_owner(&rotated, &id, p, None).cloned(), owner.clone());
            prop_assert!(owner.is_some_and(|o| ms.contains(&o)));
        }

        #[test]
        fn zone_hint_restricts_while_the_zone_lives(n in 2usize..12, p in 0u32..64, id in "[a-f0-9]{8}") {
            let ms = members(n, &["a", "b"]);
            prop_assert_eq!(choose_owner(&ms, &id, p, Some("a")).map(|m| m.zone.as_str()), Some("a"));
            let only_b: Vec<Member> = ms.iter().filter(|m| m.zone == "b").cloned().collect();
            prop_assert_eq!(choose_owner(&only_b, &id, p, Some("a")).map(|m| m.zone.as_str()), Some("b"));
        }

        #[test]
        fn key_partition_is_in_range(key in proptest::collection::vec(any::<u8>(), 0..40), n in 1u32..1000) {
            prop_assert!(partition_for_key(&key, n) < n);
        }
    }

    #[test]
    fn partitions_spread_over_writers() {
        let ms = members(4, &["*"]);
        let mut counts = [0usize; 4];
        for p in 0..4000 {
            let o =
                choose_owner(&ms, "3f2a9c1e", p, None).map(|m| m.id.clone()).unwrap_or_default();
            counts[ms.iter().position(|m| m.id == o).unwrap_or(0)] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
        assert!(choose_owner(&[], "x", 0, None).is_none());
    }
}
