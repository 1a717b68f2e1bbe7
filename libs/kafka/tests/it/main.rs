//! The front end on a real socket, over an in-memory broker (the logic under test is the
//! protocol's, not the store's; the roles' tests run real clients against real stores):
//! ApiVersions at every version and above ours (KIP-511), Metadata at old and flexible
//! versions with auto-creation and zone hints, pipelined requests answered in order, and
//! hostile or unserved frames closing the connection without an answer.

mod auth;

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, ensure};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka::{BrokerNode, Fetched, KafkaConfig, PartitionInfo, Produced, Refused, TopicInfo};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Topics by name; `created` records auto-creations; leaders are node `10 + partition`, or
/// node 99 for a client in zone `z`.
#[derive(Default)]
struct FakeBroker {
    topics: Mutex<Vec<(String, uuid::Uuid, u32)>>,
    created: Mutex<Vec<(String, u32)>>,
    /// Batches appended, by topic and partition, with their record counts.
    appended: Mutex<Vec<(String, i32, Bytes, u32)>>,
    /// Fetches that waited.
    waited: Mutex<u32>,
    /// Topic settings set, by topic (a topic named `orders` exists for them).
    settings: Mutex<std::collections::HashMap<String, kafka::StreamConfig>>,
    /// DeleteRecords asked: topic, partition, offset.
    deleted: Mutex<Vec<(String, i32, i64)>>,
    /// Committed offsets by (group, topic, partition).
    offsets: Mutex<std::collections::BTreeMap<(String, String, i32), kafka::OffsetCommit>>,
    /// Each group's coordinator tenure and stored state, and the last tenure handed out.
    tenures: Mutex<std::collections::HashMap<String, i64>>,
    states: Mutex<std::collections::HashMap<String, Bytes>>,
    revision: std::sync::atomic::AtomicI64,
    /// Reads of topic `lagging`: bytes asked for, bytes returned, reads.
    lagging: Mutex<(u64, u64, u64)>,
    /// Produces to topic `slow`: admitted so far; their commits wait until this is true.
    slow: std::sync::atomic::AtomicUsize,
    slow_gate: tokio::sync::watch::Sender<bool>,
    /// While true, group state stores wait (counted in `stores_waiting`).
    stores_held: tokio::sync::watch::Sender<bool>,
    stores_waiting: std::sync::atomic::AtomicUsize,
    /// Group configs set, by group.
    group_configs: Mutex<std::collections::HashMap<String, kafka::GroupConfig>>,
    /// Transactional ids' states and revisions; markers asked for (written at once).
    txns: Mutex<std::collections::HashMap<String, (kafka::transactions::StoredTxn, i64)>>,
    markers: Mutex<Vec<(kafka::transactions::Marker, Vec<kafka::transactions::TxnPartition>)>>,
    /// Offsets staged by transactions: (group, producer id, producer epoch, the offset).
    staged: Mutex<Vec<(String, i64, i16, kafka::OffsetCommit)>>,
}

/// Batches of each partition of topic `lagging` (any partition number), one record each.
const LAGGING_BATCHES: i64 = 64;

/// A batch of one 16 KiB record, as every partition of topic `lagging` holds.
fn lagging_batch() -> Bytes {
    static BATCH: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    BATCH
        .get_or_init(|| {
            let record = recordbatch::Record {
                value: Some(Bytes::from(vec![7u8; 16 << 10])),
                ..Default::default()
            };
            recordbatch::encode(&[record], recordbatch::ProducerFields::NONE).unwrap_or_default()
        })
        .clone()
}

#[async_trait::async_trait]
impl kafka::Cluster for FakeBroker {
    fn cluster_id(&self) -> String {
        "test-cluster".to_owned()
    }

    async fn brokers(&self) -> Result<Vec<BrokerNode>, Refused> {
        Ok(vec![
            BrokerNode {
                node_id: 10,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
                read_only: false,
            },
            BrokerNode {
                node_id: 11,
                host: "127.0.0.2".into(),
                port: 9093,
                rack: Some("z".into()),
                read_only: false,
            },
        ])
    }

    async fn topics(
        &self,
        names: Option<&[String]>,
        zone: Option<&str>,
        create: Option<u32>,
    ) -> Result<Vec<TopicInfo>, Refused> {
        let mut topics = self.topics.lock().map_err(|_| Refused::server("poisoned"))?;
        let info = |(name, id, n): &(String, uuid::Uuid, u32)| TopicInfo {
            name: name.clone(),
            error: kafka::code::NONE,
            id: *id,
            partitions: (0..*n as i32)
                .map(|p| PartitionInfo {
                    index: p,
                    leader: Some(if zone == Some("z") { 99 } else { 10 + p }),
                    followers: Vec::new(),
                })
                .collect(),
            internal: false,
        };
        let Some(names) = names else { return Ok(topics.iter().map(info).collect()) };
        let mut out = Vec::new();
        for n in names {
            if let Some(t) = topics.iter().find(|t| &t.0 == n) {
                out.push(info(t));
            } else if let Some(parts) = create {
                let t = (n.clone(), uuid::Uuid::new_v4(), parts);
                self.created
                    .lock()
                    .map_err(|_| Refused::server("poisoned"))?
                    .push((n.clone(), parts));
                out.push(info(&t));
                topics.push(t);
            } else {
                out.push(TopicInfo::failed(n, kafka::code::UNKNOWN_TOPIC_OR_PARTITION));
            }
        }
        Ok(out)
    }

    fn node_id(&self) -> i32 {
        10
    }

    async fn coordinator(&self, _key: &str) -> Result<Option<BrokerNode>, Refused> {
        Ok(self.brokers().await?.into_iter().next())
    }

    async fn coordinator_view(&self, key: &str) -> Result<(Option<BrokerNode>, i64), Refused> {
        Ok((self.coordinator(key).await?, 1))
    }
}

impl FakeBroker {
    /// NOT_COORDINATOR unless `tenure` is the group's current one.
    fn fenced(&self, group: &str, tenure: kafka::Tenure) -> Result<(), Refused> {
        let tenures = self.tenures.lock().unwrap_or_else(|e| e.into_inner());
        match tenures.get(group) {
            Some(t) if *t == tenure.0 => Ok(()),
            _ => Err(Refused::new(kafka::groups::errors::NOT_COORDINATOR, "taken")),
        }
    }
}

#[async_trait::async_trait]
impl kafka::ShareStates for FakeBroker {}

#[async_trait::async_trait]
impl kafka::TxnStates for FakeBroker {
    async fn txn_state(
        &self,
        id: &str,
    ) -> Result<Option<(kafka::transactions::StoredTxn, i64)>, Refused> {
        let txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        Ok(txns.get(id).cloned())
    }

    async fn put_txn_state(
        &self,
        id: &str,
        state: &kafka::transactions::StoredTxn,
        revision: i64,
    ) -> Result<bool, Refused> {
        let mut txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if txns.get(id).map_or(0, |(_, r)| *r) != revision {
            return Ok(false);
        }
        let next = self.revision.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        txns.insert(id.to_owned(), (state.clone(), next));
        Ok(true)
    }

    async fn remove_txn_state(&self, id: &str, revision: i64) -> Result<bool, Refused> {
        let mut txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if txns.get(id).map(|(_, r)| *r) != Some(revision) {
            return Ok(false);
        }
        txns.remove(id);
        Ok(true)
    }

    async fn txn_states(&self) -> Result<Vec<(String, kafka::transactions::StoredTxn)>, Refused> {
        let txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        Ok(txns.iter().map(|(id, (t, _))| (id.clone(), t.clone())).collect())
    }

    async fn send_markers(
        &self,
        id: &str,
        marker: kafka::transactions::Marker,
        t: &kafka::transactions::StoredTxn,
    ) -> Result<bool, Refused> {
        let txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if txns.get(id).map(|(s, _)| s) != Some(t) {
            return Ok(false);
        }
        let mut markers = self.markers.lock().unwrap_or_else(|e| e.into_inner());
        markers.push((marker, t.partitions.clone()));
        Ok(true)
    }

    async fn markers_pending(
        &self,
        _producer_id: i64,
        _partitions: &[kafka::transactions::TxnPartition],
    ) -> Result<usize, Refused> {
        Ok(0)
    }

    async fn stage_offsets(
        &self,
        group: &str,
        tenure: kafka::Tenure,
        txn: (&str, i64),
        producer: (i64, i16),
        offsets: Vec<kafka::OffsetCommit>,
    ) -> kafka::Staged {
        if let Err(r) = self.fenced(group, tenure) {
            return kafka::Staged::Done(offsets.iter().map(|_| Err(r.clone())).collect());
        }
        let txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if txns.get(txn.0).map(|(_, r)| *r) != Some(txn.1) {
            return kafka::Staged::TxnMoved;
        }
        let mut staged = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        let outcomes = offsets.iter().map(|_| Ok(())).collect();
        for o in offsets {
            staged.retain(|(g, pid, _, x)| {
                !(g == group
                    && *pid == producer.0
                    && (&x.topic, x.partition) == (&o.topic, o.partition))
            });
            staged.push((group.to_owned(), producer.0, producer.1, o));
        }
        kafka::Staged::Done(outcomes)
    }

    async fn end_offsets(
        &self,
        id: &str,
        revision: i64,
        group: &str,
        marker: kafka::transactions::Marker,
    ) -> Result<(), Refused> {
        let txns = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        if txns.get(id).map(|(_, r)| *r) != Some(revision) {
            return Err(Refused::new(kafka::transactions::CONCURRENT_TRANSACTIONS, "moved"));
        }
        let mut staged = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        let mut stored = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        staged.retain(|(g, pid, epoch, o)| {
            let ends = g == group && *pid == marker.producer_id;
            if ends && marker.commit && *epoch == marker.producer_epoch {
                stored.insert((g.clone(), o.topic.clone(), o.partition), o.clone());
            }
            !ends
        });
        Ok(())
    }

    async fn unstable_offsets(&self, group: &str) -> Result<Vec<(String, i32)>, Refused> {
        let staged = self.staged.lock().unwrap_or_else(|e| e.into_inner());
        Ok(staged
            .iter()
            .filter(|(g, ..)| g == group)
            .map(|(_, _, _, o)| (o.topic.clone(), o.partition))
            .collect())
    }
}

#[async_trait::async_trait]
impl kafka::Partitions for FakeBroker {
    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        _zone: Option<&str>,
        batch: Bytes,
        header: &recordbatch::BatchHeader,
        _txn: Option<kafka::TxnProduce<'_>>,
    ) -> Result<kafka::Commit, Refused> {
        let record_count = header.record_count as u32;
        // Admission itself takes long here (a producer state loading, say).
        if topic == "stall" {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            return Ok(Box::pin(async { Ok(Produced::at(0)) }));
        }
        if topic == "slow" {
            self.slow.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut open = self.slow_gate.subscribe();
            return Ok(Box::pin(async move {
                let _ = open.wait_for(|open| *open).await;
                drop(batch);
                Ok(Produced::at(0))
            }));
        }
        if topic != "orders" || !(0..3).contains(&partition) {
            return Err(Refused::new(kafka::code::UNKNOWN_TOPIC_OR_PARTITION, "no such partition"));
        }
        // A look-up before admitting (the writer's routing read), longer for some batches: were
        // a connection's requests admitted concurrently, later ones would overtake.
        let delay = std::time::Duration::from_millis(u64::from(10 * (record_count % 3)));
        tokio::time::sleep(delay).await;
        let mut log = self.appended.lock().map_err(|_| Refused::new(-1, "poisoned"))?;
        let base: u32 = log
            .iter()
            .filter(|(t, p, _, _)| t == topic && *p == partition)
            .map(|(_, _, _, n)| *n)
            .sum();
        log.push((topic.to_owned(), partition, batch, record_count));
        drop(log);
        // Committed a moment later: a later batch's commit must not overtake it in the answers.
        Ok(Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(Produced::at(i64::from(base)))
        }))
    }

    async fn write_marker(
        &self,
        _topic: &str,
        _partition: i32,
        _marker: kafka::transactions::Marker,
    ) -> Result<kafka::Commit, Refused> {
        Err(Refused::new(kafka::code::INVALID_REQUEST, "no markers in this test"))
    }

    /// Partition 0's batches from `offset`, base offsets written in.
    async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        _zone: Option<&str>,
        rack: Option<&str>,
        offset: i64,
        max_bytes: usize,
        isolation: kafka::Isolation,
    ) -> Result<Fetched, Refused> {
        // A client of rack `r` is sent to node 11 (KIP-392).
        if rack == Some("r") {
            return Ok(Fetched {
                high_watermark: 5,
                preferred_read_replica: Some(11),
                ..Default::default()
            });
        }
        if topic == "lagging" {
            // Whole batches up to `max_bytes`, at least one when asked for any.
            let batch = lagging_batch();
            let (mut out, mut bytes) = (Vec::new(), 0usize);
            let mut at = offset;
            while at < LAGGING_BATCHES
                && max_bytes > 0
                && (out.is_empty() || bytes + batch.len() <= max_bytes)
            {
                out.push(kafka::StoredBatch { base_offset: at, bytes: batch.clone() });
                bytes += batch.len();
                at += 1;
            }
            let mut n = self.lagging.lock().map_err(|_| Refused::new(-1, "poisoned"))?;
            *n = (n.0 + max_bytes as u64, n.1 + bytes as u64, n.2 + 1);
            return Ok(Fetched {
                high_watermark: LAGGING_BATCHES,
                last_stable_offset: LAGGING_BATCHES,
                log_start_offset: 0,
                records: out,
                ..Default::default()
            });
        }
        if topic != "orders" || partition != 0 {
            return Err(Refused {
                code: kafka::code::NOT_LEADER_OR_FOLLOWER,
                message: "elsewhere".into(),
                leader: Some(11),
            });
        }
        let log = self.appended.lock().map_err(|_| Refused::new(-1, "poisoned"))?;
        let (mut at, mut out) = (0i64, Vec::new());
        for (_, _, b, n) in log.iter().filter(|(t, p, _, _)| t == topic && *p == 0) {
            if at + i64::from(*n) > offset {
                out.push(kafka::StoredBatch { base_offset: at, bytes: b.clone() });
            }
            at += i64::from(*n);
        }
        if offset > at {
            return Err(Refused::new(kafka::code::OFFSET_OUT_OF_RANGE, "past the end"));
        }
        // Read committed, as if producer 9's transaction from offset 0 had been aborted.
        let committed = isolation == kafka::Isolation::ReadCommitted;
        Ok(Fetched {
            high_watermark: at,
            last_stable_offset: at,
            log_start_offset: 0,
            aborted: if committed && !out.is_empty() { vec![(9, 0)] } else { Vec::new() },
            records: out,
            preferred_read_replica: None,
        })
    }

    /// Returns after at most 100 ms, as if a record had arrived.
    async fn wait_for(&self, _targets: Vec<(String, i32, i64)>, max_wait: std::time::Duration) {
        *self.waited.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        tokio::time::sleep(max_wait.min(std::time::Duration::from_millis(100))).await;
    }

    async fn list_offset(
        &self,
        _topic: &str,
        _partition: i32,
        _zone: Option<&str>,
        timestamp: i64,
        isolation: kafka::Isolation,
    ) -> Result<(i64, i64), Refused> {
        match timestamp {
            -2 => Ok((0, -1)),
            // As if a transaction were open from offset 40.
            -1 if isolation == kafka::Isolation::ReadCommitted => Ok((40, -1)),
            -1 => Ok((42, -1)),
            t => Ok((7, t)),
        }
    }

    async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        _zone: Option<&str>,
        offset: i64,
    ) -> Result<i64, Refused> {
        self.deleted.lock().map_err(|_| Refused::new(-1, "poisoned"))?.push((
            topic.to_owned(),
            partition,
            offset,
        ));
        Ok(if offset == -1 { 42 } else { offset })
    }

    async fn init_producer_id(&self, current: Option<(i64, i16)>) -> Result<(i64, i16), Refused> {
        Ok(current.map_or((1000, 0), |(id, e)| (id, e + 1)))
    }
}

#[async_trait::async_trait]
impl kafka::Topics for FakeBroker {
    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        _settings: kafka::StreamConfig,
        _validate_only: bool,
    ) -> Result<uuid::Uuid, Refused> {
        let id = uuid::Uuid::new_v4();
        self.topics.lock().map_err(|_| Refused::new(-1, "poisoned"))?.push((
            name.to_owned(),
            id,
            partitions,
        ));
        Ok(id)
    }

    async fn delete_topic(&self, _name: &str) -> Result<uuid::Uuid, Refused> {
        Err(Refused::new(kafka::code::UNKNOWN_TOPIC_OR_PARTITION, "no"))
    }

    async fn create_partitions(
        &self,
        _name: &str,
        _count: u32,
        _validate_only: bool,
    ) -> Result<(), Refused> {
        Ok(())
    }

    async fn topic_config(&self, name: &str) -> Result<kafka::StreamConfig, Refused> {
        if name != "orders" {
            return Err(Refused::new(kafka::code::UNKNOWN_TOPIC_OR_PARTITION, "no such topic"));
        }
        let settings = self.settings.lock().map_err(|_| Refused::new(-1, "poisoned"))?;
        Ok(settings.get(name).cloned().unwrap_or_default())
    }

    async fn set_topic_config(
        &self,
        name: &str,
        settings: kafka::StreamConfig,
        validate_only: bool,
    ) -> Result<(), Refused> {
        self.topic_config(name).await?;
        if !validate_only {
            self.settings
                .lock()
                .map_err(|_| Refused::new(-1, "poisoned"))?
                .insert(name.to_owned(), settings);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl kafka::GroupOffsets for FakeBroker {
    async fn take_group(
        &self,
        group: &str,
        _view: i64,
        held: Option<kafka::Tenure>,
    ) -> Result<kafka::Taken, Refused> {
        let mut tenures = self.tenures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = held
            && tenures.get(group) == Some(&h.0)
        {
            return Ok(kafka::Taken { tenure: h, state: None, kept: true });
        }
        let t = self.revision.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        tenures.insert(group.to_owned(), t);
        let state = self.states.lock().unwrap_or_else(|e| e.into_inner()).get(group).cloned();
        Ok(kafka::Taken { tenure: kafka::Tenure(t), state, kept: false })
    }

    async fn store_group(
        &self,
        group: &str,
        tenure: kafka::Tenure,
        state: Bytes,
    ) -> Result<(), Refused> {
        let mut held = self.stores_held.subscribe();
        if *held.borrow() {
            self.stores_waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = held.wait_for(|held| !*held).await;
        }
        self.fenced(group, tenure)?;
        self.states.lock().unwrap_or_else(|e| e.into_inner()).insert(group.to_owned(), state);
        Ok(())
    }

    async fn commit_offsets(
        &self,
        group: &str,
        tenure: kafka::Tenure,
        offsets: Vec<kafka::OffsetCommit>,
    ) -> Vec<Result<(), Refused>> {
        if let Err(r) = self.fenced(group, tenure) {
            return offsets.iter().map(|_| Err(r.clone())).collect();
        }
        // Group `pipe`'s commits of smaller offsets take longer to store.
        if group == "pipe"
            && let Some(o) = offsets.first()
        {
            let ms = 5 * u64::try_from(10 - o.offset.clamp(0, 10)).unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        let mut stored = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        offsets
            .into_iter()
            .map(|o| {
                stored.insert((group.to_owned(), o.topic.clone(), o.partition), o);
                Ok(())
            })
            .collect()
    }

    async fn committed_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<kafka::CommittedOffset>, Refused> {
        let stored = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        let of = |o: &kafka::OffsetCommit| kafka::CommittedOffset {
            topic: o.topic.clone(),
            partition: o.partition,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata.clone(),
            error: 0,
        };
        Ok(match partitions {
            None => stored.iter().filter(|((g, _, _), _)| g == group).map(|(_, o)| of(o)).collect(),
            Some(asked) => asked
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .map(|(t, p)| match stored.get(&(group.to_owned(), t.clone(), p)) {
                    Some(o) => of(o),
                    None => kafka::CommittedOffset {
                        topic: t,
                        partition: p,
                        offset: -1,
                        leader_epoch: -1,
                        metadata: Some(String::new()),
                        error: 0,
                    },
                })
                .collect(),
        })
    }

    async fn stored_groups(&self) -> Result<Vec<(String, Bytes)>, Refused> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let mut groups: Vec<(String, Bytes)> =
            states.iter().map(|(g, s)| (g.clone(), s.clone())).collect();
        groups.sort();
        Ok(groups)
    }

    async fn delete_group(&self, group: &str, tenure: kafka::Tenure) -> Result<bool, Refused> {
        self.fenced(group, tenure)?;
        let mut stored = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        let before = stored.len();
        stored.retain(|(g, _, _), _| g != group);
        let state = self.states.lock().unwrap_or_else(|e| e.into_inner()).remove(group);
        self.tenures.lock().unwrap_or_else(|e| e.into_inner()).remove(group);
        Ok(before != stored.len() || state.is_some())
    }

    async fn release_group(&self, group: &str, tenure: kafka::Tenure) -> Result<(), Refused> {
        let mut tenures = self.tenures.lock().unwrap_or_else(|e| e.into_inner());
        let stored = self.states.lock().unwrap_or_else(|e| e.into_inner()).contains_key(group);
        if tenures.get(group) == Some(&tenure.0) && !stored {
            tenures.remove(group);
        }
        Ok(())
    }

    async fn delete_offset(
        &self,
        group: &str,
        tenure: kafka::Tenure,
        topic: &str,
        partition: i32,
    ) -> Result<(), Refused> {
        self.fenced(group, tenure)?;
        let mut stored = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        stored.remove(&(group.to_owned(), topic.to_owned(), partition));
        Ok(())
    }

    async fn group_config(&self, group: &str) -> Result<kafka::GroupConfig, Refused> {
        let configs = self.group_configs.lock().unwrap_or_else(|e| e.into_inner());
        Ok(configs.get(group).cloned().unwrap_or_default())
    }

    async fn configured_groups(&self) -> Result<Vec<String>, Refused> {
        let configs = self.group_configs.lock().unwrap_or_else(|e| e.into_inner());
        let mut groups: Vec<String> =
            configs.iter().filter(|(_, c)| !c.is_empty()).map(|(g, _)| g.clone()).collect();
        groups.sort();
        Ok(groups)
    }

    async fn set_group_config(
        &self,
        group: &str,
        config: kafka::GroupConfig,
        validate_only: bool,
    ) -> Result<(), Refused> {
        if !validate_only {
            let mut configs = self.group_configs.lock().unwrap_or_else(|e| e.into_inner());
            configs.insert(group.to_owned(), config);
        }
        Ok(())
    }
}

struct Server {
    addr: std::net::SocketAddr,
    broker: Arc<FakeBroker>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn server(cfg: KafkaConfig) -> Result<Server> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let broker = Arc::new(FakeBroker::default());
    broker.topics.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push((
        "orders".to_owned(),
        uuid::Uuid::new_v4(),
        3,
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(kafka::serve(listener, broker.clone(), cfg, async move {
        let _ = stopped.await;
    }));
    Ok(Server { addr, broker, _stop: stop })
}

/// A request frame: size, header (in the version's header encoding), body.
fn request<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client: &str,
    body: &M,
) -> Result<Bytes> {
    let mut b = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client.to_owned())))
        .encode(&mut b, api.request_header_version(version))?;
    body.encode(&mut b, version)?;
    let mut f = BytesMut::new();
    f.put_i32(b.len() as i32);
    f.put_slice(&b);
    Ok(f.freeze())
}

async fn read_response(s: &mut tokio::net::TcpStream) -> Result<Option<Bytes>> {
    read_response_half(s).await
}

/// [`read_response`] from any reader (a split connection's half).
async fn read_response_half<R: tokio::io::AsyncRead + Unpin>(s: &mut R) -> Result<Option<Bytes>> {
    let mut size = [0u8; 4];
    if s.read_exact(&mut size).await.is_err() {
        return Ok(None);
    }
    let mut b = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut b).await?;
    Ok(Some(Bytes::from(b)))
}

/// The response's correlation id and body decoded as `M` at `version`.
fn decode<M: Decodable>(api: ApiKey, version: i16, mut b: Bytes) -> Result<(i32, M)> {
    let h = ResponseHeader::decode(&mut b, api.response_header_version(version))?;
    let m = M::decode(&mut b, version)?;
    ensure!(!b.has_remaining(), "{} bytes after the {api:?} v{version} response", b.remaining());
    Ok((h.correlation_id, m))
}

async fn ask<Q: Encodable, R: Decodable>(
    addr: std::net::SocketAddr,
    api: ApiKey,
    version: i16,
    client: &str,
    body: &Q,
) -> Result<R> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(&request(api, version, 7, client, body)?).await?;
    let b = read_response(&mut s).await?.context("connection closed without an answer")?;
    let (id, r) = decode::<R>(api, version, b)?;
    ensure!(id == 7, "correlation id {id}");
    Ok(r)
}

#[tokio::test]
async fn api_versions_answers_every_version_and_kip_511_above_ours() -> Result<()> {
    let s = server(KafkaConfig::default()).await?;
    for v in 0..=4 {
        let r: ApiVersionsResponse =
            ask(s.addr, ApiKey::ApiVersions, v, "t", &ApiVersionsRequest::default()).await?;
        ensure!(r.error_code == 0, "v{v}: {r:?}");
        let keys: Vec<(i16, i16, i16)> =
            r.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
        ensure!(keys.contains(&(18, 0, 4)) && keys.contains(&(3, 0, 12)), "v{v}: {keys:?}");
        // From v3, the features: transactions V2 finalized (a Kafka 4 client's switch to it).
        let finalized: Vec<(String, i16, i16)> = r
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
            .collect();
        let want = if v >= 3 { vec![("transaction.version".to_owned(), 2, 2)] } else { vec![] };
        ensure!(finalized == want && (v < 3 || r.finalized_features_epoch > 0), "v{v}: {r:?}");
        ensure!(
            keys.contains(&(26, 0, 5)) && keys.contains(&(28, 0, 5)),
            "EndTxn, TxnOffsetCommit"
        );
    }
    // A client newer than us asks v9: the answer is a v0 body with UNSUPPORTED_VERSION and our
    // range, so it retries at v4.
    let mut raw = BytesMut::new();
    raw.put_i16(18);
    raw.put_i16(9);
    raw.put_i32(33);
    raw.put_slice(&[0xde, 0xad]); // a header of a version we cannot parse
    let mut f = BytesMut::new();
    f.put_i32(raw.len() as i32);
    f.put_slice(&raw);
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    c.write_all(&f).await?;
    let b = read_response(&mut c).await?.context("no answer to ApiVersions v9")?;
    let (id, r) = decode::<ApiVersionsResponse>(ApiKey::ApiVersions, 0, b)?;
    ensure!(id == 33 && r.error_code == 35, "{id} {r:?}");
    ensure!(r.api_keys.iter().any(|k| k.api_key == 18 && k.max_version == 4));
    Ok(())
}

#[tokio::test]
async fn metadata_at_old_and_flexible_versions_names_brokers_topics_and_leaders() -> Result<()> {
    let s = server(KafkaConfig::default()).await?;
    // v0 (kcat's oldest path): an empty list is every topic.
    let r: MetadataResponse = ask(
        s.addr,
        ApiKey::Metadata,
        0,
        "rdkafka",
        &MetadataRequest::default().with_topics(Some(vec![])),
    )
    .await?;
    ensure!(r.brokers.len() == 2 && r.topics.len() == 1, "{r:?}");
    let t = &r.topics[0];
    ensure!(t.name.as_ref().map(|n| n.0.as_str()) == Some("orders") && t.partitions.len() == 3);
    ensure!(t.partitions.iter().all(|p| p.leader_id.0 == 10 + p.partition_index), "{t:?}");
    // v12 (flexible), a zone in client.id: the zone's leader; the topic id is the stream's.
    let want_id = s.broker.topics.lock().map_err(|_| anyhow::anyhow!("poisoned"))?[0].1;
    let named = |n: &str| {
        MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(n.to_owned()))))
    };
    let r: MetadataResponse = ask(
        s.addr,
        ApiKey::Metadata,
        12,
        "app,zone_id=z",
        &MetadataRequest::default().with_topics(Some(vec![named("orders")])),
    )
    .await?;
    let t = &r.topics[0];
    ensure!(t.topic_id == want_id, "{t:?}");
    ensure!(t.partitions.iter().all(|p| p.leader_id.0 == 99 && p.isr_nodes.len() == 1), "{t:?}");
    ensure!(
        r.cluster_id.as_ref().map(|c| c.as_str()) == Some("test-cluster")
            && r.controller_id.0 == 10
    );
    ensure!(r.brokers[1].rack.as_ref().map(|c| c.as_str()) == Some("z"));
    // A topic that does not exist: created (1 partition) unless the client says not to.
    let mut no_create = MetadataRequest::default().with_topics(Some(vec![named("fresh")]));
    no_create.allow_auto_topic_creation = false;
    let r: MetadataResponse = ask(s.addr, ApiKey::Metadata, 9, "t", &no_create).await?;
    ensure!(r.topics[0].error_code == 3, "{r:?}");
    let mut create = no_create.clone();
    create.allow_auto_topic_creation = true;
    let r: MetadataResponse = ask(s.addr, ApiKey::Metadata, 4, "t", &create).await?;
    ensure!(r.topics[0].error_code == 0 && r.topics[0].partitions.len() == 1, "{r:?}");
    let created = s.broker.created.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    ensure!(created == vec![("fresh".to_owned(), 1)], "{created:?}");
    // v1+: a null list is every topic.
    let r: MetadataResponse =
        ask(s.addr, ApiKey::Metadata, 1, "t", &MetadataRequest::default().with_topics(None))
            .await?;
    ensure!(r.topics.len() == 2, "{r:?}");
    Ok(())
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() -> Result<()> {
    let s = server(KafkaConfig { max_in_flight: 2, ..Default::default() }).await?;
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    let mut all = BytesMut::new();
    for id in 0..20 {
        let (api, body): (ApiKey, Bytes) = if id % 2 == 0 {
            (
                ApiKey::ApiVersions,
                request(ApiKey::ApiVersions, 3, id, "t", &ApiVersionsRequest::default())?,
            )
        } else {
            (
                ApiKey::Metadata,
                request(
                    ApiKey::Metadata,
                    8,
                    id,
                    "t",
                    &MetadataRequest::default().with_topics(None),
                )?,
            )
        };
        let _ = api;
        all.put_slice(&body);
    }
    c.write_all(&all).await?;
    for id in 0..20 {
        let b = read_response(&mut c).await?.context("answer missing")?;
        let got = if id % 2 == 0 {
            decode::<ApiVersionsResponse>(ApiKey::ApiVersions, 3, b)?.0
        } else {
            decode::<MetadataResponse>(ApiKey::Metadata, 8, b)?.0
        };
        ensure!(got == id, "answer {got} where {id} was due");
    }
    Ok(())
}

#[tokio::test]
async fn hostile_and_unserved_frames_close_the_connection() -> Result<()> {
    let s = server(KafkaConfig::default()).await?;
    let frame = |body: &[u8]| {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a frame claiming 2 GiB", vec![0x7f, 0xff, 0xff, 0xff, 0, 18, 0, 0]),
        ("a negative size", (-1i32).to_be_bytes().to_vec()),
        ("too short for a header", frame(&[0, 18])),
        ("an unknown API key", frame(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0, 0])),
        ("Produce v0, below ours", frame(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0])),
        ("OffsetCommit, not served yet", frame(&[0, 8, 0, 2, 0, 0, 0, 1, 0, 0])),
        ("Metadata v13, above ours", frame(&[0, 3, 0, 13, 0, 0, 0, 1, 0, 0])),
        // Metadata v1 whose topic array claims 2^31-1 entries in 4 bytes.
        (
            "an array count past the frame",
            frame(&[0, 3, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff]),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = tokio::net::TcpStream::connect(s.addr).await?;
        c.write_all(&bytes).await?;
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(5), read_response(&mut c)).await?;
        ensure!(answer?.is_none(), "{what}: answered instead of closed");
    }
    // The server still serves.
    let r: ApiVersionsResponse =
        ask(s.addr, ApiKey::ApiVersions, 0, "t", &ApiVersionsRequest::default()).await?;
    ensure!(r.error_code == 0);
    Ok(())
}

/// A produce request of `batches` (topic `orders`): one partition each, in order.
fn produce_request(acks: i16, batches: Vec<(i32, Option<Bytes>)>) -> ProduceRequest {
    let partitions = batches
        .into_iter()
        .map(|(p, b)| PartitionProduceData::default().with_index(p).with_records(b))
        .collect();
    ProduceRequest::default().with_acks(acks).with_timeout_ms(5000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partition_data(partitions),
    ])
}

fn batch(values: &[&str], producer: recordbatch::ProducerFields) -> Result<Bytes> {
    let records: Vec<recordbatch::Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| recordbatch::Record {
            offset_delta: i as u32,
            timestamp_ms: 1_700_000_000_000,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            ..Default::default()
        })
        .collect();
    Ok(recordbatch::encode(&records, producer)?)
}

#[tokio::test]
async fn produce_appends_one_checked_batch_per_partition_and_refuses_the_rest() -> Result<()> {
    let s = server(KafkaConfig { max_batch_bytes: 4096, ..Default::default() }).await?;
    let none = recordbatch::ProducerFields::NONE;
    let good = batch(&["a", "b", "c"], none)?;
    let mut bad_crc = good.to_vec();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let mut two = good.to_vec();
    two.extend_from_slice(&good);
    let idempotent = batch(
        &["x"],
        recordbatch::ProducerFields { producer_id: 7, producer_epoch: 0, base_sequence: 0 },
    )?;
    let huge = batch(&[&"z".repeat(5000)], none)?;
    let req = produce_request(
        -1,
        vec![
            (0, Some(good.clone())),
            (0, Some(good.clone())),
            (1, Some(Bytes::from(bad_crc))),
            (1, Some(Bytes::from(two))),
            (1, Some(idempotent)),
            (1, Some(huge)),
            (1, None),
            (9, Some(good.clone())),
        ],
    );
    for version in [3, 7, 9, 12] {
        let r: ProduceResponse = ask(s.addr, ApiKey::Produce, version, "t", &req).await?;
        let got: Vec<(i32, i16, i64)> = r.responses[0]
            .partition_responses
            .iter()
            .map(|p| (p.index, p.error_code, p.base_offset))
            .collect();
        let codes: Vec<i16> = got.iter().map(|g| g.1).collect();
        // The idempotent batch is the broker's to check (this fake takes it).
        ensure!(codes == vec![0, 0, 2, 87, 0, 10, 2, 3], "v{version}: {got:?}");
        // The two good batches landed one after the other (the fake's offsets).
        let bases: Vec<i64> = got[..2].iter().map(|g| g.2).collect();
        ensure!(bases[0] != bases[1] && bases.iter().all(|b| b % 3 == 0), "v{version}: {got:?}");
    }
    let appended = s.broker.appended.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    let goods = appended.iter().filter(|(_, p, b, n)| *p == 0 && *b == good && *n == 3).count();
    ensure!(appended.len() == 12 && goods == 8, "{} appended, {goods} good", appended.len());
    // A marker from a client is refused; a transactional batch needs a transactional id (else
    // TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka); with one, it is the broker's.
    let marker = recordbatch::encode_marker(7, 0, true, 0, 1)?;
    let txn = recordbatch::encode_framed(
        &[recordbatch::Record { offset_delta: 0, timestamp_ms: 1, ..Default::default() }],
        recordbatch::Framing {
            attributes: recordbatch::TRANSACTIONAL,
            base_timestamp: 1,
            max_timestamp: 1,
            producer: recordbatch::ProducerFields {
                producer_id: 7,
                producer_epoch: 0,
                base_sequence: 0,
            },
        },
    )?;
    let req = produce_request(-1, vec![(1, Some(marker)), (1, Some(txn.clone()))]);
    let r: ProduceResponse = ask(s.addr, ApiKey::Produce, 9, "t", &req).await?;
    let codes: Vec<i16> = r.responses[0].partition_responses.iter().map(|p| p.error_code).collect();
    ensure!(codes == [87, 53], "{codes:?}");
    let req = produce_request(-1, vec![(1, Some(txn))]).with_transactional_id(Some(
        kafka_protocol::messages::TransactionalId(StrBytes::from_static_str("app")),
    ));
    let r: ProduceResponse = ask(s.addr, ApiKey::Produce, 9, "t", &req).await?;
    ensure!(r.responses[0].partition_responses[0].error_code == 0, "{r:?}");
    // acks=2 is refused per partition; acks=0 is appended and not answered: the next request
    // on the connection gets the next answer.
    let r: ProduceResponse =
        ask(s.addr, ApiKey::Produce, 7, "t", &produce_request(2, vec![(0, Some(good.clone()))]))
            .await?;
    ensure!(r.responses[0].partition_responses[0].error_code == 21, "{r:?}");
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    let mut both = BytesMut::new();
    both.put_slice(&request(
        ApiKey::Produce,
        7,
        1,
        "t",
        &produce_request(0, vec![(0, Some(good))]),
    )?);
    both.put_slice(&request(ApiKey::ApiVersions, 0, 2, "t", &ApiVersionsRequest::default())?);
    c.write_all(&both).await?;
    let b = read_response(&mut c).await?.context("no answer")?;
    let (id, _) = decode::<ApiVersionsResponse>(ApiKey::ApiVersions, 0, b)?;
    ensure!(id == 2, "answer {id}: acks=0 was answered");
    ensure!(s.broker.appended.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len() == 14);
    // An acks=0 produce that fails (a partition led elsewhere, or none) closes the connection,
    // as Kafka does, so the producer refreshes its metadata instead of sending into the void.
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    let mut both = BytesMut::new();
    let failing =
        produce_request(0, vec![(7, Some(batch(&["x"], recordbatch::ProducerFields::NONE)?))]);
    both.put_slice(&request(ApiKey::Produce, 7, 1, "t", &failing)?);
    both.put_slice(&request(ApiKey::ApiVersions, 0, 2, "t", &ApiVersionsRequest::default())?);
    c.write_all(&both).await?;
    let next = tokio::time::timeout(std::time::Duration::from_secs(5), read_response(&mut c)).await;
    ensure!(matches!(next, Ok(Ok(None)) | Ok(Err(_))), "the connection stayed open: {next:?}");
    Ok(())
}

fn fetch_request(offset: i64, max_wait_ms: i32, partition: i32) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

/// A fetch of `(topic, partition, offset)`s in session `id` at `epoch`, answered at once.
fn session_fetch(id: i32, epoch: i32, partitions: &[(&'static str, i32, i64)]) -> FetchRequest {
    let topics = partitions
        .iter()
        .map(|(t, p, o)| {
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(t)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(*p)
                        .with_fetch_offset(*o)
                        .with_partition_max_bytes(1 << 20),
                ])
        })
        .collect();
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_id(id)
        .with_session_epoch(epoch)
        .with_topics(topics)
}

/// The partitions an answer holds: topic, partition, whether it has records, its error.
fn answered(r: &FetchResponse) -> Vec<(String, i32, bool, i16)> {
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.0.to_string(), p)))
        .map(|(t, p)| {
            let records = p.records.as_ref().is_some_and(|b| !b.is_empty());
            (t, p.partition_index, records, p.error_code)
        })
        .collect()
}

/// Fetch sessions (KIP-227): epoch 0 opens one (its id in the answer, every partition
/// answered); its next fetches name only partitions whose position moved and are answered
/// with only the partitions that have news (records, a moved high watermark, an error, always);
/// a stale epoch or an unknown session is refused with Kafka's codes; epoch -1 closes it
/// (answered in full, sessionless). Before v7 there are no sessions.
#[tokio::test]
async fn a_fetch_session_answers_only_what_is_new() -> Result<()> {
    use kafka::fetch_session::{FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH};
    let s = server(KafkaConfig::default()).await?;
    let none = recordbatch::ProducerFields::NONE;
    let produce = |v: &'static str| {
        let addr = s.addr;
        async move {
            let req = produce_request(-1, vec![(0, Some(batch(&[v], none)?))]);
            let _: ProduceResponse = ask(addr, ApiKey::Produce, 7, "t", &req).await?;
            anyhow::Ok(())
        }
    };
    let fetch = |req: FetchRequest| {
        let addr = s.addr;
        async move {
            let r: FetchResponse = ask(addr, ApiKey::Fetch, 12, "t", &req).await?;
            anyhow::Ok(r)
        }
    };
    let (orders, lagging, elsewhere) = (("orders", 0), ("lagging", 0), ("orders", 1));
    let row = |(t, p): (&str, i32), records: bool, error: i16| (t.to_owned(), p, records, error);
    let moved = kafka::code::NOT_LEADER_OR_FOLLOWER;
    produce("a").await?;
    // Lagging's end: no records there.
    let end = LAGGING_BATCHES;
    let open = session_fetch(0, 0, &[("orders", 0, 0), ("lagging", 0, end), ("orders", 1, 0)]);
    let r = fetch(open.clone()).await?;
    let id = r.session_id;
    ensure!(r.error_code == 0 && id > 0, "{r:?}");
    let all = [row(orders, true, 0), row(lagging, false, 0), row(elsewhere, false, moved)];
    ensure!(answered(&r) == all, "{:?}", answered(&r));
    // The client moved orders on; nothing new but the error, answered every time.
    let r = fetch(session_fetch(id, 1, &[("orders", 0, 1)])).await?;
    ensure!(r.error_code == 0 && r.session_id == id, "{r:?}");
    ensure!(answered(&r) == [row(elsewhere, false, moved)], "{:?}", answered(&r));
    // A record in orders: answered, though the fetch names no partition.
    produce("b").await?;
    let r = fetch(session_fetch(id, 2, &[])).await?;
    ensure!(
        answered(&r) == [row(orders, true, 0), row(elsewhere, false, moved)],
        "{:?}",
        answered(&r)
    );
    // The client moves lagging back a batch and orders past its record: lagging answers.
    let r = fetch(session_fetch(id, 3, &[("orders", 0, 2), ("lagging", 0, end - 1)])).await?;
    ensure!(
        answered(&r) == [row(lagging, true, 0), row(elsewhere, false, moved)],
        "{:?}",
        answered(&r)
    );
    // A stale epoch, an unknown session.
    let r = fetch(session_fetch(id, 3, &[])).await?;
    ensure!(r.error_code == INVALID_FETCH_SESSION_EPOCH && r.responses.is_empty(), "{r:?}");
    let other = if id == i32::MAX { 1 } else { id + 1 };
    let r = fetch(session_fetch(other, 1, &[])).await?;
    ensure!(r.error_code == FETCH_SESSION_ID_NOT_FOUND, "{r:?}");
    // Epoch -1 closes it: answered in full, without a session; then it is gone.
    let r = fetch(session_fetch(id, -1, &[("orders", 0, 2), ("lagging", 0, end)])).await?;
    ensure!(r.error_code == 0 && r.session_id == 0, "{r:?}");
    ensure!(answered(&r) == [row(orders, false, 0), row(lagging, false, 0)], "{:?}", answered(&r));
    let r = fetch(session_fetch(id, 4, &[])).await?;
    ensure!(r.error_code == FETCH_SESSION_ID_NOT_FOUND, "{r:?}");
    // v6 has no sessions: epoch 0 is a full fetch answered without one.
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 6, "t", &open).await?;
    ensure!(r.session_id == 0 && answered(&r).len() == 3, "{r:?}");
    Ok(())
}

#[tokio::test]
async fn fetch_returns_whole_batches_with_offsets_and_waits_only_when_empty() -> Result<()> {
    let s = server(KafkaConfig::default()).await?;
    let none = recordbatch::ProducerFields::NONE;
    let req = produce_request(
        -1,
        vec![(0, Some(batch(&["a", "b"], none)?)), (0, Some(batch(&["c"], none)?))],
    );
    let _: ProduceResponse = ask(s.addr, ApiKey::Produce, 7, "t", &req).await?;
    for version in [4, 7, 11, 12] {
        // From offset 1: the first batch (offsets 0-1) whole, then the second (2).
        let r: FetchResponse =
            ask(s.addr, ApiKey::Fetch, version, "t", &fetch_request(1, 5000, 0)).await?;
        let p = &r.responses[0].partitions[0];
        ensure!(
            p.error_code == 0 && p.high_watermark == 3 && p.last_stable_offset == 3,
            "v{version}: {p:?}"
        );
        let mut records = p.records.clone().context("null records")?;
        let mut offsets = Vec::new();
        while !records.is_empty() {
            let h = recordbatch::BatchHeader::parse(&records)?;
            let len = h.batch_length as usize + 12;
            let (_, rs) = recordbatch::decode(&records.split_to(len))?;
            offsets.extend(rs.iter().map(|r| h.base_offset + i64::from(r.offset_delta)));
        }
        ensure!(offsets == vec![0, 1, 2], "v{version}: offsets {offsets:?}");
        ensure!(p.aborted_transactions.is_none(), "read uncommitted: null");
        // Read committed: the broker's aborted transactions, as Kafka lists them.
        let committed = fetch_request(1, 5000, 0).with_isolation_level(1);
        let r: FetchResponse = ask(s.addr, ApiKey::Fetch, version, "t", &committed).await?;
        let p = &r.responses[0].partitions[0];
        let aborted: Vec<(i64, i64)> = p
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        ensure!(aborted == [(9, 0)] && p.last_stable_offset == 3, "v{version}: {p:?}");
    }
    ensure!(
        *s.broker.waited.lock().map_err(|_| anyhow::anyhow!("poisoned"))? == 0,
        "waited with data there"
    );
    // At the high watermark: a wait, then empty records (never null).
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 11, "t", &fetch_request(3, 100, 0)).await?;
    let p = &r.responses[0].partitions[0];
    ensure!(p.records.as_ref().is_some_and(|b| b.is_empty()) && r.session_id == 0, "{p:?}");
    ensure!(*s.broker.waited.lock().map_err(|_| anyhow::anyhow!("poisoned"))? == 1);
    // A client naming its rack (v11+) may be sent to a preferred read replica (KIP-392): no
    // records, no wait.
    let r: FetchResponse = ask(
        s.addr,
        ApiKey::Fetch,
        11,
        "t",
        &fetch_request(0, 5000, 0).with_rack_id(StrBytes::from_static_str("r")),
    )
    .await?;
    let p = &r.responses[0].partitions[0];
    ensure!(
        p.preferred_read_replica.0 == 11 && p.records.as_ref().is_some_and(|b| b.is_empty()),
        "{p:?}"
    );
    ensure!(
        *s.broker.waited.lock().map_err(|_| anyhow::anyhow!("poisoned"))? == 1,
        "a redirected fetch waited"
    );
    // Another broker's partition: NOT_LEADER_OR_FOLLOWER naming it (v12 carries the leader).
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 12, "t", &fetch_request(0, 0, 1)).await?;
    let p = &r.responses[0].partitions[0];
    ensure!(p.error_code == 6 && p.current_leader.leader_id.0 == 11, "{p:?}");
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 4, "t", &fetch_request(99, 0, 0)).await?;
    ensure!(r.responses[0].partitions[0].error_code == 1, "{r:?}");

    // ListOffsets: earliest, latest, by time.
    let partitions = [-2i64, -1, 1_700_000_000_000]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            ListOffsetsPartition::default().with_partition_index(i as i32).with_timestamp(*t)
        })
        .collect();
    let req = ListOffsetsRequest::default().with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(partitions),
    ]);
    for version in [1, 6] {
        let r: ListOffsetsResponse = ask(s.addr, ApiKey::ListOffsets, version, "t", &req).await?;
        let got: Vec<(i64, i64)> =
            r.topics[0].partitions.iter().map(|p| (p.offset, p.timestamp)).collect();
        ensure!(got == vec![(0, -1), (42, -1), (7, 1_700_000_000_000)], "v{version}: {got:?}");
    }
    // Read committed (v2+): latest is the last stable offset.
    let committed = req.clone().with_isolation_level(1);
    let r: ListOffsetsResponse = ask(s.addr, ApiKey::ListOffsets, 6, "t", &committed).await?;
    ensure!(r.topics[0].partitions[1].offset == 40, "{r:?}");
    Ok(())
}

/// A Fetch of `partitions` (partition numbers of topic `lagging`, from offset 0, 1 MiB each)
/// within `max_bytes`.
fn lagging_fetch(partitions: impl Iterator<Item = i32>, max_bytes: i32, wait: i32) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(wait)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("lagging")))
                .with_partitions(
                    partitions
                        .map(|p| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_fetch_offset(0)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                ),
        ])
}

/// Bytes of records in each partition of a Fetch answer, in its order.
fn records_per_partition(r: &FetchResponse) -> Vec<usize> {
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, Bytes::len))
        .collect()
}

/// KIP-74: a Fetch is filled in order against its response budget, and storage is asked for
/// about that budget, not each partition's; the first partition with records gets one batch
/// past the limits and no other does; a partition named again is read and answered once; a
/// fetch with an error is answered at once, not after its wait.
#[tokio::test]
async fn fetch_reads_about_its_budget_in_order_and_each_partition_once() -> Result<()> {
    let s = server(KafkaConfig::default()).await?;
    let one = lagging_batch().len();
    let counts = || -> Result<(u64, u64, u64)> {
        let mut n = s.broker.lagging.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        Ok(std::mem::take(&mut *n))
    };
    // 200 lagging partitions of 1 MiB asked within 1 MiB.
    let r: FetchResponse =
        ask(s.addr, ApiKey::Fetch, 12, "t", &lagging_fetch(0..200, 1 << 20, 0)).await?;
    let (asked, served, reads) = counts()?;
    let per = records_per_partition(&r);
    ensure!(per.len() == 200 && reads == 200, "{} partitions answered, {reads} read", per.len());
    ensure!(served <= (1 << 20) + one as u64, "{served} bytes read from storage for 1 MiB");
    // The budget, then what it had left (less than a batch) of the next partition.
    ensure!(asked <= (1 << 20) + one as u64, "{asked} bytes asked of storage for 1 MiB");
    ensure!(per.iter().sum::<usize>() <= 1 << 20 && per[0] >= (1 << 20) - one, "{per:?}");
    ensure!(per[1..].iter().all(|n| *n == 0), "records past the budget: {per:?}");
    let p = &r.responses[0].partitions[199];
    ensure!(p.high_watermark == LAGGING_BATCHES && p.error_code == 0, "{p:?}");

    // One partition named 200 times: read once, answered once.
    let r: FetchResponse =
        ask(s.addr, ApiKey::Fetch, 12, "t", &lagging_fetch([5; 200].into_iter(), 100 << 20, 0))
            .await?;
    let (_, served, reads) = counts()?;
    ensure!(reads == 1 && records_per_partition(&r).len() == 1, "{reads} reads");
    ensure!(served <= 1 << 20, "{served}");

    // A budget of 0: one batch, of the first partition with records; the others' offsets.
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 12, "t", &lagging_fetch(0..4, 0, 0)).await?;
    let (_, served, _) = counts()?;
    ensure!(records_per_partition(&r) == vec![one, 0, 0, 0], "{:?}", records_per_partition(&r));
    ensure!(served == one as u64, "{served}");

    // `fetch.min.bytes` not met: the fetch waits on, past each arrival, until `max_wait_ms`,
    // then answers what there is.
    let req =
        produce_request(-1, vec![(0, Some(batch(&["small"], recordbatch::ProducerFields::NONE)?))]);
    let _: ProduceResponse = ask(s.addr, ApiKey::Produce, 7, "t", &req).await?;
    let started = std::time::Instant::now();
    let req = fetch_request(0, 700, 0).with_min_bytes(4 << 20);
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 12, "t", &req).await?;
    ensure!(r.responses[0].partitions[0].records.as_ref().is_some_and(|b| !b.is_empty()));
    ensure!(
        started.elapsed() >= std::time::Duration::from_millis(650),
        "answered after {:?}, min_bytes unmet",
        started.elapsed()
    );
    // A partition whose leader is elsewhere: answered at once, whatever the wait asked.
    let started = std::time::Instant::now();
    let waited = *s.broker.waited.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let r: FetchResponse = ask(s.addr, ApiKey::Fetch, 12, "t", &fetch_request(0, 5000, 1)).await?;
    ensure!(r.responses[0].partitions[0].error_code == 6, "{r:?}");
    ensure!(
        *s.broker.waited.lock().map_err(|_| anyhow::anyhow!("poisoned"))? == waited
            && started.elapsed() < std::time::Duration::from_secs(4),
        "a fetch with an error waited {:?}",
        started.elapsed()
    );
    Ok(())
}

/// A Produce of one batch of `len` bytes to topic `slow`.
fn slow_produce(len: usize) -> Result<ProduceRequest> {
    let record =
        recordbatch::Record { value: Some(Bytes::from(vec![3u8; len])), ..Default::default() };
    let batch = recordbatch::encode(&[record], recordbatch::ProducerFields::NONE)?;
    Ok(ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("slow")))
            .with_partition_data(vec![
                PartitionProduceData::default().with_index(0).with_records(Some(batch)),
            ]),
    ]))
}

/// H2: what a listener's requests hold is bounded by its request budget, whatever clients
/// pipeline. Four connections each pipeline 16 produces of 900 KiB whose commits wait: with a
/// 16 MiB budget the listener reads only the frames that fit (held until answered), not all
/// 64; a new client's small request is still served meanwhile (the reserve); once the commits
/// go through, every produce is answered.
#[tokio::test]
async fn pipelined_produces_whose_commits_wait_are_read_only_within_the_request_budget()
-> Result<()> {
    let budget = kafka::budget::RequestBudget::new(16 << 20);
    let s = server(KafkaConfig { request_budget: budget.clone(), ..Default::default() }).await?;
    let frame = request(ApiKey::Produce, 9, 1, "t", &slow_produce(900 << 10)?)?;
    let mut conns = Vec::new();
    for _ in 0..4 {
        let c = tokio::net::TcpStream::connect(s.addr).await?;
        let writing = tokio::spawn({
            let frame = frame.clone();
            async move {
                let (mut r, mut w) = c.into_split();
                let reading = tokio::spawn(async move {
                    let mut answered = 0;
                    while read_response_half(&mut r).await?.is_some() {
                        answered += 1;
                        if answered == 16 {
                            break;
                        }
                    }
                    anyhow::Ok(answered)
                });
                for _ in 0..16 {
                    w.write_all(&frame).await?;
                }
                let answered = reading.await??;
                drop(w);
                anyhow::Ok(answered)
            }
        });
        conns.push(writing);
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let admitted = s.broker.slow.load(std::sync::atomic::Ordering::SeqCst);
    ensure!((1..=16).contains(&admitted), "{admitted} produces of 900 KiB read within 16 MiB");
    ensure!(budget.peak() <= 16 << 20 && budget.held() <= 16 << 20, "{} held", budget.held());
    // Another client is served meanwhile.
    let quick = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        ask::<_, ApiVersionsResponse>(
            s.addr,
            ApiKey::ApiVersions,
            3,
            "t",
            &ApiVersionsRequest::default(),
        ),
    )
    .await;
    ensure!(quick.is_ok_and(|r| r.is_ok()), "a small request waited behind the held produces");
    s.broker.slow_gate.send_replace(true);
    for c in conns {
        let answered = tokio::time::timeout(std::time::Duration::from_secs(30), c).await???;
        ensure!(answered == 16, "{answered} of 16 produces answered");
    }
    ensure!(s.broker.slow.load(std::sync::atomic::Ordering::SeqCst) == 64);
    ensure!(
        budget.held() == 0,
        "{} bytes still held once every produce was answered",
        budget.held()
    );
    Ok(())
}

/// L3: an answer ready is written while a later request of the connection is admitted, however
/// long that admission takes (5 s here).
#[tokio::test]
async fn an_answer_is_written_while_a_later_request_is_admitted() -> Result<()> {
    let s = server(KafkaConfig::default()).await?;
    let none = recordbatch::ProducerFields::NONE;
    let fast = produce_request(-1, vec![(0, Some(batch(&["a"], none)?))]);
    let mut stalled = fast.clone();
    stalled.topic_data[0].name = TopicName(StrBytes::from_static_str("stall"));
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    let mut both = BytesMut::new();
    both.put_slice(&request(ApiKey::Produce, 7, 1, "t", &fast)?);
    both.put_slice(&request(ApiKey::Produce, 7, 2, "t", &stalled)?);
    let started = std::time::Instant::now();
    c.write_all(&both).await?;
    let first = read_response(&mut c).await?.context("closed")?;
    let (id, _) = decode::<ProduceResponse>(ApiKey::Produce, 7, first)?;
    let took = started.elapsed();
    ensure!(id == 1 && took < std::time::Duration::from_secs(3), "answer {id} after {took:?}");
    let second = read_response(&mut c).await?.context("closed")?;
    ensure!(decode::<ProduceResponse>(ApiKey::Produce, 7, second)?.0 == 2);
    Ok(())
}

/// M2: a connection that sends nothing is closed after `connections_max_idle`, and one that
/// leaves a frame half sent after `frame_deadline`; M1/M2: connections are capped per
/// address, and another address is still served.
#[tokio::test]
async fn idle_and_half_sent_connections_are_closed_and_one_address_cannot_take_every_place()
-> Result<()> {
    let s = server(KafkaConfig {
        connections_max_idle: std::time::Duration::from_millis(300),
        frame_deadline: std::time::Duration::from_millis(300),
        max_connections_per_ip: 4,
        ..Default::default()
    })
    .await?;
    let closed_within = |mut c: tokio::net::TcpStream, secs: u64| async move {
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(std::time::Duration::from_secs(secs), c.read(&mut b)).await;
        matches!(r, Ok(Ok(0)) | Ok(Err(_)))
    };
    let idle = tokio::net::TcpStream::connect(s.addr).await?;
    ensure!(closed_within(idle, 5).await, "an idle connection stayed open");
    let mut half = tokio::net::TcpStream::connect(s.addr).await?;
    half.write_all(&[0, 0, 1, 0, 0, 18]).await?;
    ensure!(closed_within(half, 5).await, "a half-sent frame kept its connection");
    // Four from 127.0.0.2; a fifth is closed at once; 127.0.0.1 is still served.
    let from = |ip: [u8; 4]| async move {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(std::net::SocketAddr::from((ip, 0)))?;
        anyhow::Ok(sock.connect(s.addr).await?)
    };
    let mut four = Vec::new();
    for _ in 0..4 {
        four.push(from([127, 0, 0, 2]).await?);
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let fifth = from([127, 0, 0, 2]).await?;
    ensure!(closed_within(fifth, 1).await, "a fifth connection from one address was kept");
    let r: ApiVersionsResponse =
        ask(s.addr, ApiKey::ApiVersions, 3, "t", &ApiVersionsRequest::default()).await?;
    ensure!(r.error_code == 0);
    drop(four);
    Ok(())
}

#[tokio::test]
async fn pipelined_produces_are_admitted_in_request_order_and_answered_in_it() -> Result<()> {
    let s = server(KafkaConfig { max_in_flight: 4, ..Default::default() }).await?;
    let none = recordbatch::ProducerFields::NONE;
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    let mut all = BytesMut::new();
    let mut sizes = Vec::new();
    for id in 0..12 {
        // 1, 2 or 3 records: the fake commits them after 10, 20 or 0 ms.
        let n = 1 + (id as usize % 3);
        let values: Vec<String> = (0..n).map(|i| format!("r{id}-{i}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        sizes.push(n as i64);
        let req = produce_request(-1, vec![(0, Some(batch(&refs, none)?))]);
        all.put_slice(&request(ApiKey::Produce, 9, id, "t", &req)?);
    }
    c.write_all(&all).await?;
    let mut expect = 0i64;
    for (id, n) in sizes.iter().enumerate() {
        let b = read_response(&mut c).await?.context("answer missing")?;
        let (got, r) = decode::<ProduceResponse>(ApiKey::Produce, 9, b)?;
        let base = r.responses[0].partition_responses[0].base_offset;
        ensure!(
            got == id as i32 && base == expect,
            "answer {got} at {base}: {id} at {expect} was due"
        );
        expect += n;
    }
    Ok(())
}

/// A group's commits pipelined on one connection are applied in the order sent, whatever
/// each takes to store (the fake stores smaller offsets slower): the last one sent is the
/// one that stays, as with Kafka.
#[tokio::test]
async fn pipelined_offset_commits_are_applied_in_the_order_sent() -> Result<()> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{
        GroupId, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    };
    let s = server(KafkaConfig { max_in_flight: 8, ..Default::default() }).await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    let mut all = BytesMut::new();
    for offset in 1..=8i64 {
        // A simple consumer's commit: no member, generation -1.
        let req = commit_one("pipe", "", -1, 0, offset);
        all.put_slice(&request(ApiKey::OffsetCommit, 8, offset as i32, "t", &req)?);
    }
    c.write_all(&all).await?;
    for id in 1..=8 {
        let b = read_response(&mut c).await?.context("answer missing")?;
        let (got, r) = decode::<OffsetCommitResponse>(ApiKey::OffsetCommit, 8, b)?;
        ensure!(got == id && r.topics[0].partitions[0].error_code == 0, "{got}: {r:?}");
    }
    let fetch =
        OffsetFetchRequest::default().with_group_id(GroupId(str("pipe"))).with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(str("orders")))
                .with_partition_indexes(vec![0]),
        ]));
    let r: OffsetFetchResponse = ask(s.addr, ApiKey::OffsetFetch, 7, "t", &fetch).await?;
    let committed = r.topics[0].partitions[0].committed_offset;
    ensure!(committed == 8, "the last commit sent was 8; {committed} stayed");
    Ok(())
}

/// librdkafka 2.16 asks Metadata v12 for all topics (AdminClient.list_topics) leaving the
/// topic count's 4-byte placeholder in: a null count, then three bytes it meant for nothing.
/// Kafka reads the body and ignores what follows it, so the request is answered, not closed.
#[tokio::test]
async fn a_request_with_bytes_after_its_body_is_answered_as_kafka_does() -> Result<()> {
    use kafka_protocol::messages::MetadataResponse;
    let s = server(KafkaConfig::default()).await?;
    // As captured: header v2 (key 3, v12, correlation 3, client "rdkafka", no tags), then
    // 00 00 00 00 01 00 00.
    let frame: Vec<u8> = [
        &[0x00, 0x03, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x03, 0x00, 0x07][..],
        b"rdkafka",
        &[0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00],
    ]
    .concat();
    let mut c = tokio::net::TcpStream::connect(s.addr).await?;
    c.write_all(&(frame.len() as i32).to_be_bytes()).await?;
    c.write_all(&frame).await?;
    let b = read_response(&mut c).await?.context("the connection was closed unanswered")?;
    let (id, r) = decode::<MetadataResponse>(ApiKey::Metadata, 12, b)?;
    ensure!(id == 3, "correlation id {id}");
    let names: Vec<String> =
        r.topics.iter().filter_map(|t| t.name.as_ref().map(|n| n.to_string())).collect();
    ensure!(names.contains(&"orders".to_owned()), "all topics asked: {names:?}");
    Ok(())
}

#[tokio::test]
async fn admin_requests_are_answered_at_every_advertised_version() -> Result<()> {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::{
        CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
        CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    };
    let s = server(KafkaConfig::default()).await?;
    let name = |n: &str| TopicName(StrBytes::from_string(n.to_owned()));
    for v in 2..=7 {
        let t = CreatableTopic::default()
            .with_name(name(&format!("made-{v}")))
            .with_num_partitions(2)
            .with_replication_factor(3);
        let r: CreateTopicsResponse = ask(
            s.addr,
            ApiKey::CreateTopics,
            v,
            "t",
            &CreateTopicsRequest::default().with_topics(vec![t]),
        )
        .await?;
        let t = &r.topics[0];
        ensure!(t.error_code == 0, "v{v}: {t:?}");
        ensure!(v < 5 || (t.num_partitions == 2 && t.replication_factor == 1), "v{v}: {t:?}");
        // A replica assignment is checked as Kafka checks one, and accepted when it names
        // live brokers (10 and 11): with a partition count too it is INVALID_REQUEST; a
        // broker that is not live, a partition named out of order or a replica twice is
        // INVALID_REPLICA_ASSIGNMENT.
        let assigned = |topic: &str, count: i32, lists: &[(i32, &[i32])]| {
            let mut t = CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(count)
                .with_replication_factor(-1);
            for (p, brokers) in lists {
                t.assignments.push(
                    kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment::default()
                        .with_partition_index(*p)
                        .with_broker_ids(brokers.iter().map(|b| kafka_protocol::messages::BrokerId(*b)).collect()),
                );
            }
            CreateTopicsRequest::default().with_topics(vec![t])
        };
        for (topic, count, lists, want) in [
            ("x1", -1, &[(0, &[10, 11][..]), (1, &[11][..])][..], 0),
            ("x2", 2, &[(0, &[10][..])][..], 42),
            ("x3", -1, &[(0, &[12][..])][..], 39),
            ("x4", -1, &[(1, &[10][..])][..], 39),
            ("x5", -1, &[(0, &[10, 10][..])][..], 39),
            ("x6", -1, &[(0, &[][..])][..], 39),
        ] {
            let req = assigned(&format!("{topic}-{v}"), count, lists);
            let r: CreateTopicsResponse = ask(s.addr, ApiKey::CreateTopics, v, "t", &req).await?;
            ensure!(r.topics[0].error_code == want, "v{v} {topic}: {:?}", r.topics[0]);
            if want == 0 && v >= 5 {
                ensure!(r.topics[0].num_partitions == 2, "v{v}: {:?}", r.topics[0]);
            }
        }
    }
    for v in 1..=6 {
        let req = if v >= 6 {
            DeleteTopicsRequest::default()
                .with_topics(vec![DeleteTopicState::default().with_name(Some(name("gone")))])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![name("gone")])
        };
        let r: DeleteTopicsResponse = ask(s.addr, ApiKey::DeleteTopics, v, "t", &req).await?;
        ensure!(r.responses[0].error_code == 3, "v{v}: {r:?}");
    }
    for v in 0..=3 {
        let t = CreatePartitionsTopic::default().with_name(name("orders")).with_count(5);
        let r: CreatePartitionsResponse = ask(
            s.addr,
            ApiKey::CreatePartitions,
            v,
            "t",
            &CreatePartitionsRequest::default().with_topics(vec![t]).with_timeout_ms(1000),
        )
        .await?;
        ensure!(r.results[0].error_code == 0, "v{v}: {r:?}");
    }
    Ok(())
}

/// Group configs (a GROUP resource, 32) as Kafka 4.4 answers them: DescribeConfigs lists its 27
/// group configs for any group, formed or not; IncrementalAlterConfigs and AlterConfigs set
/// them within a Kafka broker's default bounds (INVALID_CONFIG outside them or for an unknown
/// name, INVALID_REQUEST for an empty group name); set, they are GROUP_CONFIG, and a KIP-848
/// member's heartbeats carry the group's own interval.
#[tokio::test]
async fn a_groups_configs_are_set_described_and_given_to_its_members() -> Result<()> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::*;
    use kafka_protocol::messages::{
        alter_configs_request as full, incremental_alter_configs_request as inc,
    };
    let s = server(KafkaConfig::default()).await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let describe = |group: &str| {
        let r = DescribeConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(str(group));
        let req = DescribeConfigsRequest::default().with_resources(vec![r]);
        async move {
            let r: DescribeConfigsResponse =
                ask(s.addr, ApiKey::DescribeConfigs, 4, "t", &req).await?;
            anyhow::Ok(r.results.into_iter().next().context("one result")?)
        }
    };
    let value = |r: &describe_configs_response::DescribeConfigsResult, name: &str| {
        r.configs
            .iter()
            .find(|c| c.name.as_str() == name)
            .map(|c| (c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(), c.config_source))
    };
    let set = |group: &str, name: &str, v: &str| {
        let op = inc::AlterableConfig::default()
            .with_name(str(name))
            .with_config_operation(0)
            .with_value(Some(str(v)));
        let r = inc::AlterConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(str(group))
            .with_configs(vec![op]);
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![r]);
        async move {
            let r: IncrementalAlterConfigsResponse =
                ask(s.addr, ApiKey::IncrementalAlterConfigs, 1, "t", &req).await?;
            anyhow::Ok(r.responses[0].error_code)
        }
    };
    let fresh = describe("never-formed").await?;
    let names: Vec<&str> = fresh.configs.iter().map(|c| c.name.as_str()).collect();
    let every: Vec<&str> = streamconfig::GROUP_DEFS.iter().map(|d| d.name).collect();
    ensure!(fresh.error_code == 0 && names == every && names.len() == 27, "{fresh:?}");
    ensure!(value(&fresh, "consumer.heartbeat.interval.ms") == Some(("5000".into(), 5)));
    ensure!(value(&fresh, "share.auto.offset.reset") == Some(("latest".into(), 5)));
    ensure!(describe("").await?.error_code == 42, "an empty group name");

    ensure!(set("g", "consumer.heartbeat.interval.ms", "7000").await? == 0);
    ensure!(set("g", "share.auto.offset.reset", "by_duration:PT1H").await? == 0);
    let g = describe("g").await?;
    ensure!(value(&g, "consumer.heartbeat.interval.ms") == Some(("7000".into(), 8)), "{g:?}");
    ensure!(value(&g, "share.auto.offset.reset") == Some(("by_duration:PT1H".into(), 8)));
    for (name, v) in [
        ("consumer.heartbeat.interval.ms", "1000"),
        ("consumer.session.timeout.ms", "60001"),
        ("share.delivery.count.limit", "11"),
        ("no.such.config", "1"),
    ] {
        ensure!(set("g", name, v).await? == 40, "{name}={v}: INVALID_CONFIG");
    }
    let v = value(&describe("g").await?, "consumer.heartbeat.interval.ms");
    ensure!(v == Some(("7000".into(), 8)), "a refused change changes nothing: {v:?}");

    // A KIP-848 member of the group is told the group's interval; another group's, the default.
    let hb = ApiKey::ConsumerGroupHeartbeat;
    let r: ConsumerGroupHeartbeatResponse =
        ask(s.addr, hb, 1, "t", &kip848_join("g", "m1")).await?;
    ensure!(r.error_code == 0 && r.heartbeat_interval_ms == 7000, "{r:?}");
    let r: ConsumerGroupHeartbeatResponse =
        ask(s.addr, hb, 1, "t", &kip848_join("h", "m1")).await?;
    ensure!(r.error_code == 0 && r.heartbeat_interval_ms == 5000, "{r:?}");

    // AlterConfigs replaces them whole: the interval not named goes back to the default.
    let r = full::AlterConfigsResource::default()
        .with_resource_type(32)
        .with_resource_name(str("g"))
        .with_configs(vec![
            full::AlterableConfig::default()
                .with_name(str("consumer.session.timeout.ms"))
                .with_value(Some(str("50000"))),
        ]);
    let req = AlterConfigsRequest::default().with_resources(vec![r]);
    let r: AlterConfigsResponse = ask(s.addr, ApiKey::AlterConfigs, 2, "t", &req).await?;
    ensure!(r.responses[0].error_code == 0, "{r:?}");
    let g = describe("g").await?;
    ensure!(value(&g, "consumer.session.timeout.ms") == Some(("50000".into(), 8)), "{g:?}");
    ensure!(value(&g, "consumer.heartbeat.interval.ms") == Some(("5000".into(), 5)), "{g:?}");

    // ListConfigResources (KIP-1142): the groups with configs, topics and brokers.
    let list = |types: Vec<i8>| {
        let req = ListConfigResourcesRequest::default().with_resource_types(types);
        async move {
            let r: ListConfigResourcesResponse =
                ask(s.addr, ApiKey::ListConfigResources, 1, "t", &req).await?;
            let listed: Vec<(i8, String)> = r
                .config_resources
                .iter()
                .map(|c| (c.resource_type, c.resource_name.to_string()))
                .collect();
            anyhow::Ok((r.error_code, listed))
        }
    };
    ensure!(list(vec![32]).await? == (0, vec![(32, "g".to_owned())]));
    let (code, all) = list(Vec::new()).await?;
    ensure!(code == 0 && all.contains(&(32, "g".into())) && all.contains(&(2, "orders".into())));
    ensure!(all.iter().any(|(t, _)| *t == 4), "the brokers: {all:?}");
    ensure!(list(vec![2, 99]).await?.0 == 35, "an unknown type: UNSUPPORTED_VERSION");
    Ok(())
}

#[tokio::test]
async fn configs_delete_records_and_describe_cluster_are_answered_at_every_version() -> Result<()> {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::describe_configs_response;
    use kafka_protocol::messages::{
        AlterConfigsRequest, AlterConfigsResponse, DeleteRecordsRequest, DeleteRecordsResponse,
        DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
        DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
        alter_configs_request as full, incremental_alter_configs_request as inc,
    };
    let s = server(KafkaConfig::default()).await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let describe = |v: i16, resource_type: i8, name: &str| {
        let r = DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(str(name));
        let req = DescribeConfigsRequest::default().with_resources(vec![r]);
        async move {
            let r: DescribeConfigsResponse =
                ask(s.addr, ApiKey::DescribeConfigs, v, "t", &req).await?;
            anyhow::Ok(r.results.into_iter().next().context("one result")?)
        }
    };
    let of = |r: &describe_configs_response::DescribeConfigsResult, name: &str| {
        r.configs.iter().find(|c| c.name.as_str() == name).cloned().context("listed")
    };
    for v in 1..=4 {
        let r = describe(v, 2, "orders").await?;
        ensure!(r.error_code == 0, "v{v}: {r:?}");
        let names: Vec<&str> = r.configs.iter().map(|c| c.name.as_str()).collect();
        let every: Vec<&str> = streamconfig::DEFS.iter().map(|d| d.name).collect();
        ensure!(names == every && names.len() == 39, "v{v}: every config: {names:?}");
        let lake_ms = of(&r, "lake.retention.ms")?;
        ensure!(
            lake_ms.value.as_deref() == Some("-1") && lake_ms.config_source == 5,
            "{lake_ms:?}"
        );
        let lake = of(&r, "lake.table")?;
        ensure!(lake.value.as_deref() == Some("false") && lake.config_source == 5, "{lake:?}");
        ensure!((v >= 3) == (lake.config_type == 1), "v{v}: config type {}", lake.config_type);
        let max = of(&r, "max.message.bytes")?;
        ensure!(max.value.as_deref() == Some("1048576") && max.config_source == 5, "{max:?}");
        ensure!((v >= 3) == (max.config_type == 3), "v{v}: config type {}", max.config_type);
        let ratio = of(&r, "min.cleanable.dirty.ratio")?;
        ensure!(ratio.value.as_deref() == Some("0.5") && (v < 3 || ratio.config_type == 6));
        ensure!(v < 3 || ratio.documentation.is_none(), "documentation only when asked for");
        ensure!(describe(v, 2, "nope").await?.error_code == 3, "v{v}: an unknown topic");
        let b = describe(v, 4, "10").await?;
        ensure!(b.error_code == 0 && b.configs.iter().all(|c| c.read_only), "v{v}: {b:?}");
        ensure!(describe(v, 8, "x").await?.error_code == 42, "v{v}: a broker logger");
    }
    // Documentation, asked for (v3+), and a subset of the configs by name.
    let req =
        DescribeConfigsRequest::default().with_include_documentation(true).with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str("orders"))
                .with_configuration_keys(Some(vec![str("segment.bytes"), str("no.such")])),
        ]);
    let r: DescribeConfigsResponse = ask(s.addr, ApiKey::DescribeConfigs, 4, "t", &req).await?;
    let seg = &r.results[0].configs;
    ensure!(seg.len() == 1 && seg[0].documentation.is_some(), "{seg:?}");
    for v in 0..=1 {
        let set = |name: &str, op: i8, value: Option<&str>| {
            inc::AlterableConfig::default()
                .with_name(str(name))
                .with_config_operation(op)
                .with_value(value.map(str))
        };
        let alter = |resource_type: i8, configs: Vec<inc::AlterableConfig>| {
            let r = inc::AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str("orders"))
                .with_configs(configs);
            let req = IncrementalAlterConfigsRequest::default().with_resources(vec![r]);
            async move {
                let r: IncrementalAlterConfigsResponse =
                    ask(s.addr, ApiKey::IncrementalAlterConfigs, v, "t", &req).await?;
                anyhow::Ok(r.responses[0].error_code)
            }
        };
        let n = 60_000 + i64::from(v);
        ensure!(alter(2, vec![set("retention.ms", 0, Some(&n.to_string()))]).await? == 0);
        let ms = of(&describe(4, 2, "orders").await?, "retention.ms")?;
        ensure!(ms.value.as_deref() == Some(n.to_string().as_str()) && ms.config_source == 1);
        ensure!(alter(2, vec![set("lake.table", 0, Some("true"))]).await? == 0);
        let lake = of(&describe(4, 2, "orders").await?, "lake.table")?;
        ensure!(lake.value.as_deref() == Some("true") && lake.config_source == 1, "{lake:?}");
        ensure!(alter(2, vec![set("lake.table", 0, Some("yes"))]).await? == 40);
        ensure!(alter(2, vec![set("lake.table", 1, None)]).await? == 0);
        let lake = of(&describe(4, 2, "orders").await?, "lake.table")?;
        ensure!(lake.value.as_deref() == Some("false"));
        // cleanup.policy is a list: APPEND and SUBTRACT change its items.
        let policy =
            || async { anyhow::Ok(of(&describe(4, 2, "orders").await?, "cleanup.policy")?.value) };
        ensure!(alter(2, vec![set("cleanup.policy", 0, Some("compact"))]).await? == 0);
        ensure!(alter(2, vec![set("cleanup.policy", 2, Some("delete"))]).await? == 0);
        ensure!(policy().await?.as_deref() == Some("compact,delete"));
        ensure!(alter(2, vec![set("cleanup.policy", 3, Some("compact"))]).await? == 0);
        ensure!(policy().await?.as_deref() == Some("delete"));
        ensure!(alter(2, vec![set("cleanup.policy", 0, Some("compacted"))]).await? == 40);
        ensure!(alter(2, vec![set("retention.ms", 2, Some("1"))]).await? == 40, "not a list");
        ensure!(alter(2, vec![set("no.such.config", 0, Some("1"))]).await? == 40);
        // A config Kafka has and a diskless log has no use for is kept as set.
        ensure!(alter(2, vec![set("segment.ms", 0, Some("1000"))]).await? == 0);
        let seg = of(&describe(4, 2, "orders").await?, "segment.ms")?;
        ensure!(seg.value.as_deref() == Some("1000") && seg.config_source == 1);
        ensure!(
            alter(2, vec![set("retention.ms", 1, None), set("segment.ms", 1, None)]).await? == 0
        );
        ensure!(of(&describe(4, 2, "orders").await?, "retention.ms")?.config_source == 5);
        ensure!(alter(4, vec![set("num.partitions", 0, Some("3"))]).await? == 42);
    }
    for v in 0..=2 {
        // Set retention.ms, then alter with max.message.bytes alone: AlterConfigs replaces
        // the whole set, so retention.ms is back to its default.
        for configs in [vec![("retention.ms", "1000")], vec![("max.message.bytes", "1000")]] {
            let r = full::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(str("orders"))
                .with_configs(
                    configs
                        .iter()
                        .map(|(n, v)| {
                            full::AlterableConfig::default()
                                .with_name(str(n))
                                .with_value(Some(str(v)))
                        })
                        .collect(),
                );
            let req = AlterConfigsRequest::default().with_resources(vec![r]);
            let r: AlterConfigsResponse = ask(s.addr, ApiKey::AlterConfigs, v, "t", &req).await?;
            ensure!(r.responses[0].error_code == 0, "v{v}: {r:?}");
        }
        let r = describe(4, 2, "orders").await?;
        let max = of(&r, "max.message.bytes")?;
        ensure!(max.value.as_deref() == Some("1000") && of(&r, "retention.ms")?.config_source == 5);
    }
    for v in 0..=2 {
        let parts = [5, -1, -2]
            .iter()
            .enumerate()
            .map(|(i, o)| {
                DeleteRecordsPartition::default().with_partition_index(i as i32).with_offset(*o)
            })
            .collect();
        let t = DeleteRecordsTopic::default()
            .with_name(TopicName(str("orders")))
            .with_partitions(parts);
        let req = DeleteRecordsRequest::default().with_topics(vec![t]).with_timeout_ms(1000);
        let r: DeleteRecordsResponse = ask(s.addr, ApiKey::DeleteRecords, v, "t", &req).await?;
        let got: Vec<(i64, i16)> =
            r.topics[0].partitions.iter().map(|p| (p.low_watermark, p.error_code)).collect();
        ensure!(got == [(5, 0), (42, 0), (-1, 1)], "v{v}: {got:?}");
    }
    ensure!(s.broker.deleted.lock().map(|d| d.len()).unwrap_or(0) == 6, "-2 reached the broker");
    for v in 0..=2 {
        let r: DescribeClusterResponse = ask(
            s.addr,
            ApiKey::DescribeCluster,
            v,
            "t",
            &DescribeClusterRequest::default().with_endpoint_type(1),
        )
        .await?;
        let ids: Vec<i32> = r.brokers.iter().map(|b| b.broker_id.0).collect();
        ensure!(r.error_code == 0 && ids == [10, 11] && r.controller_id.0 == 10, "v{v}: {r:?}");
        ensure!(r.cluster_id.as_str() == "test-cluster");
        if v >= 1 {
            let r: DescribeClusterResponse = ask(
                s.addr,
                ApiKey::DescribeCluster,
                v,
                "t",
                &DescribeClusterRequest::default().with_endpoint_type(2),
            )
            .await?;
            ensure!(r.error_code == 115, "v{v}: controllers: {r:?}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn group_apis_are_answered_at_every_version_and_refuse_bad_input() -> Result<()> {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::*;
    let cfg =
        KafkaConfig { initial_rebalance_delay: std::time::Duration::ZERO, ..Default::default() };
    let s = server(cfg).await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    for v in 0..=6 {
        let req = if v >= 4 {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![str("g")])
        } else {
            FindCoordinatorRequest::default().with_key(str("g"))
        };
        let r: FindCoordinatorResponse = ask(s.addr, ApiKey::FindCoordinator, v, "t", &req).await?;
        let node =
            if v >= 4 { r.coordinators.first().map(|c| c.node_id.0) } else { Some(r.node_id.0) };
        ensure!(node == Some(10), "v{v}: {r:?}");
    }
    let join = |group: &str, member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(str(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(str(member))
            .with_protocol_type(str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(str("range"))
                    .with_metadata(Bytes::from_static(b"meta")),
            ])
    };
    for v in 0..=9i16 {
        let group = format!("g{v}");
        // v4+: a member without an id is given one first (MEMBER_ID_REQUIRED).
        let mut r: JoinGroupResponse =
            ask(s.addr, ApiKey::JoinGroup, v, "t", &join(&group, "")).await?;
        if v >= 4 {
            ensure!(r.error_code == 79 && !r.member_id.is_empty(), "v{v}: {r:?}");
            r = ask(s.addr, ApiKey::JoinGroup, v, "t", &join(&group, &r.member_id)).await?;
        }
        ensure!(
            r.error_code == 0 && r.generation_id == 1 && r.leader == r.member_id,
            "v{v}: {r:?}"
        );
        ensure!(r.members.len() == 1 && r.members[0].metadata.as_ref() == b"meta", "v{v}: {r:?}");
        let me = r.member_id.clone();
        let sv = v.min(5);
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(str(&group)))
            .with_generation_id(1)
            .with_member_id(me.clone())
            .with_assignments(vec![
                SyncGroupRequestAssignment::default()
                    .with_member_id(me.clone())
                    .with_assignment(Bytes::from_static(b"mine")),
            ]);
        let r: SyncGroupResponse = ask(s.addr, ApiKey::SyncGroup, sv, "t", &sync).await?;
        ensure!(r.error_code == 0 && r.assignment.as_ref() == b"mine", "sync v{sv}: {r:?}");
        let hv = v.min(4);
        let hb = |generation: i32| {
            HeartbeatRequest::default()
                .with_group_id(GroupId(str(&group)))
                .with_generation_id(generation)
                .with_member_id(me.clone())
        };
        let r: HeartbeatResponse = ask(s.addr, ApiKey::Heartbeat, hv, "t", &hb(1)).await?;
        ensure!(r.error_code == 0, "heartbeat v{hv}: {r:?}");
        let r: HeartbeatResponse = ask(s.addr, ApiKey::Heartbeat, hv, "t", &hb(7)).await?;
        ensure!(r.error_code == 22, "a stale generation, v{hv}: {r:?}");
        // Offsets: committed by the member at its generation, read back; a stale generation
        // is ILLEGAL_GENERATION.
        let cv = (v + 2).min(9);
        let commit = |generation: i32, offset: i64| {
            OffsetCommitRequest::default()
                .with_group_id(GroupId(str(&group)))
                .with_generation_id_or_member_epoch(generation)
                .with_member_id(me.clone())
                .with_topics(vec![
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(str("orders")))
                        .with_partitions(vec![
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(1)
                                .with_committed_offset(offset)
                                .with_committed_metadata(Some(str("note"))),
                        ]),
                ])
        };
        let r: OffsetCommitResponse =
            ask(s.addr, ApiKey::OffsetCommit, cv, "t", &commit(1, 40 + i64::from(v))).await?;
        ensure!(r.topics[0].partitions[0].error_code == 0, "commit v{cv}: {r:?}");
        let r: OffsetCommitResponse =
            ask(s.addr, ApiKey::OffsetCommit, cv, "t", &commit(9, 1)).await?;
        ensure!(r.topics[0].partitions[0].error_code == 22, "stale commit v{cv}: {r:?}");
        let fv = (v + 1).min(9);
        let fetch = if fv >= 8 {
            OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default().with_group_id(GroupId(str(&group))).with_topics(
                    Some(vec![
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(str("orders")))
                            .with_partition_indexes(vec![1, 2]),
                    ]),
                ),
            ])
        } else {
            OffsetFetchRequest::default().with_group_id(GroupId(str(&group))).with_topics(Some(
                vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(str("orders")))
                        .with_partition_indexes(vec![1, 2]),
                ],
            ))
        };
        let r: OffsetFetchResponse = ask(s.addr, ApiKey::OffsetFetch, fv, "t", &fetch).await?;
        let got: Vec<(i64, Option<String>)> = if fv >= 8 {
            r.groups[0].topics[0]
                .partitions
                .iter()
                .map(|p| (p.committed_offset, p.metadata.as_ref().map(|m| m.to_string())))
                .collect()
        } else {
            r.topics[0]
                .partitions
                .iter()
                .map(|p| (p.committed_offset, p.metadata.as_ref().map(|m| m.to_string())))
                .collect()
        };
        ensure!(
            got == [(40 + i64::from(v), Some("note".to_owned())), (-1, Some(String::new()))],
            "fetch v{fv}: {got:?}"
        );
        let lv = v.min(5);
        let leave = if lv >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(str(&group)))
                .with_members(vec![MemberIdentity::default().with_member_id(me.clone())])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(GroupId(str(&group)))
                .with_member_id(me.clone())
        };
        let r: LeaveGroupResponse = ask(s.addr, ApiKey::LeaveGroup, lv, "t", &leave).await?;
        let code =
            if lv >= 3 { r.members.first().map_or(-1, |m| m.error_code) } else { r.error_code };
        ensure!(code == 0, "leave v{lv}: {r:?}");
    }
    // A live group is listed and described; an empty one can be deleted (its offsets go).
    let r: JoinGroupResponse = ask(s.addr, ApiKey::JoinGroup, 3, "t", &join("live", "")).await?;
    ensure!(r.error_code == 0, "{r:?}");
    for v in 0..=5 {
        let r: ListGroupsResponse =
            ask(s.addr, ApiKey::ListGroups, v, "t", &ListGroupsRequest::default()).await?;
        ensure!(r.groups.iter().any(|g| g.group_id.0.as_str() == "live"), "list v{v}: {r:?}");
        // A group whose members left but whose offsets stay is listed Empty.
        let g0 = r.groups.iter().find(|g| g.group_id.0.as_str() == "g0");
        ensure!(v < 4 || g0.is_some_and(|g| g.group_state.as_str() == "Empty"), "list v{v}: {r:?}");
        ensure!(g0.is_some(), "list v{v}: {r:?}");
        let req = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(str("live")), GroupId(str("g0"))]);
        let r: DescribeGroupsResponse = ask(s.addr, ApiKey::DescribeGroups, v, "t", &req).await?;
        ensure!(
            r.groups[0].members.len() == 1 && r.groups[0].protocol_data.as_str() == "range",
            "describe v{v}: {r:?}"
        );
        ensure!(r.groups[0].members[0].client_host.as_str() == "/127.0.0.1", "{r:?}");
    }
    // OffsetDelete: refused while a member may read the topic (its metadata does not say
    // otherwise), done for a group with no members.
    let del = |group: &str| {
        OffsetDeleteRequest::default().with_group_id(GroupId(str(group))).with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(TopicName(str("orders")))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(1),
                ]),
        ])
    };
    let r: OffsetDeleteResponse = ask(s.addr, ApiKey::OffsetDelete, 0, "t", &del("live")).await?;
    ensure!(r.topics[0].partitions[0].error_code == 86, "{r:?}");
    let r: OffsetDeleteResponse = ask(s.addr, ApiKey::OffsetDelete, 0, "t", &del("g9")).await?;
    ensure!(r.error_code == 0 && r.topics[0].partitions[0].error_code == 0, "{r:?}");
    let stored =
        s.broker.offsets.lock().map(|o| o.keys().any(|(g, _, _)| g == "g9")).unwrap_or(true);
    ensure!(!stored, "g9's offset is still stored");
    for v in 0..=2 {
        let req = DeleteGroupsRequest::default()
            .with_groups_names(vec![GroupId(str("live")), GroupId(str(&format!("g{}", v + 3)))]);
        let r: DeleteGroupsResponse = ask(s.addr, ApiKey::DeleteGroups, v, "t", &req).await?;
        let codes: Vec<i16> = r.results.iter().map(|g| g.error_code).collect();
        ensure!(codes == [68, 0], "delete v{v}: a group with members, one without: {codes:?}");
    }
    // A group id too long to hold offsets under, and an empty one.
    let long = "x".repeat(10_000);
    for group in [long.as_str(), ""] {
        let r: JoinGroupResponse = ask(s.addr, ApiKey::JoinGroup, 5, "t", &join(group, "")).await?;
        ensure!(r.error_code == 24, "{} bytes: {r:?}", group.len());
        let commit = OffsetCommitRequest::default()
            .with_group_id(GroupId(str(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(str("orders")))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default().with_committed_offset(1),
                    ]),
            ]);
        let r: OffsetCommitResponse = ask(s.addr, ApiKey::OffsetCommit, 8, "t", &commit).await?;
        ensure!(r.topics[0].partitions[0].error_code == 24, "{} bytes: {r:?}", group.len());
    }
    Ok(())
}

/// A KIP-848 member of `group` joining (epoch 0), subscribed to topic `orders`.
fn kip848_join(
    group: &str,
    member: &str,
) -> kafka_protocol::messages::ConsumerGroupHeartbeatRequest {
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId};
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str(group)))
        .with_member_id(str(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(str("orders"))]))
        .with_topic_partitions(Some(Vec::new()))
}

/// A KIP-848 member's heartbeat at `epoch`, owning `owned` of topic `orders` (id `orders`).
fn kip848_beat(
    group: &str,
    member: &str,
    epoch: i32,
    orders: uuid::Uuid,
    owned: &[i32],
) -> kafka_protocol::messages::ConsumerGroupHeartbeatRequest {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId};
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str(group)))
        .with_member_id(str(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(Some(vec![
            TopicPartitions::default().with_topic_id(orders).with_partitions(owned.to_vec()),
        ]))
}

/// An OffsetCommit of one partition of topic `orders` at `offset`, by `member` of `group` at
/// `epoch` (generation, or member epoch).
fn commit_one(
    group: &str,
    member: &str,
    epoch: i32,
    partition: i32,
    offset: i64,
) -> kafka_protocol::messages::OffsetCommitRequest {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest};
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    OffsetCommitRequest::default()
        .with_group_id(GroupId(str(group)))
        .with_member_id(str(member))
        .with_generation_id_or_member_epoch(epoch)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(str("orders")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(offset),
                ]),
        ])
}

/// KIP-848 over the wire at both versions: a member joins (v0: the coordinator names it; v1:
/// its own id) and gets every partition of "orders" by topic id; a second member joins, and
/// the first is told to keep part (revoke before assign) and is fenced at a wrong epoch;
/// ConsumerGroupDescribe shows both; commits go by member epoch (STALE_MEMBER_EPOCH at an old
/// one, UNSUPPORTED_VERSION before OffsetCommit v9); a classic JoinGroup to the group is
/// INCONSISTENT_GROUP_PROTOCOL, and bad heartbeats get Kafka's codes.
#[tokio::test]
async fn consumer_group_heartbeats_assign_revoke_and_fence_at_both_versions() -> Result<()> {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::*;
    let s = server(KafkaConfig::default()).await?;
    let orders = s.broker.topics.lock().map_err(|_| anyhow::anyhow!("poisoned"))?[0].1;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let join = kip848_join;
    let beat = |group: &str, member: &str, epoch: i32, owned: &[i32]| {
        kip848_beat(group, member, epoch, orders, owned)
    };
    let partitions = |r: &ConsumerGroupHeartbeatResponse| -> Option<Vec<i32>> {
        let a = r.assignment.as_ref()?;
        Some(a.topic_partitions.iter().flat_map(|t| t.partitions.clone()).collect())
    };
    let hb = ApiKey::ConsumerGroupHeartbeat;
    // v0: no member id; the coordinator names one.
    let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 0, "t", &join("k0", "")).await?;
    ensure!(r.error_code == 0 && r.member_id.as_ref().is_some_and(|m| !m.is_empty()), "{r:?}");
    ensure!(r.member_epoch == 1 && r.heartbeat_interval_ms == 5000, "{r:?}");
    // v1: the member's own id; all three partitions, by topic id.
    let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 1, "t", &join("k1", "m1")).await?;
    ensure!(r.member_id.as_deref() == Some("m1") && partitions(&r) == Some(vec![0, 1, 2]), "{r:?}");
    ensure!(
        r.assignment.as_ref().is_some_and(|a| a.topic_partitions[0].topic_id == orders),
        "{r:?}"
    );
    let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 1, "t", &join("k1", "m2")).await?;
    ensure!(r.member_epoch == 2 && partitions(&r) == Some(Vec::new()), "m2 waits: {r:?}");
    let r: ConsumerGroupHeartbeatResponse =
        ask(s.addr, hb, 1, "t", &beat("k1", "m1", 1, &[0, 1, 2])).await?;
    let kept = partitions(&r).unwrap_or_default();
    ensure!(r.member_epoch == 1 && kept.len() == 2, "m1 keeps two, at epoch 1: {r:?}");
    let r: ConsumerGroupHeartbeatResponse =
        ask(s.addr, hb, 1, "t", &beat("k1", "m1", 5, &kept)).await?;
    ensure!(r.error_code == 110, "FENCED_MEMBER_EPOCH: {r:?}");
    let r: ConsumerGroupHeartbeatResponse =
        ask(s.addr, hb, 1, "t", &beat("k1", "m1", 1, &kept)).await?;
    ensure!(r.error_code == 0 && r.member_epoch == 2, "revoked, epoch 2: {r:?}");
    let r: ConsumerGroupHeartbeatResponse =
        ask(s.addr, hb, 1, "t", &beat("k1", "m2", 2, &[])).await?;
    let got = partitions(&r).unwrap_or_default();
    ensure!(got.len() == 1 && !kept.contains(&got[0]), "m2 gets the released one: {r:?}");
    // Described, by topic id and name.
    for v in 0..=1 {
        let r: ConsumerGroupDescribeResponse = ask(
            s.addr,
            ApiKey::ConsumerGroupDescribe,
            v,
            "t",
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(str("k1")), GroupId(str("nope"))]),
        )
        .await?;
        let g = &r.groups[0];
        ensure!(g.error_code == 0 && g.group_state.as_str() == "Stable", "v{v}: {r:?}");
        ensure!(g.group_epoch == 2 && g.assignor_name.as_str() == "uniform", "v{v}: {r:?}");
        ensure!(g.members.len() == 2, "v{v}: {r:?}");
        let names: Vec<&str> = g
            .members
            .iter()
            .flat_map(|m| m.assignment.topic_partitions.iter().map(|t| t.topic_name.0.as_str()))
            .collect();
        ensure!(names == ["orders", "orders"], "v{v}: {names:?}");
        ensure!(r.groups[1].error_code == 69, "v{v}: GROUP_ID_NOT_FOUND: {r:?}");
    }
    // Commits by member epoch.
    let commit = |epoch: i32| commit_one("k1", "m2", epoch, got[0], 3);
    for (v, epoch, want) in [(9, 2, 0), (9, 1, 113), (8, 2, 35)] {
        let r: OffsetCommitResponse =
            ask(s.addr, ApiKey::OffsetCommit, v, "t", &commit(epoch)).await?;
        ensure!(r.topics[0].partitions[0].error_code == want, "v{v} epoch {epoch}: {r:?}");
    }
    // Not a classic group.
    let classic = JoinGroupRequest::default()
        .with_group_id(GroupId(str("k1")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(str("range"))]);
    let r: JoinGroupResponse = ask(s.addr, ApiKey::JoinGroup, 3, "t", &classic).await?;
    ensure!(r.error_code == 23, "INCONSISTENT_GROUP_PROTOCOL: {r:?}");
    // Bad heartbeats.
    let bad = [
        (join("k2", "m").with_rebalance_timeout_ms(-1), 42),
        (join("k2", "m").with_server_assignor(Some(str("sticky"))), 112),
        (join("k2", "m").with_subscribed_topic_regex(Some(str("(orders"))), 128),
        (beat("k2", "m", -7, &[]), 42),
        (beat("k2", "nobody", 3, &[]), 25),
        (join(&"x".repeat(10_000), "m"), 24),
    ];
    for (req, want) in bad {
        let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 1, "t", &req).await?;
        ensure!(r.error_code == want, "want {want}: {r:?}");
    }
    Ok(())
}

/// KIP-1251: a heartbeat that raised a member's epoch is answered only once the group is
/// stored; a commit the member sends meanwhile, at the epoch it still knows, is accepted for
/// the partitions it held at that epoch, and refused for those it has given up.
#[tokio::test]
async fn a_commit_at_the_epoch_a_member_knows_is_accepted_while_its_raised_epoch_is_stored()
-> Result<()> {
    use kafka_protocol::messages::*;
    use std::sync::atomic::Ordering::SeqCst;
    let s = server(KafkaConfig::default()).await?;
    let orders = s.broker.topics.lock().map_err(|_| anyhow::anyhow!("poisoned"))?[0].1;
    let join = |member: &str| kip848_join("k", member);
    let beat = |epoch: i32, owned: &[i32]| kip848_beat("k", "m1", epoch, orders, owned);
    let commit = |epoch: i32, partition: i32| commit_one("k", "m1", epoch, partition, 5);
    let hb = ApiKey::ConsumerGroupHeartbeat;
    let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 1, "t", &join("m1")).await?;
    ensure!(r.member_epoch == 1, "{r:?}");
    let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 1, "t", &join("m2")).await?;
    ensure!(r.member_epoch == 2, "{r:?}");
    let r: ConsumerGroupHeartbeatResponse = ask(s.addr, hb, 1, "t", &beat(1, &[0, 1, 2])).await?;
    let kept: Vec<i32> = r
        .assignment
        .as_ref()
        .map(|a| a.topic_partitions.iter().flat_map(|t| t.partitions.clone()).collect())
        .unwrap_or_default();
    ensure!(r.member_epoch == 1 && kept.len() == 2, "m1 is to give one up: {r:?}");
    let given_up = (0..3).find(|p| !kept.contains(p)).context("one given up")?;
    // m1 has given it up and says so: its epoch becomes 2, stored before it is answered.
    s.broker.stores_held.send_replace(true);
    let addr = s.addr;
    let revoked = beat(1, &kept);
    let answer = tokio::spawn(async move {
        ask::<_, ConsumerGroupHeartbeatResponse>(addr, hb, 1, "t", &revoked).await
    });
    while s.broker.stores_waiting.load(SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Meanwhile m1, still at epoch 1, commits what it holds, and what it gave up.
    let ask_commit = |epoch, partition| {
        let req = commit(epoch, partition);
        tokio::spawn(async move {
            ask::<_, OffsetCommitResponse>(addr, ApiKey::OffsetCommit, 9, "t", &req).await
        })
    };
    let held = ask_commit(1, kept[0]);
    let gone = ask_commit(1, given_up);
    let newer = ask_commit(3, kept[0]);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    s.broker.stores_held.send_replace(false);
    let code = |r: OffsetCommitResponse| r.topics[0].partitions[0].error_code;
    ensure!(code(held.await??) == 0, "a partition m1 held at epoch 1");
    ensure!(code(gone.await??) == 113, "STALE_MEMBER_EPOCH: the partition it gave up");
    ensure!(code(newer.await??) == 113, "STALE_MEMBER_EPOCH: an epoch it was never given");
    let r = answer.await??;
    ensure!(r.error_code == 0 && r.member_epoch == 2, "{r:?}");
    Ok(())
}

/// OffsetForLeaderEpoch, added as one handler file and one registration line: advertised at
/// v2-4, and answered as Kafka answers a log without leader epochs at each version.
#[tokio::test]
async fn offset_for_leader_epoch_answers_as_kafka_does_without_leader_epochs() -> Result<()> {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
    let s = server(KafkaConfig::default()).await?;
    let r: ApiVersionsResponse =
        ask(s.addr, ApiKey::ApiVersions, 3, "t", &ApiVersionsRequest::default()).await?;
    ensure!(
        r.api_keys.iter().any(|k| (k.api_key, k.min_version, k.max_version) == (23, 2, 4)),
        "OffsetForLeaderEpoch not advertised at v2-4: {:?}",
        r.api_keys
    );
    let part = |partition: i32, current: i32| {
        OffsetForLeaderPartition::default()
            .with_partition(partition)
            .with_current_leader_epoch(current)
            .with_leader_epoch(0)
    };
    let topic = |name: &'static str, partitions| {
        OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(name)))
            .with_partitions(partitions)
    };
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![
            // Partition 0 is led here (node 10), 1 by node 11; 7 does not exist.
            topic("orders", vec![part(0, -1), part(1, -1), part(7, -1), part(0, 3)]),
            topic("nowhere", vec![part(0, -1)]),
        ]);
    for v in 2..=4 {
        let r: OffsetForLeaderEpochResponse =
            ask(s.addr, ApiKey::OffsetForLeaderEpoch, v, "t", &req).await?;
        let got: Vec<(String, i32, i16, i32, i64)> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (t.topic.0.to_string(), p.partition, p.error_code, p.leader_epoch, p.end_offset)
                })
            })
            .collect();
        let want = vec![
            ("orders".to_owned(), 0, 0, -1, -1),
            ("orders".to_owned(), 1, kafka::code::NOT_LEADER_OR_FOLLOWER, -1, -1),
            ("orders".to_owned(), 7, kafka::code::UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
            ("orders".to_owned(), 0, 75, -1, -1), // UNKNOWN_LEADER_EPOCH
            ("nowhere".to_owned(), 0, kafka::code::UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ];
        ensure!(got == want, "v{v}: {got:?}");
    }
    Ok(())
}

/// Kafka's `offsets.retention.minutes`: a group's offsets go once it has had no member for
/// the retention and took no commit meanwhile; a group that keeps committing keeps them.
#[tokio::test]
async fn a_groups_offsets_expire_once_it_has_been_empty_for_the_retention() -> Result<()> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::*;
    let cfg = KafkaConfig {
        offsets_retention: std::time::Duration::from_secs(1),
        offsets_retention_check: std::time::Duration::from_millis(100),
        ..Default::default()
    };
    let s = server(cfg).await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let commit = |group: &str, offset: i64| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(str(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(str("orders")))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(offset),
                    ]),
            ])
    };
    let committed = |group: &str| {
        let req = OffsetFetchRequest::default().with_group_id(GroupId(str(group))).with_topics(
            Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(str("orders")))
                    .with_partition_indexes(vec![0]),
            ]),
        );
        let addr = s.addr;
        async move {
            let r: OffsetFetchResponse = ask(addr, ApiKey::OffsetFetch, 7, "t", &req).await?;
            Ok::<i64, anyhow::Error>(r.topics[0].partitions[0].committed_offset)
        }
    };
    for group in ["old", "kept"] {
        let r: OffsetCommitResponse =
            ask(s.addr, ApiKey::OffsetCommit, 7, "t", &commit(group, 5)).await?;
        ensure!(r.topics[0].partitions[0].error_code == 0, "{r:?}");
    }
    ensure!(committed("old").await? == 5);
    let start = std::time::Instant::now();
    let mut n = 5;
    while start.elapsed() < std::time::Duration::from_millis(2500) {
        n += 1;
        let r: OffsetCommitResponse =
            ask(s.addr, ApiKey::OffsetCommit, 7, "t", &commit("kept", n)).await?;
        ensure!(r.topics[0].partitions[0].error_code == 0, "{r:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    ensure!(committed("old").await? == -1, "the idle group's offsets outlived its retention");
    ensure!(committed("kept").await? == n, "a group committing all along lost its offsets");
    let r: ListGroupsResponse =
        ask(s.addr, ApiKey::ListGroups, 4, "t", &ListGroupsRequest::default()).await?;
    let listed: Vec<&str> = r.groups.iter().map(|g| g.group_id.0.as_str()).collect();
    ensure!(listed == ["kept"], "{listed:?}");
    Ok(())
}

/// TxnOffsetCommit (KIP-98, KIP-447) as Kafka answers it: the group must be in the producer's
/// ongoing transaction (INVALID_TXN_STATE before AddOffsetsToTxn, PRODUCER_FENCED at an old
/// epoch), a member commits at its own epoch only (ILLEGAL_GENERATION otherwise); the offsets
/// are staged until the transaction ends: OffsetFetch with `require_stable` answers
/// UNSTABLE_OFFSET_COMMIT meanwhile, without it the older offset; a commit makes them the
/// group's, an abort leaves the older one.
#[tokio::test]
async fn a_transactions_offsets_are_the_groups_only_once_it_commits() -> Result<()> {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::*;
    let s = server(KafkaConfig::default()).await?;
    let str = |v: &str| StrBytes::from_string(v.to_owned());
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(str("app"))))
        .with_transaction_timeout_ms(60_000);
    let r: InitProducerIdResponse = ask(s.addr, ApiKey::InitProducerId, 4, "t", &init).await?;
    ensure!(r.error_code == 0, "{r:?}");
    let (pid, epoch) = (r.producer_id, r.producer_epoch);
    // A KIP-848 member holding every partition of `orders`.
    let joined: ConsumerGroupHeartbeatResponse =
        ask(s.addr, ApiKey::ConsumerGroupHeartbeat, 1, "t", &kip848_join("g", "m1")).await?;
    let member_epoch = joined.member_epoch;
    ensure!(joined.error_code == 0 && member_epoch > 0, "{joined:?}");
    let commit = |member_epoch: i32, epoch: i16, offset: i64| {
        TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(str("app")))
            .with_group_id(GroupId(str("g")))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_generation_id(member_epoch)
            .with_member_id(str("m1"))
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(str("orders")))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(1)
                            .with_committed_offset(offset),
                    ]),
            ])
    };
    let txn_commit = |req: TxnOffsetCommitRequest| async move {
        let r: TxnOffsetCommitResponse = ask(s.addr, ApiKey::TxnOffsetCommit, 3, "t", &req).await?;
        anyhow::Ok(r.topics[0].partitions[0].error_code)
    };
    let fetch = |stable: bool| async move {
        let group = offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(str("g")))
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopics::default()
                    .with_name(TopicName(str("orders")))
                    .with_partition_indexes(vec![1]),
            ]));
        let req =
            OffsetFetchRequest::default().with_groups(vec![group]).with_require_stable(stable);
        let r: OffsetFetchResponse = ask(s.addr, ApiKey::OffsetFetch, 8, "t", &req).await?;
        let p = &r.groups[0].topics[0].partitions[0];
        anyhow::Ok((p.committed_offset, p.error_code))
    };
    let add_offsets = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(str("app")))
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(str("g")));
    let end = |committed: bool| {
        EndTxnRequest::default()
            .with_transactional_id(TransactionalId(str("app")))
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_committed(committed)
    };
    // Settled by the coordinator's completion, in a task of its own.
    let settles = |want: (i64, i16)| async move {
        for _ in 0..200 {
            if fetch(true).await? == want {
                return anyhow::Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        anyhow::bail!(
            "OffsetFetch(require_stable) never answered {want:?}: {:?}",
            fetch(true).await?
        )
    };
    ensure!(fetch(true).await? == (-1, 0), "no offset yet");

    ensure!(
        txn_commit(commit(member_epoch, epoch, 5)).await? == 48,
        "no transaction: INVALID_TXN_STATE"
    );
    let r: AddOffsetsToTxnResponse =
        ask(s.addr, ApiKey::AddOffsetsToTxn, 3, "t", &add_offsets).await?;
    ensure!(r.error_code == 0, "{r:?}");
    ensure!(txn_commit(commit(member_epoch + 1, epoch, 5)).await? == 22, "ILLEGAL_GENERATION");
    ensure!(txn_commit(commit(member_epoch, epoch - 1, 5)).await? == 90, "PRODUCER_FENCED");
    ensure!(txn_commit(commit(member_epoch, epoch, 5)).await? == 0);
    ensure!(fetch(true).await? == (-1, 88), "staged: UNSTABLE_OFFSET_COMMIT");
    ensure!(fetch(false).await? == (-1, 0), "staged offsets are not the group's yet");
    let r: EndTxnResponse = ask(s.addr, ApiKey::EndTxn, 3, "t", &end(true)).await?;
    ensure!(r.error_code == 0, "{r:?}");
    settles((5, 0)).await?;

    // The next transaction stages 9 and aborts: the group keeps 5.
    let r: AddOffsetsToTxnResponse =
        ask(s.addr, ApiKey::AddOffsetsToTxn, 3, "t", &add_offsets).await?;
    ensure!(r.error_code == 0, "{r:?}");
    ensure!(txn_commit(commit(member_epoch, epoch, 9)).await? == 0);
    ensure!(fetch(true).await? == (-1, 88));
    ensure!(fetch(false).await? == (5, 0));
    let r: EndTxnResponse = ask(s.addr, ApiKey::EndTxn, 3, "t", &end(false)).await?;
    ensure!(r.error_code == 0, "{r:?}");
    settles((5, 0)).await?;
    Ok(())
}
