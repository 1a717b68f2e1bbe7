//! `lakelog bench append` runs in process and reports what it promises (not how fast: speed
//! is for the benchmark itself, never a test).

use std::process::Command;

use anyhow::{Result, ensure};

#[test]
fn bench_append_reports_every_promised_figure() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_lakelog"))
        .args(["bench", "append", "--data-dir"])
        .arg(dir.path())
        .args([
            "--duration",
            "1s",
            "--logs",
            "3",
            "--concurrency",
            "8",
            "--flush-interval",
            "10ms",
            "--json",
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "bench failed: {stderr}");
    let stdout = String::from_utf8(out.stdout)?;
    let json = stdout.lines().last().unwrap_or_default();
    for key in [
        "append_mb_per_s",
        "entries_per_s",
        "\"ack_ms\":{\"p50\"",
        "\"p999\"",
        "puts",
        "put_bytes",
        "flushes",
        "hedged_puts",
        "metadata_txns",
        "puts_per_gib",
        "metadata_txns_per_gib",
        "rss_peak_mb",
    ] {
        ensure!(json.contains(key), "JSON lacks {key}: {json}");
    }
    ensure!(stderr.contains("MB/s"), "no progress line on stderr: {stderr}");
    // Something was appended, and each flush was exactly one PUT, and each hedge one more
    // (counted apart: PUTs at the object store, flushes and hedges in the writer).
    let field = |k: &str| -> Option<f64> {
        let at = json.find(&format!("\"{k}\":"))? + k.len() + 3;
        json[at..].split([',', '}']).next()?.parse().ok()
    };
    ensure!(field("entries_per_s").unwrap_or(0.0) > 0.0, "{json}");
    let (puts, flushes, hedges) = (field("puts"), field("flushes"), field("hedged_puts"));
    let made = flushes.zip(hedges).map(|(f, h)| f + h);
    ensure!(puts == made && puts.unwrap_or(0.0) >= 1.0, "{json}");
    ensure!(field("errors") == Some(0.0), "{json}");
    Ok(())
}

#[test]
fn bench_baseline_needs_stores_in_process() -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_lakelog"))
        .args(["--endpoint", "http://127.0.0.1:1", "bench", "append", "--baseline"])
        .output()?;
    let stderr = String::from_utf8(out.stderr)?;
    ensure!(out.status.code() == Some(1) && stderr.contains("--baseline needs"), "{stderr}");
    Ok(())
}

#[test]
fn bench_read_reports_tail_latency_and_catch_up_against_a_get_baseline() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_lakelog"))
        .args(["bench", "read", "--data-dir"])
        .arg(dir.path())
        .args(["--duration", "1s", "--backlog", "512KiB", "--flush-interval", "10ms", "--json"])
        .output()?;
    ensure!(out.status.success(), "bench read failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout)?;
    let json = stdout.lines().last().unwrap_or_default();
    for key in [
        "\"tail_ms\":{\"p50\"",
        "catch_up_mb_per_s",
        "catch_up_via_reader_mb_per_s",
        "baseline_get_mb_per_s",
    ] {
        ensure!(json.contains(key), "JSON lacks {key}: {json}");
    }
    ensure!(!json.contains("\"p50\":0.000"), "no tail sample was taken: {json}");
    Ok(())
}

/// `lakelog bench lake-compact` compacts a plain and a lake log through the compactor (the
/// table must then hold the whole lake log, or it fails) and times table freshness: every
/// figure it promises is in its JSON line, and appends become visible in the table.
#[test]
fn bench_lake_compact_reports_compaction_per_core_and_table_freshness() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_lakelog"))
        .args(["bench", "lake-compact", "--data-dir"])
        .arg(dir.path())
        .args(["--bytes", "2MiB", "--interval", "1s", "--freshness-for", "8s", "--json"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "bench failed: {stderr}");
    let stdout = String::from_utf8(out.stdout)?;
    let json = stdout.lines().last().unwrap_or_default();
    let field = |k: &str| -> Option<f64> {
        let at = json.find(&format!("\"{k}\":"))? + k.len() + 3;
        json[at..].split([',', '}']).next()?.parse().ok()
    };
    for k in ["plain_mb_per_cpu_s", "lake_mb_per_cpu_s", "plain_mb_per_s", "lake_mb_per_s"] {
        ensure!(field(k).is_some_and(|v| v > 0.0), "{k}: {json}");
    }
    ensure!(field("lake_segments").is_some_and(|n| n >= 1.0), "{json}");
    ensure!(field("appends_seen").is_some_and(|n| n >= 1.0), "nothing became visible: {json}");
    ensure!(field("freshness_max_s").is_some_and(|s| s > 0.0), "{json}");
    Ok(())
}

/// `lakelog bench compact-keys` compacts its log to one record a key and reports each figure.
#[test]
fn bench_compact_keys_compacts_to_one_record_a_key_and_reports_its_figures() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_lakelog"))
        .args(["bench", "compact-keys", "--data-dir"])
        .arg(dir.path())
        .args(["--keys", "500", "--updates", "10000", "--json"])
        .output()?;
    let stdout = String::from_utf8(out.stdout)?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = stdout.lines().last().unwrap_or_default();
    let field = |k: &str| -> Option<f64> {
        let at = json.find(&format!("\"{k}\":"))? + k.len() + 3;
        json[at..].split([',', '}']).next()?.parse().ok()
    };
    ensure!(field("records_before") == Some(10_000.0), "{json}");
    ensure!(field("records_after") == Some(500.0), "{json}");
    for k in ["records_per_core_s", "mb_per_core_s", "key_map_bytes", "peak_rss_bytes"] {
        ensure!(field(k).is_some_and(|x| x > 0.0), "{k}: {json}");
    }
    ensure!(field("bytes_after") < field("bytes_before"), "{json}");
    Ok(())
}
