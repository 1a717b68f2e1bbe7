//! Consumer groups' committed offsets, kept as cursors on the partitions' logs (`kafka.<group>`).

use std::collections::HashMap;

use catalog::CatalogError;
use kafka::{CommittedOffset, OffsetCommit, Refused, code};
use logstore::{LogError, LogId};

use crate::{LEADER_EPOCH, LogBroker, METADATA, refused, to_i64};

#[async_trait::async_trait]
impl kafka::GroupOffsets for LogBroker {
    async fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<OffsetCommit>,
    ) -> Vec<Result<(), Refused>> {
        let Some(name) = kafka::groups::cursor_name(group) else {
            return offsets.iter().map(|_| Err(invalid_group(group))).collect();
        };
        let reader = &self.reader;
        let mut logs: HashMap<String, Result<Vec<LogId>, Refused>> = HashMap::new();
        let mut out = Vec::with_capacity(offsets.len());
        for o in offsets {
            if !logs.contains_key(&o.topic) {
                let found = self.partition_logs(&o.topic).await.map_err(|e| match e {
                    CatalogError::NotFound(_) | CatalogError::InvalidArgument(_) => {
                        Refused::new(code::UNKNOWN_TOPIC_OR_PARTITION, e.to_string())
                    }
                    e => Refused::server(e),
                });
                logs.insert(o.topic.clone(), found);
            }
            let log = match logs.get(&o.topic) {
                Some(Ok(l)) => usize::try_from(o.partition).ok().and_then(|p| l.get(p).copied()),
                Some(Err(e)) => {
                    out.push(Err(e.clone()));
                    continue;
                }
                None => None,
            };
            let (Some(log), Ok(offset)) = (log, u64::try_from(o.offset)) else {
                out.push(Err(if o.offset < 0 {
                    Refused::new(code::OFFSET_OUT_OF_RANGE, format!("offset {}", o.offset))
                } else {
                    Refused::new(
                        code::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("{}-{}", o.topic, o.partition),
                    )
                }));
                continue;
            };
            let position = logstore::cursor::Position {
                offset,
                properties: [(LEADER_EPOCH.to_owned(), i64::from(o.leader_epoch))].into(),
                labels: o.metadata.map(|m| (METADATA.to_owned(), m)).into_iter().collect(),
            };
            out.push(
                logstore::cursor::set_position(reader, log, &name, position).await.map_err(refused),
            );
        }
        out
    }

    async fn committed_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<CommittedOffset>, Refused> {
        let name = kafka::groups::cursor_name(group).ok_or_else(|| invalid_group(group))?;
        let reader = &self.reader;
        let all = partitions.is_none();
        let asked: Vec<(String, Vec<i32>)> = match partitions {
            Some(p) => p,
            None => self
                .catalog
                .list()
                .await
                .map_err(Refused::server)?
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

    async fn groups_with_offsets(&self) -> Result<Vec<String>, Refused> {
        let streams = self.catalog.list().await.map_err(Refused::server)?;
        let mut groups = std::collections::BTreeSet::new();
        for s in streams {
            for log in s.partitions {
                match logstore::LogCursor::list(&self.reader, log).await {
                    Ok(names) => groups
                        .extend(names.iter().filter_map(|n| kafka::groups::group_of_cursor(n))),
                    Err(LogError::NotFound(_)) => {}
                    Err(e) => return Err(refused(e)),
                }
            }
        }
        Ok(groups.into_iter().collect())
    }

    async fn delete_offsets(&self, group: &str) -> Result<usize, Refused> {
        let name = kafka::groups::cursor_name(group).ok_or_else(|| invalid_group(group))?;
        let reader = &self.reader;
        let streams = self.catalog.list().await.map_err(Refused::server)?;
        let mut deleted = 0;
        for s in streams {
            for log in s.partitions {
                match logstore::LogCursor::delete(reader, log, &name).await {
                    Ok(()) => deleted += 1,
                    Err(LogError::CursorNotFound { .. }) | Err(LogError::NotFound(_)) => {}
                    Err(e) => return Err(refused(e)),
                }
            }
        }
        Ok(deleted)
    }

    async fn delete_offset(&self, group: &str, topic: &str, partition: i32) -> Result<(), Refused> {
        let name = kafka::groups::cursor_name(group).ok_or_else(|| invalid_group(group))?;
        let unknown =
            || Refused::new(code::UNKNOWN_TOPIC_OR_PARTITION, format!("{topic}-{partition}"));
        let logs = self.partition_logs(topic).await.map_err(|_| unknown())?;
        let log = usize::try_from(partition)
            .ok()
            .and_then(|p| logs.get(p).copied())
            .ok_or_else(unknown)?;
        match logstore::LogCursor::delete(&self.reader, log, &name).await {
            // No offset there: nothing to delete, as Kafka answers.
            Ok(()) | Err(LogError::CursorNotFound { .. }) => Ok(()),
            Err(e) => Err(refused(e)),
        }
    }
}

/// A group id no cursor can be named after.
fn invalid_group(group: &str) -> Refused {
    Refused::new(kafka::groups::errors::INVALID_GROUP_ID, format!("group id `{group}`"))
}
