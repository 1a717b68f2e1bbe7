//! TLS from PEM files. A listener's [`ServerTls`] reads its certificate, key and CA bundle when
//! built and checks the files again at most once a second as connections arrive: when one
//! changed (a Kubernetes Secret updated, cert-manager renewed), the next connections use the
//! new files, and connections made before keep theirs. A new set that does not load (a key
//! written before its certificate) is ignored with a warning, and the old one served until
//! the set is whole.

use parking_lot::Mutex;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use config::{ClientAuth, TlsConfig};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

/// How often the files are looked at again, at most.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A TLS handshake not done by then is dropped (a client that connects and sends nothing).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes under way at once on one listener; connections beyond wait to be accepted.
const MAX_HANDSHAKES: usize = 256;

/// A certificate, key or CA file that could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TlsError {
    pub path: String,
    pub message: String,
}

impl TlsError {
    fn new(path: &Path, message: impl std::fmt::Display) -> Self {
        TlsError { path: path.display().to_string(), message: message.to_string() }
    }
}

/// The one crypto provider every TLS config here uses (the one object storage's HTTPS builds).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The certificates of a PEM file, at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| TlsError::new(path, e))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::new(path, "no CERTIFICATE in the file"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| TlsError::new(path, e))?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| TlsError::new(path, format!("no private key: {e}")))
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path)? {
        roots.add(c).map_err(|e| TlsError::new(path, format!("not a CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// A file's identity as last read: a replaced or rewritten file has another.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp(Option<(SystemTime, u64, u64)>);

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    // `metadata` follows symbolic links: a Kubernetes Secret swaps a link to a new folder.
    Stamp(
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len(), m.ino())),
    )
}

/// What a listener serves now, and what its files looked like when it was read.
#[derive(Debug)]
struct Loaded {
    stamps: Vec<Stamp>,
    checked: Instant,
    config: Arc<rustls::ServerConfig>,
}

/// Where a listener's TLS comes from: its files, and what it offers.
#[derive(Debug)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
    client_auth: ClientAuth,
    alpn: Vec<Vec<u8>>,
}

/// A listener's TLS, reloaded from its files (module doc).
#[derive(Debug)]
pub struct ServerTls {
    files: Files,
    loaded: Mutex<Loaded>,
    reloads: AtomicU64,
    handshakes: Arc<tokio::sync::Semaphore>,
}

impl Files {
    fn paths(&self) -> impl Iterator<Item = &Path> {
        [Some(&self.cert), Some(&self.key), self.ca.as_ref()].into_iter().flatten().map(|p| &**p)
    }

    fn stamps(&self) -> Vec<Stamp> {
        self.paths().map(stamp).collect()
    }

    fn load(&self) -> Result<rustls::ServerConfig, TlsError> {
        let certs = read_certs(&self.cert)?;
        let key = read_key(&self.key)?;
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new(&self.cert, e))?;
        let builder = match &self.ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider);
                let verifier = match self.client_auth {
                    ClientAuth::Required => verifier,
                    ClientAuth::Optional => verifier.allow_unauthenticated(),
                };
                builder
                    .with_client_cert_verifier(verifier.build().map_err(|e| TlsError::new(ca, e))?)
            }
        };
        // Checks that the key is the certificate's: a half-rotated pair is refused here.
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::new(&self.key, format!("with {}: {e}", self.cert.display())))?;
        config.alpn_protocols = self.alpn.clone();
        Ok(config)
    }
}

impl ServerTls {
    /// A listener's TLS from `cfg` (its `cert` and `key` required), offering `alpn` (`h2` for
    /// gRPC; nothing for Kafka). Fails when a file is missing or does not load.
    pub fn new(cfg: &TlsConfig, alpn: &[&[u8]]) -> Result<Arc<ServerTls>, TlsError> {
        let missing = |what: &str| TlsError {
            path: String::new(),
            message: format!("a listener's TLS needs `{what}`"),
        };
        let files = Files {
            cert: cfg.cert.clone().ok_or_else(|| missing("cert"))?,
            key: cfg.key.clone().ok_or_else(|| missing("key"))?,
            ca: cfg.ca.clone(),
            client_auth: cfg.client_auth,
            alpn: alpn.iter().map(|p| p.to_vec()).collect(),
        };
        let stamps = files.stamps();
        let config = Arc::new(files.load()?);
        Ok(Arc::new(ServerTls {
            files,
            loaded: Mutex::new(Loaded { stamps, checked: Instant::now(), config }),
            reloads: AtomicU64::new(0),
            handshakes: Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES)),
        }))
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certs(&self) -> bool {
        self.files.ca.is_some() && self.files.client_auth == ClientAuth::Required
    }

    /// Times the files were read again after a change and served.
    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// The config new connections get: the files read again first if they changed since
    /// (looked at once a second at most).
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        let mut loaded = self.loaded.lock();
        if loaded.checked.elapsed() < CHECK_EVERY {
            return loaded.config.clone();
        }
        loaded.checked = Instant::now();
        let stamps = self.files.stamps();
        if stamps == loaded.stamps {
            return loaded.config.clone();
        }
        match self.files.load() {
            Ok(config) => {
                loaded.config = Arc::new(config);
                loaded.stamps = stamps;
                self.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate files reloaded");
            }
            // Tried again at the next check; the files may be mid-update.
            Err(e) => {
                tracing::warn!(error = %e, "TLS files changed but do not load; serving the previous ones")
            }
        }
        loaded.config.clone()
    }

    /// Runs the server side of the handshake on `io`, in at most 10 s.
    pub async fn accept<IO>(&self, io: IO) -> io::Result<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
            Ok(done) => done,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")),
        }
    }

    /// The TLS connections of `listener`: each handshake runs in its own task (a slow client
    /// holds up no other), at most 256 at once; a failed one is logged and dropped. Ends when
    /// the stream is dropped.
    pub fn incoming(
        self: Arc<Self>,
        listener: TcpListener,
    ) -> impl futures::Stream<Item = io::Result<TlsStream<TcpStream>>> + Send + 'static {
        let (tx, rx) = tokio::sync::mpsc::channel::<TlsStream<TcpStream>>(64);
        tokio::spawn(async move {
            loop {
                let permit = tokio::select! {
                    p = self.handshakes.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return,
                    },
                    _ = tx.closed() => return,
                };
                let (socket, peer) = tokio::select! {
                    a = listener.accept() => match a {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    _ = tx.closed() => return,
                };
                let _ = socket.set_nodelay(true);
                let (tls, tx) = (self.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tls.accept(socket).await {
                        Ok(stream) => {
                            let _ = tx.send(stream).await;
                        }
                        Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    }
                });
            }
        });
        futures::stream::unfold(rx, |mut rx| async move {
            let s = rx.recv().await?;
            Some((Ok(s), rx))
        })
    }
}

/// A client's TLS from `cfg`: `ca` trusted (the only roots), and `cert` with `key` presented
/// when set.
pub fn client_config(cfg: &TlsConfig) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = &cfg.ca {
        roots = self::roots(ca)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError { path: String::new(), message: e.to_string() })?
        .with_root_certificates(roots);
    match (&cfg.cert, &cfg.key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|e| TlsError::new(key, format!("with {}: {e}", cert.display()))),
        _ => Ok(builder.with_no_client_auth()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use testkit::certs::{Issued, Pki};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn listener_cfg(server: &Issued, ca: Option<&Path>, auth: ClientAuth) -> TlsConfig {
        TlsConfig {
            cert: Some(server.cert.clone()),
            key: Some(server.key.clone()),
            ca: ca.map(Path::to_owned),
            client_auth: auth,
        }
    }

    /// Serves an echo over TLS on a loopback port: what it serves each connection with.
    async fn echo(tls: Arc<ServerTls>) -> anyhow::Result<std::net::SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut incoming = Box::pin(tls.incoming(listener));
        tokio::spawn(async move {
            while let Some(Ok(mut s)) = incoming.next().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(addr)
    }

    /// Connects as a client of `cfg` and echoes one message: the server's leaf certificate.
    async fn call(
        addr: std::net::SocketAddr,
        cfg: &TlsConfig,
    ) -> anyhow::Result<(CertificateDer<'static>, tokio_rustls::client::TlsStream<TcpStream>)> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(cfg)?));
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost")?;
        let mut s = connector.connect(name, tcp).await?;
        s.write_all(b"ping").await?;
        let mut got = [0u8; 4];
        s.read_exact(&mut got).await?;
        anyhow::ensure!(&got == b"ping", "echo answered {got:?}");
        let leaf = s.get_ref().1.peer_certificates().and_then(|c| c.first().cloned());
        Ok((leaf.ok_or_else(|| anyhow::anyhow!("no server certificate"))?, s))
    }

    #[tokio::test]
    async fn mutual_tls_admits_only_clients_the_ca_signed_and_in_date() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let pki = Pki::new(dir.path(), "cluster")?;
        let other = Pki::new(dir.path(), "other")?;
        let server = pki.issue("server", "writer")?;
        let tls =
            ServerTls::new(&listener_cfg(&server, Some(&pki.ca()), ClientAuth::Required), &[])?;
        assert!(tls.requires_client_certs());
        let addr = echo(tls).await?;
        let client = |i: &Issued| TlsConfig {
            cert: Some(i.cert.clone()),
            key: Some(i.key.clone()),
            ca: Some(pki.ca()),
            ..Default::default()
        };
        call(addr, &client(&pki.issue("alice", "alice")?)).await?;
        // No certificate; one another CA signed; one expired; a server the client does not
        // trust (its CA unknown to it).
        let refused = [
            TlsConfig { ca: Some(pki.ca()), ..Default::default() },
            client(&other.issue("mallory", "alice")?),
            client(&pki.issue_valid("old", "alice", (2020, 2021))?),
            TlsConfig { ca: Some(other.ca()), ..client(&pki.issue("bob", "bob")?) },
        ];
        for (n, cfg) in refused.iter().enumerate() {
            assert!(call(addr, cfg).await.is_err(), "vector {n} was admitted");
        }
        // Plaintext bytes where a handshake belongs: the connection is closed unanswered.
        let mut plain = TcpStream::connect(addr).await?;
        plain.write_all(&[0, 0, 0, 10, 0, 18, 0, 3, 0, 0, 0, 1, 0, 0]).await?;
        let mut buf = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut buf)).await?;
        assert!(read.is_err() || !buf.windows(4).any(|w| w == b"ping"), "plaintext answered");

        // Optional client certificates: a client without one is admitted too.
        let tls =
            ServerTls::new(&listener_cfg(&server, Some(&pki.ca()), ClientAuth::Optional), &[])?;
        assert!(!tls.requires_client_certs());
        let addr = echo(tls).await?;
        call(addr, &TlsConfig { ca: Some(pki.ca()), ..Default::default() }).await?;
        assert!(call(addr, &client(&other.issue("eve", "eve")?)).await.is_err());
        Ok(())
    }

    #[tokio::test]
    async fn rotated_files_serve_new_connections_and_a_half_written_pair_is_ignored()
    -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let pki = Pki::new(dir.path(), "cluster")?;
        let server = pki.issue("server", "first")?;
        let tls = ServerTls::new(&listener_cfg(&server, None, ClientAuth::Required), &[])?;
        let addr = echo(tls.clone()).await?;
        let client = TlsConfig { ca: Some(pki.ca()), ..Default::default() };
        let (first, mut open) = call(addr, &client).await?;

        pki.issue("server", "second")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let second = loop {
            let (leaf, _) = call(addr, &client).await?;
            if leaf != first {
                break leaf;
            }
            anyhow::ensure!(Instant::now() < deadline, "the new certificate was never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(tls.reloads(), 1);
        // The connection made before the rotation goes on with its certificate.
        open.write_all(b"ping").await?;
        let mut got = [0u8; 4];
        open.read_exact(&mut got).await?;
        assert_eq!(&got, b"ping");

        // A key that is not the certificate's (the pair caught mid-update): refused, and the
        // previous pair served until the files agree again.
        let stray = pki.issue("stray", "stray")?;
        std::fs::copy(&stray.key, &server.key)?;
        tokio::time::sleep(CHECK_EVERY + Duration::from_millis(200)).await;
        let (leaf, _) = call(addr, &client).await?;
        assert_eq!(leaf, second, "a mismatched pair was served");
        assert_eq!(tls.reloads(), 1);
        let third = pki.issue("server", "third")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while call(addr, &client).await?.0 == second {
            anyhow::ensure!(Instant::now() < deadline, "the whole pair was never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(tls.reloads(), 2);
        assert!(third.cert.exists());

        // Files that do not load at start are an error naming the file.
        let missing = TlsConfig {
            cert: Some(dir.path().join("nope.pem")),
            ..listener_cfg(&server, None, ClientAuth::Required)
        };
        let err = ServerTls::new(&missing, &[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("nope.pem"), "{err}");
        Ok(())
    }
}
