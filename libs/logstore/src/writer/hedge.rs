//! Hedged PUTs (ARCHITECTURE §3.2): a flush's PUT still out at a high quantile of recent PUTs
//! of its size is raced by a second PUT of the same object under a new WAL sequence. The
//! first to succeed is the one the flush's chunks reference; the other object, stored or not,
//! is referenced by nothing and lies below the cleaner's cutoff once the writer's low-water
//! mark passes it, like any WAL object.

use std::collections::VecDeque;
use std::future::Future;

use super::*;

/// PUT times kept per size class...
const SAMPLES: usize = 128;
/// ...and how many a class needs before its PUTs are hedged.
const MIN_SAMPLES: usize = 20;

/// Upper bounds of the size classes (the last class takes the rest): a PUT's time grows with
/// its size, so a large object is judged against large ones.
const CLASSES: [usize; 3] = [256 << 10, 1 << 20, 4 << 20];

/// Recent PUT times by object size. Each is the time from the first PUT's start to the first
/// success, the hedge's included: a hedged PUT is recorded as at least its hedge delay, so
/// the quantile stays the first PUT's (about `1 - q` of PUTs are hedged), not the lower one
/// hedging makes.
#[derive(Default)]
pub(super) struct PutTimes {
    classes: Mutex<[VecDeque<Duration>; CLASSES.len() + 1]>,
}

fn class(bytes: usize) -> usize {
    CLASSES.iter().position(|&max| bytes < max).unwrap_or(CLASSES.len())
}

impl PutTimes {
    pub(super) fn record(&self, bytes: usize, took: Duration) {
        let mut classes = self.classes.lock();
        let times = &mut classes[class(bytes)];
        if times.len() == SAMPLES {
            times.pop_front();
        }
        times.push_back(took);
    }

    /// When a PUT of `bytes` is hedged: the `q` quantile of its class's recent times, at least
    /// [`MIN_HEDGE_AFTER`]; `None` until the class has [`MIN_SAMPLES`].
    pub(super) fn hedge_after(&self, bytes: usize, q: f64) -> Option<Duration> {
        let mut times: Vec<Duration> = {
            let classes = self.classes.lock();
            let times = &classes[class(bytes)];
            if times.len() < MIN_SAMPLES {
                return None;
            }
            times.iter().copied().collect()
        };
        times.sort_unstable();
        let at = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1;
        Some(times[at].max(MIN_HEDGE_AFTER))
    }
}

/// PUTs a flush's object as WAL sequence `seq`, hedged when the writer hedges: the sequence
/// the object was stored under. A stored object's time (from the first PUT's start) joins the
/// writer's PUT times.
pub(super) async fn put_object(
    core: &Core,
    seq: u64,
    incarnation: i64,
    object: &Bytes,
) -> Result<u64, LogError> {
    let started = Instant::now();
    let r = race(core, seq, incarnation, object).await;
    if r.is_ok() {
        core.put_times.record(object.len(), started.elapsed());
    }
    r
}

/// The first PUT, and a second under a new sequence once the first is out past the hedge
/// delay: the first to succeed.
async fn race(core: &Core, seq: u64, incarnation: i64, object: &Bytes) -> Result<u64, LogError> {
    let after = core.cfg.hedge_quantile.and_then(|q| core.put_times.hedge_after(object.len(), q));
    let first = put_as(core, seq, object);
    tokio::pin!(first);
    let Some(after) = after else { return first.await };
    // The first PUT answering at the very moment is not hedged.
    tokio::select! {
        biased;
        r = &mut first => return r,
        _ = tokio::time::sleep(after) => {}
    }
    // A sequence of the same incarnation (the flush commits under it), counted unresolved
    // until both PUTs settle or are cut off; the flush's own sequence stays unresolved until
    // it commits, and the committer puts the lower of the two as its low-water mark.
    let Ok((second, of)) = core.next_seq().await else { return first.await };
    let _settles = Settles(core);
    if of != incarnation {
        return first.await;
    }
    core.hedges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let hedge = put_as(core, second, object);
    tokio::pin!(hedge);
    let (r, hedge_won) = tokio::select! {
        biased;
        r = &mut first => match r {
            Ok(s) => (Ok(s), false),
            Err(e) => (hedge.await.map_err(|_| e), true),
        },
        r = &mut hedge => match r {
            Ok(s) => (Ok(s), true),
            Err(_) => (first.await, false),
        },
    };
    if let Some(o) = core.observer.get() {
        o.hedged(r.is_ok() && hedge_won);
    }
    r
}

/// Resolves the hedge's sequence when dropped: once both PUTs settled (or the sequence came
/// from a later incarnation and was not used), or when the flush's deadline cuts them off (a count left unresolved would keep the idle writer's low-water mark
/// down for good).
struct Settles<'a>(&'a Core);

impl Drop for Settles<'_> {
    fn drop(&mut self) {
        self.0.resolved();
    }
}

fn put_as<'a>(
    core: &'a Core,
    seq: u64,
    object: &Bytes,
) -> impl Future<Output = Result<u64, LogError>> + 'a {
    let (path, object) = (objstore::keys::wal_object(seq), object.clone());
    async move {
        match objstore::put_create_only(core.objects.as_ref(), &path, object).await {
            Ok(_) => Ok(seq),
            Err(e) => Err(LogError::unavailable(format!("WAL object {path}: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hedges_after_the_quantile_of_its_size_class_once_it_has_enough_times() {
        let times = PutTimes::default();
        for i in 1..=19u64 {
            times.record(1000, Duration::from_millis(10 * i));
        }
        assert_eq!(times.hedge_after(1000, 0.95), None, "19 times are too few");
        times.record(1000, Duration::from_millis(200));
        assert_eq!(times.hedge_after(1000, 0.95), Some(Duration::from_millis(190)));
        assert_eq!(times.hedge_after(1000, 0.5), Some(Duration::from_millis(100)));
        // Another class has no times of its own.
        assert_eq!(times.hedge_after(8 << 20, 0.95), None);
        // Never sooner than the floor.
        for _ in 0..SAMPLES {
            times.record(10, Duration::ZERO);
        }
        assert_eq!(times.hedge_after(10, 0.95), Some(MIN_HEDGE_AFTER));
    }

    #[test]
    fn keeps_the_latest_times() {
        let times = PutTimes::default();
        for _ in 0..SAMPLES {
            times.record(1, Duration::from_secs(1));
        }
        for _ in 0..SAMPLES {
            times.record(1, Duration::from_millis(20));
        }
        assert_eq!(times.hedge_after(1, 0.99), Some(Duration::from_millis(20)));
    }
}
