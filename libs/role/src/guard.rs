//! The gRPC front end's one place of authentication and authorization: a layer in front of
//! every service of a role's port. It names the caller (a bearer token, else the common name
//! of its verified client certificate, else anonymous), puts the [`Principal`] in the request's
//! extensions, and decides by [`rule`]: each method is allowed to whom the ACLs allow its
//! operation on its resource, the resource read from the request's field 1 (a stream name, a
//! log id: the log's stream) as the request streams in, before the service sees a byte of it.
//! A method [`rule`] does not know is for super users only, so a new RPC fails closed.
//!
//! Refusals are gRPC UNAUTHENTICATED or PERMISSION_DENIED with `lakelog-code`; for a streamed
//! request, the message that is not allowed ends the stream with the status (the messages
//! before it were allowed and served). Plain HTTP routes (the Iceberg REST catalog) answer
//! 401 or 403.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use security::Principal;
use security::acl::{CLUSTER, Operation, ResourceType};
use security::fields::{FieldError, FieldScanner};
use tonic::body::Body;

/// What a method needs of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Nothing: health checks.
    Open,
    /// Any authenticated principal (the service filters what it answers).
    Authenticated,
    /// `op` on the cluster.
    Cluster(Operation),
    /// `op` on the stream named by field 1.
    Stream(Operation),
    /// `op` on the stream of the log whose id is field 1 (a log of no stream: the cluster).
    Log(Operation),
    /// `op` on the stream of every log named by field 1's messages (their field 5).
    Logs(Operation),
}

/// The rule of a gRPC method path (`/package.Service/Method`) or HTTP path; `None` for one not
/// known (super users only).
pub fn rule(path: &str) -> Option<Rule> {
    use Operation::*;
    if path.starts_with("/grpc.health.v1.Health/") {
        return Some(Rule::Open);
    }
    if path.starts_with("/iceberg/") || path == "/iceberg" {
        return Some(Rule::Cluster(Describe));
    }
    if path.starts_with("/lakelog.maintenance.v1.") || path.starts_with("/lakelog.auth.v1.") {
        return Some(match path {
            "/lakelog.auth.v1.AuthService/WhoAmI" => Rule::Authenticated,
            // ACLs as Kafka guards them: DESCRIBE on the cluster to list, ALTER to change.
            "/lakelog.auth.v1.AuthService/ListAcls" => Rule::Cluster(Describe),
            "/lakelog.auth.v1.AuthService/AddAcls" | "/lakelog.auth.v1.AuthService/RemoveAcls" => {
                Rule::Cluster(Alter)
            }
            _ => Rule::Cluster(Admin),
        });
    }
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    Some(match (service, method) {
        ("lakelog.catalog.v1.CatalogService", m) => match m {
            "CreateStream" => Rule::Stream(Create),
            "GetStream" | "Route" | "GetLakeTable" => Rule::Stream(Describe),
            "AddPartitions" => Rule::Stream(Alter),
            "DeleteStream" => Rule::Stream(Delete),
            "ListStreams" | "ListMembers" => Rule::Authenticated,
            _ => return None,
        },
        ("lakelog.log.v1.LogService", m) => match m {
            "CreateLog" => Rule::Cluster(Admin),
            "Append" | "AppendStream" => Rule::Log(Produce),
            "ReadEntries" | "GetFirstOffset" | "GetLastOffset" | "ReadIndexRange"
            | "GetLogInfo" | "CreateCursor" | "ListCursors" | "DeleteCursor" | "ReadCursor"
            | "AckCursor" | "SeekCursor" | "GetCursorStats" => Rule::Log(Consume),
            "ReadEntriesByIndex" => Rule::Logs(Consume),
            "SoftTrim" | "HardTrim" | "DeleteLog" => Rule::Log(Delete),
            "Fence" | "Activate" => Rule::Log(Admin),
            _ => return None,
        },
        _ => return None,
    })
}

/// Field 1's bytes held to authorize one message: a stream name, a varint; or, for
/// ReadEntriesByIndex, its list of indexes.
const FIELD_CAP: usize = 1024;
const INDEXES_CAP: usize = 16 << 20;

/// The decisions of one role's port.
#[derive(Clone)]
pub struct Guard {
    authz: Arc<security::Authorizer>,
    logs: Option<catalog::LogStreams>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("enabled", &self.authz.enabled()).finish()
    }
}

/// A request the guard cannot read (malformed, compressed, over its caps).
fn invalid(message: impl Into<String>) -> tonic::Status {
    codes::grpc::status(codes::Code::InvalidArgument, message.into())
}

fn unauthenticated(message: &str) -> tonic::Status {
    codes::grpc::status(codes::Code::Unauthenticated, message.to_owned())
}

impl Guard {
    /// `logs` names each log's stream (none: every log is the cluster's).
    pub fn new(authz: Arc<security::Authorizer>, logs: Option<catalog::LogStreams>) -> Guard {
        Guard { authz, logs }
    }

    pub fn authorizer(&self) -> &Arc<security::Authorizer> {
        &self.authz
    }

    /// Who sent `req`: its bearer token's principal (an unknown or revoked token is refused),
    /// else its client certificate's, else anonymous. With authentication off, tokens are
    /// not looked at.
    pub fn authenticate<B>(&self, req: &http::Request<B>) -> Result<Principal, tonic::Status> {
        if self.authz.enabled()
            && let Some(v) = req.headers().get(http::header::AUTHORIZATION)
        {
            let token = v.to_str().ok().and_then(|v| v.strip_prefix("Bearer "));
            let token = token.ok_or_else(|| unauthenticated("malformed authorization header"))?;
            return self
                .authz
                .principal_of_token(token.trim())
                .ok_or_else(|| unauthenticated("unknown or revoked token"));
        }
        let certs = req
            .extensions()
            .get::<tonic::transport::server::TlsConnectInfo<tonic::transport::server::TcpConnectInfo>>()
            .and_then(|i| i.peer_certs());
        if let Some(p) = certs.and_then(|c| c.first().and_then(|c| Principal::of_certificate(c))) {
            return Ok(p);
        }
        Ok(Principal::anonymous())
    }

    fn denied(
        &self,
        p: &Principal,
        op: Operation,
        kind: ResourceType,
        name: &str,
    ) -> tonic::Status {
        codes::grpc::status(
            codes::Code::PermissionDenied,
            format!("{p} may not {op} {kind} `{name}`"),
        )
    }

    /// `p` doing `op` on `kind` `name`, or the refusal.
    pub fn check(
        &self,
        p: &Principal,
        op: Operation,
        kind: ResourceType,
        name: &str,
    ) -> Result<(), tonic::Status> {
        match self.authz.allows(p, op, kind, name) {
            true => Ok(()),
            false => Err(self.denied(p, op, kind, name)),
        }
    }

    /// `op` on the stream of log `log`, or on the cluster for a log of no stream.
    fn check_log(&self, p: &Principal, op: Operation, log: u64) -> Result<(), tonic::Status> {
        let stream = self.logs.as_ref().and_then(|l| l.current().0.get(&log).cloned());
        match stream {
            Some(name) => self.check(p, op, ResourceType::Stream, &name),
            None => self.check(p, op, ResourceType::Cluster, CLUSTER),
        }
    }

    /// Decides one whole message of a request under `rule`, its field 1 read.
    fn decide(
        &self,
        p: &Principal,
        rule: Rule,
        field: &security::fields::Field,
    ) -> Result<(), tonic::Status> {
        match rule {
            Rule::Stream(op) => {
                self.check(p, op, ResourceType::Stream, &field.text().unwrap_or_default())
            }
            Rule::Log(op) => self.check_log(p, op, field.varint.unwrap_or(0)),
            Rule::Logs(op) => {
                for index in &field.bytes {
                    let log = security::fields::field_of(index, 5, FIELD_CAP)
                        .map_err(|e| invalid(e.to_string()))?;
                    self.check_log(p, op, log.varint.unwrap_or(0))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The layer of [`Guard`] (see the module doc).
#[derive(Clone, Debug)]
pub struct GuardLayer(pub Arc<Guard>);

impl<S> tower_layer::Layer<S> for GuardLayer {
    type Service = Guarded<S>;
    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded { inner, guard: self.0.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct Guarded<S> {
    inner: S,
    guard: Arc<Guard>,
}

type Answer<E> = Pin<Box<dyn Future<Output = Result<http::Response<Body>, E>> + Send>>;

fn is_grpc<B>(req: &http::Request<B>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// A refusal in the request's protocol: a gRPC status, or 401/403 for plain HTTP.
fn refuse(grpc: bool, s: tonic::Status) -> http::Response<Body> {
    if grpc {
        return s.into_http();
    }
    let code = match s.code() {
        tonic::Code::Unauthenticated => http::StatusCode::UNAUTHORIZED,
        _ => http::StatusCode::FORBIDDEN,
    };
    let mut r = http::Response::new(Body::new(http_body_util::Full::new(Bytes::from(format!(
        "{{\"error\":{{\"message\":{:?},\"code\":{}}}}}",
        s.message(),
        code.as_u16()
    )))));
    *r.status_mut() = code;
    r
}

impl<S> tower_service::Service<http::Request<Body>> for Guarded<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let grpc = is_grpc(&req);
        let guard = self.guard.clone();
        let rule = rule(req.uri().path());
        let peer = peer_of(&req);
        let principal = match guard.authenticate(&req) {
            Ok(p) => p,
            Err(s) => {
                security::audit::failed_authentication(&peer, "bearer token", None, s.message());
                return Box::pin(std::future::ready(Ok(refuse(grpc, s))));
            }
        };
        let enabled = guard.authz.enabled();
        let early = match rule {
            Some(Rule::Open) => Ok(()),
            _ if !enabled => Ok(()),
            _ if principal.is_anonymous() => Err(unauthenticated(
                "authentication required: a client certificate or a bearer token",
            )),
            None => match guard.authz.is_super_user(&principal) {
                true => Ok(()),
                false => Err(guard.denied(
                    &principal,
                    Operation::Admin,
                    ResourceType::Cluster,
                    req.uri().path(),
                )),
            },
            Some(Rule::Authenticated) => Ok(()),
            Some(Rule::Cluster(op)) => guard.check(&principal, op, ResourceType::Cluster, CLUSTER),
            Some(_) => Ok(()),
        };
        if let Err(s) = early {
            security::audit::denied(&principal, &peer, req.uri().path(), s.message());
            return Box::pin(std::future::ready(Ok(refuse(grpc, s))));
        }
        req.extensions_mut().insert(principal.clone());
        // Whatever the content type says: the service behind decodes the body as gRPC anyway.
        if let Some(rule @ (Rule::Stream(_) | Rule::Log(_) | Rule::Logs(_))) = rule
            && enabled
            && !guard.authz.is_super_user(&principal)
        {
            let (path, g) = (req.uri().path().to_owned(), guard.clone());
            req = req.map(|body| Body::new(Peek::new(body, g, principal, rule, peer, path)));
        }
        let mut inner = self.inner.clone();
        std::mem::swap(&mut inner, &mut self.inner);
        Box::pin(inner.call(req))
    }
}

/// The caller's address, or `-` when the transport does not say.
fn peer_of<B>(req: &http::Request<B>) -> String {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let tcp = req.extensions().get::<TcpConnectInfo>().and_then(|i| i.remote_addr());
    let tls = || {
        req.extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(|i| i.get_ref().remote_addr())
    };
    tcp.or_else(tls).map_or_else(|| "-".to_owned(), |a| a.ip().to_string())
}

/// A request body passed on message by message, each held until its field 1 is read and the
/// rule allows it (module doc).
struct Peek {
    inner: Body,
    guard: Arc<Guard>,
    principal: Principal,
    rule: Rule,
    /// Said with a refusal: the caller's address and the method.
    peer: String,
    path: String,
    header: [u8; 5],
    header_len: usize,
    /// Bytes of the current message's body still to come.
    remaining: usize,
    scanner: Option<FieldScanner>,
    /// Bytes of the message being decided.
    held: Vec<Bytes>,
    ready: VecDeque<Bytes>,
    /// The refusal to give once the allowed messages before it are passed on.
    refused: Option<tonic::Status>,
    failed: bool,
}

impl Peek {
    fn new(
        inner: Body,
        guard: Arc<Guard>,
        principal: Principal,
        rule: Rule,
        peer: String,
        path: String,
    ) -> Peek {
        Peek {
            inner,
            guard,
            principal,
            rule,
            peer,
            path,
            header: [0; 5],
            header_len: 0,
            remaining: 0,
            scanner: None,
            held: Vec::new(),
            ready: VecDeque::new(),
            refused: None,
            failed: false,
        }
    }

    fn cap(&self) -> usize {
        match self.rule {
            Rule::Logs(_) => INDEXES_CAP,
            _ => FIELD_CAP,
        }
    }

    /// The message whose body just ended: passed on if allowed.
    fn end_message(&mut self) -> Result<(), tonic::Status> {
        let scanner = self.scanner.take().unwrap_or_else(|| FieldScanner::new(1, 0));
        let field = scanner.finish().map_err(|e| match e {
            FieldError::TooLarge(n) => invalid(format!("request field 1 over {n} bytes")),
            FieldError::Malformed => invalid("malformed request message"),
        })?;
        if let Err(s) = self.guard.decide(&self.principal, self.rule, &field) {
            security::audit::denied(&self.principal, &self.peer, &self.path, s.message());
            return Err(s);
        }
        self.ready.extend(self.held.drain(..));
        self.header_len = 0;
        Ok(())
    }

    fn take(&mut self, mut data: Bytes) -> Result<(), tonic::Status> {
        while !data.is_empty() {
            if self.header_len < 5 {
                let n = (5 - self.header_len).min(data.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
                self.held.push(data.split_to(n));
                self.header_len += n;
                if self.header_len == 5 {
                    if self.header[0] != 0 {
                        return Err(invalid(
                            "compressed request messages are not accepted with authorization on",
                        ));
                    }
                    let mut len = &self.header[1..5];
                    self.remaining = len.get_u32() as usize;
                    self.scanner = Some(FieldScanner::new(1, self.cap()));
                    if self.remaining == 0 {
                        self.end_message()?;
                    }
                }
                continue;
            }
            let n = self.remaining.min(data.len());
            let piece = data.split_to(n);
            if let Some(s) = &mut self.scanner {
                s.feed(&piece).map_err(|e| invalid(e.to_string()))?;
            }
            self.held.push(piece);
            self.remaining -= n;
            if self.remaining == 0 {
                self.end_message()?;
            }
        }
        Ok(())
    }
}

impl http_body::Body for Peek {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(http_body::Frame::data(b))));
            }
            if let Some(s) = self.refused.take() {
                return Poll::Ready(Some(Err(s)));
            }
            if self.failed {
                return Poll::Ready(None);
            }
            match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if let Err(s) = self.take(data) {
                            self.failed = true;
                            self.held.clear();
                            self.refused = Some(s);
                        }
                    }
                    // Trailers: passed on once every message before them is.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    if !self.held.is_empty() {
                        self.failed = true;
                        return Poll::Ready(Some(Err(invalid("request ended inside a message"))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower_service::Service;

    /// A service that reads the whole request body: what it got, or the status it ended with.
    #[derive(Clone)]
    struct Drain;

    impl tower_service::Service<http::Request<Body>> for Drain {
        type Response = http::Response<Body>;
        type Error = std::convert::Infallible;
        type Future = Answer<std::convert::Infallible>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<Body>) -> Self::Future {
            Box::pin(async move {
                let text = match req.into_body().collect().await {
                    Ok(b) => format!("read {} bytes", b.to_bytes().len()),
                    Err(s) => format!("refused {:?}", s.code()),
                };
                Ok(http::Response::new(Body::new(http_body_util::Full::new(Bytes::from(text)))))
            })
        }
    }

    /// A gRPC frame of a message whose field 1 is `log`.
    fn append_frame(log: u8) -> Bytes {
        Bytes::from(vec![0, 0, 0, 0, 4, 0x08, log, 0x10, 1])
    }

    async fn answer(
        svc: &mut Guarded<Drain>,
        content_type: &str,
        token: &str,
    ) -> anyhow::Result<String> {
        let req = http::Request::builder()
            .uri("/lakelog.log.v1.LogService/Append")
            .header(http::header::CONTENT_TYPE, content_type)
            .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::new(http_body_util::Full::new(append_frame(5))))?;
        let resp = svc.call(req).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let status = resp.headers().get("grpc-status").map(|v| v.to_str().unwrap_or("").to_owned());
        let body = resp.into_body().collect().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(format!("{status:?} {}", String::from_utf8_lossy(&body.to_bytes())))
    }

    #[tokio::test]
    async fn a_request_body_is_checked_whatever_its_content_type_says() -> anyhow::Result<()> {
        let meta: Arc<dyn metadata::MetadataStore> = Arc::new(metadata::MemoryStore::new());
        let store = security::store::AuthStore::new(meta, "g");
        let (_, alice) = store.create_token("alice", "", 0).await?;
        let (_, root) = store.create_token("root", "", 0).await?;
        let section = config::AuthSection {
            enabled: true,
            super_users: vec!["root".to_owned()],
            ..Default::default()
        };
        let authz = security::Authorizer::start(&section, &store, "test").await?;
        let mut svc =
            tower_layer::Layer::layer(&GuardLayer(Arc::new(Guard::new(authz, None))), Drain);
        // Log 5 is no stream's: the cluster's, which alice may not produce to.
        for content_type in ["application/grpc", "text/plain", ""] {
            let got = answer(&mut svc, content_type, &alice).await?;
            assert!(got.contains("refused PermissionDenied"), "{content_type:?}: {got}");
        }
        let got = answer(&mut svc, "application/grpc", &root).await?;
        assert!(got.contains("read 9 bytes"), "the super user: {got}");
        let got = answer(&mut svc, "application/grpc", "llt_00_forged").await?;
        assert!(got.starts_with("Some(\"16\")"), "a forged token: {got}");
        Ok(())
    }
}
