//! Deliberate bugs, each behind a switch that is off unless a test turns it on: the
//! simulation's mutation test (libs/sim/tests/mutants.rs) switches one on at a time and
//! requires its checker to catch it within 200 seeds, so a checker that would miss such a bug
//! fails the build. Process-wide statics, read with one relaxed load where the bug would be;
//! only that test binary (a process of its own) ever sets them.

use std::sync::atomic::{AtomicBool, Ordering};

/// The committer resolves the next flush before the one before it (invariant 7).
pub static COMMIT_OUT_OF_ORDER: AtomicBool = AtomicBool::new(false);
/// The commit transaction does not compare the log's head revision, so a fence or another
/// writer's commit in between is not seen (§3.3).
pub static SKIP_HEAD_COMPARE: AtomicBool = AtomicBool::new(false);
/// A commit attempt whose answer was lost is not remembered as ambiguous: the next attempt is
/// re-based on the moved head instead of resolved (§3.8).
pub static FORGET_AMBIGUITY: AtomicBool = AtomicBool::new(false);

/// Reclamation leaves out the writers' low-water marks: the cleaner's cutoff and the floors the
/// compactor puts (§5: a flush PUT but not yet committed is referenced by no log, so only the
/// marks keep its object). Either alone is masked by the other.
pub static IGNORE_LOW_WATER: AtomicBool = AtomicBool::new(false);
/// A read below the log's start (after a hard trim) is served from whatever index is still
/// found instead of refused.
pub static READ_BELOW_START: AtomicBool = AtomicBool::new(false);

pub(crate) fn on(m: &AtomicBool) -> bool {
    m.load(Ordering::Relaxed)
}
