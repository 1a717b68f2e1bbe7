//! `/metrics` over HTTP/1.1, in Prometheus' text format (0.0.4), which `promtool check metrics`
//! and every scraper read. A deliberately small server: one GET per connection, request heads
//! bounded, nothing else served.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::Metrics;

/// Largest request head read (bytes); longer requests are answered 431 and closed.
const MAX_HEAD: usize = 8 << 10;

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
                None => ("404 Not Found", "only /metrics is served\n".to_owned()),
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
