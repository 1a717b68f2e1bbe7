//! The memory a Kafka listener's requests may hold at once (Kafka's `queued.max.request.bytes`):
//! one budget of bytes per listener. A frame's bytes are taken from it once its size has
//! arrived, before its body is read (a connection whose next frame does not fit waits, its
//! bytes left in the socket), then what decoding it may allocate; they are given back when its
//! answer is ready. A produce's batches are slices of its frame until committed, so its frame
//! stays counted until then.
//!
//! A frame takes all its bytes at once or waits holding none, so two frames never wait on each
//! other; one that could never fit is refused from its size.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What decoding a frame of `len` bytes may allocate beyond the frame (whose strings and byte
/// fields it slices): 8 times its size, at most 16 MiB, and 64 KiB. Real requests take about
/// 4 times at most (a topic or partition of a few bytes decodes to a struct of 70-80); one
/// that would take more (a frame of nothing but tiny elements) is refused. Taken from the
/// budget with the frame, and given back but for what decoding took.
pub fn decode_allowance(len: usize) -> usize {
    len.saturating_mul(8).min(16 << 20) + (64 << 10)
}

/// One listener's request budget. Cheap to share.
#[derive(Debug)]
pub struct RequestBudget {
    /// What every frame takes from.
    main: Arc<Semaphore>,
    /// Kept for small frames (heartbeats, commits, metadata, fetch requests): while large
    /// frames hold all of `main`, other clients' small requests are still read and served.
    /// Small frames take from it first and from `main` once it is spent.
    reserve: Arc<Semaphore>,
    bytes: usize,
    held: AtomicUsize,
    peak: AtomicUsize,
}

/// A frame this small (with its decoding allowance) may take from the reserve.
pub const SMALL: usize = 1 << 20;

/// Bytes taken from a [`RequestBudget`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    permit: Option<OwnedSemaphorePermit>,
    budget: Arc<RequestBudget>,
}

impl RequestBudget {
    /// A budget of `bytes` (at least 8 MiB), an eighth of it kept for small frames.
    pub fn new(bytes: usize) -> Arc<RequestBudget> {
        let bytes = bytes.clamp(8 << 20, Semaphore::MAX_PERMITS);
        let reserve = bytes / 8;
        Arc::new(RequestBudget {
            main: Arc::new(Semaphore::new(bytes - reserve)),
            reserve: Arc::new(Semaphore::new(reserve)),
            bytes,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// Its size.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most one frame may take (with its decoding allowance): what large frames share.
    pub fn largest(&self) -> usize {
        self.bytes - self.bytes / 8
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes, waiting until they are free; `None` if `n` could never fit.
    pub async fn take(self: &Arc<Self>, n: usize) -> Option<Held> {
        if n > self.largest() {
            return None;
        }
        let count = u32::try_from(n).ok()?;
        let permit = match n {
            0 => None,
            n if n <= SMALL => match self.reserve.clone().try_acquire_many_owned(count) {
                Ok(p) => Some(p),
                Err(_) => Some(self.main.clone().acquire_many_owned(count).await.ok()?),
            },
            _ => Some(self.main.clone().acquire_many_owned(count).await.ok()?),
        };
        let held = self.held.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(held, Ordering::Relaxed);
        Some(Held { permit, budget: self.clone() })
    }
}

impl Held {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Gives back all but `keep` bytes.
    pub fn keep(&mut self, keep: usize) {
        let back = self.bytes().saturating_sub(keep);
        if back == 0 {
            return;
        }
        if let Some(p) = self.permit.as_mut().and_then(|p| p.split(back)) {
            self.budget.held.fetch_sub(back, Ordering::Relaxed);
            drop(p);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let n = self.bytes();
        self.budget.held.fetch_sub(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_are_taken_whole_kept_in_part_and_given_back() {
        let b = RequestBudget::new(8 << 20);
        assert!(b.take((7 << 20) + 1).await.is_none(), "more than large frames share never fits");
        let mut first = b.take(6 << 20).await.expect("fits");
        assert_eq!(b.held(), 6 << 20);
        // The next large one does not fit until room is given back.
        let next = tokio::spawn({
            let b = b.clone();
            async move { b.take(2 << 20).await.map(|h| h.bytes()) }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!next.is_finished(), "taken beyond the budget");
        // Small frames are still served, from the reserve.
        let small = tokio::time::timeout(std::time::Duration::from_secs(1), b.take(64 << 10)).await;
        assert!(small.is_ok_and(|h| h.is_some()), "a small frame waited behind a large one");
        first.keep(1 << 20);
        assert_eq!(next.await.expect("joins"), Some(2 << 20));
        assert_eq!(b.held(), 1 << 20, "the others' bytes were given back when dropped");
        drop(first);
        assert_eq!(b.held(), 0);
        assert_eq!(b.peak(), (6 << 20) + (64 << 10));
    }
}
