//! `standalone` with TLS on its gRPC and Kafka listeners: the CLI with client certificates,
//! kcat over SSL, and certificates rotated on disk while a producer runs.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use testkit::certs::{Issued, Pki};

use crate::Standalone;

/// A standalone whose writer port requires client certificates of `pki` (with `client_auth`)
/// and whose Kafka listener serves TLS; its endpoint is `https://localhost:<port>`.
fn secure_standalone(dir: &Path, pki: &Pki, client_auth: &str) -> Result<(Standalone, Issued)> {
    let server = pki.issue("server", "lakelog")?;
    let file = dir.join("standalone.yaml");
    let tls = format!(
        "{{cert: {}, key: {}, ca: {}, client_auth: {client_auth}}}",
        server.cert.display(),
        server.key.display(),
        pki.ca().display()
    );
    let kafka_tls = format!("{{cert: {}, key: {}}}", server.cert.display(), server.key.display());
    std::fs::write(
        &file,
        format!("writer:\n  tls: {tls}\n  kafka:\n    listen: 127.0.0.1:1\n    tls: {kafka_tls}\n"),
    )?;
    let port = testkit::free_port()?;
    let mut s =
        Standalone::start_with(&dir.join("data"), port, &["--config".as_ref(), file.as_os_str()])?;
    s.endpoint = format!("https://localhost:{port}");
    Ok((s, server))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[test]
fn over_mutual_tls_the_cli_needs_a_client_certificate_and_kcat_round_trips_over_ssl() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    let (s, _) = secure_standalone(dir.path(), &pki, "required")?;
    let admin = pki.issue("admin", "admin")?;
    let ca = pki.ca();
    let tls = ["--ca", path(&ca), "--cert", path(&admin.cert), "--key", path(&admin.key)];
    let with = |args: &[&'static str]| -> Vec<&str> { [args, &tls[..]].concat() };
    s.ok(&with(&["stream", "create", "secure", "--partitions", "2"]), "")?;
    let lines: String = (0..20).map(|i| format!("k{i}|v{i}\n")).collect();
    s.ok(&with(&["produce", "secure", "--key-separator", "|"]), &lines)?;
    let mut read = 0;
    for p in ["0", "1"] {
        let out = s.ok(&with(&["consume", "secure", "--partition", p, "--from-beginning"]), "")?;
        read += out.lines().count();
    }
    ensure!(read == 20, "read {read} of 20 records back over TLS");

    // Without a client certificate; trusting another CA; plain http:// to the TLS port.
    let (code, stderr) = s.err(&["stream", "list", "--ca", path(&ca)], "")?;
    ensure!(code != 0 && stderr.contains("UNAVAILABLE"), "{stderr}");
    let other = Pki::new(dir.path(), "other")?;
    let other_ca = other.ca();
    let stranger =
        ["--ca", path(&other_ca), "--cert", path(&admin.cert), "--key", path(&admin.key)];
    let (_, stderr) = s.err(&[&["stream", "list"][..], &stranger].concat(), "")?;
    ensure!(stderr.contains("UNAVAILABLE"), "{stderr}");
    let port = s.endpoint.rsplit(':').next().context("port")?;
    let plain = std::process::Command::new(crate::BIN)
        .args(["--endpoint", &format!("http://127.0.0.1:{port}"), "stream", "list"])
        .output()?;
    ensure!(!plain.status.success(), "plaintext was answered on the TLS port");
    // TLS options with a plain endpoint: refused before any connection.
    let mixed = std::process::Command::new(crate::BIN)
        .args(["--endpoint", "http://127.0.0.1:1", "stream", "list", "--ca", path(&ca)])
        .output()?;
    let stderr = String::from_utf8_lossy(&mixed.stderr);
    ensure!(stderr.contains("INVALID_ARGUMENT") && stderr.contains("https://"), "{stderr}");

    // kcat (librdkafka 2.0.2) over SSL, checking the broker's certificate against the CA.
    let b = s.kafka.as_str();
    let ssl = ["-X", "security.protocol=SSL", "-X", &format!("ssl.ca.location={}", ca.display())];
    let kcat = |args: &[&str], stdin: &str| testkit::kcat(&[&ssl[..], args].concat(), stdin);
    let produced: String = (0..50).map(|i| format!("key{}:value-{i}\n", i % 5)).collect();
    kcat(&["-b", b, "-P", "-t", "over-ssl", "-K:"], &produced)?;
    let consumed = kcat(
        &["-b", b, "-C", "-t", "over-ssl", "-o", "beginning", "-e", "-q", "-f", "%k:%s\n"],
        "",
    )?;
    ensure!(consumed == produced, "kcat read back over SSL:\n{consumed}");
    // A plaintext Kafka client on the TLS listener gets nothing.
    let plain = testkit::kcat(&["-b", b, "-L", "-m", "3"], "");
    ensure!(plain.is_err(), "plaintext metadata was answered: {plain:?}");
    Ok(())
}

/// The leaf certificate a new TLS connection to `addr` is served.
async fn served_leaf(addr: &str, ca: &Path) -> Result<Vec<u8>> {
    let cfg = config::TlsConfig { ca: Some(ca.to_owned()), ..Default::default() };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(security::tls::client_config(&cfg)?));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let s = connector.connect(name, tcp).await?;
    let leaf = s.get_ref().1.peer_certificates().and_then(|c| c.first().cloned());
    Ok(leaf.context("no certificate served")?.to_vec())
}

#[test]
fn certificates_rotated_on_disk_under_load_fail_no_request_and_serve_new_connections() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "cluster")?;
    let (s, _) = secure_standalone(dir.path(), &pki, "optional")?;
    let ca = pki.ca();
    let grpc = s.endpoint.trim_start_matches("https://").to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let sec = client::Security { ca: Some(ca.clone()), ..Default::default() };
        let cfg = client::ClientConfig::new(&s.endpoint).with_security(sec.clone());
        client::CatalogClient::connect_with(&s.endpoint, &sec)
            .await?
            .create("rotating", 2, None, None)
            .await?;
        let producer = client::Producer::new(cfg.clone(), "rotating", Default::default()).await?;
        let (grpc_before, kafka_before) =
            (served_leaf(&grpc, &ca).await?, served_leaf(&s.kafka, &ca).await?);
        // Sends until told to stop, each acknowledged before the next: any failure counts.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let load = tokio::spawn(async move {
            let (mut acked, mut failed) = (0u64, Vec::new());
            while !*stopped.borrow() {
                let r = client::batch::Record::value(format!("r{acked}"));
                match producer.send(r).await {
                    Ok(d) => match d.wait().await {
                        Ok(_) => acked += 1,
                        Err(e) => failed.push(e.to_string()),
                    },
                    Err(e) => failed.push(e.to_string()),
                }
            }
            producer.close().await;
            (acked, failed)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        pki.issue("server", "lakelog-renewed")?;
        let start = Instant::now();
        let (grpc_after, kafka_after) = loop {
            let (g, k) = (served_leaf(&grpc, &ca).await?, served_leaf(&s.kafka, &ca).await?);
            if g != grpc_before && k != kafka_before {
                break (g, k);
            }
            ensure!(
                start.elapsed() < Duration::from_secs(15),
                "the renewed certificate was never served"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        ensure!(grpc_after == kafka_after, "both listeners serve the same renewed certificate");
        // New clients connect with the renewed certificate while the load goes on.
        let listed = client::CatalogClient::connect_with(&s.endpoint, &sec).await?.list().await?;
        ensure!(listed.iter().any(|st| st.name == "rotating"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = stop.send(true);
        let (acked, failed) = load.await?;
        ensure!(
            failed.is_empty(),
            "{} requests failed across the rotation: {:?}",
            failed.len(),
            &failed[..failed.len().min(3)]
        );
        ensure!(acked > 0, "nothing was produced");
        // Every acknowledged record reads back, through a connection made after the rotation.
        let mut read = 0;
        for p in 0..2 {
            let mut c =
                client::Consumer::new(cfg.clone(), "rotating", p, client::StartAt::Beginning)
                    .await?;
            loop {
                let got = c.poll(1000, Duration::from_millis(500)).await?;
                if got.is_empty() {
                    break;
                }
                read += got.len() as u64;
            }
        }
        ensure!(read == acked, "read {read} of {acked} acknowledged records");
        eprintln!("rotation under load: {acked} records acknowledged, 0 failed");
        Ok(())
    })
}
