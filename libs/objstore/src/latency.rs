//! An [`ObjectStore`] wrapper that delays each request as a remote object store would: a
//! first-byte delay drawn from a [`Spread`], plus the bytes moved at its rate (a PUT's before
//! it is stored, a GET's after the inner store answered). For benchmarks on one machine
//! (`--latency-profile`); the inner store does the work.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use config::latency::{Draws, Spread};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use parking_lot::Mutex;

/// Delays every request to `inner` by a draw of `spread`.
#[derive(Debug)]
pub struct DelayedStore {
    inner: Arc<dyn ObjectStore>,
    spread: Spread,
    draws: Arc<Mutex<Draws>>,
}

impl DelayedStore {
    pub fn new(inner: Arc<dyn ObjectStore>, spread: Spread, seed: u64) -> DelayedStore {
        DelayedStore { inner, spread, draws: Arc::new(Mutex::new(Draws::new(seed))) }
    }

    fn first_byte(&self) -> Duration {
        self.draws.lock().delay(&self.spread)
    }

    async fn wait(&self, bytes: u64) {
        tokio::time::sleep(self.first_byte() + self.spread.transfer(bytes)).await;
    }
}

impl fmt::Display for DelayedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DelayedStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for DelayedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.wait(payload.content_length() as u64).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.wait(0).await;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.wait(0).await;
        let got = self.inner.get_opts(location, options).await?;
        tokio::time::sleep(self.spread.transfer(got.range.end - got.range.start)).await;
        Ok(got)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.wait(0).await;
        let got = self.inner.get_ranges(location, ranges).await?;
        let bytes = got.iter().map(|b| b.len() as u64).sum();
        tokio::time::sleep(self.spread.transfer(bytes)).await;
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (inner, spread, draws) = (self.inner.clone(), self.spread, self.draws.clone());
        locations
            .and_then(move |path| {
                let (inner, delay) = (inner.clone(), draws.lock().delay(&spread));
                async move {
                    tokio::time::sleep(delay).await;
                    inner.delete(&path).await.map(|()| path)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let listed = self.inner.list(prefix);
        futures::stream::once(tokio::time::sleep(self.first_byte()))
            .flat_map(|()| futures::stream::empty())
            .chain(listed)
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.wait(0).await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.wait(0).await;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.wait(0).await;
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    /// On tokio's paused clock: a PUT of 10 MB to a store of fixed 20 ms first byte and
    /// 100 MB/s takes 120 ms, a GET of it 120 ms too, and the bytes are the inner store's.
    #[tokio::test(start_paused = true)]
    async fn requests_wait_their_first_byte_and_their_bytes() -> anyhow::Result<()> {
        let fixed = Duration::from_millis(20);
        let spread = Spread { p50: fixed, p99: fixed, bytes_per_s: 100_000_000 };
        let s = DelayedStore::new(Arc::new(InMemory::new()), spread, 1);
        let (path, data) = (Path::from("a"), Bytes::from(vec![7u8; 10_000_000]));
        let t0 = tokio::time::Instant::now();
        s.put(&path, data.clone().into()).await?;
        assert_eq!(t0.elapsed(), Duration::from_millis(120));
        let t0 = tokio::time::Instant::now();
        let got = s.get(&path).await?.bytes().await?;
        assert_eq!(t0.elapsed(), Duration::from_millis(120));
        assert_eq!(got, data);
        Ok(())
    }
}
