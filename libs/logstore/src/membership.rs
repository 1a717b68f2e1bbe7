//! The live-member registry: every role process keeps `members/<role>/<id>` under its lease
//! (ARCHITECTURE §2); this reads it, as owner selection and clients need it.

use std::sync::Arc;
use std::time::Duration;

use metadata::{Compare, CompareOp, LeaseId, MetaError, MetadataStore, RangeRequest, Txn, TxnOp};
use prost::Message;

use crate::LogError;
use crate::keys::Keys;
use crate::records::MemberRecord;
use routing::Member;

/// Node ids tried before giving up on a contended counter.
const NODE_ID_ATTEMPTS: usize = 100;

/// The Kafka node id of member `id`: the one `kafka/node_ids/<id>` holds, else the next of the
/// `kafka/next_node_id` counter (0, 1, 2, …), taken create-only so two members never share
/// one and a member keeps its id across restarts (ARCHITECTURE §11).
pub async fn node_id(meta: &dyn MetadataStore, cluster: &str, id: &str) -> Result<i32, LogError> {
    let keys = Keys::new(cluster);
    let (mine, counter) = (keys.node_id(id), keys.next_node_id());
    for _ in 0..NODE_ID_ATTEMPTS {
        if let Some(kv) = meta.get(&mine).await? {
            return parse_node_id(&kv.value);
        }
        let (next, rev) = match meta.get(&counter).await? {
            Some(kv) => (parse_node_id(&kv.value)?, kv.mod_revision),
            None => (0, 0),
        };
        let after = next
            .checked_add(1)
            .ok_or_else(|| LogError::Internal("Kafka node ids exhausted".to_owned()))?;
        let txn = Txn::new()
            .when([
                Compare::create_revision(mine.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(counter.clone(), CompareOp::Equal, rev),
            ])
            .and_then([
                TxnOp::put(mine.clone(), next.to_string()),
                TxnOp::put(counter.clone(), after.to_string()),
            ]);
        if meta.txn(txn).await?.succeeded {
            return Ok(next);
        }
    }
    Err(LogError::unavailable(format!("could not take a Kafka node id for {id}: contended")))
}

/// A block of `n` Kafka producer ids, `[start, start + n)`, taken from the
/// `kafka/next_producer_id` counter by compare-and-set (unique cluster-wide).
pub async fn producer_ids(
    meta: &dyn MetadataStore,
    cluster: &str,
    n: i64,
) -> Result<std::ops::Range<i64>, LogError> {
    let counter = Keys::new(cluster).next_producer_id();
    for _ in 0..NODE_ID_ATTEMPTS {
        let (next, rev) = match meta.get(&counter).await? {
            Some(kv) => {
                let v = std::str::from_utf8(&kv.value).ok().and_then(|s| s.parse::<i64>().ok());
                let v = v.filter(|v| *v >= 0).ok_or_else(|| {
                    LogError::Corrupt(format!(
                        "producer id counter `{}`",
                        String::from_utf8_lossy(&kv.value)
                    ))
                })?;
                (v, kv.mod_revision)
            }
            None => (0, 0),
        };
        let end = next
            .checked_add(n)
            .ok_or_else(|| LogError::Internal("Kafka producer ids exhausted".to_owned()))?;
        let txn = Txn::new()
            .when([Compare::mod_revision(counter.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(counter.clone(), end.to_string())]);
        if meta.txn(txn).await?.succeeded {
            return Ok(next..end);
        }
    }
    Err(LogError::unavailable("could not take Kafka producer ids: contended"))
}

fn parse_node_id(v: &[u8]) -> Result<i32, LogError> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n: &i32| *n >= 0)
        .ok_or_else(|| LogError::Corrupt(format!("Kafka node id `{}`", String::from_utf8_lossy(v))))
}

/// The live members of a role, sorted by id, and the revision they were read at (owner
/// selection must not change without the member set's revision changing).
pub async fn live_members(
    meta: &dyn MetadataStore,
    cluster: &str,
    role: &str,
) -> Result<(Vec<Member>, i64), LogError> {
    let resp = meta.range(RangeRequest::prefix(member_prefix(cluster, role))).await?;
    let mut members = Vec::with_capacity(resp.kvs.len());
    for kv in resp.kvs {
        let r = MemberRecord::decode(kv.value.as_slice())
            .map_err(|_| LogError::Corrupt(String::from_utf8_lossy(&kv.key).into_owned()))?;
        members.push(Member {
            id: r.id,
            zone: r.zone,
            address: r.address,
            kafka: r.kafka,
            node_id: r.node_id,
        });
    }
    members.sort_by(|a, b| a.id.cmp(&b.id));
    Ok((members, resp.revision))
}

/// A role's live members at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSet {
    /// Sorted by id.
    pub members: Vec<Member>,
    pub revision: i64,
}

/// A role's live members, kept current by a watch on `members/<role>/` (ARCHITECTURE §2: the
/// catalog and writers watch the members). Every change re-reads the whole set, so a view is
/// always one revision's. The task ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct MemberWatch {
    rx: tokio::sync::watch::Receiver<Option<Arc<MemberSet>>>,
}

impl MemberWatch {
    /// Starts watching; `current` is `None` until the first read answers. Needs a Tokio
    /// runtime.
    pub fn start(meta: Arc<dyn MetadataStore>, cluster: &str, role: &str) -> Self {
        let (tx, rx) = tokio::sync::watch::channel(None);
        tokio::spawn(follow_members(meta, cluster.to_owned(), role.to_owned(), tx));
        MemberWatch { rx }
    }

    /// The set as last read.
    pub fn current(&self) -> Option<Arc<MemberSet>> {
        self.rx.borrow().clone()
    }

    /// Waits for the next set; `false` once the watch has stopped.
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }
}

async fn follow_members(
    meta: Arc<dyn MetadataStore>,
    cluster: String,
    role: String,
    tx: tokio::sync::watch::Sender<Option<Arc<MemberSet>>>,
) {
    let prefix = member_prefix(&cluster, &role);
    let retry = Duration::from_millis(500);
    loop {
        let (members, revision) = match live_members(meta.as_ref(), &cluster, &role).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(role, error = %e, "reading members failed; retrying");
                tokio::select! {
                    biased;
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(retry) => continue,
                }
            }
        };
        let set = MemberSet { members, revision };
        tx.send_if_modified(|cur| {
            let changed = cur.as_ref().is_none_or(|c| c.members != set.members);
            *cur = Some(Arc::new(set));
            changed
        });
        let req = metadata::WatchRequest {
            range: metadata::KeyRange::prefix(prefix.clone()),
            start_revision: revision + 1,
        };
        let mut events = match meta.watch(req).await {
            Ok(w) => w,
            Err(_) => {
                tokio::select! {
                    biased;
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(retry) => continue,
                }
            }
        };
        // Any change, or the watch ending, re-reads the whole set. Biased (here and above): a
        // closed receiver wins over a ready event, so what runs does not depend on tokio's
        // random branch order (the simulation replays every run exactly).
        tokio::select! {
            biased;
            _ = tx.closed() => return,
            _ = futures::StreamExt::next(&mut events) => {}
        }
    }
}

/// A member id for a process whose config names none: `<role>-<pid>-<nanos>`.
pub fn random_id(role: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{role}-{}-{nanos:x}", std::process::id())
}

/// `members/<role>/`: the prefix a role's member keys share.
pub fn member_prefix(cluster: &str, role: &str) -> Vec<u8> {
    let mut prefix = Keys::new(cluster).member(role, "");
    if prefix.last() != Some(&b'/') {
        prefix.push(b'/');
    }
    prefix
}

/// A role process's membership: its member key under a lease kept alive by a task. A lost
/// lease (the process stalled past its TTL) is granted again and the key re-put, as a new
/// incarnation. Writers register through `LogStorage` instead: their incarnation also fences
/// commits.
#[derive(Debug)]
pub struct Registration {
    meta: Arc<dyn MetadataStore>,
    key: Vec<u8>,
    lease: Arc<parking_lot::Mutex<LeaseId>>,
    task: tokio::task::JoinHandle<()>,
}

/// Registers `record` under `members/<role>/<id>` with a lease of `ttl`. Fails with
/// `AlreadyExists` if a live member holds the id.
pub async fn register(
    meta: Arc<dyn MetadataStore>,
    cluster: &str,
    record: MemberRecord,
    ttl: Duration,
) -> Result<Registration, LogError> {
    let key = Keys::new(cluster).member(&record.role, &record.id);
    let value = record.encode_to_vec();
    let lease = put_member(meta.as_ref(), &key, &value, ttl).await?;
    let lease = Arc::new(parking_lot::Mutex::new(lease));
    let task =
        tokio::spawn(keep_member_alive(meta.clone(), key.clone(), value, ttl, lease.clone()));
    Ok(Registration { meta, key, lease, task })
}

async fn put_member(
    meta: &dyn MetadataStore,
    key: &[u8],
    value: &[u8],
    ttl: Duration,
) -> Result<LeaseId, LogError> {
    let lease = meta.lease_grant(ttl).await?;
    let txn = Txn::new()
        .when([Compare::create_revision(key.to_vec(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put_with_lease(key.to_vec(), value.to_vec(), lease)]);
    if meta.txn(txn).await?.succeeded {
        return Ok(lease);
    }
    let _ = meta.lease_revoke(lease).await;
    Err(LogError::AlreadyExists(format!(
        "member {} (another live process has this id)",
        String::from_utf8_lossy(key)
    )))
}

async fn keep_member_alive(
    meta: Arc<dyn MetadataStore>,
    key: Vec<u8>,
    value: Vec<u8>,
    ttl: Duration,
    lease: Arc<parking_lot::Mutex<LeaseId>>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let current = *lease.lock();
        match meta.lease_keep_alive(current).await {
            Ok(_) => {}
            Err(MetaError::LeaseNotFound(_)) => {
                tracing::warn!(key = %String::from_utf8_lossy(&key), "member lease lost; registering again");
                if let Ok(l) = put_member(meta.as_ref(), &key, &value, ttl).await {
                    *lease.lock() = l;
                }
            }
            Err(e) => tracing::warn!(error = %e, "member lease keep-alive failed"),
        }
    }
}

impl Registration {
    /// Deregisters: stops the keep-alive and revokes the lease (the key goes with it).
    pub async fn close(self) {
        self.task.abort();
        let lease = *self.lease.lock();
        let _ = self.meta.lease_revoke(lease).await;
    }

    /// The member key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}
