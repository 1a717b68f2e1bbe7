//! The local directory store: `object_store`'s [`LocalFileSystem`] for everything but plain
//! puts and plain reads.
//!
//! A plain put (create or overwrite, no attributes) is written with direct I/O: from where its
//! bytes lie when they are aligned, else from an aligned buffer, to a staging file (made ahead:
//! `local/ready.rs`), fsynced, then linked or renamed into place and the directory fsynced, as
//! `LocalFileSystem` publishes its own. The page cache never holds the object: the writer
//! keeps what tailing readers want in its own cache, and copying every byte into the page
//! cache cost a produce more CPU than anything else (docs/performance.md, "Writes past the
//! page cache"). Reads of 64 KiB or more are direct too (from an aligned buffer, the range a
//! slice of it); shorter ones (footers, indexes) go through the page cache. A file system that
//! refuses direct I/O gets buffered puts and reads.
//!
//! A plain GET (a range, no conditions) opens and reads the file where it is asked, not on the
//! blocking pool twice (open, then read) as `LocalFileSystem` does, into a buffer that is not
//! zeroed first: the two hand-offs to the pool and back cost a consume more CPU than the read
//! itself (docs/performance.md, "Where a consume's CPU goes"). A read too large to do in place
//! still goes to the pool, once.
//!
//! Buffers are used again (`Buffers`): a buffer freed goes back to the system at once (the
//! allocator is told to), and a fresh one costs a page fault and a zeroed page per 4 KiB, a
//! quarter of a consume's CPU.

mod ready;

use std::collections::VecDeque;
use std::fmt;
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
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
    /// Whether the directory's file system takes direct I/O (until a file open says not).
    direct: Arc<AtomicBool>,
    /// Staging files made ahead of direct puts.
    ready: Arc<ready::Ready>,
}

impl LocalStore {
    /// `inner` serves what this store does not do itself; what it writes itself is fsynced,
    /// with its directory, before the put returns.
    pub fn new(inner: LocalFileSystem) -> LocalStore {
        LocalStore {
            inner,
            buffers: Arc::new(Buffers::new(POOL_IDLE_MAX)),
            direct: Arc::new(AtomicBool::new(true)),
            ready: Arc::default(),
        }
    }

    /// Reads and copying writes that took a free buffer, and those that allocated one (pooled
    /// sizes only).
    pub fn buffer_counts(&self) -> (u64, u64) {
        let f = self.buffers.free.lock();
        (f.reused, f.allocated)
    }

    /// [`read`] in place when it is small, else on the blocking pool.
    async fn read_where_cheap(&self, location: &Path, ranges: Ranges) -> Result<Got> {
        let path = self.inner.path_to_filesystem(location)?;
        let direct = self.direct.load(Ordering::Relaxed);
        // A direct read waits for the disk: on the blocking pool, so the runtime's threads go
        // on (and a fetch's partitions are read side by side).
        let disk = direct && ranges.longest() >= DIRECT_MIN;
        if !disk && ranges.at_most() <= IN_PLACE_MAX {
            return read(&path, location, ranges, &self.buffers, direct);
        }
        let (location, buffers) = (location.clone(), self.buffers.clone());
        tokio::task::spawn_blocking(move || read(&path, &location, ranges, &buffers, direct))
            .await
            .map_err(generic)?
    }

    /// A plain put (no attributes, create or overwrite) written with direct I/O: `None` when
    /// this store cannot (the file system refuses direct I/O, or the object's directory does
    /// not exist yet) and the inner store is to do it.
    async fn put_direct(
        &self,
        location: &Path,
        payload: PutPayload,
        mode: &PutMode,
    ) -> Result<Option<PutResult>> {
        let create = match mode {
            PutMode::Create => true,
            PutMode::Overwrite => false,
            PutMode::Update(_) => return Ok(None),
        };
        if !self.direct.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let path = self.inner.path_to_filesystem(location)?;
        let (location, buffers, direct, ready) =
            (location.clone(), self.buffers.clone(), self.direct.clone(), self.ready.clone());
        tokio::task::spawn_blocking(move || {
            write_direct(&path, &location, &payload, create, &buffers, &direct, &ready)
        })
        .await
        .map_err(generic)?
    }
}

/// The alignment direct I/O asks of file offsets, lengths and memory: a page, which covers
/// every block size a Linux file system uses.
const ALIGN: usize = 4096;

/// Reads at least this long bypass the page cache (direct I/O), smaller ones go through it.
const DIRECT_MIN: u64 = POOLED_MIN as u64;

#[cfg(target_os = "linux")]
const O_DIRECT: i32 = libc::O_DIRECT;
#[cfg(not(target_os = "linux"))]
const O_DIRECT: i32 = 0;

/// Opens `path` for direct I/O with `options`; `None` (and `direct` cleared) when its file
/// system does not take it.
fn open_direct(
    options: &mut std::fs::OpenOptions,
    path: &std::path::Path,
    direct: &AtomicBool,
) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    if O_DIRECT == 0 {
        direct.store(false, Ordering::Relaxed);
        return Ok(None);
    }
    match options.custom_flags(O_DIRECT).open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            direct.store(false, Ordering::Relaxed);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `buf` (of at least `len` + [`ALIGN`] bytes' capacity) cut or grown to `len` bytes past its
/// first aligned byte: that byte's offset. Only bytes never written before are zeroed (a
/// buffer used again keeps its length: see [`Buffers::take`]).
fn aligned(buf: &mut Vec<u8>, len: usize) -> usize {
    let at = buf.as_ptr().align_offset(ALIGN);
    buf.resize(at + len, 0);
    at
}

/// Writes `payload` to a staging file next to `path` (one `ready` made ahead, else a new one)
/// with direct I/O (from where its bytes lie when they are aligned, else through an aligned
/// buffer: see [`write_chunks`]), fsyncs it, publishes it at `path` (a hard link if `create`,
/// which fails if `path` exists, else a rename) and fsyncs the directory: the page cache never
/// holds the object's bytes. `None`: the inner store is to write it (see
/// [`LocalStore::put_direct`]).
fn write_direct(
    path: &std::path::Path,
    location: &Path,
    payload: &PutPayload,
    create: bool,
    buffers: &Arc<Buffers>,
    direct: &Arc<AtomicBool>,
    ready: &Arc<ready::Ready>,
) -> Result<Option<PutResult>> {
    let made = path.parent().and_then(|dir| ready.take_and_make(dir, direct));
    let (mut file, staging) = match made {
        Some(f) => f,
        None => match open_staging(path, direct).map_err(generic)? {
            Some(f) => f,
            None => return Ok(None),
        },
    };
    let written = (|| {
        let len = payload.content_length();
        write_chunks(&mut file, payload, buffers)?;
        if !len.is_multiple_of(ALIGN) {
            file.set_len(len as u64)?;
        }
        file.sync_all()?;
        if create {
            std::fs::hard_link(&staging, path)?;
            std::fs::remove_file(&staging)?;
        } else {
            std::fs::rename(&staging, path)?;
        }
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        std::fs::metadata(path)
    })();
    let metadata = match written {
        Ok(m) => m,
        // A file system that opens files for direct I/O but refuses the writes: the inner store
        // writes this object and every later one.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let _ = std::fs::remove_file(&staging);
            direct.store(false, Ordering::Relaxed);
            return Ok(None);
        }
        Err(e) => {
            let _ = std::fs::remove_file(&staging);
            if create && e.kind() == std::io::ErrorKind::AlreadyExists {
                return Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: e.into(),
                });
            }
            return Err(generic(e));
        }
    };
    let meta = object_meta(location, &metadata);
    Ok(Some(PutResult { e_tag: meta.e_tag, version: None, extensions: Default::default() }))
}

/// Bytes a direct write copies into its aligned buffer and writes at a time: what a put in
/// flight holds beside its object, and keeps in the free buffers after. A whole object's copy
/// broke the writer's memory bound (`make bench-memory`, in process on a local directory at 5x
/// overload: 174 MiB against 128); 1 MiB chunks 123-131; 256 KiB 117-118, as with no copy
/// (116-117), for one partition's produce 5-10% below whole-object writes.
const WRITE_CHUNK: usize = 256 << 10;

/// Writes `payload` to `file` (opened for direct I/O, at offset 0). Bytes that lie at an aligned
/// address when the file is at an aligned offset are written from where they lie, their aligned
/// length in one write (a WAL object laid out aligned is written whole, without a copy: one
/// write of a megabyte costs the disk less than four of a quarter); the rest is copied through
/// an aligned buffer, [`WRITE_CHUNK`] at a time, the last write zero-padded to [`ALIGN`].
fn write_chunks(file: &mut File, payload: &PutPayload, buffers: &Buffers) -> std::io::Result<()> {
    use std::io::Write;
    let mut copy = Bounce { buf: Vec::new(), at: 0, left: payload.content_length() };
    let written = (|| {
        for part in payload.iter() {
            let mut part = &part[..];
            while !part.is_empty() {
                let n = if copy.waiting() == 0
                    && part.len() >= ALIGN
                    && part.as_ptr().align_offset(ALIGN) == 0
                {
                    let n = part.len() / ALIGN * ALIGN;
                    file.write_all(&part[..n])?;
                    n
                } else {
                    copy.push(file, part, buffers)?
                };
                part = &part[n..];
                copy.left -= n;
            }
        }
        copy.flush(file)
    })();
    buffers.give_back(copy.buf);
    written
}

/// A direct write's bounce buffer: bytes waiting to be written from an aligned buffer,
/// `buf[at..]`.
struct Bounce {
    /// Taken at the first copy.
    buf: Vec<u8>,
    at: usize,
    /// Bytes of the payload not yet written or copied.
    left: usize,
}

impl Bounce {
    fn waiting(&self) -> usize {
        self.buf.len().saturating_sub(self.at)
    }

    /// Copies what fits of `part` (at least a byte), writing the buffer once it holds
    /// [`WRITE_CHUNK`]; the bytes taken.
    fn push(&mut self, file: &mut File, part: &[u8], buffers: &Buffers) -> std::io::Result<usize> {
        if self.buf.capacity() == 0 {
            // As long as what is left to write needs, up to a chunk.
            self.buf = buffers.take(self.left.min(WRITE_CHUNK).next_multiple_of(ALIGN) + ALIGN);
            self.at = aligned(&mut self.buf, 0);
        }
        let n = (WRITE_CHUNK - self.waiting()).min(part.len());
        self.buf.extend_from_slice(&part[..n]);
        if self.waiting() == WRITE_CHUNK {
            self.flush(file)?;
        }
        Ok(n)
    }

    /// Writes what waits, zero-padded to [`ALIGN`].
    fn flush(&mut self, file: &mut File) -> std::io::Result<()> {
        use std::io::Write;
        let waiting = self.waiting();
        if waiting > 0 {
            self.buf.resize(self.at + waiting.next_multiple_of(ALIGN), 0);
            file.write_all(&self.buf[self.at..])?;
            self.buf.truncate(self.at);
        }
        Ok(())
    }
}

/// A new staging file beside `path` (`path#N`, as [`LocalFileSystem`] names its own, which
/// its listings leave out), opened for direct writes; `None` if its directory does not exist or
/// the file system does not take direct I/O. (A file made ahead is `dir/ready#N`.)
fn open_staging(
    path: &std::path::Path,
    direct: &AtomicBool,
) -> std::io::Result<Option<(File, std::path::PathBuf)>> {
    for n in 1u32.. {
        let mut staging = path.as_os_str().to_owned();
        staging.push(format!("#{n}"));
        let staging = std::path::PathBuf::from(staging);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        match open_direct(&mut options, &staging, direct) {
            Ok(f) => return Ok(f.map(|f| (f, staging))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// An object's metadata and the bytes of each range read of it.
type Got = (ObjectMeta, Vec<(Range<u64>, Bytes)>);

/// The bytes `ranges` name of the object at `location` (the file `path`), each its own buffer.
fn read(
    path: &std::path::Path,
    location: &Path,
    ranges: Ranges,
    buffers: &Arc<Buffers>,
    direct: bool,
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
    // Long ranges straight from the disk: an object is written with direct I/O, so the page
    // cache does not hold it, and filling the cache with it costs more than the read.
    let long = ranges.iter().any(|r| r.end.saturating_sub(r.start) >= DIRECT_MIN);
    let mut unbuffered = None;
    if direct && long {
        let flag = AtomicBool::new(true);
        let mut options = std::fs::OpenOptions::new();
        unbuffered = open_direct(options.read(true), path, &flag).map_err(generic)?;
    }
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let bytes = match &unbuffered {
            Some(f) if r.end.saturating_sub(r.start) >= DIRECT_MIN => {
                match read_direct(f, &r, meta.size, buffers) {
                    // Refused (a file system that opens files for direct I/O but does not
                    // read them so): through the page cache.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        read_range(&mut file, &r, meta.size, buffers)?
                    }
                    read => read.map_err(generic)?,
                }
            }
            _ => read_range(&mut file, &r, meta.size, buffers)?,
        };
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

    /// The longest range read (unknown: `u64::MAX`).
    fn longest(&self) -> u64 {
        match self {
            Ranges::One(_) => self.at_most(),
            Ranges::Many(rs) => rs.iter().map(|r| r.end.saturating_sub(r.start)).max().unwrap_or(0),
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
    buf.clear();
    file.seek(SeekFrom::Start(range.start)).map_err(generic)?;
    Read::take(&mut *file, len).read_to_end(&mut buf).map_err(generic)?;
    if buf.len() as u64 != len {
        return Err(generic(format!("read {} of {len} bytes at {}", buf.len(), range.start)));
    }
    Ok(buffers.bytes(buf))
}

/// Reads `range` of `file` (opened for direct I/O, of `size` bytes): the aligned blocks around
/// it into an aligned buffer of `buffers`, of which the range is a slice.
fn read_direct(
    file: &File,
    range: &Range<u64>,
    size: u64,
    buffers: &Arc<Buffers>,
) -> std::io::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    if range.start > range.end || range.end > size {
        return Err(std::io::Error::other(format!("range {range:?} of an object of {size} bytes")));
    }
    let align = ALIGN as u64;
    let from = range.start - range.start % align;
    let to = range.end.next_multiple_of(align);
    let len = usize::try_from(to - from).map_err(std::io::Error::other)?;
    let mut buf = buffers.take(len + ALIGN);
    let at = aligned(&mut buf, len);
    let mut got = 0;
    // The file ends within the last block: a short read there, and 0 after it.
    while got < len {
        match file.read_at(&mut buf[at + got..at + len], from + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let (start, end) = (at + (range.start - from) as usize, at + (range.end - from) as usize);
    if at + got < end {
        return Err(std::io::Error::other(format!("read {got} of {len} bytes at {from}")));
    }
    Ok(buffers.bytes(buf).slice(start..end))
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

    /// A buffer of [`size_class`]`(len)` bytes' capacity: the most recently freed of that
    /// size, else a new one. A freed one keeps its length (its bytes stay initialized, so a
    /// direct read into it need not zero them again); a read into spare capacity clears it.
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
    fn give_back(&self, buf: Vec<u8>) {
        if buf.capacity() < POOLED_MIN || buf.capacity() > self.idle_max {
            return;
        }
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
        if opts.attributes.is_empty()
            && let Some(done) = self.put_direct(location, payload.clone(), &opts.mode).await?
        {
            return Ok(done);
        }
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
    use futures::{StreamExt, TryStreamExt};
    use object_store::ObjectStoreExt;
    use std::time::Duration;

    fn pattern(len: usize) -> Bytes {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect::<Vec<u8>>().into()
    }

    fn store(dir: &tempfile::TempDir) -> anyhow::Result<LocalStore> {
        Ok(LocalStore::new(LocalFileSystem::new_with_prefix(dir.path())?))
    }

    /// A short GET (under 64 KiB: footers, indexes) reads where it is asked: with the one
    /// thread of the blocking pool busy (fsyncing a PUT, say), it still answers
    /// (`LocalFileSystem` alone waits for the pool twice). Long reads wait for the disk there.
    #[test]
    fn a_short_get_does_not_wait_for_the_blocking_pool() -> anyhow::Result<()> {
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
            tokio::time::timeout(Duration::from_secs(5), store.get_range(&p, 10..60_000)).await
        });
        release.send(())?;
        rt.block_on(busy)??;
        assert_eq!(got??, data.slice(10..60_000));
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
        // The put's own buffer (another size class).
        let (reused, allocated) = store.buffer_counts();
        let counts = || {
            let (r, a) = store.buffer_counts();
            (r - reused, a - allocated)
        };
        let first = store.get_range(&p, 0..1_000_000).await?;
        assert_eq!(first, data.slice(0..1_000_000));
        drop(first);
        // 990,000 bytes: the same class (1 MiB) as 1,000,000; shorter, so stale bytes past its
        // end would show if the buffer were not cut to what was read.
        let second = store.get_range(&p, 2_000_000..2_990_000).await?;
        assert_eq!(second, data.slice(2_000_000..2_990_000));
        assert_eq!(counts(), (1, 1));
        let third = store.get_range(&p, 5..1_000_005).await?;
        assert_eq!(third, data.slice(5..1_000_005));
        assert_eq!(counts(), (1, 2), "the second still holds its buffer");
        let small = store.get_range(&p, 0..1000).await?;
        assert_eq!((small, counts()), (data.slice(0..1000), (1, 2)));
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

    /// Bytes of `file` in the page cache (util-linux's `fincore`).
    fn cached(file: &std::path::Path) -> anyhow::Result<u64> {
        let out = std::process::Command::new("fincore")
            .args(["--bytes", "--noheadings", "--raw", "--output", "RES"])
            .arg(file)
            .output()?;
        anyhow::ensure!(out.status.success(), "fincore: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8(out.stdout)?.trim().parse()?)
    }

    /// An object written and read back in long ranges never enters the page cache (direct
    /// I/O: the writer and readers keep what they need in their own caches, and filling the
    /// page cache costs more CPU than the write); short reads go through it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn long_writes_and_reads_bypass_the_page_cache() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        let (p, data) = (Path::from("wal/1"), pattern((4 << 20) + 123));
        std::fs::create_dir(dir.path().join("wal"))?;
        store.put(&p, data.clone().into()).await?;
        let file = dir.path().join("wal/1");
        assert_eq!(std::fs::metadata(&file)?.len(), data.len() as u64);
        assert_eq!(cached(&file)?, 0, "the object's bytes are in the page cache");
        assert_eq!(store.get_range(&p, 70_001..3_000_000).await?, data.slice(70_001..3_000_000));
        assert_eq!(store.get(&p).await?.bytes().await?, data);
        assert_eq!(cached(&file)?, 0, "long reads filled the page cache");
        assert_eq!(store.get_range(&p, 10..1_000).await?, data.slice(10..1_000));
        assert!(cached(&file)? > 0, "a short read goes through the page cache");
        Ok(())
    }

    /// Direct writes of every length around the block size read back whole and in ranges
    /// that start and end off the blocks; create-only puts keep their contract; no staging
    /// file is left behind, and a missing directory is made (by the inner store).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn direct_writes_of_any_length_and_create_only() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        for (i, len) in [0, 1, 4095, 4096, 4097, 65_536, 65_537, 1 << 20, (1 << 20) + 4099]
            .into_iter()
            .enumerate()
        {
            let (p, data) = (Path::from(format!("d/{i}")), pattern(len));
            store.put(&p, data.clone().into()).await?;
            assert_eq!(store.get(&p).await?.bytes().await?, data, "{len}");
            if len > 70_000 {
                let r = 4_097..(len as u64 - 3);
                let got = store.get_ranges(&p, &[r.clone(), 1..66_000]).await?;
                assert_eq!(got, [data.slice(4_097..len - 3), data.slice(1..66_000)], "{len}");
            }
            let past = store.get_range(&p, len as u64 + 1..len as u64 + 70_000).await;
            assert!(past.is_err(), "{len}: {past:?}");
        }
        // Parts that straddle the write chunks.
        let parts = [pattern(700_000), pattern(700_001), pattern(WRITE_CHUNK + 1)];
        let whole: Bytes = parts.concat().into();
        let p = Path::from("d/parts");
        store.put(&p, parts.into_iter().collect::<PutPayload>()).await?;
        assert_eq!(store.get(&p).await?.bytes().await?, whole);
        let create = PutOptions { mode: PutMode::Create, ..Default::default() };
        let p = Path::from("d/created");
        store.put_opts(&p, pattern(100_000).into(), create.clone()).await?;
        let again = store.put_opts(&p, pattern(5).into(), create).await;
        assert!(matches!(again, Err(object_store::Error::AlreadyExists { .. })), "{again:?}");
        assert_eq!(store.get(&p).await?.bytes().await?, pattern(100_000));
        store.put(&p, pattern(7).into()).await?;
        assert_eq!(store.get(&p).await?.bytes().await?, pattern(7), "an overwrite replaces it");
        let head = store.head(&p).await?;
        assert_eq!(head.e_tag, store.inner.head(&p).await?.e_tag);
        let staging = || staging_names(&dir.path().join("d"));
        let left = staging()?;
        assert!(left.iter().all(|n| n.starts_with("ready#")), "staging files left: {left:?}");
        assert_eq!(store.list(None).collect::<Vec<_>>().await.len(), 11);
        drop(store);
        // The file made ahead is removed with the store (once it is made).
        for _ in 0..500 {
            if staging()?.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        anyhow::bail!("staging files left: {:?}", staging()?)
    }

    /// Inode number of `file`.
    fn inode(file: &std::path::Path) -> std::io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(file)?.ino())
    }

    /// Names of the staging files in `dir` (those its listing leaves out).
    fn staging_names(dir: &std::path::Path) -> std::io::Result<Vec<String>> {
        let names = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()));
        names.filter(|n| n.as_ref().map_or(true, |n| n.contains('#'))).collect()
    }

    /// The file made ahead in `dir` once there is one.
    async fn made_ahead(dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
        for _ in 0..500 {
            if let Some(n) = staging_names(dir)?.into_iter().find(|n| n.starts_with("ready#")) {
                return Ok(dir.join(n));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        anyhow::bail!("no file made ahead in {}", dir.display())
    }

    /// A put's staging file is made ahead, after the put before it in its directory: the next
    /// put there is written into it (its inode is the object's), create-only or not, and one
    /// more is made; listings leave it out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn staging_files_are_made_ahead() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        let wal = dir.path().join("wal");
        std::fs::create_dir(&wal)?;
        store.put(&Path::from("wal/1"), pattern(100_000).into()).await?;
        let create = PutOptions { mode: PutMode::Create, ..Default::default() };
        for (i, opts) in [(2, create), (3, PutOptions::default())] {
            let ready = made_ahead(&wal).await?;
            let ino = inode(&ready)?;
            let p = Path::from(format!("wal/{i}"));
            store.put_opts(&p, pattern(70_000 + i).into(), opts).await?;
            assert_eq!(inode(&wal.join(i.to_string()))?, ino, "put {i} made its own file");
            // Taken: its name gone, or a new file's (made ahead for the next put, which may
            // reuse the name once this put has unlinked it).
            assert_ne!(inode(&ready).ok(), Some(ino), "{} left", ready.display());
            assert_eq!(store.get(&p).await?.bytes().await?, pattern(70_000 + i));
        }
        made_ahead(&wal).await?;
        let listed: Vec<_> =
            store.list(None).map_ok(|m| m.location.to_string()).try_collect().await?;
        assert_eq!(listed.len(), 3, "{listed:?}");
        Ok(())
    }

    /// `len` bytes of [`pattern`] at an aligned address, or one byte past one.
    fn laid_out(len: usize, aligned: bool) -> Bytes {
        let mut buf: Vec<u8> = Vec::with_capacity(len + 2 * ALIGN);
        let at = buf.as_ptr().align_offset(ALIGN) + usize::from(!aligned);
        buf.resize(at, 0);
        buf.extend_from_slice(&pattern(len));
        Bytes::from(buf).slice(at..)
    }

    /// A payload that lies at an aligned address (a WAL object laid out so) is written from
    /// where it lies, its last partial block through a small buffer: no write buffer is taken;
    /// one that does not is copied through one. Both read back whole, past the page cache.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aligned_payloads_are_written_without_a_copy() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = store(&dir)?;
        std::fs::create_dir(dir.path().join("wal"))?;
        for (i, len) in [1 << 20, (1 << 20) + 123, 3 * WRITE_CHUNK + 5].into_iter().enumerate() {
            let (p, data) = (Path::from(format!("wal/{i}")), laid_out(len, true));
            let before = store.buffer_counts();
            store.put(&p, data.clone().into()).await?;
            assert_eq!(store.buffer_counts(), before, "{len}: a write buffer was taken");
            let file = dir.path().join(format!("wal/{i}"));
            assert_eq!(std::fs::metadata(&file)?.len(), len as u64);
            assert_eq!(cached(&file)?, 0, "{len}: in the page cache");
            assert_eq!(store.get_range(&p, 0..len as u64).await?, data, "{len}");
        }
        let (p, data) = (Path::from("wal/off"), laid_out(1 << 20, false));
        let (reused, allocated) = store.buffer_counts();
        store.put(&p, data.clone().into()).await?;
        let (r, a) = store.buffer_counts();
        assert_eq!(r + a, reused + allocated + 1, "an unaligned payload is copied");
        assert_eq!(store.get_range(&p, 0..1 << 20).await?, data);
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
