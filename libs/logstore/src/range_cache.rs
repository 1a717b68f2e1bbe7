//! A bounded cache of object byte ranges for readers, in which concurrent requests for one
//! range share one GET (single flight).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::OnceCell;

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
}

/// Byte ranges of objects, at most `capacity` bytes (oldest evicted first). Cheap to clone.
#[derive(Clone, Default)]
pub struct RangeCache {
    capacity: usize,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for RangeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeCache").field("capacity", &self.capacity).finish()
    }
}

impl RangeCache {
    /// A cache of `capacity` bytes; 0 keeps nothing but still coalesces concurrent GETs.
    pub fn new(capacity: usize) -> Self {
        RangeCache { capacity, inner: Default::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// (hits, misses) so far.
    pub fn counts(&self) -> (u64, u64) {
        let i = self.lock();
        (i.hits, i.misses)
    }

    /// Puts a range's bytes in (a writer's write-through of what it just committed), unless
    /// they are there or larger than the whole cache.
    pub fn insert(&self, object: &str, start: u64, end: u64, bytes: Bytes) {
        let key = (object.to_owned(), start, end);
        let mut i = self.lock();
        self.put(&mut i, key, bytes);
    }

    fn put(&self, i: &mut Inner, key: Key, b: Bytes) {
        if b.len() > self.capacity || i.cached.contains_key(&key) {
            return;
        }
        i.bytes += b.len();
        i.cached.insert(key.clone(), b);
        i.order.push_back(key);
        while i.bytes > self.capacity {
            let Some(old) = i.order.pop_front() else { break };
            if let Some(v) = i.cached.remove(&old) {
                i.bytes -= v.len();
            }
        }
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
            let mut i = self.lock();
            if let Some(b) = i.cached.get(&key) {
                let b = b.clone();
                i.hits += 1;
                return Ok(b);
            }
            i.misses += 1;
            i.inflight.entry(key.clone()).or_default().clone()
        };
        let r = cell.get_or_try_init(fetch).await.cloned();
        let mut i = self.lock();
        if let Some(c) = i.inflight.get(&key)
            && Arc::ptr_eq(c, &cell)
        {
            i.inflight.remove(&key);
        }
        if let Ok(b) = &r {
            self.put(&mut i, key, b.clone());
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogError;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        let i = cache.lock();
        assert!(i.bytes <= 100 && i.cached.len() == 2, "{} bytes in {}", i.bytes, i.cached.len());
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
