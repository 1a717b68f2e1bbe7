//! The writer's gRPC service against a real etcd and a real S3 server (SeaweedFS).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use client::LogClient;
use logstore::{LogStorage, LogStorageConfig, SystemClock};

async fn start_writer()
-> Result<(LogClient, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)> {
    let etcd = testkit::shared_etcd()?;
    let cluster = testkit::unique_prefix("writer");
    let meta = metadata::EtcdStore::connect(&testkit::etcd_config(etcd.endpoint())).await?;
    let s3 = testkit::shared_s3()?.s3().config(&cluster);
    let objects = objstore::build(&config::ObjectStoreConfig::S3(s3))?;
    let mut cfg = LogStorageConfig::new(&cluster, "w1");
    cfg.flush_interval = Duration::from_millis(5);
    let storage = LogStorage::open(Arc::new(meta), objects, cfg, Arc::new(SystemClock)).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let _ = writer::serve(storage, listener, async {
            let _ = stopped.await;
        })
        .await;
    });
    let client = LogClient::connect(&format!("http://{addr}")).await?;
    Ok((client, stop, server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grpc_append_read_and_errors_over_etcd_and_s3() -> Result<()> {
    let (c, stop, server) = start_writer().await?;
    let log = c.create_log().await?;
    let mut offsets = Vec::new();
    for i in 0..5u32 {
        offsets.push(c.append(log, i + 1, Bytes::from(format!("e{i}")), None).await?.offset);
    }
    ensure!(offsets == [0, 1, 3, 6, 10], "{offsets:?}");
    let read = c.read_entries(log, 0, 0, 0).await?;
    ensure!(read.entries.len() == 5 && read.next_offset == 15);
    ensure!(read.entries[4].payload == Bytes::from_static(b"e4"));
    ensure!(c.last_offset(log).await?.map(|h| h.offset) == Some(10));

    let err = c
        .append(log + 1000, 1, Bytes::from_static(b"x"), None)
        .await
        .err()
        .context("unknown log")?;
    ensure!(err.code == "NOT_FOUND", "{err}");
    let err =
        c.append(log, 1, Bytes::from_static(b"x"), Some(3)).await.err().context("stale offset")?;
    ensure!(err.code == "OFFSET_MISMATCH", "{err}");
    let err =
        c.append(log, 0, Bytes::from_static(b"x"), None).await.err().context("zero records")?;
    ensure!(err.code == "INVALID_ARGUMENT", "{err}");
    let err = c.read_entries(log, 16, 1, 0).await.err().context("past the end")?;
    ensure!(err.code == "OFFSET_OUT_OF_RANGE", "{err}");
    let epoch = c.fence(log).await?;
    let err = c.append(log, 1, Bytes::from_static(b"x"), None).await.err().context("fenced")?;
    ensure!(err.code == "FENCED", "{err}");
    c.activate(log, epoch).await?;
    let _ = stop.send(());
    server.await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_poll_returns_when_a_commit_lands() -> Result<()> {
    let (c, stop, server) = start_writer().await?;
    let log = c.create_log().await?;
    c.append(log, 1, Bytes::from_static(b"first"), None).await?;
    // Nothing new: the poll waits its full time and answers empty.
    let t = Instant::now();
    let empty = c.read_entries(log, 1, 0, 300).await?;
    ensure!(empty.entries.is_empty() && t.elapsed() >= Duration::from_millis(300));
    // A commit during the poll ends it early, with the new entry.
    let poller = {
        let c = c.clone();
        tokio::spawn(async move { c.read_entries(log, 1, 0, 30_000).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    c.append(log, 1, Bytes::from_static(b"second"), None).await?;
    let got = poller.await??;
    ensure!(got.entries.len() == 1 && got.entries[0].payload == Bytes::from_static(b"second"));
    ensure!(
        t.elapsed() < Duration::from_secs(20),
        "the poll waited for its deadline, not the commit"
    );
    let _ = stop.send(());
    server.await?;
    Ok(())
}
