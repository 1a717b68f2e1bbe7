//! `lakelog bench produce`: records through the SDK producer to a stream on a running
//! standalone or cluster (`--endpoint`), as fast as it acknowledges them: MB/s and each
//! record's latency from `send` to its acknowledgement.

use std::time::Instant;

use anyhow::bail;
use bytes::Bytes;
use client::batch::Record;
use client::{CatalogClient, ClientConfig, Producer, ProducerConfig};
use tokio::sync::mpsc;

use crate::bench::Percentiles;

/// Options of `lakelog bench produce`.
#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    /// The stream to produce to; created with --partitions if missing.
    #[arg(long, default_value = "bench-produce")]
    stream: String,
    /// Partitions of the stream if it is created; records go round-robin over them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    partitions: u32,
    /// Bytes per record (its value).
    #[arg(long, default_value = "1KiB")]
    record_size: config::ByteSize,
    /// Batches of one partition in flight at once (the producer's max_in_flight).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=64))]
    in_flight: u64,
    /// The producer's batch size, in record bytes (the producer's default: 3 MiB).
    #[arg(long, default_value = "3MiB")]
    batch_size: config::ByteSize,
    /// How long to produce.
    #[arg(long, default_value = "10s")]
    duration: config::Duration,
    /// Print one JSON object on the last stdout line.
    #[arg(long)]
    json: bool,
}

/// Runs `lakelog bench produce`.
pub async fn run(
    args: ProduceArgs,
    endpoint: &str,
    security: &client::Security,
) -> anyhow::Result<()> {
    if args.record_size.0 == 0 || args.batch_size.0 == 0 {
        bail!("INVALID_ARGUMENT: --record-size and --batch-size must be above 0");
    }
    let catalog = CatalogClient::connect_with(endpoint, security).await?;
    let stream = match catalog.get(&args.stream).await {
        Ok(s) => s,
        Err(e) if e.code == client::Code::NotFound => {
            catalog.create(&args.stream, args.partitions, None, None).await?
        }
        Err(e) => return Err(e.into()),
    };
    let partitions = stream.partitions.len();
    let cfg = ProducerConfig {
        batch_bytes: args.batch_size.0 as usize,
        max_in_flight: args.in_flight as usize,
        ..Default::default()
    };
    let client = ClientConfig::new(endpoint).with_security(security.clone());
    let producer = Producer::new(client, &args.stream, cfg).await?;
    let value = Bytes::from(vec![0x5a; args.record_size.0 as usize]);
    // Each record's delivery with when it was sent, awaited in order by the collector.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, client::Delivery)>();
    let collector = tokio::spawn(async move {
        let (mut lat, mut errors, mut first_error) = (Vec::new(), 0u64, None);
        while let Some((sent, d)) = rx.recv().await {
            match d.wait().await {
                Ok(_) => lat.push(sent.elapsed().as_micros() as u64),
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        (lat, errors, first_error)
    });
    let start = Instant::now();
    let end = start + args.duration.0;
    while Instant::now() < end {
        let sent = Instant::now();
        // `send` waits while the partition's queue is full: the producer sets the pace.
        let d = producer.send(Record::value(value.clone())).await?;
        if tx.send((sent, d)).is_err() {
            break;
        }
    }
    drop(tx);
    producer.close().await;
    let (mut lat, errors, first_error) = collector.await?;
    let secs = start.elapsed().as_secs_f64();
    let records = lat.len() as u64;
    let mb_per_s = (records * args.record_size.0) as f64 / secs / 1e6;
    let p = Percentiles::of(&mut lat);
    println!(
        "produce: {records} records of {} B to {} partition(s) in {secs:.1} s: {mb_per_s:.1} MB/s, \
         ack p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {errors} errors ({} in flight per partition)",
        args.record_size.0, partitions, p.p50, p.p99, p.max, args.in_flight
    );
    if let Some(e) = &first_error {
        eprintln!("first error: {e}");
    }
    if args.json {
        println!(
            "{{\"bench\":\"produce\",\"records\":{records},\"record_bytes\":{},\"in_flight\":{},\
             \"seconds\":{secs:.3},\"mb_per_s\":{mb_per_s:.2},\"ack_ms\":{},\"errors\":{errors}}}",
            args.record_size.0,
            args.in_flight,
            p.json()
        );
    }
    if errors > 0 {
        bail!("{errors} records failed");
    }
    // Nothing measured is no result.
    if records == 0 {
        bail!("no record was acknowledged within {:?}", args.duration.0);
    }
    Ok(())
}
