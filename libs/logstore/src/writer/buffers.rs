//! WAL objects' buffers, used again: the buffer a flush laid its object out in goes back to the
//! writer once nothing holds the object (its PUT, the tail cache, readers), for a later flush.
//! A new buffer of a few megabytes is fresh memory, and each of its pages costs a fault as the
//! payloads are copied in: at 8 partitions saturating, the copy into new object buffers took
//! two thirds of a standalone's page faults.
//!
//! A kept buffer holds its capacity of the writer's buffer room, as the tail cache does, and
//! comes before it: a buffer is kept only while appends do not need the room (it is free, or
//! the tail cache holds it and gives it up); an append short of room has the kept buffers freed
//! first ([`ObjectBuffers::release`]), and while an append waits for room none is kept
//! ([`ObjectBuffers::make_way`]); at most [`IDLE`] are kept. So a writer's memory stays within
//! its buffer's bound, and the tail cache is smaller by what is kept.
//!
//! Under a saturating load appends always wait for room, so none of those is kept: every flush
//! took a new buffer (at 8 partitions saturating, 200 page faults per MB written: a fifth of a
//! standalone's CPU). So a few more, the spares, are kept whatever appends wait for: they live
//! in room set aside for them alone ([`spare_bytes`] of `buffer_bytes`, not appends' room), and
//! later flushes take them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::range_cache::RangeCache;

/// Objects begin at an address aligned to this (a page) in their buffers: a store that writes
/// with direct I/O (the local directory's) writes them from where they lie, not through a copy.
pub(crate) const OBJECT_ALIGN: usize = 4096;

/// Buffers kept at most.
const IDLE: usize = 2;

/// Smaller buffers are not kept (the allocator keeps small ones itself).
const KEPT_FROM: usize = 256 << 10;

/// New buffers are rounded up to this, so one fits the next flush's slightly larger object.
const ROUND: usize = 1 << 20;

/// The room set aside for spare buffers in a writer's `buffer_bytes`: an eighth of it in whole
/// [`ROUND`]s (8 MiB of the default 64 MiB, four buffers of the 1-2 MB objects a saturated
/// writer makes), none when that is under a round. Appends have the rest.
pub(crate) fn spare_bytes(buffer_bytes: usize) -> usize {
    buffer_bytes / 8 / ROUND * ROUND
}

#[derive(Debug)]
pub(crate) struct ObjectBuffers {
    /// Each with its room.
    idle: Mutex<Vec<(Vec<u8>, OwnedSemaphorePermit)>>,
    /// The writer's buffer room.
    space: Arc<Semaphore>,
    /// The tail cache, in the room appends do not hold.
    tail: RangeCache,
    /// Appends waiting for room ([`Self::make_way`]): while any do, none is kept.
    short: AtomicUsize,
    /// The spares: buffers of at most `spare_bytes` in all, in room set aside for them.
    spares: Mutex<Vec<Vec<u8>>>,
    spare_bytes: usize,
}

/// While it lives, buffers coming back are freed, not kept ([`ObjectBuffers::make_way`]).
pub(crate) struct MakingWay<'a>(&'a ObjectBuffers);

impl Drop for MakingWay<'_> {
    fn drop(&mut self) {
        self.0.short.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ObjectBuffers {
    /// Buffers kept in `space` (appends' room), and spares in `spare_bytes` set aside beside
    /// it ([`spare_bytes`]).
    pub(crate) fn new(space: Arc<Semaphore>, tail: RangeCache, spare_bytes: usize) -> Arc<Self> {
        Arc::new(ObjectBuffers {
            idle: Mutex::new(Vec::new()),
            space,
            tail,
            short: AtomicUsize::new(0),
            spares: Mutex::new(Vec::new()),
            spare_bytes,
        })
    }

    /// A buffer for an object of `size` bytes laid out at [`OBJECT_ALIGN`]: the smallest kept
    /// one it fits (first those holding appends' room, which goes back), a spare, or a new one.
    pub(crate) fn take(&self, size: usize) -> Vec<u8> {
        let size = size + OBJECT_ALIGN;
        {
            let mut idle = self.idle.lock();
            if let Some(i) = smallest(idle.iter().map(|(b, _)| b), size) {
                // Its room goes back: the flush's payloads hold theirs.
                return idle.swap_remove(i).0;
            }
        }
        let mut spares = self.spares.lock();
        match smallest(spares.iter(), size) {
            Some(i) => spares.swap_remove(i),
            None if size >= KEPT_FROM => Vec::with_capacity(size.div_ceil(ROUND) * ROUND),
            None => Vec::with_capacity(size),
        }
    }

    /// `object` as bytes whose buffer comes back here once the last of them is dropped.
    pub(crate) fn object(self: &Arc<Self>, object: wal::LaidOut) -> Bytes {
        let wal::LaidOut { buf, start } = object;
        if buf.capacity() < KEPT_FROM {
            return Bytes::from(buf).slice(start..);
        }
        Bytes::from_owner(Returning { buf, start, to: Arc::downgrade(self) })
    }

    /// Frees the kept buffers, giving their room back (to an append short of it).
    pub(crate) fn release(&self) {
        self.idle.lock().clear();
    }

    /// For an append about to wait for room: frees the kept buffers, and until the guard is
    /// dropped, buffers coming back are freed too unless kept as spares. (Kept, a buffer holds
    /// room the append would wait for: nothing else frees it while the writer is idle.)
    pub(crate) fn make_way(&self) -> MakingWay<'_> {
        self.short.fetch_add(1, Ordering::SeqCst);
        // After the count: a buffer kept before this release is freed by it, and one kept
        // after sees the count (`give_back` reads it under the lock `release` takes).
        self.release();
        MakingWay(self)
    }

    /// Keeps `buf` as a spare if the spares' room has place for it, or if the smallest spare is
    /// smaller and leaving it does; that spare, or `buf` if not kept, is returned.
    fn spare(&self, mut buf: Vec<u8>) -> Option<Vec<u8>> {
        let len = buf.capacity();
        if len > self.spare_bytes {
            return Some(buf);
        }
        let mut spares = self.spares.lock();
        let held: usize = spares.iter().map(Vec::capacity).sum();
        if held + len <= self.spare_bytes {
            buf.clear();
            spares.push(buf);
            return None;
        }
        match smallest(spares.iter(), 0) {
            Some(i)
                if spares[i].capacity() < len
                    && held - spares[i].capacity() + len <= self.spare_bytes =>
            {
                buf.clear();
                Some(std::mem::replace(&mut spares[i], buf))
            }
            _ => Some(buf),
        }
    }

    /// Keeps `buf` as a spare, or else if appends do not need its room, taking it from the
    /// tail cache if that holds it. (The tail cache drops what it evicts outside its lock, so
    /// this may shrink it.)
    fn give_back(&self, buf: Vec<u8>) {
        let Some(mut buf) = self.spare(buf) else { return };
        if self.short.load(Ordering::SeqCst) > 0 {
            return;
        }
        let len = buf.capacity();
        let Ok(n) = u32::try_from(len) else { return };
        // Each round keeps it, or gives up, or shrinks the tail cache (what that evicts may
        // come back here first and take the room).
        {
            // A larger one takes the place of the smallest kept (so those kept fit the largest
            // objects coming).
            let mut idle = self.idle.lock();
            let least = smallest(idle.iter().map(|(b, _)| b), 0);
            if let Some(i) = least.filter(|&i| idle.len() >= IDLE && idle[i].0.capacity() < len) {
                drop(idle.swap_remove(i));
            }
        }
        while self.idle.lock().len() < IDLE {
            // Released permits go to appends waiting first: free ones, none of them waits.
            if let Ok(room) = self.space.clone().try_acquire_many_owned(n) {
                let mut idle = self.idle.lock();
                if idle.len() < IDLE && self.short.load(Ordering::SeqCst) == 0 {
                    buf.clear();
                    idle.push((buf, room));
                }
                return;
            }
            // (None short: the room is closed, the writer stopping.)
            let short = len.saturating_sub(self.space.available_permits());
            if short == 0 || self.tail.len_bytes() < short {
                return;
            }
            self.tail.shrink(short);
        }
    }

    #[cfg(test)]
    fn idle(&self) -> Vec<usize> {
        self.idle.lock().iter().map(|(b, _)| b.capacity()).collect()
    }

    #[cfg(test)]
    fn spares(&self) -> Vec<usize> {
        let mut kept: Vec<usize> = self.spares.lock().iter().map(Vec::capacity).collect();
        kept.sort_unstable();
        kept
    }
}

/// Which of `buffers` is the smallest of at least `size` bytes (0: the smallest).
fn smallest<'a>(buffers: impl Iterator<Item = &'a Vec<u8>>, size: usize) -> Option<usize> {
    buffers
        .enumerate()
        .filter(|(_, b)| b.capacity() >= size)
        .min_by_key(|(_, b)| b.capacity())
        .map(|(i, _)| i)
}

/// An object's buffer, given back when dropped.
struct Returning {
    buf: Vec<u8>,
    /// Where the object begins in it.
    start: usize,
    /// Weak: the tail cache holds objects, and these buffers hold the tail cache.
    to: Weak<ObjectBuffers>,
}

impl AsRef<[u8]> for Returning {
    fn as_ref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(to) = self.to.upgrade() {
            to.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `buf` as an object laid out from its start.
    fn laid(buf: Vec<u8>) -> wal::LaidOut {
        wal::LaidOut { buf, start: 0 }
    }

    /// An object laid out in a buffer taken for its size begins at an aligned address, kept or
    /// not, and its bytes are the object's alone.
    #[test]
    fn objects_are_laid_out_aligned() -> Result<(), wal::FormatError> {
        let pool = ObjectBuffers::new(Arc::new(Semaphore::new(64 << 20)), RangeCache::new(0), 0);
        for payload in [1000, 300_000, (1 << 20) - 100, 3 << 20] {
            let size = payload + wal::ENTRY_HEADER_LEN + 24 + 52 + 64;
            let mut b = wal::ObjectBuilder::with_aligned_buffer(
                wal::ObjectKind::Wal,
                pool.take(size),
                OBJECT_ALIGN,
            );
            b.begin_chunk(1);
            b.push_entry(1, 0, &vec![9; payload])?;
            let object = pool.object(b.finish_vec()?.0);
            assert_eq!(object.as_ptr().align_offset(OBJECT_ALIGN), 0, "{payload}");
            let decoded = wal::decode_object(&object, wal::ObjectKind::Wal)?;
            assert_eq!(decoded[0].1[0].payload.len(), payload);
        }
        Ok(())
    }

    /// An object's buffer comes back once its last bytes are dropped, and the next object of
    /// that size or smaller is laid out in the same memory; none is kept while the writer's
    /// room is short, nor more than [`IDLE`].
    #[test]
    fn buffers_come_back_once_their_object_is_dropped() {
        let space = Arc::new(Semaphore::new(64 << 20));
        let pool = ObjectBuffers::new(space.clone(), RangeCache::new(0), 0);
        let mut buf = pool.take((3 << 20) - OBJECT_ALIGN);
        assert_eq!(buf.capacity(), 3 << 20);
        buf.extend_from_slice(&[7; 3 << 20]);
        let at = buf.as_ptr();
        let object = pool.object(laid(buf));
        let slice = object.slice(10..20);
        drop(object);
        assert!(pool.idle().is_empty(), "given back while a slice of it lives");
        assert_eq!(&slice[..], &[7; 10]);
        drop(slice);
        assert_eq!(pool.idle(), [3 << 20]);
        let again = pool.take(2 << 20);
        assert_eq!((again.as_ptr(), again.len()), (at, 0), "the same memory, emptied");

        // Rounded up to a megabyte; a small one is neither rounded nor kept.
        assert_eq!(pool.take((1 << 20) + 1).capacity(), 2 << 20);
        drop(pool.object(laid(pool.take(1000))));
        assert!(pool.idle().is_empty());

        // At most IDLE, the larger ones, each holding its room until taken or released.
        for size in [1 << 20, 1 << 20, 2 << 20, 1 << 20] {
            drop(pool.object(laid(vec![0; size])));
        }
        let mut kept = pool.idle();
        kept.sort_unstable();
        assert_eq!(kept, [1 << 20, 2 << 20], "the larger one took a smaller one's place");
        pool.release();
        for _ in 0..3 {
            drop(pool.object(laid(vec![0; 1 << 20])));
        }
        assert_eq!(pool.idle().len(), IDLE);
        assert_eq!(space.available_permits(), (64 - 2) << 20);
        let taken = pool.take((1 << 20) - OBJECT_ALIGN);
        assert_eq!(space.available_permits(), (64 - 1) << 20);
        pool.release();
        assert!(pool.idle().is_empty());
        assert_eq!(space.available_permits(), 64 << 20);
        drop(pool.object(laid(taken)));
        assert_eq!(pool.idle(), [1 << 20]);
        pool.release();

        // None kept while appends hold the room.
        let held = space.clone().try_acquire_many_owned(((64 - 1) << 20) + 1).expect("room");
        drop(pool.object(laid(vec![0; 1 << 20])));
        assert!(pool.idle().is_empty(), "kept while appends need the room");
        drop(held);
    }

    /// While an append waits for room, the kept buffers are freed and none coming back is
    /// kept (its room stays free for the append); once it stops waiting, they are kept again.
    #[test]
    fn no_buffer_is_kept_while_an_append_waits_for_room() {
        let space = Arc::new(Semaphore::new(8 << 20));
        let pool = ObjectBuffers::new(space.clone(), RangeCache::new(0), 0);
        drop(pool.object(laid(vec![0; 1 << 20])));
        assert_eq!(pool.idle(), [1 << 20]);
        let object = pool.object(laid(vec![0; 2 << 20]));
        let way = pool.make_way();
        assert!(pool.idle().is_empty(), "kept while an append waits");
        drop(object);
        assert!(pool.idle().is_empty(), "a buffer coming back was kept");
        assert_eq!(space.available_permits(), 8 << 20);
        drop(way);
        drop(pool.object(laid(vec![0; 2 << 20])));
        assert_eq!(pool.idle(), [2 << 20]);
    }

    /// While appends wait for room, buffers coming back are still kept as spares (they hold
    /// none of appends' room: theirs is set aside) and the next flush lays its object out in the
    /// same memory; within the spares' room a larger one takes a smaller one's place, one that
    /// does not fit is freed, and none is kept when no room is set aside.
    #[test]
    fn spares_are_kept_while_appends_wait() {
        let space = Arc::new(Semaphore::new(8 << 20));
        let pool = ObjectBuffers::new(space.clone(), RangeCache::new(0), 4 << 20);
        let way = pool.make_way();
        let buf = pool.take((2 << 20) - OBJECT_ALIGN);
        let at = buf.as_ptr();
        drop(pool.object(laid(buf)));
        assert_eq!(pool.spares(), [2 << 20], "freed while an append waits");
        assert!(pool.idle().is_empty());
        assert_eq!(space.available_permits(), 8 << 20, "a spare took appends' room");
        let again = pool.take((1 << 20) + 1);
        assert_eq!((again.as_ptr(), again.len()), (at, 0), "the same memory, emptied");
        assert!(pool.spares().is_empty());
        drop(pool.object(laid(again)));
        drop(pool.object(laid(vec![0; 1 << 20])));
        assert_eq!(pool.spares(), [1 << 20, 2 << 20]);
        drop(pool.object(laid(vec![0; 2 << 20])));
        assert_eq!(pool.spares(), [2 << 20, 2 << 20], "a larger one took a smaller one's place");
        for size in [3 << 20, 5 << 20] {
            drop(pool.object(laid(vec![0; size])));
            assert_eq!(pool.spares(), [2 << 20, 2 << 20], "{size} kept past the spares' room");
        }
        assert!(pool.idle().is_empty());
        // Too large for them, a take leaves the spares for the next.
        assert_eq!(pool.take(5 << 20).capacity(), 6 << 20);
        assert_eq!(pool.spares().len(), 2);
        drop(way);

        let none = ObjectBuffers::new(space.clone(), RangeCache::new(0), 0);
        let _way = none.make_way();
        drop(none.object(laid(vec![0; 1 << 20])));
        assert_eq!((none.spares().len(), none.idle().len()), (0, 0));
    }

    /// The tail cache gives its room to a buffer coming back (what it evicts is dropped outside
    /// its lock, so an evicted object's buffer comes back too); an object the pool is gone for
    /// is freed.
    #[test]
    fn a_buffer_coming_back_takes_the_tail_caches_room() {
        let space = Arc::new(Semaphore::new(8 << 20));
        let tail = RangeCache::new(8 << 20).with_budget(space.clone());
        let pool = ObjectBuffers::new(space.clone(), tail.clone(), 0);
        let objects: Vec<Bytes> = (0..4).map(|_| pool.object(laid(vec![1; 2 << 20]))).collect();
        for (i, o) in objects.iter().enumerate() {
            tail.insert_object(&format!("wal/{i}"), o.clone());
        }
        assert_eq!((tail.len_bytes(), space.available_permits()), (8 << 20, 0));
        drop(objects);
        // A fifth evicts the first, whose buffer comes back and takes the second's room.
        let fifth = pool.object(laid(vec![1; 2 << 20]));
        tail.insert_object("wal/4", fifth.clone());
        assert_eq!(pool.idle(), [2 << 20, 2 << 20]);
        assert_eq!(tail.len_bytes(), 4 << 20);
        assert_eq!(space.available_permits(), 0, "the kept buffers hold their room");
        drop(pool);
        drop(fifth);
        tail.shrink(8 << 20);
        assert_eq!(space.available_permits(), 8 << 20, "all given back, no cycle");
    }
}
