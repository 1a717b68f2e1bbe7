//! A lake stream across processes on etcd and SeaweedFS (docs/lake.md): kcat produces to a
//! writer's Kafka port; the compactor process makes the stream's segments its Iceberg table's
//! Parquet files; kcat reads every record back from them as before; pyiceberg through the
//! catalog process's Iceberg REST catalog (which tells it the S3 endpoint) and DuckDB (httpfs)
//! read the same records from the table on SeaweedFS.

use std::process::Command;

use anyhow::{Context, Result, ensure};

use super::Cluster;

/// kcat's view of topic `topic`: `partition, offset, key, value, headers` lines, in order.
fn kcat_read(kafka: &str, topic: &str) -> Result<Vec<String>> {
    let out = testkit::kcat(
        &[
            "-b",
            kafka,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%p\t%o\t%k\t%s\t%h\n",
        ],
        "",
    )?;
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    lines.sort_by_key(|l| {
        let mut f = l.split('\t').map(|x| x.parse::<u64>().unwrap_or(u64::MAX));
        (f.next(), f.next())
    });
    Ok(lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lake_stream_on_seaweedfs_reads_alike_through_kafka_pyiceberg_and_duckdb() -> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let cluster = Cluster::start()?;
    let (_w, kafka) = super::kafka::kafka_writer(&cluster, "w1")?;
    let meta = cluster.meta().await?;
    super::wait_role(&meta, &cluster.name, "writer", 1).await?;
    let catalog = client::CatalogClient::connect(&cluster.catalog_url).await?;
    let req = client::CreateStreamRequest {
        name: "lk".to_owned(),
        partitions: 2,
        lake_table: true,
        ..Default::default()
    };
    catalog.create_with(req).await?;
    let plain: String = (0..200).map(|i| format!("key{}:plain {i}\n", i % 7)).collect();
    testkit::kcat(&["-b", &kafka, "-P", "-t", "lk", "-K:"], &plain)?;
    let zipped: String =
        (200..400).map(|i| format!("key{}:zipped {i} {}\n", i % 5, "z".repeat(30))).collect();
    testkit::kcat(&["-b", &kafka, "-P", "-t", "lk", "-K:", "-z", "gzip", "-H", "h=v"], &zipped)?;
    let before = kcat_read(&kafka, "lk")?;
    ensure!(before.len() == 400, "{} records read", before.len());
    // A flush after theirs moves the writer's low-water mark past them.
    testkit::kcat(&["-b", &kafka, "-P", "-t", "other"], "x\n")?;
    let port = testkit::free_port()?;
    let section = format!(
        "maintenance:\n  interval: 1h\n  min_chunks: 1\n  metadata_history: 1h\n  listen: 127.0.0.1:{port}\n"
    );
    let _compactor = cluster.background(&["compactor", "run"], "compactor", &section)?;
    let compactor = format!("http://127.0.0.1:{port}");
    // The first cycle sees the logs' heads; the second finds them idle and compacts them.
    for _ in 0..2 {
        let (code, out, err) = super::lakelog(&["--endpoint", &compactor, "admin", "compact"])?;
        ensure!(code == 0, "admin compact: {out}{err}");
    }
    let (code, status, err) =
        super::lakelog(&["--endpoint", &cluster.catalog_url, "lake", "status", "lk"])?;
    ensure!(code == 0 && status.contains("lag:        0 records"), "{status}{err}");
    let metadata = status
        .lines()
        .find_map(|l| l.strip_prefix("metadata:   "))
        .context("no metadata location")?
        .to_owned();
    ensure!(metadata.starts_with(&format!("s3://{}/", cluster.s3.bucket)), "{metadata}");
    ensure!(kcat_read(&kafka, "lk")? == before, "kcat reads differently from the Parquet files");
    let engine = |args: &[&str]| {
        let out = Command::new(format!("{root}/.tools/venv/bin/python"))
            .arg(format!("{root}/e2e/lake/read_table.py"))
            .args(args)
            .env("LAKE_S3_KEY", &cluster.s3.access_key_id)
            .env("LAKE_S3_SECRET", &cluster.s3.secret_access_key)
            .env("LAKE_S3_REGION", &cluster.s3.region)
            .env("LAKE_S3_ENDPOINT", &cluster.s3.endpoint)
            .output()
            .context("DuckDB and pyiceberg in .tools/venv (`make deps`)")?;
        ensure!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        anyhow::Ok(String::from_utf8(out.stdout)?.lines().map(str::to_owned).collect::<Vec<_>>())
    };
    let rest = format!("{}/iceberg", cluster.catalog_url);
    let py = engine(&["pyiceberg", &rest, "lk"])?;
    ensure!(
        py == before,
        "pyiceberg read {} rows: {:?}",
        py.len(),
        py.iter().take(2).collect::<Vec<_>>()
    );
    let duck = engine(&["duckdb", &metadata])?;
    ensure!(
        duck == before,
        "DuckDB read {} rows: {:?}",
        duck.len(),
        duck.iter().take(2).collect::<Vec<_>>()
    );
    Ok(())
}
