//! The "writers" scenario group over many seeds, and the determinism meta-test.

use sim::scenario::{Plan, run};

/// The seeds of one `cargo test` run of the group: 200 from 0, or `SIM_SEEDS` from `SIM_FROM`
/// (`make dst` splits more over processes).
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let from = var("SIM_FROM").unwrap_or(0);
    from..from + var("SIM_SEEDS").unwrap_or(200)
}

/// Seeds that once broke an invariant (docs/reliability.md says what and how it was fixed).
const REGRESSIONS: &[u64] = &[3];

#[test]
fn regression_seeds_run_clean() {
    for seed in REGRESSIONS {
        let r = run(*seed, &Plan::writers());
        assert_eq!(r.error, None, "seed {seed}");
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
    }
}

#[test]
fn a_seed_run_twice_gives_the_same_trace() {
    let plan = Plan::writers();
    for seed in [1, 2, 3] {
        let (a, b) = (run(seed, &plan), run(seed, &plan));
        assert_eq!(a.error, None, "seed {seed}");
        assert_eq!(a.trace, b.trace, "seed {seed}: {a:?}\n{b:?}");
        assert_ne!(a.acked, 0, "seed {seed}: nothing acknowledged: {a:?}");
    }
    assert_ne!(run(1, &plan).trace, run(2, &plan).trace);
}

#[test]
fn writers_lose_nothing_under_every_fault_across_seeds() {
    let plan = Plan::writers();
    let (mut acked, mut unknown, mut failed, mut faults, mut crashes) = (0, 0, 0, 0, 0);
    let range = seeds();
    for seed in range.clone() {
        let r = run(seed, &plan);
        assert_eq!(r.error, None, "seed {seed}: replay with SIM_SEED={seed}");
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        acked += r.acked;
        unknown += r.unknown;
        failed += r.failed;
        faults += r.meta_faults;
        crashes += r.crashes;
    }
    eprintln!(
        "sim writers: seeds {}..{}: {acked} acked, {failed} failed, {unknown} unknown, {faults} metadata faults, {crashes} crashes",
        range.start, range.end
    );
}

/// Replays one seed (`SIM_SEED=n cargo test -p sim --test writers replay -- --nocapture`).
#[test]
fn replay() {
    let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) else { return };
    let r = run(seed, &Plan::writers());
    eprintln!("{r:#?}");
    assert!(r.error.is_none() && r.violations.is_empty());
}
