//! Requests, responses and errors of the [`MetadataStore`](crate::MetadataStore) contract.
//! They mirror etcd's v3 API, so the etcd backend maps them one to one and the embedded
//! backend implements etcd's semantics, which the conformance suite pins down.

use std::time::Duration;

/// An etcd revision: a cluster-wide counter that every write transaction increments once.
pub type Revision = i64;
/// A lease id; 0 means "no lease".
pub type LeaseId = i64;

/// The largest number of compares, and separately of operations per branch, in one txn:
/// etcd's default `--max-txn-ops`. Both backends refuse larger transactions.
pub const MAX_TXN_OPS: usize = 128;

/// One key's state, as etcd reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the write that created the key; changes when it is deleted and re-created.
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// Number of writes since the key was (re)created, from 1.
    pub version: i64,
    /// The lease the key is attached to, or 0.
    pub lease: LeaseId,
}

/// The smallest key above every key with this prefix (etcd's `range_end` for a prefix).
/// For an empty or all-0xff prefix this is `[0]`: "every key ≥ start".
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A key, or a key range `[key, range_end)` as etcd writes it: `range_end == [0]` means
/// "every key ≥ key".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    pub key: Vec<u8>,
    pub range_end: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        KeyRange { key: key.into(), range_end: None }
    }

    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let key = prefix.into();
        let end = prefix_end(&key);
        KeyRange { key, range_end: Some(end) }
    }

    /// `[start, end)`.
    pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange { key: start.into(), range_end: Some(end.into()) }
    }

    /// Whether `k` falls in this range.
    pub fn contains(&self, k: &[u8]) -> bool {
        match &self.range_end {
            None => k == self.key.as_slice(),
            Some(end) if end.as_slice() == [0] => k >= self.key.as_slice(),
            Some(end) => k >= self.key.as_slice() && k < end.as_slice(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), MetaError> {
        if self.key.is_empty() {
            return Err(MetaError::InvalidArgument("key must not be empty".to_owned()));
        }
        Ok(())
    }
}

/// A read of one key or a key range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    pub range: KeyRange,
    /// At most this many keys; 0 for no limit.
    pub limit: i64,
    /// Descending key order.
    pub reverse: bool,
    /// Return keys and revisions without values.
    pub keys_only: bool,
    /// Read the store as of this revision; 0 for the current one.
    pub revision: Revision,
}

impl RangeRequest {
    pub fn new(range: KeyRange) -> Self {
        RangeRequest { range, ..Default::default() }
    }

    pub fn key(key: impl Into<Vec<u8>>) -> Self {
        Self::new(KeyRange::key(key))
    }

    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        Self::new(KeyRange::prefix(prefix))
    }

    pub fn between(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        Self::new(KeyRange::between(start, end))
    }

    pub fn limit(mut self, limit: i64) -> Self {
        self.limit = limit;
        self
    }

    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    pub fn keys_only(mut self) -> Self {
        self.keys_only = true;
        self
    }

    pub fn at_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), MetaError> {
        self.range.validate()?;
        if self.limit < 0 {
            return Err(MetaError::InvalidArgument(format!("limit {} is negative", self.limit)));
        }
        if self.revision < 0 {
            return Err(MetaError::InvalidArgument(format!(
                "revision {} is negative",
                self.revision
            )));
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// More keys matched than `limit` allowed.
    pub more: bool,
    /// How many keys matched in all.
    pub count: i64,
    /// The store's revision when the read was served.
    pub revision: Revision,
}

/// What a [`Compare`] looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    Value(Vec<u8>),
    Version(i64),
    CreateRevision(Revision),
    ModRevision(Revision),
    Lease(LeaseId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Greater,
    Less,
}

/// A condition of a transaction. Over a range it must hold for every key in it. A missing
/// key compares as version, revisions and lease 0; a value compare on a missing key fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    pub range: KeyRange,
    pub op: CompareOp,
    pub target: CompareTarget,
}

impl Compare {
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Self {
        Compare { range: KeyRange::key(key), op, target: CompareTarget::Value(value.into()) }
    }

    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Self {
        Compare { range: KeyRange::key(key), op, target: CompareTarget::Version(version) }
    }

    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, rev: Revision) -> Self {
        Compare { range: KeyRange::key(key), op, target: CompareTarget::CreateRevision(rev) }
    }

    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, rev: Revision) -> Self {
        Compare { range: KeyRange::key(key), op, target: CompareTarget::ModRevision(rev) }
    }

    pub fn lease(key: impl Into<Vec<u8>>, op: CompareOp, lease: LeaseId) -> Self {
        Compare { range: KeyRange::key(key), op, target: CompareTarget::Lease(lease) }
    }

    /// Applies the compare to every key in `[key, end)` instead of one key.
    pub fn with_range_end(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.range.range_end = Some(end.into());
        self
    }

    /// Whether `kv` (or a missing key, `None`) satisfies the compare, as etcd decides it.
    pub fn holds_for(&self, kv: Option<&KeyValue>) -> bool {
        use std::cmp::Ordering;
        let ord = match (&self.target, kv) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(v), Some(kv)) => kv.value.as_slice().cmp(v.as_slice()),
            (CompareTarget::Version(v), kv) => kv.map_or(0, |kv| kv.version).cmp(v),
            (CompareTarget::CreateRevision(r), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(r),
            (CompareTarget::ModRevision(r), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(r),
            (CompareTarget::Lease(l), kv) => kv.map_or(0, |kv| kv.lease).cmp(l),
        };
        match self.op {
            CompareOp::Equal => ord == Ordering::Equal,
            CompareOp::NotEqual => ord != Ordering::Equal,
            CompareOp::Greater => ord == Ordering::Greater,
            CompareOp::Less => ord == Ordering::Less,
        }
    }
}

/// One operation of a transaction branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    Get(RangeRequest),
    Put { key: Vec<u8>, value: Vec<u8>, lease: LeaseId },
    Delete(KeyRange),
}

impl TxnOp {
    pub fn get(req: RangeRequest) -> Self {
        TxnOp::Get(req)
    }

    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        TxnOp::Put { key: key.into(), value: value.into(), lease: 0 }
    }

    pub fn put_with_lease(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease: LeaseId,
    ) -> Self {
        TxnOp::Put { key: key.into(), value: value.into(), lease }
    }

    pub fn delete(range: KeyRange) -> Self {
        TxnOp::Delete(range)
    }
}

/// An atomic transaction: if every compare holds, run `success`, else `failure`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

impl Txn {
    pub fn new() -> Self {
        Txn::default()
    }

    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.compares.extend(compares);
        self
    }

    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.success.extend(ops);
        self
    }

    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.failure.extend(ops);
        self
    }

    /// The checks etcd makes before running a txn, made up front so that both backends refuse
    /// the same transactions with the same error, and so a large txn is never split.
    pub fn validate(&self) -> Result<(), MetaError> {
        for (what, n) in [
            ("compares", self.compares.len()),
            ("success operations", self.success.len()),
            ("failure operations", self.failure.len()),
        ] {
            if n > MAX_TXN_OPS {
                return Err(MetaError::InvalidArgument(format!(
                    "transaction has {n} {what}; the most is {MAX_TXN_OPS}"
                )));
            }
        }
        for c in &self.compares {
            c.range.validate()?;
        }
        for branch in [&self.success, &self.failure] {
            validate_branch(branch)?;
        }
        Ok(())
    }
}

/// etcd refuses a branch that writes one key twice, or puts a key that a delete covers.
fn validate_branch(ops: &[TxnOp]) -> Result<(), MetaError> {
    let mut puts: Vec<&[u8]> = Vec::new();
    let mut deletes: Vec<&KeyRange> = Vec::new();
    for op in ops {
        match op {
            TxnOp::Get(r) => r.validate()?,
            TxnOp::Put { key, .. } => {
                KeyRange::key(key.clone()).validate()?;
                puts.push(key);
            }
            TxnOp::Delete(r) => {
                r.validate()?;
                deletes.push(r);
            }
        }
    }
    let mut sorted = puts.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(MetaError::InvalidArgument(format!(
            "duplicate key given in txn request: {}",
            String::from_utf8_lossy(w[0])
        )));
    }
    for key in puts {
        if deletes.iter().any(|d| d.contains(key)) {
            return Err(MetaError::InvalidArgument(format!(
                "duplicate key given in txn request: {} is both put and deleted",
                String::from_utf8_lossy(key)
            )));
        }
    }
    Ok(())
}

/// The result of one operation of the branch that ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    Get(RangeResponse),
    Put,
    Delete { deleted: i64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether every compare held (and `success` ran).
    pub succeeded: bool,
    /// The store's revision after the txn: the txn's own revision if it wrote.
    pub revision: Revision,
    pub results: Vec<OpResult>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change seen by a watch. For a delete, `kv` holds the key and the deleting revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub kv: KeyValue,
}

/// A watch of a key range, from `start_revision` (0: from the next write on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchRequest {
    pub range: KeyRange,
    pub start_revision: Revision,
}

/// What goes wrong talking to a metadata store. Each variant says whether the outcome of a
/// write is known; see [`MetaError::outcome_known`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// The request is malformed or over a limit; nothing was applied.
    #[error("invalid metadata request: {0}")]
    InvalidArgument(String),
    #[error("lease {0} not found")]
    LeaseNotFound(LeaseId),
    /// The revision asked for is older than the oldest the store keeps.
    #[error("revision {requested} has been compacted (oldest kept is {compact_revision})")]
    Compacted { requested: Revision, compact_revision: Revision },
    #[error("revision {requested} is in the future (current is {current})")]
    FutureRevision { requested: Revision, current: Revision },
    /// The store is out of space (etcd's NOSPACE alarm); writes fail until an operator acts.
    #[error("metadata store out of space: {0}")]
    NoSpace(String),
    /// A write was sent but no answer came back: it may or may not have been applied.
    /// Callers must resolve it by reading, never by blindly sending it again.
    #[error("metadata {op} outcome unknown: {reason}")]
    OutcomeUnknown { op: &'static str, reason: String },
    /// The store could not be reached; nothing was applied.
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    /// The store failed in a way the caller cannot fix (I/O error, corrupt file).
    #[error("metadata store internal error: {0}")]
    Internal(String),
}

impl MetaError {
    /// False only when a write may have been applied without the caller learning of it.
    pub fn outcome_known(&self) -> bool {
        !matches!(self, MetaError::OutcomeUnknown { .. })
    }

    /// Whether trying again later may succeed (the request itself is fine).
    pub fn is_retryable(&self) -> bool {
        matches!(self, MetaError::Unavailable(_) | MetaError::OutcomeUnknown { .. })
    }
}

/// A lease's TTL as etcd takes it: whole seconds, at least one.
pub(crate) fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff, 0xff]), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    proptest! {
        #[test]
        fn prefix_range_contains_exactly_the_prefixed_keys(
            prefix in proptest::collection::vec(any::<u8>(), 1..4),
            key in proptest::collection::vec(any::<u8>(), 0..6),
        ) {
            let r = KeyRange::prefix(prefix.clone());
            prop_assert_eq!(r.contains(&key), key.starts_with(&prefix));
        }
    }

    #[test]
    fn txn_validate_refuses_oversize_and_duplicate_writes() {
        let big = Txn::new().and_then((0..=MAX_TXN_OPS).map(|i| TxnOp::put(format!("k{i}"), "v")));
        assert!(
            matches!(big.validate(), Err(MetaError::InvalidArgument(m)) if m.contains("129 success"))
        );
        let ok = Txn::new().and_then((0..MAX_TXN_OPS).map(|i| TxnOp::put(format!("k{i}"), "v")));
        assert_eq!(ok.validate(), Ok(()));
        let dup = Txn::new().and_then([TxnOp::put("a", "1"), TxnOp::put("a", "2")]);
        assert!(dup.validate().is_err());
        let covered =
            Txn::new().and_then([TxnOp::put("a/1", "1"), TxnOp::delete(KeyRange::prefix("a/"))]);
        assert!(covered.validate().is_err());
        let other_branches =
            Txn::new().and_then([TxnOp::put("a", "1")]).or_else([TxnOp::put("a", "2")]);
        assert_eq!(other_branches.validate(), Ok(()));
    }

    #[test]
    fn compare_on_a_missing_key_uses_zero_revisions_and_fails_on_value() {
        assert!(Compare::create_revision("k", CompareOp::Equal, 0).holds_for(None));
        assert!(Compare::version("k", CompareOp::Less, 1).holds_for(None));
        assert!(!Compare::value("k", CompareOp::NotEqual, "x").holds_for(None));
    }

    #[test]
    fn ttl_rounds_up_to_whole_seconds() {
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1500)), 2);
        assert_eq!(ttl_secs(Duration::from_secs(3)), 3);
    }
}
