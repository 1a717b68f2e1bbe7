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

/// The writer that owns (stream identity, partition): among the live writers — restricted to
/// `zone` while any writer of that zone lives, else all — the one with the highest rendezvous
/// weight [`weight`]`(identity, partition, id)` (highest-random-weight hashing). A member
/// joining takes only the slots it now wins; a member leaving hands on only the slots it held;
/// so a change of N members moves about 1/N of the slots. Deterministic for a member set
/// whatever its order; `None` when none lives.
pub fn choose_owner<'a>(
    members: &'a [Member],
    stream_identity: &str,
    partition: u32,
    zone: Option<&str>,
) -> Option<&'a Member> {
    let in_zone = zone.filter(|z| members.iter().any(|m| m.zone == *z));
    members
        .iter()
        .filter(|m| in_zone.is_none_or(|z| m.zone == z))
        // Ties (a 2^-64 chance) go to the smaller id, so the order given never matters.
        .max_by(|a, b| {
            let (wa, wb) = (
                weight(stream_identity, partition, &a.id),
                weight(stream_identity, partition, &b.id),
            );
            wa.cmp(&wb).then_with(|| b.id.cmp(&a.id))
        })
}

/// The rendezvous weight of member `id` for (identity, partition): FNV-1a over the three
/// (each length-prefixed, so no two triples share an input), finished with a 64-bit avalanche
/// mix. Part of the cluster's contract: every role and version must compute the same
/// weights, or owners disagree; changing it moves every slot.
pub fn weight(stream_identity: &str, partition: u32, id: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    feed(&(stream_identity.len() as u64).to_be_bytes());
    feed(stream_identity.as_bytes());
    feed(&partition.to_be_bytes());
    feed(&(id.len() as u64).to_be_bytes());
    feed(id.as_bytes());
    // MurmurHash3's fmix64: FNV's low bits alone spread poorly.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
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

    /// Owners of 10,000 (identity, partition) pairs among `ms`.
    fn owners(ms: &[Member], zone: Option<&str>) -> Vec<String> {
        (0..10_000u32)
            .map(|i| {
                let id = format!("{:08x}", i / 100);
                choose_owner(ms, &id, i % 100, zone).map(|m| m.id.clone()).unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn a_writer_joining_moves_only_what_it_gains_and_one_leaving_only_what_it_held() {
        for zone in [None, Some("a")] {
            let three = members(3, &["a"]);
            let mut four = three.clone();
            four.push(Member { id: "w03".into(), zone: "a".into(), ..three[0].clone() });
            let (before, after) = (owners(&three, zone), owners(&four, zone));
            let moved: Vec<usize> = (0..before.len()).filter(|i| before[*i] != after[*i]).collect();
            // Every slot that moved went to the newcomer, and about a quarter moved.
            assert!(
                moved.iter().all(|i| after[*i] == "w03"),
                "a join moved slots between old members"
            );
            assert!(moved.len() <= 2_700, "a 4th writer moved {} of 10,000 slots", moved.len());
            assert!(moved.len() >= 2_300, "a 4th writer took only {} of 10,000 slots", moved.len());
            // Removing w01: only the slots it held move.
            let without: Vec<Member> = four.iter().filter(|m| m.id != "w01").cloned().collect();
            let left = owners(&without, zone);
            for i in 0..after.len() {
                assert!(
                    after[i] == "w01" || left[i] == after[i],
                    "slot {i} moved from {}",
                    after[i]
                );
            }
        }
    }

    #[test]
    fn the_zone_hint_keeps_its_owners_when_another_zone_changes() {
        let ms = members(6, &["a", "b"]);
        let before = owners(&ms, Some("a"));
        let fewer: Vec<Member> = ms.iter().filter(|m| m.id != "w01").cloned().collect();
        assert_eq!(ms[1].zone, "b");
        assert_eq!(owners(&fewer, Some("a")), before, "zone b's loss moved zone a's owners");
    }

    #[test]
    fn weights_are_stable() {
        // The contract between versions: a change here moves every slot of every cluster.
        assert_eq!(weight("3f2a9c1e", 0, "w00"), 5_918_099_026_363_420_477);
        assert_ne!(weight("ab", 0, "c"), weight("a", 0, "bc"));
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
