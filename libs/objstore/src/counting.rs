//! An [`ObjectStore`] adapter that counts requests and bytes: what the bill is made of (S3
//! charges per request). Used by benchmarks now and metrics later.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// Request and byte counts so far.
#[derive(Debug, Default)]
pub struct Counts {
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub gets: AtomicU64,
    pub deletes: AtomicU64,
    pub lists: AtomicU64,
}

impl Counts {
    pub fn get(&self, c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Counts every request that reaches the inner store.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<Counts>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Arc<CountingStore>, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        (Arc::new(CountingStore { inner, counts: counts.clone() }), counts)
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        add(&self.counts.puts, 1);
        add(&self.counts.put_bytes, payload.content_length() as u64);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        add(&self.counts.puts, 1);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        add(&self.counts.gets, 1);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        add(&self.counts.gets, ranges.len() as u64);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counts = self.counts.clone();
        self.inner
            .delete_stream(locations)
            .map(move |r| {
                add(&counts.deletes, 1);
                r
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        add(&self.counts.lists, 1);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        add(&self.counts.lists, 1);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        add(&self.counts.puts, 1);
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        add(&self.counts.puts, 1);
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn counts_puts_bytes_and_gets() -> anyhow::Result<()> {
        let (s, c) = CountingStore::new(Arc::new(InMemory::new()));
        s.put(&Path::from("a"), Bytes::from_static(b"12345").into()).await?;
        s.put(&Path::from("b"), Bytes::from_static(b"678").into()).await?;
        s.get(&Path::from("a")).await?;
        assert_eq!((c.get(&c.puts), c.get(&c.put_bytes), c.get(&c.gets)), (2, 8, 1));
        Ok(())
    }
}
