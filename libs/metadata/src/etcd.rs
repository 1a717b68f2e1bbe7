//! [`EtcdStore`]: the [`MetadataStore`] over a real etcd cluster, through `etcd-client`.
//! This is the only module in the workspace that imports `etcd-client`.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client as ec;
use futures::StreamExt;

use crate::store::{MetadataStore, WatchStream};
use crate::types::*;

/// A [`MetadataStore`] backed by etcd. Cheap to clone.
#[derive(Clone)]
pub struct EtcdStore {
    client: ec::Client,
    request_timeout: Duration,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").field("request_timeout", &self.request_timeout).finish()
    }
}

/// Reads are safe to repeat; writes are not, so their failures are "outcome unknown".
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write(&'static str),
}

/// TLS to etcd: its CA trusted (with the system's roots), this role's certificate presented
/// when set. A file that cannot be read is an error naming it.
fn tls_options(t: &config::TlsConfig) -> Result<ec::TlsOptions, MetaError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| {
            MetaError::InvalidArgument(format!("metadata.etcd.tls: {}: {e}", p.display()))
        })
    };
    let mut tls = ec::TlsOptions::new().with_native_roots();
    if let Some(ca) = &t.ca {
        tls = tls.ca_certificate(ec::Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&t.cert, &t.key) {
        tls = tls.identity(ec::Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(tls)
}

impl EtcdStore {
    /// Connects and checks that etcd answers.
    pub async fn connect(config: &config::EtcdConfig) -> Result<Self, MetaError> {
        let mut options = ec::ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout.0)
            .with_timeout(config.request_timeout.0);
        if let Some(t) = &config.tls {
            options = options.with_tls(tls_options(t)?);
        }
        let connect = ec::Client::connect(config.endpoints.clone(), Some(options));
        let client = tokio::time::timeout(config.connect_timeout.0, connect)
            .await
            .map_err(|_| {
                MetaError::Unavailable(format!(
                    "no answer from etcd at {} within {:?}",
                    config.endpoints.join(","),
                    config.connect_timeout.0
                ))
            })?
            .map_err(|e| {
                MetaError::Unavailable(format!("etcd at {}: {e}", config.endpoints.join(",")))
            })?;
        let store = EtcdStore { client, request_timeout: config.request_timeout.0 };
        store.current_revision().await.map_err(|e| match e {
            MetaError::Unavailable(m) => {
                MetaError::Unavailable(format!("{m} (endpoints {})", config.endpoints.join(",")))
            }
            e => e,
        })?;
        Ok(store)
    }

    /// Runs one etcd call under the request timeout, mapping its errors.
    async fn call<T, F>(&self, kind: Kind, f: F) -> Result<T, MetaError>
    where
        F: std::future::Future<Output = Result<T, ec::Error>>,
    {
        match tokio::time::timeout(self.request_timeout, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_error(kind, e)),
            Err(_) => Err(match kind {
                Kind::Read => MetaError::Unavailable(format!(
                    "etcd did not answer within {:?}",
                    self.request_timeout
                )),
                Kind::Write(op) => MetaError::OutcomeUnknown {
                    op,
                    reason: format!("no answer within {:?}", self.request_timeout),
                },
            }),
        }
    }
}

fn map_error(kind: Kind, e: ec::Error) -> MetaError {
    let unknown_or_unavailable = |reason: String| match kind {
        Kind::Read => MetaError::Unavailable(reason),
        Kind::Write(op) => MetaError::OutcomeUnknown { op, reason },
    };
    match e {
        ec::Error::GRpcStatus(status) => {
            let msg = status.message().to_owned();
            if msg.contains("required revision has been compacted") {
                return MetaError::Compacted { requested: 0, compact_revision: 0 };
            }
            if msg.contains("required revision is a future revision") {
                return MetaError::FutureRevision { requested: 0, current: 0 };
            }
            if msg.contains("database space exceeded") {
                return MetaError::NoSpace(msg);
            }
            if msg.contains("requested lease not found") {
                return MetaError::LeaseNotFound(0);
            }
            match status.code() {
                tonic::Code::InvalidArgument
                | tonic::Code::FailedPrecondition
                | tonic::Code::OutOfRange => MetaError::InvalidArgument(msg),
                tonic::Code::ResourceExhausted => MetaError::NoSpace(msg),
                // The request may have reached the leader before the connection broke.
                tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Unknown
                | tonic::Code::Aborted => unknown_or_unavailable(format!("etcd: {msg}")),
                _ => MetaError::Internal(format!("etcd: {}: {msg}", status.code())),
            }
        }
        ec::Error::InvalidArgs(m) => MetaError::InvalidArgument(m),
        ec::Error::LeaseKeepAliveError(m) if m.contains("not found") => MetaError::LeaseNotFound(0),
        other => unknown_or_unavailable(format!("etcd: {other}")),
    }
}

fn from_kv(kv: &ec::KeyValue) -> KeyValue {
    KeyValue {
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: kv.lease(),
    }
}

fn get_options(req: &RangeRequest) -> ec::GetOptions {
    let mut o = ec::GetOptions::new().with_limit(req.limit).with_revision(req.revision);
    if let Some(end) = &req.range.range_end {
        o = o.with_range(end.clone());
    }
    if req.reverse {
        o = o.with_sort(ec::SortTarget::Key, ec::SortOrder::Descend);
    }
    if req.keys_only {
        o = o.with_keys_only();
    }
    o
}

fn from_get(resp: &ec::GetResponse) -> RangeResponse {
    RangeResponse {
        kvs: resp.kvs().iter().map(from_kv).collect(),
        more: resp.more(),
        count: resp.count(),
        revision: resp.header().map_or(0, |h| h.revision()),
    }
}

fn to_compare(c: &Compare) -> ec::Compare {
    let op = match c.op {
        CompareOp::Equal => ec::CompareOp::Equal,
        CompareOp::NotEqual => ec::CompareOp::NotEqual,
        CompareOp::Greater => ec::CompareOp::Greater,
        CompareOp::Less => ec::CompareOp::Less,
    };
    let key = c.range.key.clone();
    let cmp = match &c.target {
        CompareTarget::Value(v) => ec::Compare::value(key, op, v.clone()),
        CompareTarget::Version(v) => ec::Compare::version(key, op, *v),
        CompareTarget::CreateRevision(r) => ec::Compare::create_revision(key, op, *r),
        CompareTarget::ModRevision(r) => ec::Compare::mod_revision(key, op, *r),
        CompareTarget::Lease(l) => ec::Compare::lease(key, op, *l),
    };
    match &c.range.range_end {
        Some(end) => cmp.with_range(end.clone()),
        None => cmp,
    }
}

fn to_op(op: &TxnOp) -> ec::TxnOp {
    match op {
        TxnOp::Get(req) => ec::TxnOp::get(req.range.key.clone(), Some(get_options(req))),
        TxnOp::Put { key, value, lease } => {
            let o = (*lease != 0).then(|| ec::PutOptions::new().with_lease(*lease));
            ec::TxnOp::put(key.clone(), value.clone(), o)
        }
        TxnOp::Delete(range) => {
            let o = range
                .range_end
                .as_ref()
                .map(|end| ec::DeleteOptions::new().with_range(end.clone()));
            ec::TxnOp::delete(range.key.clone(), o)
        }
    }
}

#[async_trait]
impl MetadataStore for EtcdStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse, MetaError> {
        req.validate()?;
        let mut kv = self.client.kv_client();
        let resp = self
            .call(Kind::Read, kv.get(req.range.key.clone(), Some(get_options(&req))))
            .await
            .map_err(|e| with_revision(e, req.revision))?;
        Ok(from_get(&resp))
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, MetaError> {
        txn.validate()?;
        let writes = txn.success.iter().chain(&txn.failure).any(|op| !matches!(op, TxnOp::Get(_)));
        let kind = if writes { Kind::Write("txn") } else { Kind::Read };
        let req = ec::Txn::new()
            .when(txn.compares.iter().map(to_compare).collect::<Vec<_>>())
            .and_then(txn.success.iter().map(to_op).collect::<Vec<_>>())
            .or_else(txn.failure.iter().map(to_op).collect::<Vec<_>>());
        let mut kv = self.client.kv_client();
        let resp = self.call(kind, kv.txn(req)).await?;
        let results = resp
            .op_responses()
            .into_iter()
            .map(|r| match r {
                ec::TxnOpResponse::Get(g) => Ok(OpResult::Get(from_get(&g))),
                ec::TxnOpResponse::Put(_) => Ok(OpResult::Put),
                ec::TxnOpResponse::Delete(d) => Ok(OpResult::Delete { deleted: d.deleted() }),
                ec::TxnOpResponse::Txn(_) => {
                    Err(MetaError::Internal("etcd answered a nested txn we never send".to_owned()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(TxnResponse {
            succeeded: resp.succeeded(),
            revision: resp.header().map_or(0, |h| h.revision()),
            results,
        })
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        let mut lease = self.client.lease_client();
        let resp = self.call(Kind::Write("lease grant"), lease.grant(ttl_secs(ttl), None)).await?;
        Ok(resp.id())
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<Duration, MetaError> {
        let mut lease = self.client.lease_client();
        let once = async {
            let (mut keeper, mut stream) = lease.keep_alive(id).await?;
            keeper.keep_alive().await?;
            stream.message().await
        };
        let answer = self.call(Kind::Read, once).await.map_err(|e| match e {
            MetaError::LeaseNotFound(_) => MetaError::LeaseNotFound(id),
            e => e,
        })?;
        match answer {
            Some(resp) if resp.ttl() > 0 => Ok(Duration::from_secs(resp.ttl().unsigned_abs())),
            Some(_) => Err(MetaError::LeaseNotFound(id)),
            None => Err(MetaError::Unavailable("etcd closed the keep-alive stream".to_owned())),
        }
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<(), MetaError> {
        let mut lease = self.client.lease_client();
        match self.call(Kind::Write("lease revoke"), lease.revoke(id)).await {
            Ok(_) => Ok(()),
            Err(MetaError::LeaseNotFound(_)) => Err(MetaError::LeaseNotFound(id)),
            Err(e) => Err(e),
        }
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream, MetaError> {
        req.range.validate()?;
        let mut o = ec::WatchOptions::new().with_start_revision(req.start_revision);
        if let Some(end) = &req.range.range_end {
            o = o.with_range(end.clone());
        }
        let mut watch = self.client.watch_client();
        let mut stream = self.call(Kind::Read, watch.watch(req.range.key.clone(), Some(o))).await?;
        // The first message confirms creation, or cancels at once for a compacted start.
        let first =
            stream.message().await.map_err(|e| map_error(Kind::Read, e))?.ok_or_else(|| {
                MetaError::Unavailable("etcd closed the watch at once".to_owned())
            })?;
        if first.canceled() {
            return Err(cancel_error(&first, req.start_revision));
        }
        let start = req.start_revision;
        let pending = (!first.events().is_empty()).then(|| Ok(convert_events(&first)));
        // The stream keeps the request sender alive: dropping it would end the watch.
        let rest = futures::stream::unfold(Some(stream), move |state| async move {
            let mut stream = state?;
            loop {
                match stream.message().await {
                    Ok(Some(resp)) if resp.canceled() => {
                        return Some((Err(cancel_error(&resp, start)), None));
                    }
                    Ok(Some(resp)) if resp.events().is_empty() => continue,
                    Ok(Some(resp)) => return Some((Ok(convert_events(&resp)), Some(stream))),
                    Ok(None) => {
                        let e = MetaError::Unavailable("etcd ended the watch".to_owned());
                        return Some((Err(e), None));
                    }
                    Err(e) => return Some((Err(map_error(Kind::Read, e)), None)),
                }
            }
        });
        Ok(Box::pin(futures::stream::iter(pending).chain(rest)))
    }

    async fn compact(&self, revision: Revision) -> Result<(), MetaError> {
        let mut kv = self.client.kv_client();
        self.call(Kind::Write("compact"), kv.compact(revision, None))
            .await
            .map_err(|e| with_revision(e, revision))?;
        Ok(())
    }
}

/// etcd's revision errors carry no numbers; fill in the one the caller asked for.
fn with_revision(e: MetaError, requested: Revision) -> MetaError {
    match e {
        MetaError::Compacted { compact_revision, .. } => {
            MetaError::Compacted { requested, compact_revision }
        }
        MetaError::FutureRevision { current, .. } => {
            MetaError::FutureRevision { requested, current }
        }
        e => e,
    }
}

fn cancel_error(resp: &ec::WatchResponse, requested: Revision) -> MetaError {
    if resp.compact_revision() > 0 {
        MetaError::Compacted { requested, compact_revision: resp.compact_revision() }
    } else {
        MetaError::Unavailable(format!("etcd canceled the watch: {}", resp.cancel_reason()))
    }
}

fn convert_events(resp: &ec::WatchResponse) -> Vec<WatchEvent> {
    resp.events()
        .iter()
        .filter_map(|ev| {
            let kv = from_kv(ev.kv()?);
            let kind = match ev.event_type() {
                ec::EventType::Put => EventKind::Put,
                ec::EventType::Delete => EventKind::Delete,
            };
            Some(WatchEvent { kind, kv })
        })
        .collect()
}
