//! `lakelog produce` and `lakelog consume`: stdin lines to a stream through the SDK producer,
//! and a stream's records to stdout through SDK consumers.

use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use client::batch::Record;
use client::{
    ClientConfig, ClientError, ConsumedRecord, Consumer, Producer, ProducerConfig, StartAt,
};

/// How `produce` keys its records.
#[derive(Debug)]
pub enum Keying {
    /// No key: partitions in turn.
    None,
    /// Every record has this key.
    Fixed(String),
    /// Each line is `key SEP value`.
    Separator(String),
}

/// Deliveries awaited at most at once; more lines wait (bounded memory on any input size).
const IN_FLIGHT: usize = 50_000;

pub async fn produce(
    cfg: ClientConfig,
    stream: &str,
    keying: Keying,
    linger: Duration,
) -> anyhow::Result<()> {
    let producer =
        Producer::new(cfg, stream, ProducerConfig { linger, ..Default::default() }).await?;
    let mut pending = VecDeque::new();
    let mut tally = Tally::default();
    let mut bad_line: Option<anyhow::Error> = None;
    let mut started = std::time::Instant::now();
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        let record = match &keying {
            Keying::None => Record::value(line),
            Keying::Fixed(k) => Record { key: Some(Bytes::from(k.clone())), ..Record::value(line) },
            Keying::Separator(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => Record {
                    key: Some(Bytes::copy_from_slice(k.as_bytes())),
                    ..Record::value(v.to_owned())
                },
                None => {
                    bad_line = Some(anyhow::anyhow!(
                        "INVALID_ARGUMENT: line {} has no key separator `{sep}`",
                        n + 1
                    ));
                    break;
                }
            },
        };
        pending.push_back(producer.send(record).await?);
        tally.sent += 1;
        while pending.len() >= IN_FLIGHT {
            if let Some(d) = pending.pop_front() {
                tally.add(d.wait().await);
            }
        }
        if started.elapsed() >= Duration::from_secs(5) {
            eprintln!("lakelog produce: {} records sent, {} acknowledged", tally.sent, tally.acked);
            started = std::time::Instant::now();
        }
    }
    for d in pending {
        tally.add(d.wait().await);
    }
    producer.close().await;
    if let Some(e) = bad_line {
        eprintln!("lakelog produce: {} records acknowledged before the bad line", tally.acked);
        return Err(e);
    }
    if tally.sent == 0 {
        anyhow::bail!("INVALID_ARGUMENT: no records on stdin: nothing produced");
    }
    if let Some(e) = tally.first_error {
        let unknown = if tally.unknown > 0 {
            format!(" ({} may have committed: outcome unknown)", tally.unknown)
        } else {
            String::new()
        };
        anyhow::bail!("{} of {} records failed{unknown}; first: {e}", tally.failed, tally.sent);
    }
    eprintln!("lakelog produce: {} records acknowledged to {stream}", tally.acked);
    Ok(())
}

#[derive(Default)]
struct Tally {
    sent: u64,
    acked: u64,
    failed: u64,
    unknown: u64,
    first_error: Option<ClientError>,
}

impl Tally {
    fn add(&mut self, r: Result<client::RecordAck, ClientError>) {
        match r {
            Ok(_) => self.acked += 1,
            Err(e) => {
                self.failed += 1;
                self.unknown += u64::from(e.outcome_unknown);
                self.first_error.get_or_insert(e);
            }
        }
    }
}

fn print(out: &mut impl Write, r: &ConsumedRecord) -> std::io::Result<()> {
    let key = r.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
    writeln!(out, "{}\t{}\t{key}\t{}", r.partition, r.offset, String::from_utf8_lossy(&r.value))
}

/// Records polled at most per call.
const POLL_RECORDS: u64 = 10_000;

pub async fn consume(
    cfg: ClientConfig,
    stream: &str,
    partition: Option<u32>,
    start: StartAt,
    max: Option<u64>,
    follow: bool,
) -> anyhow::Result<()> {
    let partitions = match partition {
        Some(p) => vec![p],
        None => {
            let s = client::CatalogClient::connect_with(&cfg.catalog, &cfg.security)
                .await?
                .get(stream)
                .await?;
            (0..s.partitions.len() as u32).collect()
        }
    };
    let mut left = max.unwrap_or(u64::MAX);
    let mut out = std::io::stdout().lock();
    if !follow {
        // Partition by partition, each up to its high watermark at the start.
        for p in partitions {
            let mut c = Consumer::new(cfg.clone(), stream, p, start).await?;
            let end = c.high_watermark().await?;
            while left > 0 && c.position() < end {
                let records = c.poll(left.min(POLL_RECORDS), Duration::ZERO).await?;
                if records.is_empty() {
                    break;
                }
                for r in records.iter().take(usize::try_from(left).unwrap_or(usize::MAX)) {
                    print(&mut out, r)?;
                    left -= 1;
                }
            }
            out.flush()?;
        }
        return Ok(());
    }
    // Following: one task per partition, long-polling; records printed as they come.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<ConsumedRecord>, ClientError>>(64);
    for p in partitions {
        let mut c = Consumer::new(cfg.clone(), stream, p, start).await?;
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                let r = c.poll(POLL_RECORDS, Duration::from_secs(5)).await;
                let stop = r.is_err();
                if tx.send(r).await.is_err() || stop {
                    return;
                }
            }
        });
    }
    drop(tx);
    while left > 0 {
        let Some(batch) = rx.recv().await else { break };
        for r in batch?.iter().take(usize::try_from(left).unwrap_or(usize::MAX)) {
            print(&mut out, r)?;
            left -= 1;
        }
        out.flush()?;
    }
    Ok(())
}
