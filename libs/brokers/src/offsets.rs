//! Consumer groups' committed offsets, kept as cursors on the partitions' logs (`kafka.<group>`).

use std::collections::HashMap;

use catalog::CatalogError;
use kafka::{CommittedOffset, OffsetCommit, code};
use logstore::{LogError, LogId};

use crate::{LEADER_EPOCH, LogBroker, METADATA, refused, to_i64};

#[async_trait::async_trait]
impl kafka::GroupOffsets for LogBroker {
    async fn commit_offsets(&self, group: &str, offsets: Vec<OffsetCommit>) -> Vec<i16> {
        let Some(name) = kafka::groups::cursor_name(group) else {
            return vec![kafka::groups::errors::INVALID_GROUP_ID; offsets.len()];
        };
        let reader = &self.reader;
        let mut logs: HashMap<String, Result<Vec<LogId>, i16>> = HashMap::new();
        let mut out = Vec::with_capacity(offsets.len());
        for o in offsets {
            if !logs.contains_key(&o.topic) {
                let found = self.partition_logs(&o.topic).await.map_err(|e| match e {
                    CatalogError::NotFound(_) | CatalogError::InvalidArgument(_) => {
                        code::UNKNOWN_TOPIC_OR_PARTITION
                    }
                    _ => code::UNKNOWN_SERVER_ERROR,
                });
                logs.insert(o.topic.clone(), found);
            }
            let log = match logs.get(&o.topic) {
                Some(Ok(l)) => usize::try_from(o.partition).ok().and_then(|p| l.get(p).copied()),
                Some(Err(e)) => {
                    out.push(*e);
                    continue;
                }
                None => None,
            };
            let (Some(log), Ok(offset)) = (log, u64::try_from(o.offset)) else {
                out.push(if o.offset < 0 {
                    code::OFFSET_OUT_OF_RANGE
                } else {
                    code::UNKNOWN_TOPIC_OR_PARTITION
                });
                continue;
            };
            let position = logstore::cursor::Position {
                offset,
                properties: [(LEADER_EPOCH.to_owned(), i64::from(o.leader_epoch))].into(),
                labels: o.metadata.map(|m| (METADATA.to_owned(), m)).into_iter().collect(),
            };
            out.push(match logstore::cursor::set_position(reader, log, &name, position).await {
                Ok(()) => code::NONE,
                Err(e) => refused(e).code,
            });
        }
        out
    }

    async fn committed_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<CommittedOffset>, i16> {
        let name =
            kafka::groups::cursor_name(group).ok_or(kafka::groups::errors::INVALID_GROUP_ID)?;
        let reader = &self.reader;
        let all = partitions.is_none();
        let asked: Vec<(String, Vec<i32>)> = match partitions {
            Some(p) => p,
            None => self
                .catalog
                .list()
                .await
                .map_err(|_| code::UNKNOWN_SERVER_ERROR)?
                .into_iter()
                .map(|s| (s.name, (0..s.partitions.len() as i32).collect()))
                .collect(),
        };
        let mut out = Vec::new();
        for (topic, parts) in asked {
            // A topic that does not exist has no committed offsets: -1, as Kafka answers.
            let logs = self.partition_logs(&topic).await.unwrap_or_default();
            for p in parts {
                let none = CommittedOffset {
                    topic: topic.clone(),
                    partition: p,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: Some(String::new()),
                    error: code::NONE,
                };
                let Some(log) = usize::try_from(p).ok().and_then(|i| logs.get(i).copied()) else {
                    out.push(none);
                    continue;
                };
                match logstore::cursor::position(reader, log, &name).await {
                    Ok(Some(pos)) => out.push(CommittedOffset {
                        offset: to_i64(pos.offset).unwrap_or(-1),
                        leader_epoch: pos
                            .properties
                            .get(LEADER_EPOCH)
                            .and_then(|e| i32::try_from(*e).ok())
                            .unwrap_or(-1),
                        metadata: Some(pos.labels.get(METADATA).cloned().unwrap_or_default()),
                        ..none
                    }),
                    // Every partition asked for is answered; with none asked, only those with
                    // an offset are.
                    Ok(None) if !all => out.push(none),
                    Ok(None) => {}
                    Err(e) => out.push(CommittedOffset { error: refused(e).code, ..none }),
                }
            }
        }
        Ok(out)
    }

    async fn groups_with_offsets(&self) -> Result<Vec<String>, i16> {
        let streams = self.catalog.list().await.map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        let mut groups = std::collections::BTreeSet::new();
        for s in streams {
            for log in s.partitions {
                match logstore::LogCursor::list(&self.reader, log).await {
                    Ok(names) => groups
                        .extend(names.iter().filter_map(|n| kafka::groups::group_of_cursor(n))),
                    Err(LogError::NotFound(_)) => {}
                    Err(e) => return Err(refused(e).code),
                }
            }
        }
        Ok(groups.into_iter().collect())
    }

    async fn delete_offsets(&self, group: &str) -> Result<usize, i16> {
        let name =
            kafka::groups::cursor_name(group).ok_or(kafka::groups::errors::INVALID_GROUP_ID)?;
        let reader = &self.reader;
        let streams = self.catalog.list().await.map_err(|_| code::UNKNOWN_SERVER_ERROR)?;
        let mut deleted = 0;
        for s in streams {
            for log in s.partitions {
                match logstore::LogCursor::delete(reader, log, &name).await {
                    Ok(()) => deleted += 1,
                    Err(LogError::CursorNotFound { .. }) | Err(LogError::NotFound(_)) => {}
                    Err(e) => return Err(refused(e).code),
                }
            }
        }
        Ok(deleted)
    }

    async fn delete_offset(&self, group: &str, topic: &str, partition: i32) -> i16 {
        let Some(name) = kafka::groups::cursor_name(group) else {
            return kafka::groups::errors::INVALID_GROUP_ID;
        };
        let logs = match self.partition_logs(topic).await {
            Ok(l) => l,
            Err(_) => return code::UNKNOWN_TOPIC_OR_PARTITION,
        };
        let Some(log) = usize::try_from(partition).ok().and_then(|p| logs.get(p).copied()) else {
            return code::UNKNOWN_TOPIC_OR_PARTITION;
        };
        match logstore::LogCursor::delete(&self.reader, log, &name).await {
            // No offset there: nothing to delete, as Kafka answers.
            Ok(()) | Err(LogError::CursorNotFound { .. }) => code::NONE,
            Err(e) => refused(e).code,
        }
    }
}
