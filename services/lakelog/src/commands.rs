//! The gRPC client commands that print what a role answers: `log …`, `cursor …`, `stream …`.

use std::io::{BufRead, Write};

use anyhow::Context;
use client::{LogClient, batch};

use crate::cli::{CursorCommand, LogCommand, StreamCommand};

/// `w` takes writes; `r` reads (a reader with --reader, else the same writer).
pub(crate) async fn log_command(
    w: &LogClient,
    r: &LogClient,
    command: LogCommand,
) -> anyhow::Result<()> {
    let c = w;
    let mut out = std::io::stdout().lock();
    match command {
        LogCommand::Create => writeln!(out, "{}", c.create_log().await?)?,
        LogCommand::Append { log, batch, expected_offset } => {
            let stdin = std::io::stdin();
            let mut lines = stdin.lock().lines();
            let mut expected = expected_offset;
            let mut appended = 0u64;
            loop {
                let mut records = Vec::with_capacity(batch as usize);
                for line in lines.by_ref() {
                    records.push(batch::Record::value(line.context("reading stdin")?));
                    if records.len() == batch as usize {
                        break;
                    }
                }
                if records.is_empty() {
                    break;
                }
                let n = records.len() as u32;
                let h = c.append(log, n, batch::encode(&records)?, expected).await?;
                writeln!(out, "{}", h.offset)?;
                expected = expected.map(|_| h.offset + u64::from(h.record_count));
                appended += 1;
            }
            if appended == 0 {
                anyhow::bail!("INVALID_ARGUMENT: no records on stdin: nothing appended");
            }
        }
        LogCommand::Read { log, from, max_records, follow } => {
            let c = r;
            let info = c.info(log).await?;
            let mut at = from.unwrap_or(info.first_offset);
            let mut left = max_records.unwrap_or(u64::MAX);
            while left > 0 {
                let wait = if follow { 10_000 } else { 0 };
                let resp = c.read_entries(log, at, left.min(10_000), wait).await?;
                if resp.entries.is_empty() {
                    if follow {
                        continue;
                    }
                    break;
                }
                for e in resp.entries {
                    let Some(h) = e.header else { continue };
                    for (at, r) in batch::decode_at(&e.payload)? {
                        let offset = h.offset + at;
                        if offset >= at && left > 0 {
                            writeln!(out, "{offset}\t{}", String::from_utf8_lossy(&r.value))?;
                            left -= 1;
                        }
                    }
                    at = h.offset + u64::from(h.record_count);
                }
                out.flush()?;
            }
        }
        LogCommand::Info { log, json } => {
            let i = r.info(log).await?;
            if json {
                writeln!(
                    out,
                    "{{\"log\":{},\"state\":\"{}\",\"epoch\":{},\"first_offset\":{},\"next_offset\":{},\"entries\":{},\"bytes\":{}}}",
                    i.log_id, i.state, i.epoch, i.first_offset, i.next_offset, i.entries, i.bytes
                )?;
            } else {
                writeln!(out, "log:          {}", i.log_id)?;
                writeln!(out, "state:        {}", i.state)?;
                writeln!(out, "epoch:        {}", i.epoch)?;
                writeln!(out, "first offset: {}", i.first_offset)?;
                writeln!(out, "next offset:  {}", i.next_offset)?;
                writeln!(out, "entries:      {}", i.entries)?;
                writeln!(out, "bytes:        {}", i.bytes)?;
            }
        }
        LogCommand::Fence { log } => writeln!(out, "{}", c.fence(log).await?)?,
        LogCommand::Activate { log, epoch } => {
            let epoch = match epoch {
                Some(e) => e,
                None => c.info(log).await?.epoch,
            };
            c.activate(log, epoch).await?;
        }
        LogCommand::Trim { log, soft: _, hard, offset } => {
            let start = if hard {
                c.hard_trim(log, offset).await?
            } else {
                c.soft_trim(log, offset).await?
            };
            writeln!(out, "{start}")?;
        }
        LogCommand::Delete { log } => c.delete_log(log).await?,
    }
    Ok(())
}

pub(crate) async fn cursor_command(
    w: &LogClient,
    r: &LogClient,
    command: CursorCommand,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        CursorCommand::Create { log, name, offset, from_end } => {
            w.create_cursor(log, &name, offset, from_end).await?
        }
        CursorCommand::List { log } => {
            for n in r.list_cursors(log).await? {
                writeln!(out, "{n}")?;
            }
        }
        CursorCommand::Delete { log, name } => w.delete_cursor(log, &name).await?,
        CursorCommand::Read { log, name, max } => {
            let mut left = max;
            let mut from = None;
            while left > 0 {
                let resp = r.read_cursor(log, &name, left.min(10_000), from).await?;
                if resp.entries.is_empty() {
                    break;
                }
                for e in resp.entries {
                    let Some(h) = e.header else { continue };
                    for (at, rec) in batch::decode_at(&e.payload)? {
                        if left > 0 {
                            let offset = h.offset + at;
                            writeln!(out, "{offset}\t{}", String::from_utf8_lossy(&rec.value))?;
                            left -= 1;
                        }
                    }
                }
                from = Some(resp.next_offset);
            }
        }
        CursorCommand::Ack { log, name, offset, individual, properties } => {
            let props = properties.into_iter().collect();
            let md = if individual {
                w.ack_cursor(log, &name, None, vec![offset], props).await?
            } else {
                w.ack_cursor(log, &name, Some(offset), Vec::new(), props).await?
            };
            writeln!(out, "{}", md.map_or("none".to_owned(), |m| m.to_string()))?;
        }
        CursorCommand::Seek { log, name, offset } => w.seek_cursor(log, &name, offset).await?,
        CursorCommand::Stats { log, name } => {
            let s = r.cursor_stats(log, &name).await?;
            let md = s.mark_delete_offset.map_or("none".to_owned(), |m| m.to_string());
            writeln!(out, "mark-delete offset: {md}")?;
            writeln!(out, "read position:      {}", s.read_position)?;
            writeln!(out, "high watermark:     {}", s.high_watermark)?;
            writeln!(out, "backlog records:    {}", s.backlog_records)?;
            writeln!(out, "backlog bytes:      {}", s.backlog_bytes)?;
            writeln!(
                out,
                "individual acks:    {} records in {} ranges",
                s.acked_records, s.ack_ranges
            )?;
            let mut props: Vec<_> = s.properties.into_iter().collect();
            props.sort();
            for (k, v) in props {
                writeln!(out, "property:           {k}={v}")?;
            }
        }
    }
    Ok(())
}

pub(crate) fn print_stream(out: &mut impl Write, s: &client::Stream) -> std::io::Result<()> {
    let logs: Vec<String> = s.partitions.iter().map(|l| l.to_string()).collect();
    writeln!(out, "name:       {}", s.name)?;
    writeln!(out, "identity:   {}", s.identity)?;
    writeln!(out, "partitions: {} (logs {})", s.partitions.len(), logs.join(","))?;
    if let Some(ms) = s.retention_ms {
        writeln!(out, "retention:  {ms} ms")?;
    }
    if let Some(b) = s.retention_bytes {
        writeln!(out, "retention:  {b} bytes")?;
    }
    if s.lake_table {
        writeln!(out, "lake table: yes")?;
    }
    if let Some(ms) = s.lake_retention_ms {
        writeln!(out, "lake retention: {ms} ms")?;
    }
    for (name, value) in &s.configs {
        writeln!(out, "config:     {name}={value}")?;
    }
    Ok(())
}

/// `lakelog lake status`: the table, then one line per partition with its lag.
pub(crate) fn print_lake(
    out: &mut impl Write,
    stream: &str,
    t: &client::GetLakeTableResponse,
    now_ms: i64,
) -> std::io::Result<()> {
    let behind: u64 =
        t.partitions.iter().map(|p| p.log_end_offset.saturating_sub(p.table_end_offset)).sum();
    let oldest =
        t.partitions.iter().filter(|p| p.oldest_behind_ms > 0).map(|p| p.oldest_behind_ms).min();
    let lag_s = oldest.map_or(0.0, |o| (now_ms - o).max(0) as f64 / 1000.0);
    writeln!(out, "table:      lakelog.{stream}")?;
    if t.metadata_location.is_empty() {
        writeln!(out, "location:   none yet (no segment committed)")?;
    } else {
        writeln!(out, "location:   {}", t.location)?;
        writeln!(out, "metadata:   {}", t.metadata_location)?;
    }
    writeln!(out, "snapshots:  {} kept, {} data files", t.snapshots, t.data_files)?;
    if t.last_commit_ms > 0 {
        let ago = (now_ms - t.last_commit_ms).max(0) as f64 / 1000.0;
        writeln!(out, "last commit: {ago:.1} s ago")?;
    }
    writeln!(out, "lag:        {behind} records, {lag_s:.1} s")?;
    for p in &t.partitions {
        let lag = p.log_end_offset.saturating_sub(p.table_end_offset);
        writeln!(
            out,
            "partition {} (log {}): table [.., {}), log [.., {}), {lag} behind",
            p.partition, p.log_id, p.table_end_offset, p.log_end_offset
        )?;
    }
    Ok(())
}

pub(crate) async fn stream_command(
    c: &client::CatalogClient,
    command: StreamCommand,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        StreamCommand::Create {
            name,
            partitions,
            retention_ms,
            retention_bytes,
            lake_table,
            lake_retention_ms,
            configs,
        } => {
            let req = client::CreateStreamRequest {
                name,
                partitions,
                retention_ms,
                retention_bytes,
                lake_table,
                lake_retention_ms,
                configs: configs.into_iter().collect(),
            };
            print_stream(&mut out, &c.create_with(req).await?)?;
        }
        StreamCommand::List => {
            for s in c.list().await? {
                writeln!(out, "{}\t{}\t{}", s.name, s.partitions.len(), s.identity)?;
            }
        }
        StreamCommand::Describe { name } => print_stream(&mut out, &c.get(&name).await?)?,
        StreamCommand::AddPartitions { name, to } => {
            print_stream(&mut out, &c.add_partitions(&name, to).await?)?
        }
        StreamCommand::Delete { name } => c.delete(&name).await?,
    }
    Ok(())
}
