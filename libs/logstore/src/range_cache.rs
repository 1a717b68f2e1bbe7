//! A bounded cache of object byte ranges for readers, in which concurrent requests for one
//! range share one GET (single flight).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

type Key = (String, u64, u64);

#[derive(Default)]
struct Inner {
    cached: HashMap<Key, Bytes>,
    /// Insertion order, for eviction (oldest first).
    order: VecDeque<Key>,
    bytes: usize,
    inflight: HashMap<Key, Arc<OnceCell<Bytes>>>,
    hits: u64,
    misses: u64,
    /// With a budget: one permit per cached byte.
    held: Option<OwnedSemaphorePermit>,
    /// Objects cached whole (keyed `(object, 0, len)`), by name: any range of them is a hit.
    whole: HashMap<String, u64>,
    /// Entries whose contents were checked (checksums) since they were cached, or that never
    /// left this process (a writer's own objects): a read of them need not check again.
    checked: HashSet<Key>,
}

impl Inner {
    /// The range's bytes and the key that holds them: the range itself cached, or a whole
    /// object put in that covers it.
    fn covering(&self, object: &str, start: u64, end: u64) -> Option<(Key, Bytes)> {
        let key = (object.to_owned(), start, end);
        if let Some(b) = self.cached.get(&key) {
            return Some((key, b.clone()));
        }
        let &len = self.whole.get(object)?;
        let whole = (object.to_owned(), 0, len);
        let b = self.cached.get(&whole).filter(|_| start <= end && end <= len)?;
        let b = b.slice(start as usize..end as usize);
        Some((whole, b))
    }

    /// Takes the oldest entry out (its permits go back to the budget); its bytes, for the
    /// caller to drop once the lock is released: dropping the last of a writer's object gives
    /// its buffer back to the writer, which may shrink this cache.
    fn evict_oldest(&mut self) -> Option<Bytes> {
        let old = self.order.pop_front()?;
        if old.1 == 0 && self.whole.get(&old.0) == Some(&old.2) {
            self.whole.remove(&old.0);
        }
        self.checked.remove(&old);
        let gone = self.cached.remove(&old).unwrap_or_default();
        let len = gone.len();
        self.bytes -= len;
        if len > 0
            && let Some(h) = self.held.as_mut()
        {
            drop(h.split(len));
        }
        Some(gone)
    }
}

/// Byte ranges of objects, at most `capacity` bytes (oldest evicted first). Cheap to clone.
#[derive(Clone, Default)]
pub struct RangeCache {
    capacity: usize,
    inner: Arc<Mutex<Inner>>,
    /// Memory shared with others (a writer's append buffer): a byte is cached only with a
    /// permit taken from it, and [`RangeCache::shrink`] gives permits back.
    budget: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for RangeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeCache").field("capacity", &self.capacity).finish()
    }
}

impl RangeCache {
    /// A cache of `capacity` bytes; 0 keeps nothing but still coalesces concurrent GETs.
    pub fn new(capacity: usize) -> Self {
        RangeCache { capacity, inner: Default::default(), budget: None }
    }

    /// Caches only within `budget`'s free permits, one per byte: what others hold or wait for
    /// is never taken, so the cache uses room they do not need.
    pub fn with_budget(mut self, budget: Arc<Semaphore>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Drops the oldest entries until `bytes` were given back (or the cache is empty).
    pub fn shrink(&self, bytes: usize) {
        let mut gone = Vec::new();
        let mut i = self.inner.lock();
        let mut freed = 0;
        while freed < bytes
            && let Some(b) = i.evict_oldest()
        {
            freed += b.len();
            gone.push(b);
        }
    }

    /// Bytes cached now.
    pub fn len_bytes(&self) -> usize {
        self.inner.lock().bytes
    }

    /// The bytes it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether `object`'s bytes `start..end` are cached, or being fetched.
    pub fn contains(&self, object: &str, start: u64, end: u64) -> bool {
        let i = self.inner.lock();
        i.covering(object, start, end).is_some()
            || i.inflight.contains_key(&(object.to_owned(), start, end))
    }

    /// (hits, misses) so far.
    pub fn counts(&self) -> (u64, u64) {
        let i = self.inner.lock();
        (i.hits, i.misses)
    }

    /// Puts a whole object in (a writer's write-through of a WAL object it just committed
    /// from): any range of it is then a hit. Whole, because a range sliced out of it would keep
    /// all of it in memory while counting only its own bytes (a hundred logs' runs of one 8
    /// MiB object, a few cached: the whole 8 MiB held for a few hundred KiB counted). Its
    /// bytes are the ones its checksums were computed over, in this process's memory: checked.
    pub fn insert_object(&self, object: &str, bytes: Bytes) {
        let len = bytes.len() as u64;
        // Declared before the guard, so dropped after it (as `bytes` is).
        let mut gone = Vec::new();
        let mut i = self.inner.lock();
        if i.whole.contains_key(object) {
            return;
        }
        let key = (object.to_owned(), 0, len);
        if self.put(&mut i, key.clone(), bytes, &mut gone) {
            i.whole.insert(object.to_owned(), len);
            i.checked.insert(key);
        }
    }

    /// Whether `bytes`, read of the range, are what the cache holds for it (as it is, or in a
    /// whole object put in), and if so whether they were checked ([`Self::mark_checked`];
    /// whole objects put in always are).
    pub fn checked(&self, object: &str, start: u64, end: u64, bytes: &Bytes) -> Option<bool> {
        let i = self.inner.lock();
        let (key, b) = i.covering(object, start, end)?;
        same(&b, bytes).then(|| i.checked.contains(&key))
    }

    /// Notes that `bytes`, read of the range, were checked, if they are what the cache holds
    /// for it: a read of them from the cache need not check them again until it is evicted.
    pub fn mark_checked(&self, object: &str, start: u64, end: u64, bytes: &Bytes) {
        let mut i = self.inner.lock();
        let key = (object.to_owned(), start, end);
        if i.cached.get(&key).is_some_and(|b| same(b, bytes)) {
            i.checked.insert(key);
        }
    }

    /// Caches `b` under `key` if it fits (capacity, and the budget's free room); whether it did.
    /// What it evicts, and `b` if not cached, go to `gone`, to be dropped once the lock is
    /// released ([`Inner::evict_oldest`]).
    fn put(&self, i: &mut Inner, key: Key, b: Bytes, gone: &mut Vec<Bytes>) -> bool {
        if b.len() > self.capacity || i.cached.contains_key(&key) {
            gone.push(b);
            return false;
        }
        while i.bytes + b.len() > self.capacity
            && let Some(old) = i.evict_oldest()
        {
            gone.push(old);
        }
        if let Some(budget) = &self.budget {
            // Newer bytes take the room older cached ones hold; past that (appends hold the
            // rest or wait for it), not cached, and nothing evicted for it.
            let n = u32::try_from(b.len()).ok();
            let Some(n) = n.filter(|_| budget.available_permits() + i.bytes >= b.len()) else {
                gone.push(b);
                return false;
            };
            let p = loop {
                match budget.clone().try_acquire_many_owned(n) {
                    Ok(p) => break p,
                    Err(_) => match i.evict_oldest() {
                        Some(old) => gone.push(old),
                        None => {
                            gone.push(b);
                            return false;
                        }
                    },
                }
            };
            match i.held.as_mut() {
                Some(h) => h.merge(p),
                None => i.held = Some(p),
            }
        }
        i.bytes += b.len();
        i.cached.insert(key.clone(), b);
        i.order.push_back(key);
        true
    }

    /// The range's bytes: cached, fetched by a request already in flight, or fetched now.
    pub async fn get_or_fetch<E, F, Fut>(
        &self,
        object: &str,
        start: u64,
        end: u64,
        fetch: F,
    ) -> Result<Bytes, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Bytes, E>>,
    {
        let key = (object.to_owned(), start, end);
        let cell = {
            let mut i = self.inner.lock();
            if let Some((_, b)) = i.covering(object, start, end) {
                i.hits += 1;
                return Ok(b);
            }
            i.misses += 1;
            i.inflight.entry(key.clone()).or_default().clone()
        };
        let r = cell.get_or_try_init(fetch).await.cloned();
        let mut gone = Vec::new();
        let mut i = self.inner.lock();
        if let Some(c) = i.inflight.get(&key)
            && Arc::ptr_eq(c, &cell)
        {
            i.inflight.remove(&key);
        }
        if let Ok(b) = &r {
            self.put(&mut i, key, b.clone(), &mut gone);
        }
        r
    }
}

/// The same bytes in memory (not merely equal ones).
fn same(a: &Bytes, b: &Bytes) -> bool {
    a.as_ptr() == b.as_ptr() && a.len() == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budgeted_cache_takes_only_free_room_and_gives_it_back() {
        let budget = Arc::new(Semaphore::new(100));
        let cache = RangeCache::new(1000).with_budget(budget.clone());
        cache.insert_object("a", Bytes::from(vec![0; 60]));
        assert_eq!((cache.len_bytes(), budget.available_permits()), (60, 40));
        // 50 bytes do not fit in the 40 left: they take the older entry's room.
        cache.insert_object("b", Bytes::from(vec![0; 50]));
        assert_eq!((cache.len_bytes(), budget.available_permits()), (50, 50));
        // With 40 held elsewhere, 70 do not fit even in the cache's room: not cached, and
        // nothing evicted for them.
        let elsewhere = budget.clone().try_acquire_many_owned(40).ok();
        cache.insert_object("x", Bytes::from(vec![0; 70]));
        assert_eq!((cache.len_bytes(), budget.available_permits()), (50, 10));
        drop(elsewhere);
        cache.insert_object("c", Bytes::from(vec![0; 30]));
        assert_eq!((cache.len_bytes(), budget.available_permits()), (80, 20));
        // Shrinking drops the oldest first and returns its permits.
        cache.shrink(1);
        assert_eq!((cache.len_bytes(), budget.available_permits()), (30, 70));
        // Evicted for capacity, an entry's permits go back too.
        let small = RangeCache::new(40).with_budget(budget.clone());
        small.insert_object("d", Bytes::from(vec![0; 30]));
        small.insert_object("e", Bytes::from(vec![0; 30]));
        assert_eq!((small.len_bytes(), budget.available_permits()), (30, 40));
        drop(small);
        drop(cache);
        assert_eq!(budget.available_permits(), 100);
    }
    use crate::LogError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_whole_object_serves_its_ranges_and_counts_every_byte_it_holds() {
        let budget = Arc::new(Semaphore::new(1000));
        let cache = RangeCache::new(1000).with_budget(budget.clone());
        let object: Bytes = (0..=255u8).cycle().take(600).collect();
        cache.insert_object("w", object.clone());
        // All of it is held, so all of it is counted (not just the ranges read back).
        assert_eq!((cache.len_bytes(), budget.available_permits()), (600, 400));
        let fetched = AtomicUsize::new(0);
        for (start, end) in [(0, 600), (10, 20), (599, 600), (300, 300)] {
            let got = cache
                .get_or_fetch::<LogError, _, _>("w", start, end, || async {
                    fetched.fetch_add(1, Ordering::SeqCst);
                    Ok(Bytes::new())
                })
                .await;
            assert_eq!(got.ok(), Some(object.slice(start as usize..end as usize)));
        }
        assert_eq!(fetched.load(Ordering::SeqCst), 0, "every range inside it is a hit");
        // Beyond its end, and another object: fetched.
        let beyond = cache.get_or_fetch::<LogError, _, _>("w", 590, 610, || async {
            fetched.fetch_add(1, Ordering::SeqCst);
            Ok(Bytes::from(vec![1; 20]))
        });
        assert_eq!(beyond.await.map(|b| b.len()).ok(), Some(20));
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        // Evicted (the oldest), its ranges are misses again and its room goes back.
        cache.shrink(600);
        assert_eq!((cache.len_bytes(), budget.available_permits()), (20, 980));
        let again = cache.get_or_fetch::<LogError, _, _>("w", 10, 20, || async {
            fetched.fetch_add(1, Ordering::SeqCst);
            Ok(Bytes::from(vec![2; 10]))
        });
        assert_eq!(again.await.ok(), Some(Bytes::from(vec![2; 10])));
        assert_eq!(fetched.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_fetch_and_the_cache_stays_bounded() {
        let cache = RangeCache::new(100);
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cache, fetches) = (cache.clone(), fetches.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_fetch::<LogError, _, _>("o", 0, 40, || async {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        Ok(Bytes::from(vec![7u8; 40]))
                    })
                    .await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.ok().and_then(Result::ok).map(|b| b.len()), Some(40));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "one GET for eight requests");
        for start in 1..5u64 {
            let r = cache.get_or_fetch::<LogError, _, _>(
                "o",
                start * 100,
                start * 100 + 40,
                || async { Ok(Bytes::from(vec![1u8; 40])) },
            );
            assert!(r.await.is_ok());
        }
        let i = cache.inner.lock();
        assert!(i.bytes <= 100 && i.cached.len() == 2, "{} bytes in {}", i.bytes, i.cached.len());
    }

    /// A range is checked once while cached, and only the bytes cached: a whole object put in
    /// is checked, a fetched range is not until marked, equal bytes elsewhere in memory are not
    /// marked, and an evicted range is checked again.
    #[tokio::test]
    async fn ranges_are_checked_once_while_cached() {
        let cache = RangeCache::new(1000);
        let object: Bytes = (0..=255u8).cycle().take(300).collect();
        cache.insert_object("w", object.clone());
        assert_eq!(cache.checked("w", 10, 20, &object.slice(10..20)), Some(true));
        let copy = Bytes::copy_from_slice(&object[10..20]);
        assert_eq!(cache.checked("w", 10, 20, &copy), None, "not the cached bytes");
        assert_eq!(cache.checked("w", 10, 400, &object), None, "past its end");
        let fetched = Bytes::from(vec![5u8; 40]);
        let f = fetched.clone();
        let got = cache.get_or_fetch::<LogError, _, _>("r", 0, 40, || async { Ok(f) }).await;
        let got = got.unwrap_or_default();
        assert_eq!(cache.checked("r", 0, 40, &got), Some(false));
        cache.mark_checked("r", 0, 40, &Bytes::copy_from_slice(&got));
        assert_eq!(cache.checked("r", 0, 40, &got), Some(false), "marked through other bytes");
        cache.mark_checked("r", 0, 40, &got);
        assert_eq!(cache.checked("r", 0, 40, &got), Some(true));
        cache.shrink(1000);
        assert_eq!(cache.checked("r", 0, 40, &got), None);
        let again = cache
            .get_or_fetch::<LogError, _, _>("r", 0, 40, || async { Ok(fetched.clone()) })
            .await
            .unwrap_or_default();
        assert_eq!(cache.checked("r", 0, 40, &again), Some(false), "evicted, checked again");
    }

    #[tokio::test]
    async fn a_failed_fetch_is_not_cached() {
        let cache = RangeCache::new(1000);
        let r = cache.get_or_fetch("o", 0, 1, || async { Err(LogError::Internal("x".into())) });
        assert!(r.await.is_err());
        let r = cache
            .get_or_fetch::<LogError, _, _>("o", 0, 1, || async { Ok(Bytes::from_static(b"y")) });
        assert_eq!(r.await.ok(), Some(Bytes::from_static(b"y")));
    }
}
