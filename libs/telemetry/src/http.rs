//! `/metrics` over HTTP/1.1, in Prometheus' text format (0.0.4), which `promtool check metrics`
//! and every scraper read, and `/healthz`: 200 while the role's stores answer (what its gRPC
//! health says), 503 otherwise, for probes that cannot speak gRPC over TLS (Kubernetes'). A
//! deliberately small server: one GET per connection, request heads bounded, nothing else
//! served.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::Metrics;

/// Largest request head read (bytes); longer requests are answered 431 and closed.
const MAX_HEAD: usize = 8 << 10;

/// Whether this process's role serves (its stores answer): what `/healthz` says.
static SERVING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets what `/healthz` answers (the role runner follows its stores).
pub fn set_serving(serving: bool) {
    SERVING.store(serving, std::sync::atomic::Ordering::Relaxed);
}

/// Serves `metrics` on `GET /metrics` until `shutdown` resolves.
pub async fn serve_metrics(
    metrics: Metrics,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => return Ok(()),
        };
        // One failed accept (a connection reset before it was taken, no file descriptors
        // left) ends only that connection: the server goes on after a short pause.
        let mut conn = match accepted {
            Ok((conn, _)) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed; going on");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(1024);
            let mut buf = [0u8; 1024];
            let status = loop {
                let read =
                    tokio::time::timeout(std::time::Duration::from_secs(5), conn.read(&mut buf));
                let n = match read.await {
                    Ok(Ok(0)) | Err(_) => return,
                    Ok(Ok(n)) => n,
                    Ok(Err(_)) => return,
                };
                head.extend_from_slice(&buf[..n]);
                if head.windows(4).any(|w| w == b"\r\n\r\n") {
                    break None;
                }
                if head.len() > MAX_HEAD {
                    break Some("431 Request Header Fields Too Large");
                }
            };
            let first = head.split(|b| *b == b'\r').next().unwrap_or_default();
            let (status, body) = match status {
                Some(s) => (s, String::new()),
                None if first.starts_with(b"GET /metrics ") || first == b"GET /metrics" => {
                    ("200 OK", metrics.encode_prometheus())
                }
                None if first.starts_with(b"GET /healthz ") || first == b"GET /healthz" => {
                    match SERVING.load(std::sync::atomic::Ordering::Relaxed) {
                        true => ("200 OK", "SERVING\n".to_owned()),
                        false => ("503 Service Unavailable", "NOT_SERVING\n".to_owned()),
                    }
                }
                None => ("404 Not Found", "only /metrics and /healthz are served\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(response.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

/// Rewrites prometheus-client's OpenMetrics text as Prometheus text 0.0.4: a counter family's
/// HELP and TYPE lines name its `_total` samples, and there is no `# EOF`.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = help.replace(line) {
                out.push_str(h);
                out.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            if let Some(h) = help.take() {
                let text =
                    h.strip_prefix("# HELP ").and_then(|r| r.strip_prefix(name)).unwrap_or("");
                out.push_str(&format!("# HELP {name}_total{text}\n"));
            }
            out.push_str(&format!("# TYPE {name}_total counter\n"));
            continue;
        }
        if let Some(h) = help.take() {
            out.push_str(h);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(h) = help {
        out.push_str(h);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
        let mut c = tokio::net::TcpStream::connect(addr).await?;
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await?;
        let mut out = String::new();
        c.read_to_string(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn healthz_says_what_the_role_last_set() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(serve_metrics(Metrics::global().clone(), listener, std::future::pending()));
        set_serving(false);
        let r = get(addr, "/healthz").await?;
        assert!(r.starts_with("HTTP/1.1 503") && r.ends_with("NOT_SERVING\n"), "{r}");
        set_serving(true);
        let r = get(addr, "/healthz").await?;
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\nSERVING\n"), "{r}");
        assert!(get(addr, "/other").await?.starts_with("HTTP/1.1 404"));
        Ok(())
    }
}
