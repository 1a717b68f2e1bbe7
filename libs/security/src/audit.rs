//! The audit log: failed authentications and refused requests, said at WARN with who, from
//! where and what, as Kafka's authorizer log says them; at most [`BURST`] lines per
//! [`WINDOW`] (a flood of refusals cannot flood the log), the next line saying how many were
//! held back.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Principal;

/// Lines said per window at most.
pub const BURST: u32 = 20;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// At most `burst` lines per `window`; the next line said counts how many were held back.
/// One serves the audit log; the Kafka listener has its own for refused connections.
#[derive(Debug)]
pub struct RateLimit {
    burst: u32,
    window: Duration,
    /// When the current window began, and lines said in it.
    state: Mutex<(Option<Instant>, u32)>,
    held: AtomicU64,
}

impl RateLimit {
    pub const fn new(burst: u32, window: Duration) -> RateLimit {
        RateLimit { burst, window, state: Mutex::new((None, 0)), held: AtomicU64::new(0) }
    }

    /// Whether a line may be said now, and if so how many were held back since the last;
    /// if not, it is counted as held back.
    pub fn allow(&self) -> Option<u64> {
        let mut s = self.state.lock();
        let now = Instant::now();
        if s.0.is_none_or(|t| now.duration_since(t) >= self.window) {
            *s = (Some(now), 0);
        }
        if s.1 >= self.burst {
            self.held.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        s.1 += 1;
        Some(self.held.swap(0, Ordering::Relaxed))
    }
}

static LIMIT: RateLimit = RateLimit::new(BURST, WINDOW);
static SAID: AtomicU64 = AtomicU64::new(0);

/// Whether an audit line may be said now (see [`RateLimit::allow`]).
fn may_say() -> Option<u64> {
    let held = LIMIT.allow()?;
    SAID.fetch_add(1, Ordering::Relaxed);
    Some(held)
}

/// Lines said so far (for tests).
pub fn said() -> u64 {
    SAID.load(Ordering::Relaxed)
}

/// A request refused: `principal` from `peer` may not `operation` on `resource`.
pub fn denied(principal: &Principal, peer: &str, operation: &str, resource: &str) {
    if let Some(held_back) = may_say() {
        tracing::warn!(
            principal = %principal,
            peer,
            operation,
            resource,
            held_back,
            "authorization: denied"
        );
    }
}

/// An authentication that failed (`how`: the mechanism or credential kind; never the secret).
pub fn failed_authentication(peer: &str, how: &str, user: Option<&str>, reason: &str) {
    if let Some(held_back) = may_say() {
        tracing::warn!(peer, mechanism = how, user, reason, held_back, "authentication failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_refusals_says_at_most_a_burst_per_window() {
        let before = said();
        for _ in 0..10_000 {
            denied(&Principal::user("mallory"), "10.0.0.9", "consume", "stream:b");
        }
        let n = said() - before;
        assert!(n >= 1 && n <= u64::from(BURST), "{n} lines for 10,000 refusals");
    }
}
