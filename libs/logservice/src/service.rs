//! The gRPC adapter: proto ↔ domain conversions and nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use logstore::{
    Conditions, CursorStart, EntryIndex, LogCursor, LogEntry, LogEntryHeader, LogError, LogId,
    LogReader, LogStorage,
};
use proto::log::v1 as pb;
use tonic::{Request, Response, Status};

use crate::status::to_status;

/// Reads wait at most this long, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);
const DEFAULT_MAX_RECORDS: u64 = 1000;
const DEFAULT_MAX_BYTES: u64 = 4 << 20;
/// What one read returns at most, whatever the client asks: records, payload bytes (one entry
/// more than that at most, as a read always returns one entry), index entries.
pub const MAX_READ_RECORDS: u64 = 100_000;
pub const MAX_READ_BYTES: u64 = 16 << 20;
pub const MAX_INDEX_ENTRIES: u32 = 10_000;
/// The largest response a role encodes: a capped read plus its largest entry, with room.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Open cursors kept between calls at most; a full cache evicts one at a time.
const OPEN_CURSORS_MAX: usize = 1024;

/// A kept cursor handle: a call takes it out, and puts it back when done.
type Kept = std::sync::Arc<parking_lot::Mutex<Option<LogCursor>>>;
type OpenCursors = std::sync::Arc<quick_cache::sync::Cache<(u64, String), Kept>>;

/// The LogService over one writer's log storage, or read-only over a log reader.
#[derive(Clone, Debug)]
pub struct LogServiceImpl {
    reader: LogReader,
    /// `None` on a read-only reader.
    storage: Option<LogStorage>,
    /// Cursors opened by earlier calls: a call refreshes one (one metadata read) instead of
    /// loading every acknowledgement chunk again.
    cursors: OpenCursors,
}

impl LogServiceImpl {
    /// Every call, appends through this writer's storage.
    pub fn new(storage: LogStorage) -> Self {
        LogServiceImpl {
            reader: storage.reader().clone(),
            storage: Some(storage),
            cursors: open_cursors(),
        }
    }

    /// Reads only: mutating calls answer READ_ONLY, reads never wait for new data.
    pub fn read_only(reader: LogReader) -> Self {
        LogServiceImpl { reader, storage: None, cursors: open_cursors() }
    }

    fn writable(&self, what: &str) -> Result<&LogStorage, Status> {
        self.storage.as_ref().ok_or_else(|| {
            to_status(LogError::ReadOnly(format!("{what} is not served by a read-only reader")))
        })
    }

    fn refuse(&self, what: &str) -> Result<(), Status> {
        self.writable(what).map(|_| ())
    }

    /// A cursor handle, up to date: from the cache (refreshed) or opened.
    async fn cursor(&self, log: u64, name: &str) -> Result<LogCursor, Status> {
        let cached =
            self.cursors.remove(&(log, name.to_owned())).and_then(|(_, kept)| kept.lock().take());
        match cached {
            Some(mut c) => {
                c.refresh().await.map_err(to_status)?;
                Ok(c)
            }
            None => LogCursor::open(&self.reader, LogId(log), name).await.map_err(to_status),
        }
    }

    /// Keeps a handle for the next call.
    fn keep(&self, c: LogCursor) {
        let key = (c.log().0, c.name().to_owned());
        self.cursors.insert(key, std::sync::Arc::new(parking_lot::Mutex::new(Some(c))));
    }
}

fn open_cursors() -> OpenCursors {
    std::sync::Arc::new(quick_cache::sync::Cache::new(OPEN_CURSORS_MAX))
}

pub(crate) fn header(h: LogEntryHeader) -> pb::EntryHeader {
    pb::EntryHeader {
        offset: h.offset,
        record_count: h.record_count,
        timestamp_ms: h.timestamp,
        entry_size: h.entry_size,
        cumulative_size: h.cumulative_size,
    }
}

fn from_header(h: Option<pb::EntryHeader>) -> Result<LogEntryHeader, Status> {
    let h = h.ok_or_else(|| Status::invalid_argument("entry index without a header"))?;
    Ok(LogEntryHeader {
        offset: h.offset,
        record_count: h.record_count,
        timestamp: h.timestamp_ms,
        entry_size: h.entry_size,
        cumulative_size: h.cumulative_size,
    })
}

fn entry(e: LogEntry) -> pb::Entry {
    pb::Entry { header: Some(header(e.header)), payload: e.payload }
}

/// A client's limit: its default when 0, the server's cap when above it.
fn limit(v: u64, default: u64, cap: u64) -> u64 {
    if v == 0 { default } else { v.min(cap) }
}

#[tonic::async_trait]
impl pb::log_service_server::LogService for LogServiceImpl {
    async fn create_log(
        &self,
        _: Request<pb::CreateLogRequest>,
    ) -> Result<Response<pb::CreateLogResponse>, Status> {
        let log = self.writable("CreateLog")?.create_log().await.map_err(to_status)?;
        Ok(Response::new(pb::CreateLogResponse { log_id: log.0 }))
    }

    async fn append(
        &self,
        req: Request<pb::AppendRequest>,
    ) -> Result<Response<pb::AppendResponse>, Status> {
        let s = self.writable("Append")?;
        let reception = req.extensions().get::<crate::reception::Slot>().cloned();
        let r = req.into_inner();
        let log = LogId(r.log_id);
        let payload = crate::own(r.payload);
        let slot = if r.slot.is_empty() { s.config().zone.clone() } else { r.slot };
        let opts = Conditions {
            expected_offset: r.expected_offset,
            overhead: crate::UNARY_OVERHEAD,
            reserved: reception.as_ref().and_then(crate::reception::Slot::take_room),
            ..Default::default()
        };
        let admitted = s.submit_in_slot(log, &slot, r.record_count, payload, opts).await;
        // Admitted, waiting for room or refused: no longer being received.
        if let Some(r) = reception {
            r.release();
        }
        let committing = admitted.map_err(to_status)?;
        let h = committing.await.map_err(to_status)?;
        Ok(Response::new(pb::AppendResponse { header: Some(header(h)) }))
    }

    type AppendStreamStream = crate::pipeline::Answers;

    async fn append_stream(
        &self,
        req: Request<tonic::Streaming<pb::AppendRequest>>,
    ) -> Result<Response<Self::AppendStreamStream>, Status> {
        let s = self.writable("AppendStream")?.clone();
        Ok(Response::new(crate::pipeline::serve(s, req.into_inner())))
    }

    async fn read_entries(
        &self,
        req: Request<pb::ReadEntriesRequest>,
    ) -> Result<Response<pb::ReadEntriesResponse>, Status> {
        let r = req.into_inner();
        let log = LogId(r.log_id);
        let wait = Duration::from_millis(u64::from(r.max_wait_ms)).min(MAX_WAIT_CAP);
        let reader = &self.reader;
        // Readers serve committed data only: no tail reads.
        if !wait.is_zero() && self.storage.is_some() {
            reader.wait_beyond(log, r.start_offset, wait).await.map_err(to_status)?;
        }
        let max_records = limit(r.max_records, DEFAULT_MAX_RECORDS, MAX_READ_RECORDS);
        let max_bytes = limit(r.max_bytes, DEFAULT_MAX_BYTES, MAX_READ_BYTES);
        if r.stored {
            let runs = reader
                .read_stored(log, r.start_offset, max_records, max_bytes)
                .await
                .map_err(to_status)?;
            let next_offset = runs.last().map_or(r.start_offset, |run| run.end_offset);
            return Ok(Response::new(pb::ReadEntriesResponse {
                entries: Vec::new(),
                next_offset,
                runs: runs
                    .into_iter()
                    .map(|run| pb::StoredRun {
                        first_offset: run.first_offset,
                        cumulative_before: run.cumulative_before,
                        data: run.data,
                    })
                    .collect(),
            }));
        }
        let entries = reader
            .read_entries(log, r.start_offset, max_records, max_bytes)
            .await
            .map_err(to_status)?;
        let next_offset = match entries.last() {
            Some(e) => e.header.end_offset(),
            None => r.start_offset,
        };
        Ok(Response::new(pb::ReadEntriesResponse {
            entries: entries.into_iter().map(entry).collect(),
            next_offset,
            runs: Vec::new(),
        }))
    }

    async fn get_first_offset(
        &self,
        req: Request<pb::GetFirstOffsetRequest>,
    ) -> Result<Response<pb::GetFirstOffsetResponse>, Status> {
        let h = self
            .reader
            .get_first_offset(LogId(req.into_inner().log_id))
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::GetFirstOffsetResponse { header: h.map(header) }))
    }

    async fn get_last_offset(
        &self,
        req: Request<pb::GetLastOffsetRequest>,
    ) -> Result<Response<pb::GetLastOffsetResponse>, Status> {
        let h =
            self.reader.get_last_offset(LogId(req.into_inner().log_id)).await.map_err(to_status)?;
        Ok(Response::new(pb::GetLastOffsetResponse { header: h.map(header) }))
    }

    async fn read_index_range(
        &self,
        req: Request<pb::ReadIndexRangeRequest>,
    ) -> Result<Response<pb::ReadIndexRangeResponse>, Status> {
        let r = req.into_inner();
        let idx = self
            .reader
            .read_index_range(
                LogId(r.log_id),
                r.start_offset,
                r.max_entries.min(MAX_INDEX_ENTRIES) as usize,
            )
            .await
            .map_err(to_status)?;
        let indexes = idx
            .into_iter()
            .map(|i| pb::EntryIndex {
                log_id: i.log.0,
                header: Some(header(i.header)),
                object: i.object.to_string(),
                byte_start: i.byte_start,
                byte_len: i.byte_len,
            })
            .collect();
        Ok(Response::new(pb::ReadIndexRangeResponse { indexes }))
    }

    async fn read_entries_by_index(
        &self,
        req: Request<pb::ReadEntriesByIndexRequest>,
    ) -> Result<Response<pb::ReadEntriesByIndexResponse>, Status> {
        // Bounds (count, bytes, ranges) are log storage's to check: one place for every caller.
        let asked = req.into_inner().indexes;
        let mut indexes = Vec::with_capacity(asked.len());
        for i in asked {
            let object = objstore::Path::parse(&i.object)
                .map_err(|e| Status::invalid_argument(format!("object `{}`: {e}", i.object)))?;
            // The log the guard authorized: storage reads only that log's entries.
            indexes.push(EntryIndex {
                log: LogId(i.log_id),
                header: from_header(i.header)?,
                object,
                byte_start: i.byte_start,
                byte_len: i.byte_len,
            });
        }
        let entries = self.reader.read_entries_by_index(&indexes).await.map_err(to_status)?;
        Ok(Response::new(pb::ReadEntriesByIndexResponse {
            entries: entries.into_iter().map(entry).collect(),
        }))
    }

    async fn soft_trim(
        &self,
        req: Request<pb::SoftTrimRequest>,
    ) -> Result<Response<pb::SoftTrimResponse>, Status> {
        let r = req.into_inner();
        let s = self.writable("SoftTrim")?;
        let start = s.soft_trim(LogId(r.log_id), r.offset).await.map_err(to_status)?;
        Ok(Response::new(pb::SoftTrimResponse { start_offset: start }))
    }

    async fn hard_trim(
        &self,
        req: Request<pb::HardTrimRequest>,
    ) -> Result<Response<pb::HardTrimResponse>, Status> {
        let r = req.into_inner();
        let s = self.writable("HardTrim")?;
        let start = s.hard_trim(LogId(r.log_id), r.offset).await.map_err(to_status)?;
        Ok(Response::new(pb::HardTrimResponse { start_offset: start }))
    }

    async fn delete_log(
        &self,
        req: Request<pb::DeleteLogRequest>,
    ) -> Result<Response<pb::DeleteLogResponse>, Status> {
        let s = self.writable("DeleteLog")?;
        s.delete_log(LogId(req.into_inner().log_id)).await.map_err(to_status)?;
        Ok(Response::new(pb::DeleteLogResponse {}))
    }

    async fn fence(
        &self,
        req: Request<pb::FenceRequest>,
    ) -> Result<Response<pb::FenceResponse>, Status> {
        let s = self.writable("Fence")?;
        let epoch = s.fence(LogId(req.into_inner().log_id)).await.map_err(to_status)?;
        Ok(Response::new(pb::FenceResponse { epoch }))
    }

    async fn activate(
        &self,
        req: Request<pb::ActivateRequest>,
    ) -> Result<Response<pb::ActivateResponse>, Status> {
        let r = req.into_inner();
        self.writable("Activate")?.activate(LogId(r.log_id), r.epoch).await.map_err(to_status)?;
        Ok(Response::new(pb::ActivateResponse {}))
    }

    async fn get_log_info(
        &self,
        req: Request<pb::GetLogInfoRequest>,
    ) -> Result<Response<pb::GetLogInfoResponse>, Status> {
        let i = self.reader.info(LogId(req.into_inner().log_id)).await.map_err(to_status)?;
        let state = match i.state {
            logstore::records::LogState::Normal => "NORMAL",
            logstore::records::LogState::Fenced => "FENCED",
            logstore::records::LogState::Deleted => "DELETED",
        };
        Ok(Response::new(pb::GetLogInfoResponse {
            log_id: i.log.0,
            state: state.to_owned(),
            epoch: i.epoch,
            first_offset: i.first_offset,
            next_offset: i.next_offset,
            entries: i.entries,
            bytes: i.bytes,
        }))
    }

    async fn create_cursor(
        &self,
        req: Request<pb::CreateCursorRequest>,
    ) -> Result<Response<pb::CreateCursorResponse>, Status> {
        self.refuse("CreateCursor")?;
        let r = req.into_inner();
        let start = match (r.offset, r.from_end) {
            (Some(o), _) => CursorStart::Offset(o),
            (None, true) => CursorStart::End,
            (None, false) => CursorStart::Beginning,
        };
        LogCursor::create(&self.reader, LogId(r.log_id), &r.name, start)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::CreateCursorResponse {}))
    }

    async fn list_cursors(
        &self,
        req: Request<pb::ListCursorsRequest>,
    ) -> Result<Response<pb::ListCursorsResponse>, Status> {
        let log = LogId(req.into_inner().log_id);
        let names = LogCursor::list(&self.reader, log).await.map_err(to_status)?;
        Ok(Response::new(pb::ListCursorsResponse { names }))
    }

    async fn delete_cursor(
        &self,
        req: Request<pb::DeleteCursorRequest>,
    ) -> Result<Response<pb::DeleteCursorResponse>, Status> {
        self.refuse("DeleteCursor")?;
        let r = req.into_inner();
        LogCursor::delete(&self.reader, LogId(r.log_id), &r.name).await.map_err(to_status)?;
        Ok(Response::new(pb::DeleteCursorResponse {}))
    }

    async fn read_cursor(
        &self,
        req: Request<pb::ReadCursorRequest>,
    ) -> Result<Response<pb::ReadCursorResponse>, Status> {
        let r = req.into_inner();
        let mut c = self.cursor(r.log_id, &r.name).await?;
        // Without from_offset a read starts at the mark-delete position (stateless readers
        // keep no position between calls).
        c.set_read_offset(r.from_offset.unwrap_or(0));
        let max_records = limit(r.max_records, DEFAULT_MAX_RECORDS, MAX_READ_RECORDS);
        let max_bytes = limit(r.max_bytes, DEFAULT_MAX_BYTES, MAX_READ_BYTES);
        let entries = c.read_entries(max_records, max_bytes).await.map_err(to_status)?;
        let next_offset = c.read_offset();
        self.keep(c);
        Ok(Response::new(pb::ReadCursorResponse {
            entries: entries.into_iter().map(entry).collect(),
            next_offset,
        }))
    }

    async fn ack_cursor(
        &self,
        req: Request<pb::AckCursorRequest>,
    ) -> Result<Response<pb::AckCursorResponse>, Status> {
        self.refuse("AckCursor")?;
        let r = req.into_inner();
        let mut c = self.cursor(r.log_id, &r.name).await?;
        if let Some(md) = r.mark_delete {
            let props: BTreeMap<String, i64> = r.properties.into_iter().collect();
            c.mark_delete(md, props).await.map_err(to_status)?;
        }
        if !r.individual.is_empty() {
            c.ack(&r.individual).await.map_err(to_status)?;
        }
        let mark_delete_offset = c.mark_delete_offset();
        self.keep(c);
        Ok(Response::new(pb::AckCursorResponse { mark_delete_offset }))
    }

    async fn seek_cursor(
        &self,
        req: Request<pb::SeekCursorRequest>,
    ) -> Result<Response<pb::SeekCursorResponse>, Status> {
        self.refuse("SeekCursor")?;
        let r = req.into_inner();
        let mut c =
            LogCursor::open(&self.reader, LogId(r.log_id), &r.name).await.map_err(to_status)?;
        c.seek(r.offset).await.map_err(to_status)?;
        Ok(Response::new(pb::SeekCursorResponse {}))
    }

    async fn get_cursor_stats(
        &self,
        req: Request<pb::GetCursorStatsRequest>,
    ) -> Result<Response<pb::GetCursorStatsResponse>, Status> {
        let r = req.into_inner();
        let mut c = self.cursor(r.log_id, &r.name).await?;
        c.set_read_offset(0);
        let s = c.stats().await.map_err(to_status)?;
        self.keep(c);
        Ok(Response::new(pb::GetCursorStatsResponse {
            mark_delete_offset: s.mark_delete_offset,
            read_position: s.read_position,
            high_watermark: s.high_watermark,
            backlog_records: s.backlog_records,
            backlog_bytes: s.backlog_bytes,
            acked_records: s.acked_records,
            ack_ranges: s.ack_ranges as u64,
            properties: s.properties.into_iter().collect(),
        }))
    }
}
