//! Log lifecycle operations that need no writer identity: the catalog creates and deletes
//! logs with these, writers through [`LogStorage`](crate::LogStorage).

use metadata::{Compare, CompareOp, KeyRange, MetadataStore, OpResult, RangeRequest, Txn, TxnOp};
use prost::Message;

use crate::keys::{Keys, parse_u64};
use crate::reader::LogReader;
use crate::records::{LogHead, LogState, StreamRoute};
use crate::{LogError, LogId};

/// Creates an empty log and returns its id (never reused). A stream's log carries its `route`
/// (stream identity, partition), which owner selection hashes.
pub async fn create_log(
    meta: &dyn MetadataStore,
    keys: &Keys,
    route: Option<StreamRoute>,
) -> Result<LogId, LogError> {
    for _ in 0..100 {
        let next_key = keys.next_log_id();
        let (id, id_rev) = match meta.get(&next_key).await? {
            Some(kv) => (
                parse_u64(&kv.value).ok_or_else(|| LogError::Corrupt("logs/next_id".to_owned()))?,
                kv.mod_revision,
            ),
            None => (1, 0),
        };
        let log = LogId(id);
        let floor = wal_floor_now(meta, keys).await?;
        let head =
            LogHead { state: LogState::Normal as i32, route: route.clone(), ..Default::default() };
        let txn = Txn::new()
            .when([
                Compare::mod_revision(next_key.clone(), CompareOp::Equal, id_rev),
                Compare::create_revision(keys.head(log), CompareOp::Equal, 0),
            ])
            .and_then([
                TxnOp::put(next_key, (id + 1).to_string()),
                TxnOp::put(keys.head(log), head.encode_to_vec()),
                TxnOp::put(keys.start(log), "0"),
                TxnOp::put(keys.wal_floor(log), floor.to_string()),
            ]);
        if meta.txn(txn).await?.succeeded {
            return Ok(log);
        }
    }
    Err(LogError::unavailable("could not allocate a log id: too much contention"))
}

/// `min(wal/next_seq, every live writer's low-water mark)`, read at one revision
/// (ARCHITECTURE §5): no chunk of a new log can have a lower sequence.
async fn wal_floor_now(meta: &dyn MetadataStore, keys: &Keys) -> Result<u64, LogError> {
    let txn = Txn::new().and_then([
        TxnOp::get(RangeRequest::key(keys.next_seq())),
        TxnOp::get(RangeRequest::prefix(keys.low_water_prefix())),
    ]);
    let resp = meta.txn(txn).await?;
    let mut floor = u64::MAX;
    for r in resp.results {
        if let OpResult::Get(g) = r {
            for kv in g.kvs {
                let seq = parse_u64(&kv.value)
                    .ok_or_else(|| LogError::Corrupt("WAL sequence".to_owned()))?;
                floor = floor.min(seq);
            }
        }
    }
    Ok(if floor == u64::MAX { 0 } else { floor })
}

/// Marks a log DELETED and removes its index, start, floor, cursors and state checkpoint
/// pointers. Its id is never reused; its
/// objects are reclaimed by the cleaner.
pub async fn delete_log(
    meta: &dyn MetadataStore,
    reader: &LogReader,
    log: LogId,
) -> Result<(), LogError> {
    let keys = reader.keys();
    for _ in 0..100 {
        let snap = reader.snapshot(log).await?;
        if snap.head.log_state() == LogState::Deleted {
            return Err(LogError::NotFound(log));
        }
        let mut head = snap.head.clone();
        head.state = LogState::Deleted as i32;
        head.recent.clear();
        head.slots.clear();
        let txn = Txn::new()
            .when([Compare::mod_revision(keys.head(log), CompareOp::Equal, snap.head_revision)])
            .and_then([
                TxnOp::put(keys.head(log), head.encode_to_vec()),
                TxnOp::delete(KeyRange::prefix(keys.index_prefix(log))),
                TxnOp::delete(KeyRange::key(keys.start(log))),
                TxnOp::delete(KeyRange::key(keys.wal_floor(log))),
                TxnOp::delete(KeyRange::prefix(keys.cursors_prefix(log))),
                TxnOp::delete(KeyRange::prefix(keys.producers_prefix(log))),
            ]);
        if meta.txn(txn).await?.succeeded {
            return Ok(());
        }
    }
    Err(LogError::unavailable(format!("could not delete log {log}: too much contention")))
}
