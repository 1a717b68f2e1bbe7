//! A small Kafka client over the same codec the front end uses, for `lakelog group` and
//! `lakelog bench catchup`: one request at a time per connection, every response length bounded
//! before it is read, every call bounded in time. Over TLS and SASL (SCRAM, or PLAIN over TLS)
//! when the command line says so ([`configure`]).

use anyhow::{Context, bail};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response this client reads.
const MAX_RESPONSE: usize = 64 << 20;

/// How the CLI's Kafka connections protect themselves (Kafka's `security.protocol` and SASL
/// settings).
#[derive(Clone, Debug, Default)]
pub struct KafkaSecurity {
    /// TLS, trusting this CA (`--ca`).
    pub tls: Option<Option<std::path::PathBuf>>,
    /// SASL: mechanism, user, password.
    pub sasl: Option<(String, String, String)>,
}

static SECURITY: std::sync::OnceLock<KafkaSecurity> = std::sync::OnceLock::new();

/// Sets how every connection of this process is made (once, from the command line).
pub fn configure(s: KafkaSecurity) {
    let _ = SECURITY.set(s);
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// One connection to a broker.
pub struct Conn {
    stream: Box<dyn Io>,
    addr: String,
    next: i32,
}

impl Conn {
    pub async fn connect(addr: &str) -> anyhow::Result<Conn> {
        let tcp =
            tokio::time::timeout(std::time::Duration::from_secs(10), TcpStream::connect(addr))
                .await
                .map_err(|_| {
                    anyhow::anyhow!("UNAVAILABLE: no answer from the Kafka port at {addr}")
                })?
                .with_context(|| {
                    format!("UNAVAILABLE: cannot reach the Kafka port at {addr} (--kafka)")
                })?;
        let security = SECURITY.get().cloned().unwrap_or_default();
        let stream: Box<dyn Io> = match &security.tls {
            None => Box::new(tcp),
            Some(ca) => {
                let cfg = config::TlsConfig { ca: ca.clone(), ..Default::default() };
                let tls = security::tls::client_config(&cfg)?;
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .with_context(|| format!("INVALID_ARGUMENT: `{host}` is not a TLS name"))?;
                let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
                let s = connector
                    .connect(name, tcp)
                    .await
                    .with_context(|| format!("UNAVAILABLE: TLS to the Kafka port at {addr}"))?;
                Box::new(s)
            }
        };
        let mut c = Conn { stream, addr: addr.to_owned(), next: 1 };
        if let Some((mechanism, user, password)) = &security.sasl {
            c.authenticate(mechanism, user, password).await?;
        }
        Ok(c)
    }

    /// SaslHandshake, then SaslAuthenticate: PLAIN in one step, SCRAM in two.
    async fn authenticate(
        &mut self,
        mechanism: &str,
        user: &str,
        password: &str,
    ) -> anyhow::Result<()> {
        use kafka_protocol::messages::{
            SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
            SaslHandshakeResponse,
        };
        let failed = |code: i16, message: Option<StrBytes>| {
            anyhow::anyhow!(
                "UNAUTHENTICATED: {}: {}",
                error_name(code),
                message.map(|m| m.to_string()).unwrap_or_default()
            )
        };
        let hs = SaslHandshakeRequest::default().with_mechanism(s(mechanism));
        let r: SaslHandshakeResponse = self.call(ApiKey::SaslHandshake, 1, &hs).await?;
        if r.error_code != 0 {
            return Err(failed(r.error_code, None));
        }
        let auth = |b: Vec<u8>| SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(b));
        match security::scram::Mechanism::parse(mechanism) {
            None => {
                let msg = format!("\0{user}\0{password}").into_bytes();
                let r: SaslAuthenticateResponse =
                    self.call(ApiKey::SaslAuthenticate, 2, &auth(msg)).await?;
                if r.error_code != 0 {
                    return Err(failed(r.error_code, r.error_message));
                }
            }
            Some(m) => {
                let (mut client, first) = security::scram::ScramClient::new(m, user, password)
                    .map_err(anyhow::Error::msg)?;
                let r: SaslAuthenticateResponse =
                    self.call(ApiKey::SaslAuthenticate, 2, &auth(first)).await?;
                if r.error_code != 0 {
                    return Err(failed(r.error_code, r.error_message));
                }
                let last = client.last(&r.auth_bytes).map_err(anyhow::Error::msg)?;
                let r: SaslAuthenticateResponse =
                    self.call(ApiKey::SaslAuthenticate, 2, &auth(last)).await?;
                if r.error_code != 0 {
                    return Err(failed(r.error_code, r.error_message));
                }
                if !client.verify(&r.auth_bytes) {
                    bail!("UNAUTHENTICATED: {} did not prove it knows the credential", self.addr);
                }
            }
        }
        Ok(())
    }

    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Q,
    ) -> anyhow::Result<R> {
        let id = self.next;
        self.next += 1;
        let mut b = BytesMut::new();
        b.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str("lakelog-cli")))
            .encode(&mut b, api.request_header_version(version))?;
        req.encode(&mut b, version)?;
        let size = i32::try_from(b.len() - 4)?;
        b[..4].copy_from_slice(&size.to_be_bytes());
        let io = async {
            self.stream.write_all(&b).await?;
            let n = self.stream.read_i32().await?;
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_RESPONSE)
                .ok_or_else(|| std::io::Error::other(format!("a response claiming {n} bytes")))?;
            let mut body = vec![0; n];
            self.stream.read_exact(&mut body).await?;
            Ok::<_, std::io::Error>(Bytes::from(body))
        };
        let mut body = tokio::time::timeout(std::time::Duration::from_secs(30), io)
            .await
            .map_err(|_| {
                anyhow::anyhow!("UNAVAILABLE: {api:?} to {} not answered in 30 s", self.addr)
            })?
            .with_context(|| format!("UNAVAILABLE: {api:?} to {}", self.addr))?;
        let header = ResponseHeader::decode(&mut body, api.response_header_version(version))?;
        if header.correlation_id != id {
            bail!(
                "INTERNAL: {} answered correlation id {}, not {id}",
                self.addr,
                header.correlation_id
            );
        }
        let r = R::decode(&mut body, version)?;
        Ok(r)
    }
}

/// A Kafka error code as a line's prefix.
pub fn error_name(code: i16) -> String {
    use kafka_protocol::error::ParseResponseErrorCode;
    match code.err() {
        Some(e) => format!("{e:?}"),
        None => format!("Kafka error {code}"),
    }
}

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// A connection to the coordinator of `group`.
pub async fn coordinator(bootstrap: &str, group: &str) -> anyhow::Result<Conn> {
    let mut c = Conn::connect(bootstrap).await?;
    let r: FindCoordinatorResponse = c
        .call(ApiKey::FindCoordinator, 3, &FindCoordinatorRequest::default().with_key(s(group)))
        .await?;
    if r.error_code != 0 {
        bail!("{}: no coordinator for group {group}", error_name(r.error_code));
    }
    Conn::connect(&format!("{}:{}", r.host, r.port)).await
}
