//! The writer as a Kafka broker (ARCHITECTURE §11): what the Kafka front end asks of it,
//! answered from the catalog and the live writers. Topics are streams; partition p is the
//! stream's log p; a partition's leader is the writer the routing function picks for the
//! client's zone, named by its node id; brokers are the live writers that serve Kafka.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use catalog::{Catalog, CatalogError, StreamInfo, StreamProps, Target};
use kafka::producers::{Check, Producers};
use kafka::{
    BrokerError, BrokerNode, Fetched, PartitionInfo, Produced, Refused, TopicInfo, TopicSettings,
    code,
};
use logstore::{LogError, LogId, LogStorage};

/// The Kafka broker of one writer (or standalone).
#[derive(Clone, Debug)]
pub struct WriterBroker {
    catalog: Catalog,
    cluster: String,
    storage: LogStorage,
    /// Idempotent producers' state per (log, slot), with the served epoch it belongs to.
    producers: Arc<Mutex<HashMap<(LogId, String), Tenure>>>,
    /// Producer ids this writer may hand out (a block from the metadata store).
    producer_ids: Arc<tokio::sync::Mutex<std::ops::Range<i64>>>,
}

/// A slot's idempotent producers, with the served epoch they were seen under (`None` until
/// this writer's first commit in the slot).
type Tenure = (Option<i64>, Producers);

/// Producer ids taken from the metadata store at a time.
const PRODUCER_ID_BLOCK: i64 = 1000;

impl WriterBroker {
    pub fn new(catalog: Catalog, cluster: &str, storage: LogStorage) -> Self {
        WriterBroker {
            catalog,
            cluster: cluster.to_owned(),
            storage,
            producers: Default::default(),
            producer_ids: Arc::new(tokio::sync::Mutex::new(0..0)),
        }
    }

    /// Checks an idempotent batch against its producer's state for (log, slot) under the
    /// epoch this writer serves it at now (state of another tenure is dropped first).
    fn check(&self, log: LogId, slot: &str, h: &recordbatch::BatchHeader) -> Check {
        let tenure = self.storage.served_epoch(log, slot);
        let mut map = self.producers.lock().unwrap_or_else(|e| e.into_inner());
        let e = map.entry((log, slot.to_owned())).or_default();
        // Unknown (None) until this writer's first commit in the slot: adopted then.
        if e.0.is_some() && e.0 != tenure {
            *e = (tenure, Producers::default());
        }
        e.0 = e.0.or(tenure);
        let p = h.producer;
        e.1.check(p.producer_id, p.producer_epoch, p.base_sequence, h.last_sequence())
    }

    /// The log of a topic's partition, and the owner slot a client in `zone` appends in, if
    /// this writer owns it; else NOT_LEADER_OR_FOLLOWER naming the owner.
    async fn led(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
    ) -> Result<(logstore::LogId, String), Refused> {
        let unknown = || {
            Refused::new(
                code::UNKNOWN_TOPIC_OR_PARTITION,
                format!("topic {topic} has no partition {partition}"),
            )
        };
        let p = u32::try_from(partition).map_err(|_| unknown())?;
        let route = match self.catalog.route_to(topic, Target::Partition(p), zone).await {
            Ok(r) => r,
            Err(CatalogError::NotFound(_)) | Err(CatalogError::InvalidArgument(_)) => {
                return Err(unknown());
            }
            Err(e) => return Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, e.to_string())),
        };
        match &route.owner {
            Some(o) if o.id == self.storage.config().writer_id => Ok((route.log, route.slot)),
            Some(o) => Err(Refused {
                code: code::NOT_LEADER_OR_FOLLOWER,
                message: format!("partition {partition} of {topic} is led by {}", o.id),
                leader: (o.node_id >= 0).then_some(o.node_id),
            }),
            None => Err(Refused::new(code::NOT_LEADER_OR_FOLLOWER, "no writer lives")),
        }
    }

    async fn writers(&self) -> Result<Vec<routing::Member>, BrokerError> {
        self.catalog.members("writer").await.map_err(|e| BrokerError(e.to_string()))
    }

    /// A stream as a topic, each partition led by its owner for `zone`.
    fn topic(s: &StreamInfo, writers: &[routing::Member], zone: Option<&str>) -> TopicInfo {
        let partitions = (0..s.partitions.len() as u32)
            .map(|p| PartitionInfo {
                index: p as i32,
                leader: routing::choose_owner(writers, &s.identity, p, zone)
                    .filter(|m| !m.kafka.is_empty() && m.node_id >= 0)
                    .map(|m| m.node_id),
            })
            .collect();
        TopicInfo {
            name: s.name.clone(),
            error: code::NONE,
            id: uuid::Uuid::parse_str(&s.identity).unwrap_or_default(),
            partitions,
        }
    }

    /// One named stream; created with `create` partitions when it does not exist.
    async fn named(&self, name: &str, create: Option<u32>) -> Result<StreamInfo, i16> {
        let failed = |e: CatalogError| match e {
            CatalogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
            CatalogError::InvalidArgument(_) => code::INVALID_TOPIC_EXCEPTION,
            other => {
                tracing::warn!(topic = name, error = %other, "Kafka Metadata: topic unreadable");
                code::UNKNOWN_SERVER_ERROR
            }
        };
        match (self.catalog.get(name).await, create) {
            (Ok(s), _) => Ok(s),
            (Err(CatalogError::NotFound(_)), Some(n)) => {
                match self.catalog.create(name, n, StreamProps::default()).await {
                    Ok(s) => {
                        tracing::info!(topic = name, partitions = n, "Kafka: topic auto-created");
                        Ok(s)
                    }
                    // Another broker created it first.
                    Err(CatalogError::AlreadyExists(_)) => {
                        self.catalog.get(name).await.map_err(failed)
                    }
                    Err(e) => Err(failed(e)),
                }
            }
            (Err(e), _) => Err(failed(e)),
        }
    }
}

#[async_trait::async_trait]
impl kafka::Broker for WriterBroker {
    fn cluster_id(&self) -> String {
        self.cluster.clone()
    }

    async fn brokers(&self) -> Result<Vec<BrokerNode>, BrokerError> {
        let mut out: Vec<BrokerNode> = self
            .writers()
            .await?
            .into_iter()
            .filter(|m| m.node_id >= 0)
            .filter_map(|m| {
                let (host, port) = m.kafka.rsplit_once(':')?;
                Some(BrokerNode {
                    node_id: m.node_id,
                    host: host.trim_matches(['[', ']']).to_owned(),
                    port: port.parse().ok()?,
                    rack: (m.zone != "*").then_some(m.zone),
                })
            })
            .collect();
        out.sort_by_key(|b| b.node_id);
        Ok(out)
    }

    async fn topics(
        &self,
        names: Option<&[String]>,
        zone: Option<&str>,
        create: Option<u32>,
    ) -> Result<Vec<TopicInfo>, BrokerError> {
        let writers = self.writers().await?;
        let Some(names) = names else {
            let all = self.catalog.list().await.map_err(|e| BrokerError(e.to_string()))?;
            return Ok(all.iter().map(|s| Self::topic(s, &writers, zone)).collect());
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            out.push(match self.named(name, create).await {
                Ok(s) => Self::topic(&s, &writers, zone),
                Err(code) => TopicInfo::failed(name, code),
            });
        }
        Ok(out)
    }

    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        batch: bytes::Bytes,
        header: &recordbatch::BatchHeader,
    ) -> Result<kafka::Commit, Refused> {
        let (log, slot) = self.led(topic, partition, zone).await?;
        // validate() checked the count is last_offset_delta + 1 and at least 1.
        let record_count = u32::try_from(header.record_count)
            .map_err(|_| Refused::new(code::CORRUPT_MESSAGE, "record count"))?;
        let idempotent = header.producer.producer_id >= 0;
        if idempotent {
            match self.check(log, &slot, header) {
                Check::Append => {}
                Check::Duplicate(original) => return Ok(Box::pin(original)),
                Check::Refuse(r) => return Err(r),
            }
        }
        let committing = self
            .storage
            .submit_in_slot(log, &slot, record_count, batch, None)
            .await
            .map_err(refused)?;
        let commit: kafka::Commit = Box::pin(async move {
            let h = committing.await.map_err(refused)?;
            Ok(Produced { base_offset: to_i64(h.offset)? })
        });
        if !idempotent {
            return Ok(commit);
        }
        let shared = kafka::producers::shared(commit);
        let p = header.producer;
        let mut map = self.producers.lock().unwrap_or_else(|e| e.into_inner());
        let e = map.entry((log, slot)).or_default();
        e.1.admitted(
            p.producer_id,
            p.producer_epoch,
            p.base_sequence,
            header.last_sequence(),
            shared.clone(),
        );
        Ok(Box::pin(shared))
    }

    async fn init_producer_id(&self, current: Option<(i64, i16)>) -> Result<(i64, i16), i16> {
        // KIP-360: the same producer at its next epoch, while epochs last.
        if let Some((id, epoch)) = current
            && (0..i16::MAX - 1).contains(&epoch)
        {
            return Ok((id, epoch + 1));
        }
        let mut ids = self.producer_ids.lock().await;
        if ids.is_empty() {
            *ids = logstore::membership::producer_ids(
                self.storage.metadata().as_ref(),
                &self.cluster,
                PRODUCER_ID_BLOCK,
            )
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "Kafka: no producer ids");
                code::COORDINATOR_NOT_AVAILABLE
            })?;
        }
        let id = ids.start;
        ids.start += 1;
        Ok((id, 0))
    }

    async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Fetched, Refused> {
        let (log, _) = self.led(topic, partition, zone).await?;
        let info = self.storage.info(log).await.map_err(refused)?;
        let (hw, start) = (to_i64(info.next_offset)?, to_i64(info.first_offset)?);
        if offset < start || offset > hw {
            return Err(Refused::new(
                code::OFFSET_OUT_OF_RANGE,
                format!("offset {offset} is outside [{start}, {hw}]"),
            ));
        }
        let mut fetched =
            Fetched { high_watermark: hw, log_start_offset: start, records: Bytes::new() };
        if offset == hw {
            return Ok(fetched);
        }
        let entries = self
            .storage
            .read_entries(log, offset as u64, MAX_FETCH_RECORDS, max_bytes as u64)
            .await
            .map_err(refused)?;
        let mut out = BytesMut::with_capacity(entries.iter().map(|e| e.payload.len()).sum());
        for e in entries {
            // Entries that are not Kafka batches (written in Lakelog's first record format)
            // are left out: a Kafka client could not read them.
            if recordbatch::BatchHeader::parse(&e.payload).is_err() {
                continue;
            }
            let at = out.len();
            out.extend_from_slice(&e.payload);
            recordbatch::set_base_offset(&mut out[at..], to_i64(e.header.offset)?)
                .map_err(|e| Refused::new(code::UNKNOWN_SERVER_ERROR, e.to_string()))?;
        }
        fetched.records = out.freeze();
        Ok(fetched)
    }

    async fn wait_for(&self, targets: Vec<(String, i32, i64)>, max_wait: std::time::Duration) {
        let reader = self.storage.reader();
        let mut waits = Vec::with_capacity(targets.len());
        for (topic, partition, offset) in targets {
            let (Ok(p), Ok(offset)) = (u32::try_from(partition), u64::try_from(offset)) else {
                continue;
            };
            let Ok(log) = self.catalog.route(&topic, p).await else { continue };
            waits.push(Box::pin(async move {
                let _ = reader.wait_beyond(log, offset, max_wait).await;
            }));
        }
        if waits.is_empty() {
            tokio::time::sleep(max_wait).await;
            return;
        }
        // The first partition with more, or the wait's end (each wait ends by then too).
        let _ = tokio::time::timeout(max_wait, futures::future::select_all(waits)).await;
    }

    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        settings: TopicSettings,
        validate_only: bool,
    ) -> Result<uuid::Uuid, Refused> {
        // The name first, then the count, as the catalog checks them.
        catalog::validate_name(name).map_err(topic_refused)?;
        if partitions == 0 || partitions > catalog::MAX_PARTITIONS {
            return Err(Refused::new(code::INVALID_PARTITIONS, format!("{partitions} partitions")));
        }
        if validate_only {
            return match self.catalog.get(name).await {
                Ok(_) => Err(topic_refused(CatalogError::AlreadyExists(name.to_owned()))),
                Err(CatalogError::NotFound(_)) => Ok(uuid::Uuid::nil()),
                Err(e) => Err(topic_refused(e)),
            };
        }
        let props = StreamProps {
            retention_ms: settings.retention_ms,
            retention_bytes: settings.retention_bytes,
        };
        let s = self.catalog.create(name, partitions, props).await.map_err(topic_refused)?;
        Ok(uuid::Uuid::parse_str(&s.identity).unwrap_or_default())
    }

    async fn delete_topic(&self, name: &str) -> Result<uuid::Uuid, Refused> {
        let s = self.catalog.get(name).await.map_err(topic_refused)?;
        self.catalog.delete(name).await.map_err(topic_refused)?;
        Ok(uuid::Uuid::parse_str(&s.identity).unwrap_or_default())
    }

    async fn create_partitions(
        &self,
        name: &str,
        count: u32,
        validate_only: bool,
    ) -> Result<(), Refused> {
        let s = self.catalog.get(name).await.map_err(topic_refused)?;
        let have = s.partitions.len() as u32;
        // Kafka refuses a count that adds nothing as well as one that removes partitions.
        if count <= have {
            return Err(Refused::new(
                code::INVALID_PARTITIONS,
                format!("topic {name} has {have} partitions; asked for {count}"),
            ));
        }
        if count > catalog::MAX_PARTITIONS {
            return Err(Refused::new(code::INVALID_PARTITIONS, format!("{count} partitions")));
        }
        if !validate_only {
            self.catalog
                .add_partitions(name, count)
                .await
                .map_err(|e| admin_refused(e, code::INVALID_PARTITIONS))?;
        }
        Ok(())
    }

    async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        zone: Option<&str>,
        timestamp: i64,
    ) -> Result<(i64, i64), Refused> {
        let (log, _) = self.led(topic, partition, zone).await?;
        let info = self.storage.info(log).await.map_err(refused)?;
        match timestamp {
            -2 => Ok((to_i64(info.first_offset)?, -1)),
            -1 => Ok((to_i64(info.next_offset)?, -1)),
            t if t < 0 => Err(Refused::new(
                code::INVALID_REQUEST,
                format!("timestamp {t}: only -1, -2 or a time are supported"),
            )),
            t => {
                let found = logstore::retention::find_by_timestamp(self.storage.reader(), log, t)
                    .await
                    .map_err(refused)?;
                match found {
                    Some(h) => Ok((to_i64(h.offset)?, h.timestamp)),
                    // Every entry is older: Kafka answers the end (and no timestamp).
                    None => Ok((to_i64(info.next_offset)?, -1)),
                }
            }
        }
    }
}

/// [`admin_refused`] where an invalid argument is the topic's name or a setting.
fn topic_refused(e: CatalogError) -> Refused {
    admin_refused(e, code::INVALID_TOPIC_EXCEPTION)
}

/// A catalog error as Kafka's code for an admin request; `invalid` is what an invalid
/// argument means for the request (a bad name or setting, or a bad partition count).
fn admin_refused(e: CatalogError, invalid: i16) -> Refused {
    let code = match &e {
        CatalogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        CatalogError::AlreadyExists(_) => code::TOPIC_ALREADY_EXISTS,
        CatalogError::InvalidArgument(_) => invalid,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    Refused::new(code, e.to_string())
}

/// Records one fetch reads at most (its bytes bound it first).
const MAX_FETCH_RECORDS: u64 = 100_000;

fn to_i64(n: u64) -> Result<i64, Refused> {
    i64::try_from(n).map_err(|_| Refused::new(code::UNKNOWN_SERVER_ERROR, "offset past i64"))
}

/// A log-storage error as Kafka's code for a produce or fetch: retryable ones as the codes
/// clients retry on (after a metadata refresh for leadership).
pub fn refused(e: LogError) -> Refused {
    let code = match &e {
        LogError::NotFound(_) => code::UNKNOWN_TOPIC_OR_PARTITION,
        LogError::Fenced { .. } | LogError::NotOwner { .. } | LogError::ReadOnly(_) => {
            code::NOT_LEADER_OR_FOLLOWER
        }
        LogError::OffsetOutOfRange { .. } => code::OFFSET_OUT_OF_RANGE,
        LogError::InvalidArgument(m) if m.contains("maximum entry size") => code::MESSAGE_TOO_LARGE,
        LogError::InvalidArgument(_) => code::INVALID_RECORD,
        LogError::Unavailable { outcome_unknown: true, .. } => code::REQUEST_TIMED_OUT,
        LogError::Unavailable { .. } => code::NOT_LEADER_OR_FOLLOWER,
        LogError::ResourceExhausted(_) => code::REQUEST_TIMED_OUT,
        _ => code::UNKNOWN_SERVER_ERROR,
    };
    Refused::new(code, e.to_string())
}
