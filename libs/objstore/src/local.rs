//! The local directory store: `object_store`'s [`LocalFileSystem`] for everything but plain
//! reads, which it runs on the blocking pool twice per GET (open, then read) into a zeroed
//! buffer. Here a plain GET (a range, no conditions) opens and reads the file where it is
//! asked, into a buffer that is not zeroed first: written once and fsynced, an object is
//! read from the page cache, and the two hand-offs to the pool and back cost a consume more
//! CPU than the read itself (docs/performance.md, "Where a consume's CPU goes"). A read too
//! large to do in place still goes to the pool, once.
//!
//! Read buffers are used again ([`Buffers`]): a buffer freed goes back to the system at once
//! (the allocator is told to), and a fresh one costs a page fault and a zeroed page per 4 KiB,
//! a quarter of a consume's CPU.

use std::collections::VecDeque;
use std::fmt;
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, RenameOptions, Result,
};
use parking_lot::Mutex;

/// The largest read done where it is asked for rather than on the blocking pool: from the page
/// cache about a millisecond at most (a WAL object's run is far smaller).
const IN_PLACE_MAX: u64 = 8 << 20;

/// Reads smaller than this are not pooled (the allocator's small pages serve them).
const POOLED_MIN: usize = 64 << 10;

/// Bytes of free buffers kept at most: memory beside the caches' budgets, and what reading
/// back at a few hundred MB/s needs for most reads to find one (docs/performance.md).
const POOL_IDLE_MAX: usize = 16 << 20;

/// The name errors of this store carry.
const STORE: &str = "LocalStore";

/// A local directory of objects (see the module's comment).
#[derive(Debug)]
pub struct LocalStore {
    inner: LocalFileSystem,
    buffers: Arc<Buffers>,
}

impl LocalStore {
    pub fn new(inner: LocalFileSystem) -> LocalStore {
        LocalStore { inner, buffers: Arc::new(Buffers::new(POOL_IDLE_MAX)) }
    }

    /// Reads that took a free buffer, and reads that allocated one (pooled sizes only).
    pub fn buffer_counts(&self) -> (u64, u64) {
        let f = self.buffers.free.lock();
        (f.reused, f.allocated)
    }

    /// [`read`] in place when it is small, else on the blocking pool.
    async fn read_where_cheap(&self, location: &Path, ranges: Ranges) -> Result<Got> {
        let path = self.inner.path_to_filesystem(location)?;
        if ranges.at_most() <= IN_PLACE_MAX {
            return read(&path, location, ranges, &self.buffers);
        }
        let (location, buffers) = (location.clone(), self.buffers.clone());
        tokio::task::spawn_blocking(move || read(&path, &location, ranges, &buffers))
            .await
            .map_err(generic)?
    }
}

/// An object's metadata and the bytes of each range read of it.
type Got = (ObjectMeta, Vec<(Range<u64>, Bytes)>);

/// The bytes `ranges` name of the object at `location` (the file `path`), each its own buffer.
fn read(
    path: &std::path::Path,
    location: &Path,
    ranges: Ranges,
    buffers: &Arc<Buffers>,
) -> Result<Got> {
    let not_found = |source: std::io::Error| object_store::Error::NotFound {
        path: path.display().to_string(),
        source: source.into(),
    };
    let mut file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => not_found(e),
        _ => generic(e),
    })?;
    let metadata = file.metadata().map_err(generic)?;
    if metadata.is_dir() {
        return Err(not_found(std::io::Error::other("a directory, not an object")));
    }
    let meta = object_meta(location, &metadata);
    let ranges = match ranges {
        Ranges::One(r) => {
            let whole = 0..meta.size;
            Vec::from([r.map_or(Ok(whole), |r| r.as_range(meta.size)).map_err(generic)?])
        }
        Ranges::Many(rs) => rs,
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let bytes = read_range(&mut file, &r, meta.size, buffers)?;
        out.push((r, bytes));
    }
    Ok((meta, out))
}

/// What a read asks for.
enum Ranges {
    /// A range, or the whole object.
    One(Option<GetRange>),
    Many(Vec<Range<u64>>),
}

impl Ranges {
    /// The most bytes the read can return (unknown: `u64::MAX`).
    fn at_most(&self) -> u64 {
        match self {
            Ranges::One(Some(GetRange::Bounded(r))) => r.end.saturating_sub(r.start),
            Ranges::One(Some(GetRange::Suffix(n))) => *n,
            Ranges::One(Some(GetRange::Offset(_)) | None) => u64::MAX,
            Ranges::Many(rs) => rs.iter().map(|r| r.end.saturating_sub(r.start)).sum(),
        }
    }
}

/// Reads `range` of `file` (of `size` bytes) into a buffer of `buffers`, not zeroed first
/// (`read_to_end` reads into the spare capacity). Fewer bytes than asked is an error.
fn read_range(
    file: &mut File,
    range: &Range<u64>,
    size: u64,
    buffers: &Arc<Buffers>,
) -> Result<Bytes> {
    if range.start > range.end || range.end > size {
        return Err(generic(format!("range {range:?} of an object of {size} bytes")));
    }
    let len = range.end - range.start;
    let mut buf = buffers.take(usize::try_from(len).map_err(generic)?);
    file.seek(SeekFrom::Start(range.start)).map_err(generic)?;
    Read::take(&mut *file, len).read_to_end(&mut buf).map_err(generic)?;
    if buf.len() as u64 != len {
        return Err(generic(format!("read {} of {len} bytes at {}", buf.len(), range.start)));
    }
    Ok(buffers.bytes(buf))
}

/// Free read buffers, taken by the next reads that fit them. At most `idle_max` bytes of them
/// are kept; a buffer given back beyond that is freed.
#[derive(Debug)]
struct Buffers {
    free: Mutex<Free>,
    idle_max: usize,
}

#[derive(Debug, Default)]
struct Free {
    /// Oldest first.
    buffers: VecDeque<Vec<u8>>,
    /// Their capacities' sum.
    bytes: usize,
    reused: u64,
    allocated: u64,
}

impl Buffers {
    fn new(idle_max: usize) -> Buffers {
        Buffers { free: Mutex::default(), idle_max }
    }

    /// An empty buffer of [`size_class`]`(len)` bytes' capacity: the most recently freed of
    /// that size, else a new one.
    fn take(&self, len: usize) -> Vec<u8> {
        if len < POOLED_MIN {
            return Vec::with_capacity(len);
        }
        let class = size_class(len);
        let mut f = self.free.lock();
        match f.buffers.iter().rposition(|b| b.capacity() == class) {
            Some(i) => {
                let b = f.buffers.remove(i).unwrap_or_default();
                f.bytes -= b.capacity();
                f.reused += 1;
                b
            }
            None => {
                f.allocated += 1;
                drop(f);
                Vec::with_capacity(class)
            }
        }
    }

    /// `buf` as bytes that give it back when the last reference to them is dropped.
    fn bytes(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        if buf.capacity() < POOLED_MIN {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Pooled { buf, home: self.clone() })
    }

    /// Keeps `buf` for a read of its size; the oldest kept are freed past `idle_max`.
    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() > self.idle_max {
            return;
        }
        buf.clear();
        let mut f = self.free.lock();
        f.bytes += buf.capacity();
        f.buffers.push_back(buf);
        while f.bytes > self.idle_max
            && let Some(old) = f.buffers.pop_front()
        {
            f.bytes -= old.capacity();
        }
    }
}

/// The capacity a read buffer of `len` bytes is given: `len` rounded up to an eighth of the
/// power of two below it (so at most an eighth more than `len`, as the allocator's own size
/// classes), which lets a freed buffer serve any read of its class.
fn size_class(len: usize) -> usize {
    let step = (1usize << len.max(8).ilog2()) / 8;
    len.next_multiple_of(step)
}

/// A read buffer lent out as [`Bytes`].
struct Pooled {
    buf: Vec<u8>,
    home: Arc<Buffers>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.buf));
    }
}

/// An object's metadata as [`LocalFileSystem`] gives it (its ETag of inode, mtime and size,
/// so a conditional request the inner store answers agrees with it).
fn object_meta(location: &Path, m: &Metadata) -> ObjectMeta {
    use std::os::unix::fs::MetadataExt;
    let modified = m.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH);
    let mtime =
        modified.duration_since(std::time::SystemTime::UNIX_EPOCH).unwrap_or_default().as_micros();
    ObjectMeta {
        location: location.clone(),
        last_modified: modified.into(),
        size: m.len(),
        e_tag: Some(format!("\"{:x}-{mtime:x}-{:x}\"", m.ino(), m.len())),
        version: None,
    }
}

fn generic(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> object_store::Error {
    object_store::Error::Generic { store: STORE, source: source.into() }
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let plain = options.if_match.is_none()
            && options.if_none_match.is_none()
            && options.if_modified_since.is_none()
            && options.if_unmodified_since.is_none()
            && options.version.is_none()
            && !options.head;
        if !plain {
            return self.inner.get_opts(location, options).await;
        }
        let (meta, mut read) = self.read_where_cheap(location, Ranges::One(options.range)).await?;
        let (range, bytes) = read.pop().ok_or_else(|| generic("no range read"))?;
        Ok(GetResult {
            payload: GetResultPayload::Stream(Box::pin(futures::stream::once(async { Ok(bytes) }))),
            meta,
            range,
            attributes: Attributes::default(),
            extensions: Default::default(),
        })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let (_, read) = self.read_where_cheap(location, Ranges::Many(ranges.to_vec())).await?;
        Ok(read.into_iter().map(|(_, b)| b).collect())
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use std::time::Duration;

    fn pattern(len: usize) -> Bytes {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect::<Vec<u8>>().into()
    }

    fn store(dir: &tempfile::TempDir) -> anyhow::Result<LocalStore> {
        Ok(LocalStore::new(LocalFileSystem::new_with_prefix(dir.path())?))
    }

    /// A GET reads where it is asked: with the one thread of the blocking pool busy (fsyncing
    /// a PUT, say), it still answers (`LocalFileSystem` alone waits for the pool twice).
    #[test]
    fn a_get_does_not_wait_for_the_blocking_pool() -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .enable_all()
            .build()?;
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        let (p, data) = (Path::from("a/b"), pattern(100_000));
        rt.block_on(store.put(&p, data.clone().into()))?;
        let (release, held) = std::sync::mpsc::channel::<()>();
        let busy = rt.spawn_blocking(move || held.recv());
        let got = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), store.get_range(&p, 10..90_000)).await
        });
        release.send(())?;
        rt.block_on(busy)??;
        assert_eq!(got??, data.slice(10..90_000));
        Ok(())
    }

    /// A buffer freed serves the next read of its size class, which sees only its own bytes;
    /// one still referenced does not; small reads are not pooled.
    #[tokio::test]
    async fn read_buffers_are_used_again_and_show_only_their_bytes() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        let (p, data) = (Path::from("obj"), pattern(3 << 20));
        store.put(&p, data.clone().into()).await?;
        let first = store.get_range(&p, 0..1_000_000).await?;
        assert_eq!(first, data.slice(0..1_000_000));
        drop(first);
        // 990,000 bytes: the same class (1 MiB) as 1,000,000; shorter, so stale bytes past its
        // end would show if the buffer were not cut to what was read.
        let second = store.get_range(&p, 2_000_000..2_990_000).await?;
        assert_eq!(second, data.slice(2_000_000..2_990_000));
        assert_eq!(store.buffer_counts(), (1, 1));
        let third = store.get_range(&p, 5..1_000_005).await?;
        assert_eq!(third, data.slice(5..1_000_005));
        assert_eq!(store.buffer_counts(), (1, 2), "the second still holds its buffer");
        let small = store.get_range(&p, 0..1000).await?;
        assert_eq!((small, store.buffer_counts()), (data.slice(0..1000), (1, 2)));
        Ok(())
    }

    /// Whole objects, large reads (on the blocking pool), and conditional reads (the inner
    /// store's) answer as `LocalFileSystem` does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn whole_large_and_conditional_reads() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        let (p, data) = (Path::from("big"), pattern(IN_PLACE_MAX as usize + 12_345));
        store.put(&p, data.clone().into()).await?;
        let whole = store.get(&p).await?;
        assert_eq!(
            (whole.meta.size, whole.range.clone()),
            (data.len() as u64, 0..data.len() as u64)
        );
        let etag = whole.meta.e_tag.clone();
        assert_eq!(whole.bytes().await?, data);
        assert_eq!(store.get_range(&p, 1..data.len() as u64).await?, data.slice(1..));
        assert_eq!(store.inner.head(&p).await?.e_tag, etag, "the ETag is the inner store's");
        let unchanged = GetOptions { if_none_match: etag, ..Default::default() };
        let answer = store.get_opts(&p, unchanged).await;
        assert!(matches!(answer, Err(object_store::Error::NotModified { .. })), "{answer:?}");
        let missing = store.get_range(&Path::from("none"), 0..1).await;
        assert!(matches!(missing, Err(object_store::Error::NotFound { .. })), "{missing:?}");
        Ok(())
    }

    #[test]
    fn size_classes_waste_at_most_an_eighth() {
        for len in (POOLED_MIN..64 << 20).step_by(9_973).chain([1 << 20, (1 << 20) + 1]) {
            let class = size_class(len);
            assert!(class >= len && class - len <= len / 8, "{len}: {class}");
            assert_eq!(size_class(class), class, "{len}");
        }
    }
}
