//! Share groups' share-partition states (KIP-932) as cursors of the partitions' logs
//! (ARCHITECTURE §12): a group's share-partition on a partition is the log's cursor
//! `share.<group>` (the group id spelled as its offsets' cursor spells it). Its mark-delete
//! position is the share-partition start offset; its individual acknowledgements are the
//! records done above it (accepted, rejected, archived); its properties hold the window's end
//! (`share.end`) and the delivery counts of the records not done, a range each
//! (`share.count.<first>` = `(last - first) << 16 | count`).
//!
//! One owner writes it at a time: the writer leading the partition, through one cursor
//! handle loaded when it takes the share-partition up. Every write compares the cursor's
//! revision, so an owner that another wrote past is refused (NOT_LEADER_OR_FOLLOWER) and loads
//! it again: a stale owner never overwrites a newer one's state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka::share::{Change, Stored};
use kafka::{OffsetCommit, Refused, ShareOffset, Tenure, code};
use logstore::LogId;
use logstore::cursor::{CursorStart, LogCursor, Position};
use metadata::{KeyRange, TxnOp};
use parking_lot::Mutex;

use crate::LogBroker;
use crate::offsets::encoded;

/// Cursor handles a writer keeps at most: past it, all are let go (their share-partitions
/// are loaded again at their next use).
const MAX_HANDLES: usize = 20_000;

const END: &str = "share.end";
const COUNT: &str = "share.count.";

/// Open share-partition cursors by log and cursor name.
pub(crate) type Handles = Arc<Mutex<HashMap<(LogId, String), Arc<tokio::sync::Mutex<LogCursor>>>>>;

/// The cursor holding `group`'s share-partitions; `None` for a group id too long for one.
pub fn cursor_name(group: &str) -> Option<String> {
    kafka::groups::cursor_name(group).map(|n| format!("share.{}", &n["kafka.".len()..]))
}

fn properties(change: &Change) -> BTreeMap<String, i64> {
    let mut p = BTreeMap::new();
    p.insert(END.to_owned(), change.end);
    for &(first, last, count) in &change.counts {
        p.insert(format!("{COUNT}{first}"), ((last - first) << 16) | i64::from(count.max(0)));
    }
    p
}

/// A share-partition's state as its cursor holds it.
fn stored(c: &LogCursor) -> Stored {
    let start = i64::try_from(c.mark_delete_offset().map_or(0, |o| o + 1)).unwrap_or(i64::MAX);
    let props = c.properties();
    let forget = logstore::mutations::on(logstore::mutations::Mutation::ForgetShareCounts);
    let counts = props
        .iter()
        .filter_map(|(k, v)| {
            let first: i64 = k.strip_prefix(COUNT)?.parse().ok()?;
            let count = i16::try_from(v & 0xffff).ok()?;
            Some((first, first + (v >> 16), count))
        })
        .filter(|_| !forget)
        .collect();
    Stored {
        start,
        end: props.get(END).copied().unwrap_or(start).max(start),
        done: c
            .acked_ranges()
            .into_iter()
            .map(|(a, b)| {
                (i64::try_from(a).unwrap_or(i64::MAX), i64::try_from(b).unwrap_or(i64::MAX))
            })
            .collect(),
        counts,
    }
}

fn name_of(group: &str) -> Result<String, Refused> {
    cursor_name(group).ok_or_else(|| {
        Refused::new(kafka::groups::errors::INVALID_GROUP_ID, format!("group id {group}"))
    })
}

#[async_trait::async_trait]
impl kafka::ShareStates for LogBroker {
    async fn share_owner(&self, topic: &str, partition: i32) -> Result<(), Refused> {
        self.led(topic, partition, None).await.map(|_| ())
    }

    async fn load_share(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<Stored>, Refused> {
        let (log, _) = self.led(topic, partition, None).await?;
        let name = name_of(group)?;
        self.share_handles.lock().remove(&(log, name.clone()));
        let cursor = match LogCursor::open(&self.reader, log, &name).await {
            Ok(c) => c,
            Err(logstore::LogError::CursorNotFound { .. }) => return Ok(None),
            Err(e) => return Err(crate::refused(e)),
        };
        let state = stored(&cursor);
        let mut handles = self.share_handles.lock();
        if handles.len() >= MAX_HANDLES {
            handles.clear();
        }
        handles.insert((log, name), Arc::new(tokio::sync::Mutex::new(cursor)));
        Ok(Some(state))
    }

    async fn store_share(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        change: &Change,
        create: bool,
    ) -> Result<(), Refused> {
        let (log, _) = self.led(topic, partition, None).await?;
        let name = name_of(group)?;
        let key = (log, name.clone());
        let stale = || {
            Refused::new(
                code::NOT_LEADER_OR_FOLLOWER,
                format!("the share-partition of group {group} on {topic}-{partition} moved on"),
            )
        };
        let start = u64::try_from(change.start).unwrap_or(0);
        if create {
            // The group's index of its share-partitions first: a cursor is never unlisted.
            let enc = encoded(group)?;
            let index = self.reader.keys().group_share(&enc, log);
            let value = format!("{partition} {topic}").into_bytes();
            self.reader.meta().put(&index, &value, 0).await.map_err(Refused::server)?;
            let at = CursorStart::Offset(start);
            match LogCursor::create(&self.reader, log, &name, at).await {
                Ok(()) => {}
                Err(logstore::LogError::AlreadyExists(_)) => return Err(stale()),
                Err(e) => return Err(crate::refused(e)),
            }
            let cursor = LogCursor::open(&self.reader, log, &name).await.map_err(crate::refused)?;
            let mut handles = self.share_handles.lock();
            if handles.len() >= MAX_HANDLES {
                handles.clear();
            }
            handles.insert(key.clone(), Arc::new(tokio::sync::Mutex::new(cursor)));
        }
        let Some(handle) = self.share_handles.lock().get(&key).cloned() else {
            return Err(stale());
        };
        let mut cursor = handle.lock().await;
        let ranges: Vec<(u64, u64)> = change
            .done
            .iter()
            .map(|&(a, b)| (u64::try_from(a).unwrap_or(0), u64::try_from(b).unwrap_or(0)))
            .collect();
        if let Err(e) = cursor.apply(&ranges, start, properties(change)).await {
            drop(cursor);
            self.share_handles.lock().remove(&key);
            tracing::debug!(group, topic, partition, error = %e, "share-partition state not stored");
            return Err(stale());
        }
        Ok(())
    }

    async fn share_offsets(&self, group: &str) -> Result<Vec<ShareOffset>, Refused> {
        let enc = encoded(group)?;
        let name = name_of(group)?;
        let listed = self.share_index(&enc).await?;
        let mut out = Vec::with_capacity(listed.len());
        for (log, topic, partition) in listed {
            let cursor = match LogCursor::open(&self.reader, log, &name).await {
                Ok(c) => c,
                Err(
                    logstore::LogError::CursorNotFound { .. } | logstore::LogError::NotFound(_),
                ) => {
                    continue;
                }
                Err(e) => return Err(crate::refused(e)),
            };
            let s = stored(&cursor);
            let lag = match self.reader.tail_info(log).await {
                Ok(info) => {
                    let hw = i64::try_from(info.next_offset).unwrap_or(i64::MAX);
                    let done: i64 = s.done.iter().map(|(a, b)| b - a).sum();
                    (hw - s.start - done).max(0)
                }
                Err(_) => -1,
            };
            out.push(ShareOffset { topic, partition, start: s.start, lag });
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    async fn alter_share_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        items: &[(String, i32, i64)],
    ) -> Result<Vec<Result<(), Refused>>, Refused> {
        let enc = encoded(group)?;
        let name = name_of(group)?;
        let asked: Vec<OffsetCommit> = items
            .iter()
            .map(|(topic, partition, start)| OffsetCommit {
                topic: topic.clone(),
                partition: *partition,
                offset: *start,
                leader_epoch: -1,
                metadata: None,
            })
            .collect();
        let (mut out, logs) = self.offset_logs(&asked).await;
        let fence = self.fence(group, &enc, tenure).await?;
        let keys = self.reader.keys().clone();
        for (i, log) in logs {
            let (topic, partition, start) = &items[i];
            let at = u64::try_from(*start).unwrap_or(0);
            let position = Position {
                offset: at,
                properties: [(END.to_owned(), *start)].into(),
                labels: BTreeMap::new(),
            };
            let mut ops = vec![TxnOp::put(
                keys.group_share(&enc, log),
                format!("{partition} {topic}").into_bytes(),
            )];
            ops.extend(
                logstore::cursor::position_ops(&keys, log, &name, position)
                    .map_err(crate::refused)?,
            );
            out[i] = self.fenced(group, fence.clone(), ops).await;
            self.share_handles.lock().remove(&(log, name.clone()));
        }
        Ok(out)
    }

    async fn delete_share_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        topics: &[String],
    ) -> Result<Vec<String>, Refused> {
        let enc = encoded(group)?;
        let fence = self.fence(group, &enc, tenure).await?;
        let mut deleted: Vec<String> = Vec::new();
        for (log, topic, _) in self.share_index(&enc).await? {
            if !topics.contains(&topic) {
                continue;
            }
            self.fenced(group, fence.clone(), self.forget_share(&enc, log)?).await?;
            if !deleted.contains(&topic) {
                deleted.push(topic);
            }
        }
        Ok(deleted)
    }
}

impl LogBroker {
    /// The share-partitions `enc`'s group has, by the index: (log, topic, partition).
    pub(crate) async fn share_index(
        &self,
        enc: &str,
    ) -> Result<Vec<(LogId, String, i32)>, Refused> {
        self.index_under(self.reader.keys().group_shares(enc)).await
    }

    /// What removes a share-partition of `enc`'s group: its cursor and its index entry.
    pub(crate) fn forget_share(&self, enc: &str, log: LogId) -> Result<Vec<TxnOp>, Refused> {
        let keys = self.reader.keys();
        let name = format!("share.{enc}");
        self.share_handles.lock().remove(&(log, name.clone()));
        Ok(vec![
            TxnOp::delete(KeyRange::key(keys.cursor_state(log, &name))),
            TxnOp::delete(KeyRange::prefix(keys.cursor_acks_prefix(log, &name))),
            TxnOp::delete(KeyRange::key(keys.group_share(enc, log))),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_the_end_round_trip_through_properties() {
        let change =
            Change { start: 5, end: 90, done: vec![], counts: vec![(5, 9, 2), (70, 89, 1)] };
        let p = properties(&change);
        assert_eq!(p.get(END), Some(&90));
        let back: Vec<(i64, i64, i16)> = p
            .iter()
            .filter_map(|(k, v)| {
                let first: i64 = k.strip_prefix(COUNT)?.parse().ok()?;
                Some((first, first + (v >> 16), i16::try_from(v & 0xffff).ok()?))
            })
            .collect();
        assert_eq!(back, change.counts);
        assert_eq!(cursor_name("g 1").as_deref(), Some("share.g_201"));
    }
}
