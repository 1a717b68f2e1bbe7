//! The scenario groups ("writers", "maintenance", "kafka") over many seeds, the regression
//! seeds, and the determinism meta-test.

use sim::scenario::{Plan, run};

/// The seeds of one `cargo test` run of the group: `default` from 0, or `SIM_SEEDS` from
/// `SIM_FROM` (`make dst` splits more over processes).
fn seeds(default: u64) -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let from = var("SIM_FROM").unwrap_or(0);
    from..from + var("SIM_SEEDS").unwrap_or(default)
}

/// A group's plan by name.
fn plan(group: &str) -> Plan {
    match group {
        "maintenance" => Plan::maintenance(),
        "kafka" => Plan::kafka(),
        "kafka-zones" => Plan::kafka_zones(),
        "groups" => Plan::groups(),
        "compacted" => Plan::compacted(),
        "transactions" => Plan::transactions(),
        "transactions-zones" => Plan::transactions_zones(),
        "shares" => Plan::shares(),
        _ => Plan::writers(),
    }
}

/// Seeds that once broke an invariant (docs/reliability.md says what and how it was fixed).
const REGRESSIONS: &[(&str, u64)] = &[
    ("writers", 3),
    ("maintenance", 14),
    ("maintenance", 3813),
    ("kafka", 35),
    ("kafka", 65),
    ("kafka", 97),
    ("kafka-zones", 6266),
    ("kafka-zones", 8748),
];

#[test]
fn regression_seeds_run_clean() {
    for (group, seed) in REGRESSIONS {
        let r = run(*seed, &plan(group));
        assert_eq!(r.error, None, "seed {seed}");
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

#[test]
fn a_seed_run_twice_gives_the_same_trace() {
    let seeds: u64 = std::env::var("SIM_DET_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    for group in [
        "writers",
        "maintenance",
        "kafka",
        "kafka-zones",
        "groups",
        "compacted",
        "transactions",
        "transactions-zones",
        "shares",
    ] {
        let plan = plan(group);
        let mut differ = Vec::new();
        for seed in 0..seeds {
            let (a, b) = (run(seed, &plan), run(seed, &plan));
            assert_eq!(a.error, None, "seed {seed}");
            assert_ne!(a.acked, 0, "seed {seed}: nothing acknowledged: {a:?}");
            if a.trace != b.trace {
                differ.push(seed);
            }
        }
        assert!(differ.is_empty(), "{group}: seeds {differ:?} ran differently twice");
        assert_ne!(run(1, &plan).trace, run(2, &plan).trace);
    }
}

#[test]
fn writers_lose_nothing_under_every_fault_across_seeds() {
    sweep("writers", &Plan::writers());
}

#[test]
fn compaction_cleaning_and_hard_trims_lose_nothing_across_seeds() {
    sweep("maintenance", &Plan::maintenance());
}

#[test]
fn kafka_producers_across_owner_changes_lose_nothing_and_duplicate_nothing() {
    sweep("kafka", &Plan::kafka());
}

#[test]
fn kafka_producers_in_zones_moving_between_owner_slots_lose_nothing_and_duplicate_nothing() {
    sweep("kafka-zones", &Plan::kafka_zones());
}

#[test]
fn consumer_groups_through_coordinator_changes_lose_nothing_and_never_rebalance_when_stable() {
    sweep("groups", &Plan::groups());
}

#[test]
fn compacted_logs_lose_nothing_of_each_keys_latest_move_nothing_and_resurrect_nothing() {
    sweep("compacted", &Plan::compacted());
}

#[test]
fn transactions_through_owner_and_coordinator_changes_lose_nothing_and_are_read_committed_whole_or_not_at_all()
 {
    sweep("transactions", &Plan::transactions());
}

#[test]
fn zoned_transactional_producers_lose_nothing_and_their_transactions_are_read_whole_or_not_at_all()
{
    sweep("transactions-zones", &Plan::transactions_zones());
}

#[test]
fn share_groups_through_owner_changes_lose_nothing_and_deliver_each_record_within_its_limit_accepting_it_once()
 {
    sweep("shares", &Plan::shares());
}

fn sweep(group: &str, plan: &Plan) {
    let (mut acked, mut unknown, mut failed, mut faults, mut crashes) = (0, 0, 0, 0, 0);
    let (mut reads, mut read_entries, mut zombies) = (0, 0, 0);
    let (mut delivered, mut share_acks) = (0, 0);
    // The groups and transactions plans run several times longer a seed: half the seeds in
    // `cargo test` (`make dst` runs each group's SEEDS).
    let range =
        seeds(if matches!(group, "groups" | "transactions" | "transactions-zones" | "shares") {
            100
        } else {
            200
        });
    let mut bad = Vec::new();
    for seed in range.clone() {
        let r = run(seed, plan);
        if r.error.is_some() || !r.violations.is_empty() {
            eprintln!("sim {group} seed {seed} FAILED: {:?} {:?}", r.error, r.violations);
            if bad.is_empty() {
                eprintln!("minimal trace of seed {seed}:\n  {}", r.minimal_trace.join("\n  "));
            }
            bad.push(seed);
        }
        acked += r.acked;
        unknown += r.unknown;
        failed += r.failed;
        faults += r.meta_faults;
        crashes += r.crashes;
        reads += r.reads;
        read_entries += r.read_entries;
        zombies += r.zombie_attempts;
        delivered += r.share_deliveries;
        share_acks += r.share_acks;
    }
    if delivered > 0 {
        eprintln!(
            "sim {group}: {delivered} share deliveries, {share_acks} acknowledgements answered"
        );
    }
    eprintln!(
        "sim {group}: seeds {}..{}: {acked} acked, {failed} failed, {unknown} unknown, {reads} reads of {read_entries} entries, {zombies} zombie commits refused, {faults} metadata faults, {crashes} nemesis rounds",
        range.start, range.end
    );
    assert!(
        bad.is_empty(),
        "{group}: seeds {bad:?} failed; replay with SIM_GROUP={group} SIM_SEED=<seed>"
    );
}

/// Replays one seed (`SIM_SEED=n [SIM_GROUP=maintenance|kafka|kafka-zones] cargo test -p sim
/// --test writers replay -- --nocapture`).
#[test]
fn replay() {
    let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) else { return };
    let r = run(seed, &plan(&std::env::var("SIM_GROUP").unwrap_or_default()));
    eprintln!("{r:#?}");
    if !r.minimal_trace.is_empty() {
        eprintln!("minimal trace:\n  {}", r.minimal_trace.join("\n  "));
    }
    assert!(r.error.is_none() && r.violations.is_empty());
}
