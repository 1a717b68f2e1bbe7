//! The listener: one task per connection, reading frames while fewer than `max_in_flight`
//! requests wait for their answers, and writing the answers in request order (Kafka clients
//! pipeline and match answers by order). A frame that cannot be read, or a request that
//! closes its connection ([`crate::api::Close`]), ends the connection after the answers
//! already due are written.
//!
//! What a listener holds is bounded whatever clients send: requests by its
//! [`RequestBudget`] (a frame's bytes are taken before its body is read, and held until it is
//! answered), connections by `max_connections` and `max_connections_per_ip` (and, before
//! authentication, [`MAX_UNAUTHENTICATED`] of them, [`MAX_UNAUTHENTICATED_PER_IP`] from one
//! address), time by `connections_max_idle` (a connection with nothing to answer and no
//! request for that long is closed) and `frame_deadline` (a frame's body must follow its
//! size). A connection refused at accept is closed at once, and said in a warning at most
//! every 10 s with how many were.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::budget::RequestBudget;
use crate::session::Session;
use crate::{Broker, api, frame};

/// The front end's settings.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// The largest request frame (Kafka's `socket.request.max.bytes`, 100 MiB); a frame must
    /// also fit in `request_budget` with its decoding allowance.
    pub max_frame_bytes: usize,
    /// Requests one connection may have waiting for answers; reading pauses beyond.
    pub max_in_flight: usize,
    /// The bytes all of this listener's requests may hold at once (Kafka's
    /// `queued.max.request.bytes`): see [`crate::budget`].
    pub request_budget: Arc<RequestBudget>,
    /// Connections this listener keeps at once (Kafka's `max.connections`); one more is
    /// closed at accept.
    pub max_connections: usize,
    /// Connections from one address at once (Kafka's `max.connections.per.ip`).
    pub max_connections_per_ip: usize,
    /// A connection with no request for this long and nothing to answer is closed (Kafka's
    /// `connections.max.idle.ms`, 10 min).
    pub connections_max_idle: Duration,
    /// How long a frame's body may take once its size arrived.
    pub frame_deadline: Duration,
    /// Metadata for a topic that does not exist creates it (Kafka's default: on).
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic (Kafka's `num.partitions`, 1).
    pub default_partitions: u32,
    /// The largest record batch a Produce may carry (Kafka's `max.message.bytes`).
    pub max_batch_bytes: usize,
    /// How long a consumer group formed from empty waits for more members before its first
    /// assignment (Kafka's `group.initial.rebalance.delay.ms`, 3 s).
    pub initial_rebalance_delay: std::time::Duration,
    /// KIP-848 groups: a member silent this long is removed (Kafka's
    /// `group.consumer.session.timeout.ms`, 45 s).
    pub consumer_session_timeout: std::time::Duration,
    /// KIP-848 groups: the heartbeat interval members are told (5 s).
    pub consumer_heartbeat_interval: std::time::Duration,
    /// A group's offsets expire once it has had no member this long (Kafka's
    /// `offsets.retention.minutes`, 7 days).
    pub offsets_retention: std::time::Duration,
    /// How often offsets are checked for expiry (Kafka's
    /// `offsets.retention.check.interval.ms`, 10 minutes).
    pub offsets_retention_check: std::time::Duration,
    /// TLS on the listener (clients' `security.protocol=SSL`); none: plaintext.
    pub tls: Option<Arc<security::ServerTls>>,
    /// Who may do what ([`crate::session`]); off by default.
    pub authz: Arc<security::Authorizer>,
    /// Where CreateAcls, DescribeAcls and DeleteAcls keep ACLs; none: SECURITY_DISABLED.
    pub acls: Option<security::store::AuthStore>,
    /// The listener's fetch sessions (KIP-227), shared by its connections.
    pub fetch_sessions: Arc<crate::fetch_session::FetchSessions>,
}

/// Connections that have not authenticated yet, at most, on one listener (with
/// authentication on); one more is closed at once.
pub const MAX_UNAUTHENTICATED: usize = 1024;

/// Of those, from one address at most: one address cannot hold them all.
pub const MAX_UNAUTHENTICATED_PER_IP: usize = 128;

/// The request budget by default (Kafka's `queued.max.request.bytes` is unbounded).
pub const DEFAULT_REQUEST_BUDGET: usize = 100 << 20;

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            max_frame_bytes: frame::MAX_FRAME_BYTES,
            max_in_flight: 16,
            request_budget: RequestBudget::new(DEFAULT_REQUEST_BUDGET),
            max_connections: 4096,
            max_connections_per_ip: 1024,
            connections_max_idle: Duration::from_secs(600),
            frame_deadline: frame::FRAME_DEADLINE,
            auto_create_topics: true,
            default_partitions: 1,
            max_batch_bytes: 1 << 20,
            initial_rebalance_delay: std::time::Duration::from_secs(3),
            consumer_session_timeout: std::time::Duration::from_secs(45),
            consumer_heartbeat_interval: std::time::Duration::from_secs(5),
            offsets_retention: std::time::Duration::from_secs(7 * 24 * 3600),
            offsets_retention_check: crate::groups::RETENTION_CHECK_INTERVAL,
            tls: None,
            authz: security::Authorizer::off(),
            acls: None,
            fetch_sessions: Arc::default(),
        }
    }
}

/// Connections open, in all and per address, and those not authenticated yet.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    unauthenticated: usize,
    /// Per address: connections, and of them unauthenticated.
    by_ip: HashMap<IpAddr, (usize, usize)>,
}

/// A connection's place in [`Open`], given back when dropped.
#[derive(Debug)]
struct Place {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

/// An unauthenticated connection's share of [`Open`], given back on authentication or close.
#[derive(Debug)]
struct PreAuthPlace {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut o = self.open.lock();
        o.total = o.total.saturating_sub(1);
        if let Some(n) = o.by_ip.get_mut(&self.ip) {
            n.0 = n.0.saturating_sub(1);
            if n.0 == 0 {
                o.by_ip.remove(&self.ip);
            }
        }
    }
}

impl Drop for PreAuthPlace {
    fn drop(&mut self) {
        let mut o = self.open.lock();
        o.unauthenticated = o.unauthenticated.saturating_sub(1);
        if let Some(n) = o.by_ip.get_mut(&self.ip) {
            n.1 = n.1.saturating_sub(1);
        }
    }
}

/// Why a connection is refused at accept.
#[derive(Debug)]
enum Full {
    Listener(usize),
    Address(usize),
    Unauthenticated(usize),
    UnauthenticatedAddress(usize),
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Full::Listener(n) => write!(f, "{n} connections open (max_connections)"),
            Full::Address(n) => {
                write!(f, "{n} connections from this address (max_connections_per_ip)")
            }
            Full::Unauthenticated(n) => write!(f, "{n} connections not authenticated yet"),
            Full::UnauthenticatedAddress(n) => {
                write!(f, "{n} connections from this address not authenticated yet")
            }
        }
    }
}

/// Takes a place for a connection from `ip` (and, unauthenticated, a pre-authentication one).
fn admit_connection(
    open: &Arc<Mutex<Open>>,
    cfg: &KafkaConfig,
    ip: IpAddr,
    pre_auth: bool,
) -> Result<(Place, Option<PreAuthPlace>), Full> {
    let mut o = open.lock();
    let (n, unauth) = o.by_ip.get(&ip).copied().unwrap_or((0, 0));
    if o.total >= cfg.max_connections {
        return Err(Full::Listener(o.total));
    }
    if n >= cfg.max_connections_per_ip {
        return Err(Full::Address(n));
    }
    if pre_auth && o.unauthenticated >= MAX_UNAUTHENTICATED {
        return Err(Full::Unauthenticated(o.unauthenticated));
    }
    if pre_auth && unauth >= MAX_UNAUTHENTICATED_PER_IP {
        return Err(Full::UnauthenticatedAddress(unauth));
    }
    o.total += 1;
    o.unauthenticated += usize::from(pre_auth);
    o.by_ip.insert(ip, (n + 1, unauth + usize::from(pre_auth)));
    let place = Place { open: open.clone(), ip };
    Ok((place, pre_auth.then(|| PreAuthPlace { open: open.clone(), ip })))
}

/// Serves Kafka on `listener` until `shutdown`; then stops accepting and lets each
/// connection finish the requests it has read.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<dyn Broker>,
    cfg: KafkaConfig,
    shutdown: impl Future<Output = ()>,
) {
    let groups = Arc::new(
        crate::groups::Groups::new(cfg.initial_rebalance_delay)
            .with_consumer_timeouts(cfg.consumer_session_timeout, cfg.consumer_heartbeat_interval)
            .with_offsets_retention(cfg.offsets_retention),
    );
    let cfg = Arc::new(cfg);
    let open = Arc::new(Mutex::new(Open::default()));
    // Refused and failed accepts: a warning each at most every 10 s, with how many were not.
    let quiet = || security::audit::RateLimit::new(1, Duration::from_secs(10));
    let (refused, failed) = (quiet(), quiet());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    // Sessions end and rebalances complete on time, whether or not requests come in.
    // What that changed of the groups (emptied ones) is stored after each tick.
    // Offsets of groups empty past their retention are deleted once a check interval.
    let (ticking, storing, check) = (groups.clone(), broker.clone(), cfg.offsets_retention_check);
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(200));
        let (mut checked, mut txns_checked) =
            (tokio::time::Instant::now(), tokio::time::Instant::now());
        loop {
            every.tick().await;
            ticking.tick(tokio::time::Instant::now().into_std());
            ticking.store_changed(storing.as_ref()).await;
            if checked.elapsed() >= check {
                checked = tokio::time::Instant::now();
                ticking.expire(storing.as_ref()).await;
            }
            // Transactions past their timeout, or left half ended (Kafka's 10 s).
            if txns_checked.elapsed() >= crate::txn_api::coordinator::CHECK_INTERVAL {
                txns_checked = tokio::time::Instant::now();
                crate::txn_api::coordinator::expire(&storing).await;
            }
        }
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let pre_auth = cfg.authz.enabled();
                    let (place, pre_auth) = match admit_connection(&open, &cfg, peer.ip(), pre_auth) {
                        Ok(p) => p,
                        Err(full) => {
                            if let Some(held) = refused.allow() {
                                tracing::warn!(%peer, held_back = held, "Kafka: connection refused: {full}");
                            }
                            continue;
                        }
                    };
                    let permit = pre_auth.map(|p| Box::new(p) as crate::session::PreAuth);
                    let (broker, cfg, stopped) = (broker.clone(), cfg.clone(), stopped.clone());
                    let groups = groups.clone();
                    connections.spawn(async move {
                        let _place = place;
                        let _ = socket.set_nodelay(true);
                        // As Kafka shows a group member's host: `/<ip>`.
                        let host: Arc<str> = format!("/{}", peer.ip()).into();
                        let tls = cfg.tls.clone();
                        let max = cfg.max_frame_bytes;
                        let served = match tls {
                            None => {
                                let session = Session::new(&cfg.authz, false, None, max, permit)
                                    .with_peer(host.clone());
                                let (read, write) = socket.into_split();
                                let c = Conn { host, session, broker, cfg, groups, stopped };
                                connection(read, write, c).await
                            }
                            Some(tls) => match tls.accept(socket).await {
                                Ok(s) => {
                                    let cert = s.get_ref().1.peer_certificates().and_then(|c| {
                                        c.first().and_then(|c| security::Principal::of_certificate(c))
                                    });
                                    let session = Session::new(&cfg.authz, true, cert, max, permit)
                                        .with_peer(host.clone());
                                    let (read, write) = tokio::io::split(s);
                                    let c = Conn { host, session, broker, cfg, groups, stopped };
                                    connection(read, write, c).await
                                }
                                Err(e) => {
                                    tracing::debug!(%peer, error = %e, "Kafka TLS handshake failed");
                                    return;
                                }
                            },
                        };
                        if let Err(e) = served {
                            tracing::debug!(%peer, error = %e, "Kafka connection closed");
                        }
                    });
                }
                Err(e) => {
                    // Out of descriptors, most often: said at most every 10 s, and a pause so
                    // the loop does not spin.
                    if let Some(held) = failed.allow() {
                        tracing::warn!(error = %e, held_back = held, "Kafka listener: accept failed");
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
    ticker.abort();
}

/// A request being answered.
type Answer = api::Answer;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("{0}")]
    Frame(#[from] frame::FrameError),
    #[error("{0}")]
    Request(#[from] api::Close),
    #[error("writing: {0}")]
    Write(std::io::Error),
    #[error("no request for {0:?}")]
    Idle(Duration),
}

/// What one connection is served with.
struct Conn {
    host: Arc<str>,
    session: Session,
    broker: Arc<dyn Broker>,
    cfg: Arc<KafkaConfig>,
    groups: Arc<crate::groups::Groups>,
    stopped: tokio::sync::watch::Receiver<bool>,
}

/// A request being admitted, with the session it has for the while (given back with it).
type Admitting = futures::future::BoxFuture<'static, (Session, Result<Answer, api::Close>)>;

/// Serves one connection, its bytes read from `read` and answers written to `write` (a TCP
/// socket's halves, or a TLS stream's).
async fn connection<R, W>(read: R, write: W, c: Conn) -> Result<(), Ended>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let (id, groups, broker) = (c.session.connection(), c.groups.clone(), c.broker.clone());
    let ended = serve_connection(read, write, c).await;
    // Its share sessions end with it, and what their members hold is lent again (as Kafka
    // releases a closed connection's acquired records).
    tokio::spawn(async move { groups.shares().disconnected(id, broker.as_ref()).await });
    ended
}

async fn serve_connection<R, W>(mut read: R, mut write: W, c: Conn) -> Result<(), Ended>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let Conn { host, session, broker, cfg, groups, mut stopped } = c;
    // Frames are read by a task of their own: a read cut off by select! would lose the bytes
    // of a frame half read. It reads one frame ahead of the requests taken, that frame's bytes
    // taken from the listener's budget before its body is read.
    let (tx, mut frames) = tokio::sync::mpsc::channel(1);
    let max = session.frame_cap();
    let (budget, frame_deadline) = (cfg.request_budget.clone(), cfg.frame_deadline);
    let reader = tokio::spawn(async move {
        loop {
            let next =
                frame::read_frame_within(&mut read, max.clone(), &budget, frame_deadline).await;
            let last = !matches!(next, Ok(Some(_)));
            if tx.send(next).await.is_err() || last {
                return;
            }
        }
    });
    let auth_deadline = session.deadline().unwrap_or_else(Instant::now);
    // The session, but while a request is admitted (it has the session then).
    let mut session = Some(session);
    let mut admitting: Option<Admitting> = None;
    let mut waiting: FuturesOrdered<Answer> = FuturesOrdered::new();
    let mut reading = !*stopped.borrow();
    let mut closing: Option<Ended> = None;
    let idle = cfg.connections_max_idle;
    let mut active = Instant::now();
    while reading || !waiting.is_empty() || admitting.is_some() {
        let room = waiting.len() + usize::from(admitting.is_some()) < cfg.max_in_flight;
        let unauthenticated = session.as_ref().is_some_and(|s| !s.authenticated());
        let quiet = waiting.is_empty() && admitting.is_none();
        tokio::select! {
            // Answers first: they free room and keep the client's pipeline moving; they are
            // written while a later request is admitted, too.
            biased;
            Some(answer) = waiting.next(), if !waiting.is_empty() => match answer {
                Ok(None) => {}
                Ok(Some(out)) => {
                    if let Err(e) = write_out(&mut write, &out).await {
                        reader.abort();
                        return Err(Ended::Write(e));
                    }
                    active = Instant::now();
                }
                // The answers after it are dropped: the client sees the connection close
                // where the request that cannot be answered stood.
                Err(close) => {
                    reader.abort();
                    return Err(Ended::Request(close));
                }
            },
            (s, admitted) = async {
                match admitting.as_mut() {
                    Some(a) => a.await,
                    None => std::future::pending().await,
                }
            }, if admitting.is_some() => {
                admitting = None;
                let close_after = s.close_after;
                session = Some(s);
                match admitted {
                    Ok(answer) => {
                        waiting.push_back(answer);
                        // A failed authentication: answered, then the connection closes.
                        if close_after {
                            reading = false;
                        }
                    }
                    Err(close) => {
                        // Answered after the answers due before it: a closed connection.
                        reading = false;
                        waiting.push_back(Box::pin(std::future::ready(Err(close))));
                    }
                }
            }
            next = frames.recv(), if reading && room && admitting.is_none() => match next {
                Some(Ok(Some(f))) => {
                    active = Instant::now();
                    // Admitted one request at a time, in the connection's order.
                    let Some(mut s) = session.take() else { break };
                    let (broker, cfg, groups, host) = (broker.clone(), cfg.clone(), groups.clone(), host.clone());
                    admitting = Some(Box::pin(async move {
                        let admitted = api::handle(f, &mut s, broker, cfg, groups, host).await;
                        (s, admitted)
                    }));
                }
                Some(Ok(None)) | None => reading = false,
                Some(Err(e)) => {
                    reading = false;
                    closing = Some(Ended::Frame(e));
                }
            },
            _ = stopped.changed(), if reading => reading = false,
            _ = tokio::time::sleep_until(auth_deadline.into()), if reading && unauthenticated => {
                reading = false;
                closing = Some(Ended::Request(api::Close::AuthTimeout(crate::session::PRE_AUTH_TIMEOUT)));
            }
            _ = tokio::time::sleep_until((active + idle).into()), if reading && quiet => {
                reading = false;
                closing = Some(Ended::Idle(idle));
            }
        }
    }
    reader.abort();
    let _ = write.shutdown().await;
    match closing {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Writes a response frame's parts in vectored writes: stored batches go from the bytes read
/// to the socket with no copy in between.
async fn write_out<W: tokio::io::AsyncWrite + Unpin>(
    write: &mut W,
    out: &crate::splice::Outgoing,
) -> std::io::Result<()> {
    use std::io::IoSlice;
    if let [one] = out.parts() {
        return write.write_all(one).await;
    }
    let mut slices: Vec<IoSlice<'_>> = out.parts().iter().map(|p| IoSlice::new(p)).collect();
    let mut left = &mut slices[..];
    IoSlice::advance_slices(&mut left, 0);
    while !left.is_empty() {
        let n = write.write_vectored(left).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut left, n);
    }
    Ok(())
}
