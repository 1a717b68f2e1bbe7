//! The listener: one task per connection, reading frames while fewer than `max_in_flight`
//! requests wait for their answers, and writing the answers in request order (Kafka clients
//! pipeline and match answers by order). A frame that cannot be read, or a request that
//! closes its connection ([`crate::api::Close`]), ends the connection after the answers
//! already due are written.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::session::Session;
use crate::{Broker, api, frame};

/// The front end's settings.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// The largest request frame (Kafka's `socket.request.max.bytes`, 100 MiB).
    pub max_frame_bytes: usize,
    /// Requests one connection may have waiting for answers; reading pauses beyond.
    pub max_in_flight: usize,
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
    /// TLS on the listener (clients' `security.protocol=SSL`); none: plaintext.
    pub tls: Option<Arc<security::ServerTls>>,
    /// Who may do what ([`crate::session`]); off by default.
    pub authz: Arc<security::Authorizer>,
    /// Where CreateAcls, DescribeAcls and DeleteAcls keep ACLs; none: SECURITY_DISABLED.
    pub acls: Option<security::store::AuthStore>,
}

/// Connections that have not authenticated yet, at most, on one listener (with
/// authentication on); one more is closed at once.
pub const MAX_UNAUTHENTICATED: usize = 1024;

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            max_frame_bytes: frame::MAX_FRAME_BYTES,
            max_in_flight: 16,
            auto_create_topics: true,
            default_partitions: 1,
            max_batch_bytes: 1 << 20,
            initial_rebalance_delay: std::time::Duration::from_secs(3),
            consumer_session_timeout: std::time::Duration::from_secs(45),
            consumer_heartbeat_interval: std::time::Duration::from_secs(5),
            tls: None,
            authz: security::Authorizer::off(),
            acls: None,
        }
    }
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
            .with_consumer_timeouts(cfg.consumer_session_timeout, cfg.consumer_heartbeat_interval),
    );
    let cfg = Arc::new(cfg);
    let unauthenticated = Arc::new(tokio::sync::Semaphore::new(MAX_UNAUTHENTICATED));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    // Sessions end and rebalances complete on time, whether or not requests come in.
    let ticking = groups.clone();
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(200));
        loop {
            every.tick().await;
            ticking.tick(std::time::Instant::now());
        }
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let permit = match cfg.authz.enabled() {
                        true => match unauthenticated.clone().try_acquire_owned() {
                            Ok(p) => Some(p),
                            Err(_) => {
                                tracing::warn!(%peer, "Kafka: {MAX_UNAUTHENTICATED} connections not authenticated yet; closing one more");
                                continue;
                            }
                        },
                        false => None,
                    };
                    let (broker, cfg, stopped) = (broker.clone(), cfg.clone(), stopped.clone());
                    let groups = groups.clone();
                    connections.spawn(async move {
                        let _ = socket.set_nodelay(true);
                        // As Kafka shows a group member's host: `/<ip>`.
                        let host: Arc<str> = format!("/{}", peer.ip()).into();
                        let tls = cfg.tls.clone();
                        let max = cfg.max_frame_bytes;
                        let served = match tls {
                            None => {
                                let session = Session::new(&cfg.authz, false, None, max, permit);
                                let (read, write) = socket.into_split();
                                let c = Conn { host, session, broker, cfg, groups, stopped };
                                connection(read, write, c).await
                            }
                            Some(tls) => match tls.accept(socket).await {
                                Ok(s) => {
                                    let cert = s.get_ref().1.peer_certificates().and_then(|c| {
                                        c.first().and_then(|c| security::Principal::of_certificate(c))
                                    });
                                    let session = Session::new(&cfg.authz, true, cert, max, permit);
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
                    tracing::warn!(error = %e, "Kafka listener: accept failed");
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

/// Serves one connection, its bytes read from `read` and answers written to `write` (a TCP
/// socket's halves, or a TLS stream's).
async fn connection<R, W>(mut read: R, mut write: W, c: Conn) -> Result<(), Ended>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let Conn { host, mut session, broker, cfg, groups, mut stopped } = c;
    // Frames are read by a task of their own: a read cut off by select! would lose the bytes
    // of a frame half read. It reads one frame ahead of the requests taken.
    let (tx, mut frames) = tokio::sync::mpsc::channel(1);
    let max = session.frame_cap();
    let reader = tokio::spawn(async move {
        loop {
            let next = frame::read_frame(&mut read, max.clone()).await;
            let last = !matches!(next, Ok(Some(_)));
            if tx.send(next).await.is_err() || last {
                return;
            }
        }
    });
    let mut waiting: FuturesOrdered<Answer> = FuturesOrdered::new();
    let mut reading = !*stopped.borrow();
    let mut closing: Option<Ended> = None;
    let deadline = session.deadline().unwrap_or_else(std::time::Instant::now);
    while reading || !waiting.is_empty() {
        let room = waiting.len() < cfg.max_in_flight;
        tokio::select! {
            // Answers first: they free room and keep the client's pipeline moving.
            biased;
            Some(answer) = waiting.next(), if !waiting.is_empty() => match answer {
                Ok(None) => {}
                Ok(Some(out)) => {
                    if let Err(e) = write_out(&mut write, &out).await {
                        reader.abort();
                        return Err(Ended::Write(e));
                    }
                }
                // The answers after it are dropped: the client sees the connection close
                // where the request that cannot be answered stood.
                Err(close) => {
                    reader.abort();
                    return Err(Ended::Request(close));
                }
            },
            next = frames.recv(), if reading && room => match next {
                Some(Ok(Some(f))) => {
                    // Admitted here, one request at a time, in the connection's order.
                    let admitted = api::admit(
                        f,
                        &mut session,
                        broker.clone(),
                        cfg.clone(),
                        groups.clone(),
                        host.clone(),
                    );
                    match admitted.await {
                        Ok(answer) => {
                            waiting.push_back(answer);
                            // A failed authentication: answered, then the connection closes.
                            if session.close_after {
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
                Some(Ok(None)) | None => reading = false,
                Some(Err(e)) => {
                    reading = false;
                    closing = Some(Ended::Frame(e));
                }
            },
            _ = stopped.changed(), if reading => reading = false,
            _ = tokio::time::sleep_until(deadline.into()), if reading && !session.authenticated() => {
                reading = false;
                closing = Some(Ended::Request(api::Close::AuthTimeout(crate::session::PRE_AUTH_TIMEOUT)));
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
