//! The stream catalog: `streams/<name>` → identity, partitions (one log each), properties;
//! `catalog/deleting/<identity>` → the logs (comma-separated ids) of a deleted stream not yet
//! all marked deleted (written in the transaction that removes the stream, removed once they
//! are; the compactor's cycle finishes what a crash left).

use std::sync::Arc;

use logstore::keys::Keys;
use logstore::membership::MemberWatch;
use logstore::records::StreamRoute;
use logstore::{LogError, LogId, LogReader};
use metadata::{Compare, CompareOp, KeyRange, MetaError, MetadataStore, RangeRequest, Txn, TxnOp};
use prost::Message;

use crate::routing::{Member, choose_owner, partition_for_key};
pub use streamconfig::StreamConfig;

/// What to route: a partition, or a key hashed to one.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    Partition(u32),
    Key(&'a [u8]),
}

/// A routing answer (`Catalog::route_to`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub partition: u32,
    pub log: LogId,
    pub identity: String,
    /// The stream's partition count.
    pub partitions: u32,
    /// The serving writer; `None` when no writer lives.
    pub owner: Option<Member>,
    /// The owner slot to append in: the zone asked for while a writer of it lives, else `*`.
    pub slot: String,
    /// The stream's configs as read for this route.
    pub config: StreamConfig,
}

/// Most partitions one stream may have.
pub const MAX_PARTITIONS: u32 = 10_000;

#[derive(Clone, PartialEq, prost::Message)]
struct StreamRecord {
    #[prost(string, tag = "1")]
    identity: String,
    #[prost(uint64, repeated, tag = "2")]
    partitions: Vec<u64>,
    // Tags 3 to 7 are the configs records held before `configs` (tag 8) had them all: still
    // written (as they apply: no retention for a compact-only stream), so a role of the
    // previous release acts the same, and read under `configs`.
    #[prost(int64, optional, tag = "3")]
    retention_ms: Option<i64>,
    #[prost(uint64, optional, tag = "4")]
    retention_bytes: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    max_message_bytes: Option<u64>,
    #[prost(bool, tag = "6")]
    lake_table: bool,
    #[prost(int64, optional, tag = "7")]
    lake_retention_ms: Option<i64>,
    /// Every config set, by name ([`StreamConfig`]).
    #[prost(btree_map = "string, string", tag = "8")]
    configs: std::collections::BTreeMap<String, String>,
}

impl StreamRecord {
    /// The stream's configs: `configs`, over the fields older records held them in.
    fn config(&self) -> Result<StreamConfig, streamconfig::Invalid> {
        let legacy = [
            ("retention.ms", self.retention_ms.map(|v| v.to_string())),
            ("retention.bytes", self.retention_bytes.map(|v| v.to_string())),
            ("max.message.bytes", self.max_message_bytes.map(|v| v.to_string())),
            ("lake.table", self.lake_table.then(|| "true".to_owned())),
            ("lake.retention.ms", self.lake_retention_ms.map(|v| v.to_string())),
        ];
        let mut c = StreamConfig::default();
        for (name, value) in legacy {
            if let Some(v) = value {
                c.set(name, &v)?;
            }
        }
        for (name, value) in &self.configs {
            c.set(name, value)?;
        }
        Ok(c)
    }
}

/// A stream as the catalog holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub name: String,
    /// Changes whenever the stream is deleted and created again.
    pub identity: String,
    /// Partition i is served by log `partitions[i]`.
    pub partitions: Vec<LogId>,
    pub config: StreamConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("stream {0} not found")]
    NotFound(String),
    #[error("stream {0} already exists")]
    AlreadyExists(String),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("corrupt catalog record of {0}")]
    Corrupt(String),
}

/// Which stream each log is a partition of, kept current by a watch of `streams/` (the gRPC
/// front end names a log's stream to authorize a call on it). Logs of no stream are absent.
pub type LogStreams = metadata::follow::Followed<std::collections::HashMap<u64, Arc<str>>>;

/// Starts following which stream each log belongs to (see [`LogStreams`]).
pub async fn follow_log_streams(
    meta: Arc<dyn MetadataStore>,
    cluster: &str,
) -> Result<LogStreams, metadata::MetaError> {
    let root = format!("/{cluster}/streams/");
    let prefix = root.clone().into_bytes();
    metadata::follow::follow(meta, prefix, move |kvs| {
        let mut logs = std::collections::HashMap::new();
        for kv in kvs {
            let name: Arc<str> = String::from_utf8_lossy(&kv.key[root.len()..]).into();
            if let Ok(r) = StreamRecord::decode(kv.value.as_slice()) {
                for log in r.partitions {
                    logs.insert(log, name.clone());
                }
            }
        }
        logs
    })
    .await
}

/// Kafka's internal topics' names: no stream takes one, so none hides the topic Kafka clients
/// expect under it.
const KAFKA_INTERNAL: [&str; 3] =
    ["__consumer_offsets", "__transaction_state", "__share_group_state"];

/// Checks a stream name: 1–249 of `[A-Za-z0-9._-]`, not `.` or `..` (Kafka's topic rules, so
/// every stream can be a Kafka topic), and none of Kafka's internal topics' names.
pub fn validate_name(name: &str) -> Result<(), CatalogError> {
    if KAFKA_INTERNAL.contains(&name) {
        return Err(CatalogError::InvalidArgument(format!(
            "stream name `{name}` is one of Kafka's internal topics"
        )));
    }
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CatalogError::InvalidArgument(format!(
            "stream name `{name}` must be 1 to 249 of A-Z a-z 0-9 . _ - (and not . or ..)"
        )))
    }
}

/// The stream catalog of one cluster. Cheap to clone.
#[derive(Clone)]
pub struct Catalog {
    meta: Arc<dyn MetadataStore>,
    logs: LogReader,
    keys: Keys,
    cluster: String,
    root: String,
    /// `deleting/<identity>`: the logs of a deleted stream not yet all marked deleted.
    deleting_root: String,
    /// Live writers, watched; `None` outside a Tokio runtime (routes then read them).
    writers: Option<MemberWatch>,
    /// Live readers, watched by a serving role's catalog ([`Catalog::with_followed_streams`]).
    readers: Option<MemberWatch>,
    /// Every stream by name, followed by a serving role's catalog once its first read answers
    /// (until then, and in every other catalog, each lookup reads the store).
    streams: Option<Arc<std::sync::OnceLock<FollowedStreams>>>,
}

/// Every stream by name, kept current by a watch of `streams/`.
type FollowedStreams =
    metadata::follow::Followed<std::collections::HashMap<String, Arc<StreamInfo>>>;

/// How long a catalog write waits for its own change to reach the followed streams, so the
/// process that made it reads it next.
const OWN_WRITE_SEEN: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("root", &self.root).finish()
    }
}

impl Catalog {
    /// The reader the catalog reads logs with.
    pub fn logs(&self) -> &LogReader {
        &self.logs
    }

    /// `logs` reads (and, to delete, updates) the cluster's logs.
    pub fn new(meta: Arc<dyn MetadataStore>, logs: LogReader, cluster: &str) -> Self {
        let writers = tokio::runtime::Handle::try_current()
            .ok()
            .map(|_| MemberWatch::start(meta.clone(), cluster, "writer"));
        Catalog {
            writers,
            readers: None,
            streams: None,
            meta,
            logs,
            keys: Keys::new(cluster),
            cluster: cluster.to_owned(),
            root: format!("/{cluster}/streams/"),
            deleting_root: format!("/{cluster}/catalog/deleting/"),
        }
    }

    /// Follows every stream (one watch of `streams/`) and the live readers, so routing a
    /// request reads no metadata (ARCHITECTURE §11: a caught-up client costs the metadata store
    /// nothing). A stream found in the followed view may trail the store by a watch round trip
    /// (another process's create, delete or change of properties); one not found there is read
    /// from the store. This process's own catalog writes are seen before they return. For the
    /// serving roles; needs a Tokio runtime.
    pub fn with_followed_streams(mut self) -> Self {
        let cell: Arc<std::sync::OnceLock<FollowedStreams>> = Default::default();
        let weak = Arc::downgrade(&cell);
        let (meta, root) = (self.meta.clone(), self.root.clone());
        tokio::spawn(async move {
            loop {
                let r = root.clone();
                let build = move |kvs: Vec<metadata::KeyValue>| {
                    kvs.iter()
                        .filter_map(|kv| {
                            let name = String::from_utf8_lossy(&kv.key[r.len()..]).into_owned();
                            Self::info(&name, &kv.value).ok().map(|i| (name, Arc::new(i)))
                        })
                        .collect()
                };
                match metadata::follow::follow(meta.clone(), root.clone().into_bytes(), build).await
                {
                    Ok(f) => {
                        if let Some(cell) = weak.upgrade() {
                            let _ = cell.set(f);
                        }
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "following the streams failed; retrying"),
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                if weak.strong_count() == 0 {
                    return;
                }
            }
        });
        self.streams = Some(cell);
        self.readers = Some(MemberWatch::start(self.meta.clone(), &self.cluster, "reader"));
        self
    }

    /// The followed view of every stream, once it answers.
    fn followed(&self) -> Option<&FollowedStreams> {
        self.streams.as_ref().and_then(|c| c.get())
    }

    /// After this process's catalog write at `revision`: waits (a little) until the followed
    /// view shows it.
    async fn seen(&self, revision: i64) {
        if let Some(f) = self.followed() {
            let _ = f.clone().caught_up(revision, OWN_WRITE_SEEN).await;
        }
    }

    fn key(&self, name: &str) -> Vec<u8> {
        format!("{}{name}", self.root).into_bytes()
    }

    fn info(name: &str, value: &[u8]) -> Result<StreamInfo, CatalogError> {
        let r = StreamRecord::decode(value).map_err(|_| CatalogError::Corrupt(name.to_owned()))?;
        let config = r.config().map_err(|_| CatalogError::Corrupt(name.to_owned()))?;
        Ok(StreamInfo {
            name: name.to_owned(),
            identity: r.identity,
            partitions: r.partitions.into_iter().map(LogId).collect(),
            config,
        })
    }

    fn record(info: &StreamInfo) -> Vec<u8> {
        let c = &info.config;
        StreamRecord {
            identity: info.identity.clone(),
            partitions: info.partitions.iter().map(|l| l.0).collect(),
            retention_ms: c.retention_ms(),
            retention_bytes: c.retention_bytes(),
            max_message_bytes: c.max_message_bytes(),
            lake_table: c.lake_table(),
            lake_retention_ms: c.lake_retention_ms(),
            configs: c.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        }
        .encode_to_vec()
    }

    fn check_partitions(n: u32) -> Result<(), CatalogError> {
        if n == 0 || n > MAX_PARTITIONS {
            return Err(CatalogError::InvalidArgument(format!(
                "partition count {n} must be between 1 and {MAX_PARTITIONS}"
            )));
        }
        Ok(())
    }

    /// Creates a stream with a new identity and one new log per partition.
    pub async fn create(
        &self,
        name: &str,
        partitions: u32,
        config: StreamConfig,
    ) -> Result<StreamInfo, CatalogError> {
        self.create_with_identity(name, partitions, config, uuid::Uuid::new_v4().to_string()).await
    }

    /// [`create`](Self::create) with the identity given (it seeds owner selection: the
    /// simulation gives one from its seed, so owners are chosen alike in every run).
    pub async fn create_with_identity(
        &self,
        name: &str,
        partitions: u32,
        config: StreamConfig,
        identity: String,
    ) -> Result<StreamInfo, CatalogError> {
        validate_name(name)?;
        Self::check_partitions(partitions)?;
        Self::check_config(&config)?;
        if self.meta.get(&self.key(name)).await?.is_some() {
            return Err(CatalogError::AlreadyExists(name.to_owned()));
        }
        let logs = self.create_logs(&identity, 0, partitions).await?;
        let info = StreamInfo { name: name.to_owned(), identity, partitions: logs.clone(), config };
        let txn = Txn::new()
            .when([Compare::create_revision(self.key(name), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(self.key(name), Self::record(&info))]);
        let resp = self.meta.txn(txn).await?;
        if !resp.succeeded {
            self.delete_logs(&logs).await;
            return Err(CatalogError::AlreadyExists(name.to_owned()));
        }
        self.seen(resp.revision).await;
        Ok(info)
    }

    /// Checks configs as `create` and `set_config` do (together: a lake table keeps at least
    /// what its log keeps), without touching the store.
    pub fn check_config(config: &StreamConfig) -> Result<(), CatalogError> {
        config.check().map_err(|e| CatalogError::InvalidArgument(e.to_string()))
    }

    /// Replaces a stream's configs (compare-and-set on its record); the stream after.
    pub async fn set_config(
        &self,
        name: &str,
        config: StreamConfig,
    ) -> Result<StreamInfo, CatalogError> {
        Self::check_config(&config)?;
        for _ in 0..100 {
            let (mut info, rev) = self.get_with_revision(name).await?;
            if info.config == config {
                return Ok(info);
            }
            info.config = config.clone();
            let txn = Txn::new()
                .when([Compare::mod_revision(self.key(name), CompareOp::Equal, rev)])
                .and_then([TxnOp::put(self.key(name), Self::record(&info))]);
            let resp = self.meta.txn(txn).await?;
            if resp.succeeded {
                self.seen(resp.revision).await;
                return Ok(info);
            }
        }
        Err(CatalogError::Meta(MetaError::Unavailable(format!(
            "stream {name}: too much contention"
        ))))
    }

    /// Creates the logs of partitions `first..first + n` of the stream `identity`.
    async fn create_logs(
        &self,
        identity: &str,
        first: u32,
        n: u32,
    ) -> Result<Vec<LogId>, CatalogError> {
        let mut logs = Vec::with_capacity(n as usize);
        for partition in first..first + n {
            let route = StreamRoute { stream_identity: identity.to_owned(), partition };
            match logstore::admin::create_log(self.meta.as_ref(), &self.keys, Some(route)).await {
                Ok(l) => logs.push(l),
                Err(e) => {
                    self.delete_logs(&logs).await;
                    return Err(e.into());
                }
            }
        }
        Ok(logs)
    }

    /// Marks logs deleted; best effort (an unreferenced empty log costs one head key). Whether
    /// every one is deleted now.
    async fn delete_logs(&self, logs: &[LogId]) -> bool {
        let mut all = true;
        for l in logs {
            if let Err(e) = logstore::admin::delete_log(self.meta.as_ref(), &self.logs, *l).await
                && !matches!(e, LogError::NotFound(_))
            {
                tracing::warn!(log = %l, error = %e, "catalog could not delete a log");
                all = false;
            }
        }
        all
    }

    /// The key naming the logs of a deleted stream still to be marked deleted.
    fn deleting_key(&self, identity: &str) -> Vec<u8> {
        format!("{}{identity}", self.deleting_root).into_bytes()
    }

    /// Marks the logs of the deleted stream `identity` deleted, then forgets the stream.
    async fn finish_deletion(&self, identity: &str, logs: &[LogId]) -> Result<bool, CatalogError> {
        if !self.delete_logs(logs).await {
            return Ok(false);
        }
        self.meta.delete(KeyRange::key(self.deleting_key(identity))).await?;
        Ok(true)
    }

    /// Finishes the deletions a crash or an error left half done (their stream records gone,
    /// some of their logs not yet marked deleted): the maintenance cycle calls it. Returns how
    /// many it finished; one whose logs still cannot be deleted stays for the next call.
    pub async fn finish_deletions(&self) -> Result<usize, CatalogError> {
        let pending =
            self.meta.range(RangeRequest::prefix(self.deleting_root.clone().into_bytes())).await?;
        let mut done = 0;
        for kv in &pending.kvs {
            let identity =
                String::from_utf8_lossy(&kv.key[self.deleting_root.len()..]).into_owned();
            let logs: Vec<LogId> = String::from_utf8_lossy(&kv.value)
                .split(',')
                .filter_map(|l| l.trim().parse().ok().map(LogId))
                .collect();
            if self.finish_deletion(&identity, &logs).await? {
                tracing::info!(identity, logs = logs.len(), "finished deleting a stream's logs");
                done += 1;
            }
        }
        Ok(done)
    }

    async fn get_with_revision(&self, name: &str) -> Result<(StreamInfo, i64), CatalogError> {
        validate_name(name)?;
        let kv = self
            .meta
            .get(&self.key(name))
            .await?
            .ok_or_else(|| CatalogError::NotFound(name.to_owned()))?;
        Ok((Self::info(name, &kv.value)?, kv.mod_revision))
    }

    /// The topic and partition of each log of the followed streams (none before the view is
    /// followed): no metadata request.
    pub fn followed_partitions(&self) -> std::collections::HashMap<LogId, (String, u32)> {
        let mut out = std::collections::HashMap::new();
        let Some(f) = self.followed() else { return out };
        let current = f.current();
        for (name, info) in &current.0 {
            for (i, log) in info.partitions.iter().enumerate() {
                out.insert(*log, (name.clone(), u32::try_from(i).unwrap_or(u32::MAX)));
            }
        }
        out
    }

    /// A stream: from the followed view when it holds it, else read from the store.
    pub async fn get(&self, name: &str) -> Result<StreamInfo, CatalogError> {
        Ok(Arc::unwrap_or_clone(self.stream(name).await?))
    }

    /// [`Self::get`], shared.
    async fn stream(&self, name: &str) -> Result<Arc<StreamInfo>, CatalogError> {
        if let Some(info) = self.followed().and_then(|f| f.current().0.get(name).cloned()) {
            return Ok(info);
        }
        Ok(Arc::new(self.get_with_revision(name).await?.0))
    }

    /// Every stream, by name.
    pub async fn list(&self) -> Result<Vec<StreamInfo>, CatalogError> {
        let resp = self.meta.range(RangeRequest::prefix(self.root.clone().into_bytes())).await?;
        resp.kvs
            .iter()
            .map(|kv| {
                let name = String::from_utf8_lossy(&kv.key[self.root.len()..]).into_owned();
                Self::info(&name, &kv.value)
            })
            .collect()
    }

    /// Grows a stream to `to` partitions (never shrinks: keys would move).
    pub async fn add_partitions(&self, name: &str, to: u32) -> Result<StreamInfo, CatalogError> {
        Self::check_partitions(to)?;
        for _ in 0..100 {
            let (mut info, rev) = self.get_with_revision(name).await?;
            let have = info.partitions.len() as u32;
            if to < have {
                return Err(CatalogError::InvalidArgument(format!(
                    "stream {name} has {have} partitions; partitions can only be added, not removed"
                )));
            }
            if to == have {
                return Ok(info);
            }
            let added = self.create_logs(&info.identity, have, to - have).await?;
            info.partitions.extend(added.iter().copied());
            let txn = Txn::new()
                .when([Compare::mod_revision(self.key(name), CompareOp::Equal, rev)])
                .and_then([TxnOp::put(self.key(name), Self::record(&info))]);
            let resp = self.meta.txn(txn).await?;
            if resp.succeeded {
                self.seen(resp.revision).await;
                return Ok(info);
            }
            self.delete_logs(&added).await;
        }
        Err(CatalogError::Meta(MetaError::Unavailable(format!(
            "stream {name}: too much contention"
        ))))
    }

    /// Deletes a stream: its name is free again (a new stream of that name gets a new identity
    /// and new logs) and its logs are marked DELETED. Crash-atomic: the transaction that
    /// removes the stream records which logs it had (`deleting/<identity>`), and the record
    /// goes once they are all marked; a deletion cut short (a crash, an error) is finished by
    /// [`Self::finish_deletions`].
    pub async fn delete(&self, name: &str) -> Result<(), CatalogError> {
        let (info, rev) = self.get_with_revision(name).await?;
        let logs: Vec<String> = info.partitions.iter().map(|l| l.0.to_string()).collect();
        // Its lake table goes with it (its files are its logs' segments, reclaimed with them).
        let txn = Txn::new()
            .when([Compare::mod_revision(self.key(name), CompareOp::Equal, rev)])
            .and_then([
                TxnOp::delete(KeyRange::key(self.key(name))),
                TxnOp::delete(KeyRange::key(self.keys.lake_table(&info.identity))),
                TxnOp::put(self.deleting_key(&info.identity), logs.join(",")),
            ]);
        let resp = self.meta.txn(txn).await?;
        if !resp.succeeded {
            return Err(CatalogError::Meta(MetaError::Unavailable(format!(
                "stream {name} changed while being deleted; try again"
            ))));
        }
        self.seen(resp.revision).await;
        // Best effort now; the maintenance cycle finishes what is left.
        if let Err(e) = self.finish_deletion(&info.identity, &info.partitions).await {
            tracing::warn!(stream = name, error = %e, "deleting a stream's logs: left for the maintenance cycle");
        }
        Ok(())
    }

    /// The log of a partition.
    pub async fn route(&self, name: &str, partition: u32) -> Result<LogId, CatalogError> {
        Ok(locate(&*self.stream(name).await?, Target::Partition(partition))?.1)
    }

    /// Where a partition or a key's partition goes, and which live writer serves it for a
    /// caller in `zone` (ARCHITECTURE §3 "Owner selection and zones").
    pub async fn route_to(
        &self,
        name: &str,
        target: Target<'_>,
        zone: Option<&str>,
    ) -> Result<Route, CatalogError> {
        let info = self.stream(name).await?;
        let n = info.partitions.len() as u32;
        let (partition, log) = locate(&info, target)?;
        let members = match self.writers.as_ref().and_then(MemberWatch::current) {
            Some(set) => set.members.clone(),
            None => {
                logstore::membership::live_members(self.meta.as_ref(), &self.cluster, "writer")
                    .await?
                    .0
            }
        };
        let zone = zone.filter(|z| !z.is_empty() && *z != "*");
        let slot = match zone {
            Some(z) if members.iter().any(|m| m.zone == z) => z.to_owned(),
            _ => "*".to_owned(),
        };
        let owner = choose_owner(&members, &info.identity, partition, zone).cloned();
        Ok(Route {
            partition,
            log,
            identity: info.identity.clone(),
            partitions: n,
            owner,
            slot,
            config: info.config.clone(),
        })
    }

    /// The live members of a role, sorted by id (writers as watched, and readers when
    /// followed).
    pub async fn members(&self, role: &str) -> Result<Vec<Member>, CatalogError> {
        Ok(self.members_at(role).await?.0)
    }

    /// [`Self::members`], with the revision of the member set they were read at.
    pub async fn members_at(&self, role: &str) -> Result<(Vec<Member>, i64), CatalogError> {
        let watched = match role {
            "writer" => self.writers.as_ref(),
            "reader" => self.readers.as_ref(),
            _ => None,
        };
        if let Some(set) = watched.and_then(MemberWatch::current) {
            return Ok((set.members.clone(), set.revision));
        }
        if !matches!(role, "writer" | "reader" | "catalog") {
            return Err(CatalogError::InvalidArgument(format!(
                "role `{role}`: one of writer, reader, catalog"
            )));
        }
        Ok(logstore::membership::live_members(self.meta.as_ref(), &self.cluster, role).await?)
    }

    /// The partition and log of a key.
    pub async fn route_key(&self, name: &str, key: &[u8]) -> Result<(u32, LogId), CatalogError> {
        locate(&*self.stream(name).await?, Target::Key(key))
    }
}

/// The partition a target names in a stream, and its log.
fn locate(info: &StreamInfo, target: Target<'_>) -> Result<(u32, LogId), CatalogError> {
    let n = info.partitions.len() as u32;
    let partition = match target {
        Target::Partition(p) if p < n => p,
        Target::Partition(p) => {
            return Err(CatalogError::InvalidArgument(format!(
                "partition {p} out of range: stream {} has {n}",
                info.name
            )));
        }
        Target::Key(k) => partition_for_key(k, n),
    };
    let log = info
        .partitions
        .get(partition as usize)
        .ok_or_else(|| CatalogError::Corrupt(info.name.clone()))?;
    Ok((partition, *log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_configs_round_trip_and_older_records_read_the_same() {
        let config = StreamConfig::from_pairs([
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "60000"),
            ("min.insync.replicas", "2"),
            ("max.message.bytes", "8388608"),
        ])
        .expect("valid");
        let info = StreamInfo {
            name: "s".into(),
            identity: "id".into(),
            partitions: vec![LogId(7)],
            config: config.clone(),
        };
        let back = Catalog::info("s", &Catalog::record(&info)).expect("decodes");
        assert_eq!(back, info);
        // A record of the previous release: its configs in the typed fields alone.
        let old = StreamRecord {
            identity: "id".into(),
            partitions: vec![7],
            retention_ms: Some(60_000),
            retention_bytes: Some(10),
            max_message_bytes: Some(1000),
            lake_table: true,
            lake_retention_ms: Some(120_000),
            configs: Default::default(),
        };
        let read = old.config().expect("valid");
        assert_eq!(
            (read.retention_ms(), read.retention_bytes(), read.max_message_bytes()),
            (Some(60_000), Some(10), Some(1000))
        );
        assert_eq!((read.lake_table(), read.lake_retention_ms()), (true, Some(120_000)));
        // And the typed fields are still written, for a role of the previous release.
        let written = StreamRecord::decode(Catalog::record(&info).as_slice()).expect("decodes");
        assert_eq!(
            (written.retention_ms, written.max_message_bytes),
            (Some(60_000), Some(8_388_608))
        );
    }
}
