//! Consumer groups' durable part (ARCHITECTURE §11 "Groups"): who coordinates each group, its
//! stored membership, and its committed offsets, kept as cursors on the partitions' logs
//! (`kafka.<group>`) with an index of them per group (`kafka/groups/…`, see the key module).
//!
//! A coordinator takes a group by compare-and-set on its coordinator record, naming the
//! member-set revision it chose itself at; the record's mod_revision is its tenure. Every
//! write of the group (membership, offsets, deletion) compares the tenure and the writer's
//! incarnation, so a coordinator whose group was taken, or whose lease ended, writes nothing.
//! A coordinator whose member view trails the record's does not take the group back.

use std::collections::HashMap;

use bytes::Bytes;
use catalog::CatalogError;
use kafka::{CommittedOffset, OffsetCommit, Refused, Taken, Tenure, code};
use logstore::LogId;
use metadata::{Compare, CompareOp, KeyRange, OpResult, RangeRequest, Txn, TxnOp};

use crate::{LEADER_EPOCH, LogBroker, METADATA, to_i64};

/// Offsets one fenced transaction commits at most: three operations each (the cursor's state,
/// its acknowledgements dropped, the group's index), within etcd's 128 a transaction.
const OFFSETS_PER_TXN: usize = 40;

/// Reads one transaction batches at most.
const GETS_PER_TXN: usize = 120;

/// Attempts at taking a group whose coordinator record keeps changing.
const TAKE_ATTEMPTS: usize = 5;

/// Every group's configs by group, as a broker follows them (`kafka/groups/configs/`).
pub(crate) type FollowedConfigs = metadata::follow::Followed<HashMap<String, kafka::GroupConfig>>;

/// How long a broker that set a group's configs waits to follow its own write.
const FOLLOW_OWN_WRITE: std::time::Duration = std::time::Duration::from_secs(5);

/// A group's coordinator record.
#[derive(Debug, PartialEq, Eq)]
struct Coordinator {
    view: i64,
    incarnation: i64,
    writer: String,
}

impl Coordinator {
    fn encode(&self) -> String {
        format!("{} {} {}", self.view, self.incarnation, self.writer)
    }

    fn decode(v: &[u8]) -> Option<Coordinator> {
        let s = std::str::from_utf8(v).ok()?;
        let mut parts = s.splitn(3, ' ');
        Some(Coordinator {
            view: parts.next()?.parse().ok()?,
            incarnation: parts.next()?.parse().ok()?,
            writer: parts.next()?.to_owned(),
        })
    }
}

/// A group's id as it appears in keys and cursor names (INVALID_GROUP_ID if it cannot).
pub(crate) fn encoded(group: &str) -> Result<String, Refused> {
    kafka::groups::cursor_name(group)
        .and_then(|c| c.strip_prefix("kafka.").map(str::to_owned))
        .ok_or_else(|| invalid_group(group))
}

pub(crate) fn not_coordinator(group: &str) -> Refused {
    Refused::new(
        kafka::groups::errors::NOT_COORDINATOR,
        format!("group {group} is coordinated elsewhere now"),
    )
}

fn unavailable(e: impl std::fmt::Display) -> Refused {
    Refused::new(kafka::groups::errors::COORDINATOR_NOT_AVAILABLE, e.to_string())
}

impl LogBroker {
    /// This writer's id and the compare of its incarnation (a reader coordinates nothing).
    async fn coordinator_self(&self, group: &str) -> Result<(String, i64, Compare), Refused> {
        let Some(storage) = &self.storage else { return Err(not_coordinator(group)) };
        let id = storage.config().writer_id.clone();
        let incarnation = storage.incarnation().await;
        let member = self.reader.keys().member("writer", &id);
        Ok((id, incarnation, Compare::create_revision(member, CompareOp::Equal, incarnation)))
    }

    /// The compares of a write of `group` under `tenure`.
    pub(crate) async fn fence(
        &self,
        group: &str,
        enc: &str,
        tenure: Tenure,
    ) -> Result<Vec<Compare>, Refused> {
        let (_, _, alive) = self.coordinator_self(group).await?;
        if logstore::mutations::on(logstore::mutations::Mutation::UnfencedGroupWrites) {
            return Ok(Vec::new());
        }
        let record = self.reader.keys().group_coordinator(enc);
        Ok(vec![Compare::mod_revision(record, CompareOp::Equal, tenure.0), alive])
    }

    /// Runs a fenced transaction: NOT_COORDINATOR if its compares fail.
    pub(crate) async fn fenced(
        &self,
        group: &str,
        when: Vec<Compare>,
        ops: Vec<TxnOp>,
    ) -> Result<(), Refused> {
        let resp = self
            .reader
            .meta()
            .txn(Txn::new().when(when).and_then(ops))
            .await
            .map_err(unavailable)?;
        if resp.succeeded { Ok(()) } else { Err(not_coordinator(group)) }
    }

    /// Commits the offsets given, as (index of the item, log, position, index value), in
    /// fenced transactions; each item's outcome.
    async fn commit_fenced(
        &self,
        group: &str,
        enc: &str,
        tenure: Tenure,
        items: Vec<(usize, LogId, logstore::cursor::Position, String)>,
        out: &mut [Result<(), Refused>],
    ) {
        let fence = match self.fence(group, enc, tenure).await {
            Ok(f) => f,
            Err(r) => {
                for (i, ..) in items {
                    out[i] = Err(r.clone());
                }
                return;
            }
        };
        let name = format!("kafka.{enc}");
        let keys = self.reader.keys().clone();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let chunk: Vec<_> = items.by_ref().take(OFFSETS_PER_TXN).collect();
            let mut ops = Vec::with_capacity(chunk.len() * 3);
            let mut refused = Vec::new();
            for (i, log, position, indexed) in &chunk {
                match logstore::cursor::position_ops(&keys, *log, &name, position.clone()) {
                    Ok(o) => {
                        ops.extend(o);
                        ops.push(TxnOp::put(keys.group_offset(enc, *log), indexed.clone()));
                    }
                    Err(e) => refused.push((*i, crate::refused(e))),
                }
            }
            let result = self.fenced(group, fence.clone(), ops).await;
            for (i, ..) in &chunk {
                out[*i] = result.clone();
            }
            for (i, r) in refused {
                out[i] = Err(r);
            }
        }
    }

    /// The cursors of `logs` named `name`, read in batched transactions.
    async fn positions(
        &self,
        name: &str,
        logs: &[LogId],
    ) -> Result<Vec<Option<logstore::cursor::Position>>, Refused> {
        let keys = self.reader.keys();
        let mut out = Vec::with_capacity(logs.len());
        for chunk in logs.chunks(GETS_PER_TXN) {
            let gets =
                chunk.iter().map(|l| TxnOp::get(RangeRequest::key(keys.cursor_state(*l, name))));
            let resp = self.reader.meta().txn(Txn::new().and_then(gets)).await;
            for r in resp.map_err(Refused::server)?.results {
                let OpResult::Get(g) = r else {
                    return Err(Refused::server("a read answered the wrong shape"));
                };
                out.push(match g.kvs.first() {
                    Some(kv) => {
                        Some(logstore::cursor::decode_position(&kv.value).map_err(crate::refused)?)
                    }
                    None => None,
                });
            }
        }
        Ok(out)
    }

    /// Every key under `prefix` (one read), as (the key past the prefix, the value); keys that
    /// are not text are left out.
    async fn under(&self, prefix: Vec<u8>) -> Result<Vec<(String, Vec<u8>)>, Refused> {
        let resp = self
            .reader
            .meta()
            .range(RangeRequest::prefix(prefix.clone()))
            .await
            .map_err(Refused::server)?;
        Ok(resp
            .kvs
            .into_iter()
            .filter_map(|kv| {
                let rest = std::str::from_utf8(&kv.key[prefix.len()..]).ok()?.to_owned();
                Some((rest, kv.value))
            })
            .collect())
    }

    /// Every group's configs: one read and one watch of `kafka/groups/configs/` for the
    /// broker's life, from the first time they are asked for; none after.
    async fn followed_configs(&self) -> Result<&FollowedConfigs, Refused> {
        let keys = self.reader.keys();
        let prefix = keys.group_configs();
        let meta = self.reader.meta().clone();
        self.group_configs
            .get_or_try_init(|| async move {
                let skip = prefix.len();
                let build = move |kvs: Vec<metadata::KeyValue>| {
                    kvs.into_iter()
                        .filter_map(|kv| {
                            let enc = std::str::from_utf8(kv.key.get(skip..)?).ok()?;
                            let group = kafka::groups::group_of_cursor(&format!("kafka.{enc}"))?;
                            let config = kafka::configs::decode_group_config(&group, &kv.value)?;
                            Some((group, config))
                        })
                        .collect()
                };
                metadata::follow::follow(meta, prefix, build).await.map_err(unavailable)
            })
            .await
    }

    /// The log of each offset a group commits, as (index of the offset, its log); each
    /// offset's outcome so far (refused: a partition unknown, a negative offset).
    pub(crate) async fn offset_logs(
        &self,
        offsets: &[OffsetCommit],
    ) -> (Vec<Result<(), Refused>>, Vec<(usize, LogId)>) {
        let mut logs: HashMap<String, Result<Vec<LogId>, Refused>> = HashMap::new();
        let mut out: Vec<Result<(), Refused>> = Vec::with_capacity(offsets.len());
        let mut found = Vec::new();
        for (i, o) in offsets.iter().enumerate() {
            if !logs.contains_key(&o.topic) {
                let listed = self.partition_logs(&o.topic).await.map_err(|e| match e {
                    CatalogError::NotFound(_) | CatalogError::InvalidArgument(_) => {
                        Refused::new(code::UNKNOWN_TOPIC_OR_PARTITION, e.to_string())
                    }
                    e => Refused::server(e),
                });
                logs.insert(o.topic.clone(), listed);
            }
            let log = match logs.get(&o.topic) {
                Some(Ok(l)) => usize::try_from(o.partition).ok().and_then(|p| l.get(p).copied()),
                Some(Err(e)) => {
                    out.push(Err(e.clone()));
                    continue;
                }
                None => None,
            };
            let Some(log) = log else {
                let what = format!("{}-{}", o.topic, o.partition);
                out.push(Err(Refused::new(code::UNKNOWN_TOPIC_OR_PARTITION, what)));
                continue;
            };
            // Kafka stores any offset a group commits, past the log's end included; a
            // negative one names no position a cursor can hold.
            if o.offset < 0 {
                let what = format!("offset {}", o.offset);
                out.push(Err(Refused::new(code::OFFSET_OUT_OF_RANGE, what)));
                continue;
            }
            out.push(Ok(()));
            found.push((i, log));
        }
        (out, found)
    }

    /// The logs a group has committed offsets on, from its index: (log, topic, partition).
    async fn indexed(&self, enc: &str) -> Result<Vec<(LogId, String, i32)>, Refused> {
        self.index_under(self.reader.keys().group_offsets(enc)).await
    }

    /// A group's index of logs under `prefix` (one read): each key ends in a log id, each
    /// value is `<partition> <topic>`; (log, topic, partition), entries that do not parse left
    /// out. The index of committed offsets and that of share-partitions alike.
    pub(crate) async fn index_under(
        &self,
        prefix: Vec<u8>,
    ) -> Result<Vec<(LogId, String, i32)>, Refused> {
        let listed = self.under(prefix).await?;
        Ok(listed
            .iter()
            .filter_map(|(log, value)| {
                let (p, topic) = std::str::from_utf8(value).ok()?.split_once(' ')?;
                Some((LogId(log.parse().ok()?), topic.to_owned(), p.parse().ok()?))
            })
            .collect())
    }
}

/// What a committed offset's cursor holds.
pub(crate) fn position_of(o: &OffsetCommit) -> logstore::cursor::Position {
    logstore::cursor::Position {
        offset: o.offset as u64,
        properties: [(LEADER_EPOCH.to_owned(), i64::from(o.leader_epoch))].into(),
        labels: o.metadata.clone().map(|m| (METADATA.to_owned(), m)).into_iter().collect(),
    }
}

/// A committed offset as OffsetFetch answers it.
fn committed(
    topic: &str,
    partition: i32,
    pos: Option<&logstore::cursor::Position>,
) -> CommittedOffset {
    let none = CommittedOffset {
        topic: topic.to_owned(),
        partition,
        offset: -1,
        leader_epoch: -1,
        metadata: Some(String::new()),
        error: code::NONE,
    };
    let Some(pos) = pos else { return none };
    CommittedOffset {
        offset: to_i64(pos.offset).unwrap_or(-1),
        leader_epoch: pos
            .properties
            .get(LEADER_EPOCH)
            .and_then(|e| i32::try_from(*e).ok())
            .unwrap_or(-1),
        metadata: Some(pos.labels.get(METADATA).cloned().unwrap_or_default()),
        ..none
    }
}

#[async_trait::async_trait]
impl kafka::GroupOffsets for LogBroker {
    async fn take_group(
        &self,
        group: &str,
        view: i64,
        held: Option<Tenure>,
    ) -> Result<Taken, Refused> {
        let enc = encoded(group)?;
        let (me, incarnation, alive) = self.coordinator_self(group).await?;
        let keys = self.reader.keys();
        let (record, state) = (keys.group_coordinator(&enc), keys.group_state(&enc));
        let meta = self.reader.meta();
        for _ in 0..TAKE_ATTEMPTS {
            let found = meta.get(&record).await.map_err(unavailable)?;
            let rev = found.as_ref().map_or(0, |kv| kv.mod_revision);
            if held.is_some_and(|t| t.0 == rev) {
                return Ok(Taken { tenure: Tenure(rev), state: None, kept: true });
            }
            let theirs = found.as_ref().and_then(|kv| Coordinator::decode(&kv.value));
            if let Some(c) = &theirs
                && c.view > view
                && c.writer != me
            {
                return Err(not_coordinator(group));
            }
            let mine = Coordinator { view, incarnation, writer: me.clone() };
            let txn = Txn::new()
                .when([Compare::mod_revision(record.clone(), CompareOp::Equal, rev), alive.clone()])
                .and_then([
                    TxnOp::put(record.clone(), mine.encode()),
                    TxnOp::get(RangeRequest::key(state.clone())),
                ]);
            let resp = meta.txn(txn).await.map_err(unavailable)?;
            if !resp.succeeded {
                continue;
            }
            let stored = match resp.results.get(1) {
                Some(OpResult::Get(g)) => g.kvs.first().map(|kv| Bytes::from(kv.value.clone())),
                _ => None,
            };
            let stored = stored.filter(|_| {
                !logstore::mutations::on(logstore::mutations::Mutation::ForgetGroupState)
            });
            tracing::debug!(group, tenure = resp.revision, view, "Kafka group taken");
            return Ok(Taken { tenure: Tenure(resp.revision), state: stored, kept: false });
        }
        Err(unavailable(format!("group {group}: its coordinator record keeps changing")))
    }

    async fn store_group(&self, group: &str, tenure: Tenure, state: Bytes) -> Result<(), Refused> {
        let enc = encoded(group)?;
        let fence = self.fence(group, &enc, tenure).await?;
        let put = TxnOp::put(self.reader.keys().group_state(&enc), state.to_vec());
        self.fenced(group, fence, vec![put]).await
    }

    async fn commit_offsets(
        &self,
        group: &str,
        tenure: Tenure,
        offsets: Vec<OffsetCommit>,
    ) -> Vec<Result<(), Refused>> {
        let enc = match encoded(group) {
            Ok(e) => e,
            Err(r) => return offsets.iter().map(|_| Err(r.clone())).collect(),
        };
        let (mut out, logs) = self.offset_logs(&offsets).await;
        let items = logs
            .into_iter()
            .map(|(i, log)| {
                let o = &offsets[i];
                (i, log, position_of(o), format!("{} {}", o.partition, o.topic))
            })
            .collect();
        self.commit_fenced(group, &enc, tenure, items, &mut out).await;
        out
    }

    async fn committed_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<CommittedOffset>, Refused> {
        let enc = encoded(group)?;
        let name = format!("kafka.{enc}");
        let Some(asked) = partitions else {
            // Every partition the index names whose topic still has that log there (a topic
            // deleted, or deleted and created again, has none of the group's offsets).
            let mut found = Vec::new();
            for (log, topic, p) in self.indexed(&enc).await? {
                let logs = self.partition_logs(&topic).await.unwrap_or_default();
                if usize::try_from(p).ok().and_then(|i| logs.get(i)) == Some(&log) {
                    found.push((log, topic, p));
                }
            }
            let logs: Vec<LogId> = found.iter().map(|(l, ..)| *l).collect();
            let positions = self.positions(&name, &logs).await?;
            return Ok(found
                .iter()
                .zip(&positions)
                .filter_map(|((_, t, p), pos)| pos.as_ref().map(|pos| committed(t, *p, Some(pos))))
                .collect());
        };
        let mut out = Vec::new();
        for (topic, parts) in asked {
            // A topic that does not exist has no committed offsets: -1, as Kafka answers.
            let logs = self.partition_logs(&topic).await.unwrap_or_default();
            let at: Vec<Option<LogId>> = parts
                .iter()
                .map(|p| usize::try_from(*p).ok().and_then(|i| logs.get(i).copied()))
                .collect();
            let known: Vec<LogId> = at.iter().flatten().copied().collect();
            let mut positions = self.positions(&name, &known).await?.into_iter();
            for (p, log) in parts.iter().zip(at) {
                let pos = log.and_then(|_| positions.next().flatten());
                out.push(committed(&topic, *p, pos.as_ref()));
            }
        }
        Ok(out)
    }

    async fn stored_groups(&self) -> Result<Vec<(String, Bytes)>, Refused> {
        let listed = self.under(self.reader.keys().group_states()).await?;
        Ok(listed
            .into_iter()
            .filter_map(|(enc, value)| {
                let group = kafka::groups::group_of_cursor(&format!("kafka.{enc}"))?;
                Some((group, Bytes::from(value)))
            })
            .collect())
    }

    async fn delete_group(&self, group: &str, tenure: Tenure) -> Result<bool, Refused> {
        let enc = encoded(group)?;
        let fence = self.fence(group, &enc, tenure).await?;
        let keys = self.reader.keys().clone();
        let indexed = self.indexed(&enc).await?;
        for chunk in indexed.chunks(OFFSETS_PER_TXN) {
            let ops: Vec<TxnOp> =
                chunk.iter().flat_map(|(log, ..)| forget_offset(&keys, &enc, *log)).collect();
            self.fenced(group, fence.clone(), ops).await?;
        }
        // A share group's share-partitions, likewise.
        let shares = self.share_index(&enc).await?;
        for chunk in shares.chunks(OFFSETS_PER_TXN) {
            let mut ops = Vec::new();
            for (log, ..) in chunk {
                ops.extend(self.forget_share(&enc, *log)?);
            }
            self.fenced(group, fence.clone(), ops).await?;
        }
        // The records last: a deletion cut short is finished by the next one.
        let state = keys.group_state(&enc);
        let txn = Txn::new().when(fence).and_then([
            TxnOp::get(RangeRequest::key(state.clone()).keys_only()),
            TxnOp::delete(KeyRange::key(state)),
            TxnOp::delete(KeyRange::key(keys.group_coordinator(&enc))),
        ]);
        let resp = self.reader.meta().txn(txn).await.map_err(unavailable)?;
        if !resp.succeeded {
            return Err(not_coordinator(group));
        }
        let had_state = matches!(resp.results.first(), Some(OpResult::Get(g)) if !g.kvs.is_empty());
        Ok(had_state || !indexed.is_empty() || !shares.is_empty())
    }

    async fn release_group(&self, group: &str, tenure: Tenure) -> Result<(), Refused> {
        let enc = encoded(group)?;
        let keys = self.reader.keys();
        let record = keys.group_coordinator(&enc);
        // Not fenced by liveness: a writer whose lease lapsed still removes what it left.
        let txn = Txn::new()
            .when([
                Compare::mod_revision(record.clone(), CompareOp::Equal, tenure.0),
                Compare::version(keys.group_state(&enc), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::delete(KeyRange::key(record))]);
        let resp = self.reader.meta().txn(txn).await.map_err(unavailable)?;
        if resp.succeeded {
            tracing::debug!(
                group,
                tenure = tenure.0,
                "Kafka group never formed: its record removed"
            );
        }
        Ok(())
    }

    async fn group_config(&self, group: &str) -> Result<kafka::GroupConfig, Refused> {
        let followed = self.followed_configs().await?;
        Ok(followed.current().0.get(group).cloned().unwrap_or_default())
    }

    async fn configured_groups(&self) -> Result<Vec<String>, Refused> {
        let followed = self.followed_configs().await?;
        let mut groups: Vec<String> = followed.current().0.keys().cloned().collect();
        groups.sort();
        Ok(groups)
    }

    async fn set_group_config(
        &self,
        group: &str,
        config: kafka::GroupConfig,
        validate_only: bool,
    ) -> Result<(), Refused> {
        let enc = encoded(group)?;
        let followed = self.followed_configs().await?;
        let known = followed.current();
        if !config.is_empty()
            && !known.0.contains_key(group)
            && known.0.len() >= kafka::configs::MAX_GROUP_CONFIGS
        {
            return Err(Refused::new(
                code::POLICY_VIOLATION,
                format!(
                    "{} groups have configs already, the most a cluster keeps",
                    kafka::configs::MAX_GROUP_CONFIGS
                ),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let key = self.reader.keys().group_config(&enc);
        let op = if config.is_empty() {
            TxnOp::delete(KeyRange::key(key))
        } else {
            TxnOp::put(key, kafka::configs::encode_group_config(&config))
        };
        let resp = self.reader.meta().txn(Txn::new().and_then([op])).await.map_err(unavailable)?;
        let wrote = !matches!(resp.results.first(), Some(OpResult::Delete { deleted: 0 }));
        // What this broker answers next (a DescribeConfigs, a heartbeat) has the change.
        if wrote && !followed.clone().caught_up(resp.revision, FOLLOW_OWN_WRITE).await {
            tracing::warn!(group, "a group's configs set, not yet followed here");
        }
        Ok(())
    }

    async fn delete_offset(
        &self,
        group: &str,
        tenure: Tenure,
        topic: &str,
        partition: i32,
    ) -> Result<(), Refused> {
        let enc = encoded(group)?;
        let unknown =
            || Refused::new(code::UNKNOWN_TOPIC_OR_PARTITION, format!("{topic}-{partition}"));
        let logs = self.partition_logs(topic).await.map_err(|_| unknown())?;
        let log = usize::try_from(partition)
            .ok()
            .and_then(|p| logs.get(p).copied())
            .ok_or_else(unknown)?;
        let fence = self.fence(group, &enc, tenure).await?;
        let ops = forget_offset(self.reader.keys(), &enc, log).to_vec();
        // No offset there: nothing to delete, as Kafka answers.
        self.fenced(group, fence, ops).await
    }
}

/// What deletes a group's committed offset on `log`: its cursor's state and acknowledgements,
/// and its entry in the group's index.
fn forget_offset(keys: &logstore::keys::Keys, enc: &str, log: LogId) -> [TxnOp; 3] {
    let name = format!("kafka.{enc}");
    [
        TxnOp::delete(KeyRange::key(keys.cursor_state(log, &name))),
        TxnOp::delete(KeyRange::prefix(keys.cursor_acks_prefix(log, &name))),
        TxnOp::delete(KeyRange::key(keys.group_offset(enc, log))),
    ]
}

/// A group id no cursor can be named after.
fn invalid_group(group: &str) -> Refused {
    Refused::new(kafka::groups::errors::INVALID_GROUP_ID, format!("group id `{group}`"))
}

#[cfg(test)]
mod tests {
    use super::Coordinator;

    #[test]
    fn a_coordinator_record_round_trips_and_garbage_is_none() {
        let c = Coordinator { view: 42, incarnation: 7, writer: "w 1".to_owned() };
        assert_eq!(Coordinator::decode(c.encode().as_bytes()), Some(c));
        assert_eq!(Coordinator::decode(b"x 1 w"), None);
        assert_eq!(Coordinator::decode(b"1"), None);
    }
}
