//! One connection's identity (docs/security.md). With authentication on, a connection is
//! anonymous until it proves who it is: a verified TLS client certificate (its common name),
//! or SASL (SaslHandshake, then SaslAuthenticate: PLAIN over TLS only, SCRAM-SHA-256/512).
//! Until then it may send only ApiVersions and the SASL requests, in frames of at most 512 KiB
//! (Kafka's `sasl.server.max.receive.size`), for at most 30 s; a failed authentication is
//! answered and the connection closed. With authentication off, every connection is
//! `User:ANONYMOUS` and may do everything.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use security::scram::{Mechanism, ScramServer};
use security::{Authorizer, Principal};

/// The largest frame before authentication.
pub const PRE_AUTH_FRAME_BYTES: usize = 512 << 10;

/// How long a connection may take to authenticate.
pub const PRE_AUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// Kafka's SASL error codes.
pub const UNSUPPORTED_SASL_MECHANISM: i16 =
    kafka_protocol::ResponseError::UnsupportedSaslMechanism.code();
pub const ILLEGAL_SASL_STATE: i16 = kafka_protocol::ResponseError::IllegalSaslState.code();
pub const SASL_AUTHENTICATION_FAILED: i16 =
    kafka_protocol::ResponseError::SaslAuthenticationFailed.code();

#[derive(Debug)]
enum Sasl {
    None,
    Plain,
    Scram(Box<ScramServer>),
}

/// A connection's identity and authentication state.
#[derive(Debug)]
pub struct Session {
    principal: Principal,
    authenticated: bool,
    tls: bool,
    sasl: Sasl,
    /// Answer the request just admitted, then close (a failed authentication).
    pub close_after: bool,
    /// The frame cap the connection's reader applies: raised on authentication.
    cap: Arc<AtomicUsize>,
    max_frame: usize,
    started: Instant,
    /// Held while unauthenticated: bounds how many connections may be (the listener's).
    permit: Option<PreAuth>,
    /// The client's address (`/<ip>`), said with a failed authentication.
    peer: Arc<str>,
    /// The connection's number in its process: what a share session is tied to.
    id: u64,
}

/// What an unauthenticated connection holds of its listener's caps, given back once it
/// authenticates (or closes).
pub type PreAuth = Box<dyn std::fmt::Debug + Send + Sync>;

/// Connections numbered in the order they came.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Session {
    /// A new connection's session: authenticated already when authentication is off or its
    /// TLS client certificate named someone (`cert`).
    pub fn new(
        authz: &Authorizer,
        tls: bool,
        cert: Option<Principal>,
        max_frame: usize,
        permit: Option<PreAuth>,
    ) -> Session {
        let authenticated = !authz.enabled() || cert.is_some();
        let cap = if authenticated { max_frame } else { PRE_AUTH_FRAME_BYTES.min(max_frame) };
        Session {
            principal: cert.unwrap_or_else(Principal::anonymous),
            authenticated,
            tls,
            sasl: Sasl::None,
            close_after: false,
            cap: Arc::new(AtomicUsize::new(cap)),
            max_frame,
            started: Instant::now(),
            permit: if authenticated { None } else { permit },
            peer: Arc::from(""),
            id: NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The connection's number in its process (share sessions opened on it end with it).
    pub fn connection(&self) -> u64 {
        self.id
    }

    /// The client's address, as Kafka shows it (`/<ip>`).
    pub fn with_peer(mut self, peer: Arc<str>) -> Session {
        self.peer = peer;
        self
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// The frame cap, shared with the connection's reader.
    pub fn frame_cap(&self) -> Arc<AtomicUsize> {
        self.cap.clone()
    }

    /// When an unauthenticated connection is closed.
    pub fn deadline(&self) -> Option<Instant> {
        (!self.authenticated).then(|| self.started + PRE_AUTH_TIMEOUT)
    }

    fn mechanisms(&self) -> Vec<StrBytes> {
        let mut m: Vec<&str> = Vec::new();
        if self.tls {
            m.push("PLAIN");
        }
        m.extend(Mechanism::ALL.iter().map(|m| m.name()));
        m.into_iter().map(StrBytes::from_static_str).collect()
    }

    /// SaslHandshake: picks the mechanism the next SaslAuthenticate speaks.
    pub fn handshake(&mut self, req: &SaslHandshakeRequest) -> SaslHandshakeResponse {
        let resp = SaslHandshakeResponse::default().with_mechanisms(self.mechanisms());
        if self.authenticated || !matches!(self.sasl, Sasl::None) {
            return resp.with_error_code(ILLEGAL_SASL_STATE);
        }
        let asked = req.mechanism.as_str();
        self.sasl = match (asked, Mechanism::parse(asked)) {
            ("PLAIN", _) if self.tls => Sasl::Plain,
            (_, Some(m)) => Sasl::Scram(Box::new(ScramServer::new(m))),
            _ => return resp.with_error_code(UNSUPPORTED_SASL_MECHANISM),
        };
        resp
    }

    /// SaslAuthenticate: one step of the mechanism chosen. A failure is answered and the
    /// connection closed after it. PLAIN's password check (PBKDF2, thousands of iterations)
    /// runs off the async runtime, [`PASSWORD_CHECKS`] at once: a flood of attempts costs its
    /// own queue, not every connection's progress.
    pub async fn authenticate(
        &mut self,
        req: &SaslAuthenticateRequest,
        authz: &Authorizer,
    ) -> SaslAuthenticateResponse {
        let resp = SaslAuthenticateResponse::default();
        let failed = |s: &mut Session, message: String| {
            let mechanism = match &s.sasl {
                Sasl::Plain => "PLAIN",
                Sasl::Scram(server) => server.mechanism().name(),
                Sasl::None => "none",
            };
            security::audit::failed_authentication(&s.peer, mechanism, None, &message);
            s.close_after = true;
            s.sasl = Sasl::None;
            resp.clone()
                .with_error_code(SASL_AUTHENTICATION_FAILED)
                .with_error_message(Some(StrBytes::from_string(message)))
        };
        if self.authenticated {
            self.close_after = true;
            return resp
                .with_error_code(ILLEGAL_SASL_STATE)
                .with_error_message(Some(StrBytes::from_static_str("already authenticated")));
        }
        let msg = &req.auth_bytes;
        match &mut self.sasl {
            Sasl::None => {
                self.close_after = true;
                resp.with_error_code(ILLEGAL_SASL_STATE).with_error_message(Some(
                    StrBytes::from_static_str("SaslAuthenticate before SaslHandshake"),
                ))
            }
            Sasl::Plain => {
                let checked = match security::scram::parse_plain(msg) {
                    Ok((user, password)) => {
                        let credential = authz.credential(&user, Mechanism::ScramSha512);
                        match check_password(credential, password).await {
                            true => Ok(user),
                            false => Err(security::scram::AuthFailed {
                                detail: "Invalid username or password".to_owned(),
                            }),
                        }
                    }
                    Err(e) => Err(e),
                };
                match checked {
                    Ok(user) => {
                        self.done(&user);
                        resp
                    }
                    Err(e) => failed(self, e.to_string()),
                }
            }
            Sasl::Scram(server) => {
                let m = server.mechanism();
                let step = match server.awaiting_first() {
                    true => {
                        server.first(msg, |user| authz.credential(user, m)).map(|out| (None, out))
                    }
                    false => server.last(msg).map(|(user, out)| (Some(user), out)),
                };
                match step {
                    Ok((user, out)) => {
                        if let Some(user) = user {
                            self.done(&user);
                        }
                        resp.with_auth_bytes(Bytes::from(out))
                    }
                    Err(e) => failed(self, e.to_string()),
                }
            }
        }
    }

    fn done(&mut self, user: &str) {
        self.principal = Principal::user(user);
        self.authenticated = true;
        self.sasl = Sasl::None;
        self.permit = None;
        self.cap.store(self.max_frame, Ordering::Release);
    }
}

/// PLAIN password checks run at once, at most (each a blocking thread's PBKDF2).
pub const PASSWORD_CHECKS: usize = 2;

/// Whether `password` is the one `credential` was salted from (none: no such user), checked on
/// a blocking thread.
async fn check_password(credential: Option<security::scram::Credential>, password: String) -> bool {
    static CHECKS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PASSWORD_CHECKS);
    let Some(credential) = credential else { return false };
    let Ok(_turn) = CHECKS.acquire().await else { return false };
    tokio::task::spawn_blocking(move || credential.verify_password(&password))
        .await
        .unwrap_or(false)
}

/// ApiVersions: every API of the registry and its versions (served before authentication).
#[derive(Debug)]
pub struct ApiVersions;

impl crate::api::Handler for ApiVersions {
    const KEY: kafka_protocol::messages::ApiKey = kafka_protocol::messages::ApiKey::ApiVersions;
    const VERSIONS: (i16, i16) = (0, 4);
    const BEFORE_AUTH: bool = true;
    type Request = kafka_protocol::messages::ApiVersionsRequest;

    fn serve(_: Self::Request, ctx: crate::api::Ctx, _: &mut Session) -> crate::api::Admission<'_> {
        ctx.now(&crate::api::api_versions(crate::code::NONE))
    }
}

/// SaslHandshake: the mechanism the next SaslAuthenticate speaks. v0 is advertised because
/// librdkafka requires it to use SASL at all; the v0 exchange's raw tokens are not served
/// (every current client sends SaslAuthenticate after v1).
#[derive(Debug)]
pub struct Handshake;

impl crate::api::Handler for Handshake {
    const KEY: kafka_protocol::messages::ApiKey = kafka_protocol::messages::ApiKey::SaslHandshake;
    const VERSIONS: (i16, i16) = (0, 1);
    const BEFORE_AUTH: bool = true;
    type Request = SaslHandshakeRequest;

    fn serve(
        req: Self::Request,
        ctx: crate::api::Ctx,
        session: &mut Session,
    ) -> crate::api::Admission<'_> {
        ctx.now(&session.handshake(&req))
    }
}

/// SaslAuthenticate: one step of the mechanism, in connection order (the session moves on).
#[derive(Debug)]
pub struct Authenticate;

impl crate::api::Handler for Authenticate {
    const KEY: kafka_protocol::messages::ApiKey =
        kafka_protocol::messages::ApiKey::SaslAuthenticate;
    const VERSIONS: (i16, i16) = (0, 2);
    const BEFORE_AUTH: bool = true;
    type Request = SaslAuthenticateRequest;

    fn serve(
        req: Self::Request,
        ctx: crate::api::Ctx,
        session: &mut Session,
    ) -> crate::api::Admission<'_> {
        Box::pin(async move {
            let body = session.authenticate(&req, &ctx.cfg.authz).await;
            ctx.now(&body).await
        })
    }
}
