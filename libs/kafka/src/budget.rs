//! The memory a Kafka listener's requests may hold at once (Kafka's `queued.max.request.bytes`):
//! one budget of bytes per listener. A frame's bytes are taken from it once its size has
//! arrived, before its body is read (a connection whose next frame does not fit waits, its
//! bytes left in the socket), then what decoding it may allocate; they are given back when its
//! answer is ready. A produce's batches are slices of its frame until committed, so its frame
//! stays counted until then.
//!
//! A frame takes all its bytes at once or waits holding none, so two frames never wait on each
//! other; one that could never fit is refused from its size.
//!
//! A large frame's buffer is used again once nothing holds its bytes ([`RequestBudget::frame`]):
//! a new one is fresh memory, each of whose pages faults as the body arrives. A kept buffer
//! holds its capacity of the budget, taken only while free and given back before a frame would
//! wait for room, and at most [`KEPT_FRAMES`] are kept: the budget still bounds them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;
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
    /// Buffers of frames answered, each with its room taken from `main`.
    kept: Mutex<Vec<(Vec<u8>, OwnedSemaphorePermit)>>,
}

/// Frame buffers kept at most.
pub const KEPT_FRAMES: usize = 4;

/// Frames' buffers from this size to [`KEPT_UP_TO`] are kept (smaller ones the allocator keeps
/// itself); new ones are rounded up to a multiple of it, so one fits the next frame of about
/// its size.
const KEPT_FROM: usize = 64 << 10;
const KEPT_UP_TO: usize = 4 << 20;

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
            kept: Mutex::new(Vec::new()),
        })
    }

    /// An empty buffer for a frame of `len` bytes: the smallest kept one it fits, or a new one
    /// (large ones rounded up). Give the frame back as [`Self::frame`].
    pub fn frame_buffer(&self, len: usize) -> Vec<u8> {
        let mut kept = self.kept.lock();
        let fits = kept
            .iter()
            .enumerate()
            .filter(|(_, (b, _))| b.capacity() >= len)
            .min_by_key(|(_, (b, _))| b.capacity())
            .map(|(i, _)| i);
        match fits {
            // Its room goes back: the frame takes its own.
            Some(i) => kept.swap_remove(i).0,
            None if (KEPT_FROM..=KEPT_UP_TO).contains(&len) => {
                Vec::with_capacity(len.div_ceil(KEPT_FROM) * KEPT_FROM)
            }
            None => Vec::with_capacity(len),
        }
    }

    /// A frame read into a buffer of [`Self::frame_buffer`], as bytes whose buffer comes back
    /// once the last of them is dropped.
    pub fn frame(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        if !(KEPT_FROM..=KEPT_UP_TO).contains(&buf.capacity()) {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Returning { buf, to: Arc::downgrade(self) })
    }

    /// Keeps `buf` if its room is free: in place of the smallest kept one if
    /// [`KEPT_FRAMES`] are (so those kept fit the largest frames coming).
    fn give_back(&self, mut buf: Vec<u8>) {
        let mut kept = self.kept.lock();
        let Ok(n) = u32::try_from(buf.capacity()) else { return };
        if kept.len() >= KEPT_FRAMES {
            let smallest = (0..kept.len()).min_by_key(|&i| kept[i].0.capacity());
            match smallest {
                Some(i) if kept[i].0.capacity() < buf.capacity() => drop(kept.swap_remove(i)),
                _ => return,
            }
        }
        // Released permits go to frames waiting first: free ones, none of them waits.
        if let Ok(room) = self.main.clone().try_acquire_many_owned(n) {
            buf.clear();
            kept.push((buf, room));
        }
    }

    /// Frees the kept buffers, giving their room back, if `main` is short of `n`.
    fn room_for(&self, n: usize) {
        if self.main.available_permits() < n {
            self.kept.lock().clear();
        }
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
                Err(_) => {
                    self.room_for(n);
                    Some(self.main.clone().acquire_many_owned(count).await.ok()?)
                }
            },
            _ => {
                self.room_for(n);
                Some(self.main.clone().acquire_many_owned(count).await.ok()?)
            }
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

/// A frame's buffer, given back to its budget when dropped.
struct Returning {
    buf: Vec<u8>,
    /// Weak: a listener's budget may go before the last of its frames.
    to: Weak<RequestBudget>,
}

impl AsRef<[u8]> for Returning {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(to) = self.to.upgrade() {
            to.give_back(std::mem::take(&mut self.buf));
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

    /// A large frame's buffer comes back once its last bytes are dropped, holding its room,
    /// and the next frame of that size or smaller is read into it; a frame that needs the room
    /// frees the kept ones first; at most KEPT_FRAMES are kept; small and huge ones never.
    #[tokio::test]
    async fn frame_buffers_come_back_within_the_budget() {
        let b = RequestBudget::new(8 << 20);
        let main = b.largest();
        let mut buf = b.frame_buffer(300 << 10);
        assert_eq!(buf.capacity(), 320 << 10, "rounded up to 64 KiB");
        buf.resize(300 << 10, 9);
        let at = buf.as_ptr();
        let frame = b.frame(buf);
        let batch = frame.slice(100..200);
        drop(frame);
        assert!(b.kept.lock().is_empty(), "kept while a slice of it lives");
        drop(batch);
        assert_eq!(b.main.available_permits(), main - (320 << 10), "it holds its room");
        let again = b.frame_buffer(200 << 10);
        assert_eq!((again.as_ptr(), again.len()), (at, 0));
        assert_eq!(b.main.available_permits(), main);
        drop(b.frame(again));

        // Five come back, four are kept, the larger ones; a frame needing all of main frees
        // them.
        let five: Vec<Bytes> = (0..5).map(|_| b.frame(b.frame_buffer(1 << 20))).collect();
        drop(five);
        let mut sizes: Vec<usize> = b.kept.lock().iter().map(|(b, _)| b.capacity()).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [1 << 20; KEPT_FRAMES], "the 320 KiB one gave way");
        let all = tokio::time::timeout(std::time::Duration::from_secs(5), b.take(main)).await;
        let all = all.expect("waited for kept buffers");
        assert!(all.is_some());
        assert!(b.kept.lock().is_empty());
        // With no room free, none is kept.
        drop(b.frame(b.frame_buffer(1 << 20)));
        assert!(b.kept.lock().is_empty());
        drop(all);

        // Small and huge buffers are the allocator's.
        drop(b.frame(b.frame_buffer(1000)));
        drop(b.frame(b.frame_buffer(5 << 20)));
        assert!(b.kept.lock().is_empty());
    }
}
