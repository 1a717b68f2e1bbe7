//! The mutation test (issue 17): each deliberate bug of `logstore::mutations`, switched on
//! alone, must be caught within 200 seeds — by the checker, or by a run that cannot finish
//! (a final read that finds data gone) — so a checker that would miss it fails here. A test
//! binary of its own: the switches are process-wide.

use logstore::mutations::{self, Mutation};
use sim::scenario::{Plan, run};

/// The first seed below 200 whose run the checker faults, with what it found.
fn caught(m: Mutation, plan: &Plan) -> Option<(u64, String)> {
    mutations::set(m, true);
    let found = (0..200).find_map(|seed| {
        let r = run(seed, plan);
        if let Some(v) = r.violations.first() {
            // The failure comes with a minimal trace naming what it found.
            assert!(!r.minimal_trace.is_empty(), "seed {seed}: {v:?} without a trace");
            for id in v.names() {
                let named = r.minimal_trace.iter().any(|t| {
                    let event = t.split_once(" ms ").map_or(t.as_str(), |(_, e)| e);
                    sim::scenario::names(event, id)
                });
                assert!(
                    named,
                    "seed {seed}: the trace of {v:?} misses {id}: {:?}",
                    r.minimal_trace
                );
            }
        }
        if std::env::var_os("SIM_SHOW_TRACE").is_some() && !r.minimal_trace.is_empty() {
            eprintln!("seed {seed}: {:?}\n  {}", r.violations, r.minimal_trace.join("\n  "));
        }
        let found = r
            .violations
            .first()
            .map(|v| format!("{v:?}, a minimal trace of {} events", r.minimal_trace.len()))
            .or(r.error);
        found.map(|f| (seed, f))
    });
    mutations::set(m, false);
    found
}

#[test]
fn every_deliberate_bug_is_caught_within_200_seeds() {
    let mut report = Vec::new();
    let (writers, upkeep, groups) = (Plan::writers(), Plan::maintenance(), Plan::groups());
    let (compacted, transactions, shares) =
        (Plan::compacted(), Plan::transactions(), Plan::shares());
    for (name, m, plan) in [
        ("commits out of flush order", Mutation::CommitOutOfOrder, &writers),
        ("the head's revision not compared in the commit", Mutation::SkipHeadCompare, &writers),
        ("an ambiguous commit re-based instead of resolved", Mutation::ForgetAmbiguity, &writers),
        ("the cleaner ignoring the writers' low-water marks", Mutation::IgnoreLowWater, &upkeep),
        ("a read below a hard trim served from the index", Mutation::ReadBelowStart, &upkeep),
        ("a group coordinator's writes unfenced", Mutation::UnfencedGroupWrites, &groups),
        ("a group's stored membership not resumed", Mutation::ForgetGroupState, &groups),
        (
            "key compaction keeping a superseded record, not the latest",
            Mutation::KeepSuperseded,
            &compacted,
        ),
        ("key compaction moving the records it keeps", Mutation::ShiftCompactedOffsets, &compacted),
        (
            "an abort marker ending its transaction without indexing it as aborted",
            Mutation::ForgetAbortedTxn,
            &transactions,
        ),
        (
            "a transactions V2 batch taken without adding its partition to the transaction",
            Mutation::SkipImplicitAdd,
            &transactions,
        ),
        (
            "a share-partition's owner loading its state without its delivery counts",
            Mutation::ForgetShareCounts,
            &shares,
        ),
    ] {
        let found = caught(m, plan);
        assert!(found.is_some(), "{name}: not caught in 200 seeds");
        report.push(format!("{name}: seed {:?}", found));
    }
    // Switched off, the same seeds run clean (the bugs, not the harness, were caught).
    for plan in [&writers, &upkeep, &groups, &compacted, &transactions, &shares] {
        let r = run(0, plan);
        assert!(r.violations.is_empty() && r.error.is_none(), "{r:?}");
    }
    eprintln!("sim mutants: {}", report.join("; "));
}
