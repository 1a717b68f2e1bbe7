//! Deliberate bugs, each behind a switch that is off unless a test turns it on: the
//! simulation's mutation test (libs/sim/tests/mutants.rs) switches one on at a time and
//! requires its checker to catch it within 200 seeds, so a checker that would miss such a bug
//! fails the build.
//!
//! The switches exist only with the `mutants` feature, which only that test enables (a
//! dev-dependency feature: a release build never has it). Without it [`on`] is a constant
//! `false` and every guarded branch compiles away. With it, the switches are process-wide
//! statics read with one relaxed load; only the mutation test binary (a process of its own)
//! sets them.

/// One deliberate bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The committer resolves the next flush before the one before it (invariant 7).
    CommitOutOfOrder,
    /// The commit transaction does not compare the log's head revision, so a fence or another
    /// writer's commit in between is not seen (§3.3).
    SkipHeadCompare,
    /// A commit attempt whose answer was lost is not remembered as ambiguous: the next attempt
    /// is re-based on the moved head instead of resolved (§3.8).
    ForgetAmbiguity,
    /// Reclamation leaves out the writers' low-water marks: the cleaner's cutoff and the floors
    /// the compactor puts (§5: a flush PUT but not yet committed is referenced by no log, so
    /// only the marks keep its object). Either alone is masked by the other.
    IgnoreLowWater,
    /// A read below the log's start (after a hard trim) is served from whatever index is still
    /// found instead of refused.
    ReadBelowStart,
    /// A Kafka group coordinator's writes (offset commits, membership) compare neither its
    /// tenure nor its incarnation: a coordinator the group was taken from still writes (§11).
    UnfencedGroupWrites,
    /// A coordinator taking a Kafka group does not resume its stored membership: it starts the
    /// group empty, and its members rejoin (§11: a coordinator change alone rebalances nothing).
    ForgetGroupState,
    /// Key compaction keeps a superseded record and drops its key's latest one instead
    /// (ARCHITECTURE §12: at least the latest record of each key survives).
    KeepSuperseded,
    /// Key compaction writes the records it keeps at their positions in their batch, not at
    /// their offsets (§12: a survivor's offset never changes).
    ShiftCompactedOffsets,
    /// An abort marker ends its transaction without adding it to the log's aborted index, so
    /// read_committed serves its records (§12: no aborted record is read committed).
    ForgetAbortedTxn,
    /// A transactions V2 batch whose partition is not in its producer's transaction is taken
    /// without adding the partition, so no marker of the transaction ends it there (§12: a
    /// transaction's records are read committed whole or not at all, and the last stable
    /// offset reaches the end once every transaction ended).
    SkipImplicitAdd,
    /// A share-partition's owner loads its stored state without the delivery counts, so a
    /// new owner lends records as if never delivered (§12: a share-partition's state never
    /// goes back across owners; no record goes out past the delivery limit).
    ForgetShareCounts,
}

#[cfg(feature = "mutants")]
static SWITCHES: [std::sync::atomic::AtomicBool; 12] =
    [const { std::sync::atomic::AtomicBool::new(false) }; 12];

/// Whether the bug is switched on.
#[cfg(feature = "mutants")]
#[inline]
pub fn on(m: Mutation) -> bool {
    SWITCHES[m as usize].load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the bug is switched on: never, without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn on(_: Mutation) -> bool {
    false
}

/// Switches the bug on or off, for the whole process.
#[cfg(feature = "mutants")]
pub fn set(m: Mutation, on: bool) {
    SWITCHES[m as usize].store(on, std::sync::atomic::Ordering::SeqCst);
}

// A build without the feature cannot turn a bug on.
#[cfg(not(feature = "mutants"))]
const _: () = assert!(!on(Mutation::CommitOutOfOrder) && !on(Mutation::ReadBelowStart));
