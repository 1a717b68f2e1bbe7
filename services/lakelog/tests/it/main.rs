//! The `lakelog` command end to end: `standalone` as a real process, the CLI against it,
//! kill -9 and restart on the same data dir.

mod authz;
mod bench;
mod ecosystem;
mod shares;
mod tls;
mod transactions;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

const BIN: &str = env!("CARGO_BIN_EXE_lakelog");

struct Standalone {
    child: Child,
    endpoint: String,
    /// Its Kafka listener, `127.0.0.1:port`.
    kafka: String,
}

impl Standalone {
    fn start(data: &Path, port: u16) -> Result<Standalone> {
        Standalone::start_with(data, port, &[])
    }

    /// With more arguments (`--config FILE`).
    fn start_with(data: &Path, port: u16, more: &[&std::ffi::OsStr]) -> Result<Standalone> {
        let kafka = format!("127.0.0.1:{}", testkit::free_port()?);
        Standalone::start_on(data, port, &kafka, more)
    }

    /// Listening for Kafka clients on `kafka` (`127.0.0.1:port`): a restart where its clients
    /// were.
    fn start_on(
        data: &Path,
        port: u16,
        kafka: &str,
        more: &[&std::ffi::OsStr],
    ) -> Result<Standalone> {
        let kafka = kafka.to_owned();
        let child = Command::new(BIN)
            .args(["standalone", "--data-dir"])
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--kafka-listen", &kafka])
            .args(more)
            .env("LAKELOG_LOG_LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // Both listeners: the Kafka one opens after log storage (a test's first kcat found it
        // closed on a loaded machine).
        let start = Instant::now();
        for addr in [format!("127.0.0.1:{port}"), kafka.clone()] {
            while TcpStream::connect(addr.as_str()).is_err() {
                ensure!(
                    start.elapsed() < Duration::from_secs(30),
                    "standalone did not listen on {addr}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(Standalone { child, endpoint: format!("http://127.0.0.1:{port}"), kafka })
    }

    fn cli(&self, args: &[&str], stdin: &str) -> Result<Output> {
        use std::io::Write;
        let mut child = Command::new(BIN)
            .args(["--endpoint", &self.endpoint])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().context("stdin")?.write_all(stdin.as_bytes())?;
        Ok(child.wait_with_output()?)
    }

    fn ok(&self, args: &[&str], stdin: &str) -> Result<String> {
        let out = self.cli(args, stdin)?;
        ensure!(
            out.status.success(),
            "lakelog {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }

    /// A failing command: its exit code and its one stderr line.
    fn err(&self, args: &[&str], stdin: &str) -> Result<(i32, String)> {
        let out = self.cli(args, stdin)?;
        ensure!(!out.status.success(), "lakelog {args:?} succeeded but should not");
        let stderr = String::from_utf8(out.stderr)?;
        Ok((out.status.code().unwrap_or(-1), stderr))
    }

    fn kill9(mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `standalone --config`: its `maintenance:` section (a 1 s interval, not the default minute)
/// and `writer:` section apply to the embedded roles; a bad file is one line, exit 1.
#[test]
fn standalone_takes_its_writer_and_maintenance_sections_from_a_config_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("standalone.yaml");
    std::fs::write(
        &file,
        "writer:\n  flush_interval: 5ms\nmaintenance:\n  interval: 1s\n  min_chunks: 8\n  grace: 1s\n",
    )?;
    let port = testkit::free_port()?;
    let s = Standalone::start_with(
        &dir.path().join("data"),
        port,
        &["--config".as_ref(), file.as_os_str()],
    )?;
    let log = s.ok(&["log", "create"], "")?.trim().to_owned();
    for i in 0..24 {
        s.ok(&["log", "append", &log], &format!("r{i}\n"))?;
    }
    // Compacted by the embedded compactor within a few of its 1 s cycles.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let client = runtime.block_on(client::LogClient::connect(&s.endpoint))?;
    let log_id: u64 = log.parse()?;
    let start = Instant::now();
    loop {
        let first = runtime.block_on(client.read_index_range(log_id, 0, 1))?;
        if first.first().is_some_and(|i| i.object.starts_with("compacted/")) {
            break;
        }
        ensure!(start.elapsed() < Duration::from_secs(30), "not compacted: {first:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let read = s.ok(&["log", "read", &log], "")?;
    ensure!(read.lines().count() == 24 && read.contains("23\tr23"), "{read}");
    drop(s);
    std::fs::write(&file, "maintenance:\n  interval: 10ms\n")?;
    let out = Command::new(BIN)
        .args(["standalone", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&file)
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1)
            && stderr.lines().count() == 1
            && stderr.contains("maintenance.interval"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn standalone_serves_every_acknowledged_record_after_kill_9_and_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let port = testkit::free_port()?;
    let s = Standalone::start(dir.path(), port)?;
    let log = s.ok(&["log", "create"], "")?.trim().to_owned();
    let lines: Vec<String> = (0..25).map(|i| format!("record {i}")).collect();
    let offsets = s.ok(&["log", "append", &log, "--batch", "4"], &(lines.join("\n") + "\n"))?;
    ensure!(
        offsets.lines().collect::<Vec<_>>() == ["0", "4", "8", "12", "16", "20", "24"],
        "{offsets}"
    );
    s.kill9()?;

    let s = Standalone::start(dir.path(), port)?;
    let read = s.ok(&["log", "read", &log], "")?;
    let expected: Vec<String> =
        lines.iter().enumerate().map(|(i, l)| format!("{i}\t{l}")).collect();
    ensure!(read.lines().collect::<Vec<_>>() == expected, "after restart: {read}");
    let more = s.ok(&["log", "append", &log], "after restart\n")?;
    ensure!(more.trim() == "25");
    let info = s.ok(&["log", "info", &log, "--json"], "")?;
    ensure!(info.contains("\"next_offset\":26") && info.contains("\"state\":\"NORMAL\""), "{info}");
    Ok(())
}

#[test]
fn cli_bad_input_exits_non_zero_with_one_clear_line() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let log = s.ok(&["log", "create"], "")?.trim().to_owned();
    s.ok(&["log", "append", &log], "a\nb\n")?;
    for (args, stdin, needle) in [
        (vec!["log", "read", "424242"], "", "NOT_FOUND"),
        (vec!["log", "append", "424242"], "x\n", "NOT_FOUND"),
        (vec!["log", "append", log.as_str()], "", "no records on stdin"),
        (
            vec!["log", "read", log.as_str(), "--from", "18446744073709551615"],
            "",
            "OFFSET_OUT_OF_RANGE",
        ),
        (vec!["log", "append", log.as_str(), "--expected-offset", "0"], "x\n", "OFFSET_MISMATCH"),
        (vec!["log", "activate", log.as_str(), "--epoch", "7"], "", "FENCED"),
    ] {
        let (code, stderr) = s.err(&args, stdin)?;
        ensure!(code == 1, "{args:?}: exit {code}");
        ensure!(stderr.lines().count() == 1 && stderr.contains(needle), "{args:?}: {stderr}");
        ensure!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    }
    let big = "x".repeat(17 << 20) + "\n";
    let (_, stderr) = s.err(&["log", "append", &log], &big)?;
    ensure!(
        stderr.contains("INVALID_ARGUMENT") && stderr.contains("maximum entry size"),
        "{stderr}"
    );
    // Arguments the CLI itself refuses: a negative offset, a zero batch.
    for args in [
        vec!["log", "read", log.as_str(), "--from", "-1"],
        vec!["log", "append", log.as_str(), "--batch", "0"],
    ] {
        let (code, stderr) = s.err(&args, "x\n")?;
        ensure!(code == 2 && stderr.starts_with("error:"), "{args:?}: {code} {stderr}");
    }
    // Nothing listening: a clear UNAVAILABLE.
    let out = Command::new(BIN)
        .args([
            "--endpoint",
            &format!("http://127.0.0.1:{}", testkit::free_port()?),
            "log",
            "info",
            "1",
        ])
        .output()?;
    let stderr = String::from_utf8(out.stderr)?;
    ensure!(out.status.code() == Some(1) && stderr.contains("UNAVAILABLE"), "{stderr}");
    Ok(())
}

#[test]
fn cli_fence_activate_trim_and_delete() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let log = s.ok(&["log", "create"], "")?.trim().to_owned();
    s.ok(&["log", "append", &log], "a\nb\nc\n")?;
    let epoch = s.ok(&["log", "fence", &log], "")?.trim().to_owned();
    let (_, stderr) = s.err(&["log", "append", &log], "fenced\n")?;
    ensure!(stderr.contains("FENCED"), "{stderr}");
    s.ok(&["log", "activate", &log, "--epoch", &epoch], "")?;
    s.ok(&["log", "append", &log], "d\n")?;
    ensure!(s.ok(&["log", "trim", &log, "--soft", "2"], "")?.trim() == "2");
    ensure!(s.ok(&["log", "read", &log], "")? == "2\tc\n3\td\n");
    let (_, stderr) = s.err(&["log", "read", &log, "--from", "0"], "")?;
    ensure!(stderr.contains("OFFSET_OUT_OF_RANGE"), "{stderr}");
    s.ok(&["log", "delete", &log], "")?;
    ensure!(s.ok(&["log", "info", &log], "")?.contains("DELETED"));
    let (_, stderr) = s.err(&["log", "read", &log], "")?;
    ensure!(stderr.contains("NOT_FOUND"), "{stderr}");
    Ok(())
}

#[test]
fn cli_streams_are_created_grown_listed_and_deleted() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let created =
        s.ok(&["stream", "create", "orders", "--partitions", "3", "--retention-ms", "60000"], "")?;
    ensure!(
        created.contains("partitions: 3") && created.contains("retention:  60000 ms"),
        "{created}"
    );
    let identity = created
        .lines()
        .find_map(|l| l.strip_prefix("identity:"))
        .map(str::trim)
        .unwrap_or_default()
        .to_owned();
    ensure!(identity.len() == 36, "identity `{identity}` is not a UUID");
    s.ok(&["stream", "create", "audit"], "")?;
    let list = s.ok(&["stream", "list"], "")?;
    ensure!(
        list.lines().map(|l| l.split('\t').next().unwrap_or("")).collect::<Vec<_>>()
            == ["audit", "orders"],
        "{list}"
    );
    ensure!(
        s.ok(&["stream", "add-partitions", "orders", "--to", "5"], "")?.contains("partitions: 5")
    );
    for (args, needle) in [
        (vec!["stream", "create", "orders"], "ALREADY_EXISTS"),
        (vec!["stream", "create", "bad name"], "INVALID_ARGUMENT"),
        (vec!["stream", "add-partitions", "orders", "--to", "2"], "INVALID_ARGUMENT"),
        (vec!["stream", "describe", "nope"], "NOT_FOUND"),
        (vec!["stream", "create", "zero", "--partitions", "0"], "INVALID_ARGUMENT"),
    ] {
        let (code, stderr) = s.err(&args, "")?;
        ensure!(
            code == 1 && stderr.lines().count() == 1 && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    }
    s.ok(&["stream", "delete", "orders"], "")?;
    let again = s.ok(&["stream", "create", "orders"], "")?;
    ensure!(!again.contains(&identity), "a re-created stream kept its old identity");
    Ok(())
}

/// `bench produce`: what it reports acknowledged is in the stream, each partition gap-free;
/// bad sizes are one clear line.
#[test]
fn bench_produce_reports_what_it_acknowledged_and_refuses_empty_records() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let args = ["bench", "produce", "--stream", "b", "--partitions", "2", "--record-size", "16"];
    let out =
        s.ok(&[&args[..], &["--duration", "1s", "--in-flight", "3", "--json"]].concat(), "")?;
    let json = out.lines().last().unwrap_or_default();
    let field = |k: &str| -> Option<u64> {
        let at = json.find(&format!("\"{k}\":"))? + k.len() + 3;
        json[at..].split([',', '}']).next()?.parse().ok()
    };
    let records = field("records").unwrap_or(0);
    ensure!(records > 0 && field("errors") == Some(0), "{json}");
    let consumed = s.ok(&["consume", "b", "--from-beginning"], "")?;
    let mut next = [0u64; 2];
    for line in consumed.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (p, offset): (usize, u64) = (f[0].parse()?, f[1].parse()?);
        ensure!(offset == next[p], "partition {p}: offset {offset} after {}", next[p]);
        next[p] += 1;
    }
    ensure!(next[0] + next[1] == records, "{records} acknowledged, {next:?} in the stream");
    let (code, err) = s.err(&["bench", "produce", "--record-size", "0"], "")?;
    ensure!(code == 1 && err.contains("INVALID_ARGUMENT"), "{code}: {err}");
    Ok(())
}

/// `bench compact` at a small scale: the segments it leaves are merged (the check it makes
/// itself, GETs within bytes / target + 2, holds), and a bad target is refused.
#[test]
fn bench_compact_merges_small_segments_and_reads_back_within_its_get_bound() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("d");
    let out = lakelog(&[
        "bench",
        "compact",
        "--data-dir",
        data.to_str().context("a path")?,
        "--flushes",
        "400",
        "--compact-every",
        "40",
        "--entry-size",
        "8KiB",
        "--target-segment-size",
        "1MiB",
        "--json",
    ])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let json = text.lines().last().unwrap_or_default();
    let field = |k: &str| -> Option<u64> {
        let at = json.find(&format!("\"{k}\":"))? + k.len() + 3;
        json[at..].split([',', '}']).next()?.parse().ok()
    };
    let (gets, bound) = (field("gets").unwrap_or(u64::MAX), field("get_bound").unwrap_or(0));
    ensure!(gets <= bound && field("segments_merged").unwrap_or(0) > 0, "{json}");
    ensure!(field("bytes") == Some(400 * 8192), "{json}");
    let bad = lakelog(&["bench", "compact", "--data-dir", "x", "--target-segment-size", "lots"])?;
    ensure!(!bad.status.success(), "a bad size was taken");
    Ok(())
}

#[test]
fn cli_produce_routes_keys_to_partitions_and_consume_prints_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "orders", "--partitions", "3"], "")?;
    let lines: Vec<String> = (0..30).map(|i| format!("k{}:value {i}", i % 7)).collect();
    s.ok(&["produce", "orders", "--key-separator", ":"], &(lines.join("\n") + "\n"))?;
    let out = s.ok(&["consume", "orders", "--from-beginning"], "")?;
    let mut next = [0u64; 3];
    let mut seen = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        ensure!(f.len() == 4, "not partition<TAB>offset<TAB>key<TAB>value: {line}");
        let (p, offset): (u32, u64) = (f[0].parse()?, f[1].parse()?);
        ensure!(p == logstore::routing::partition_for_key(f[2].as_bytes(), 3), "{line}");
        ensure!(
            offset == next[p as usize],
            "partition {p}: offset {offset} after {}",
            next[p as usize]
        );
        next[p as usize] += 1;
        seen.push(format!("{}:{}", f[2], f[3]));
    }
    seen.sort();
    let mut want = lines.clone();
    want.sort();
    ensure!(seen == want, "consumed {seen:?}");
    // One partition from an offset, at most 2 records.
    let p1 = s.ok(&["consume", "orders", "--partition", "1", "--offset", "1", "--max", "2"], "")?;
    let offsets: Vec<&str> = p1.lines().filter_map(|l| l.split('\t').nth(1)).collect();
    let want: Vec<String> = (1..next[1].min(3)).map(|o| o.to_string()).collect();
    ensure!(offsets == want, "{p1}");
    // --follow prints records produced after it started, then stops at --max.
    let mut follow = Command::new(BIN)
        .args(["--endpoint", &s.endpoint, "consume", "orders", "--follow", "--max", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(500));
    s.ok(&["produce", "orders", "--record-key", "late"], "x\ny\nz\n")?;
    let start = Instant::now();
    while follow.try_wait()?.is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            follow.kill()?;
            anyhow::bail!("consume --follow --max 3 did not stop after 3 records");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = follow.wait_with_output()?;
    let tail = String::from_utf8(out.stdout)?;
    let values: Vec<&str> = tail.lines().filter_map(|l| l.split('\t').nth(3)).collect();
    ensure!(values == ["x", "y", "z"], "follow printed {tail}");
    for (args, stdin, needle) in [
        (vec!["produce", "nope"], "x\n", "NOT_FOUND"),
        (vec!["produce", "orders", "--key-separator", ":"], "no separator\n", "INVALID_ARGUMENT"),
        (vec!["produce", "orders"], "", "no records on stdin"),
        (vec!["consume", "orders", "--partition", "9"], "", "out of range"),
        (vec!["consume", "nope", "--from-beginning"], "", "NOT_FOUND"),
        (
            vec!["consume", "orders", "--partition", "0", "--offset", "999"],
            "",
            "OFFSET_OUT_OF_RANGE",
        ),
    ] {
        let (code, stderr) = s.err(&args, stdin)?;
        ensure!(code == 1 && stderr.contains(needle), "{args:?}: {code} {stderr}");
        ensure!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let (code, _) = s.err(&["consume", "orders", "--offset", "1"], "")?;
    ensure!(code == 2, "--offset without --partition: exit {code}");
    Ok(())
}

#[test]
fn cli_cursors_ack_fold_and_report_backlog() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let log = s.ok(&["log", "create"], "")?.trim().to_owned();
    let lines: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    s.ok(&["log", "append", &log, "--batch", "2"], &(lines.join("\n") + "\n"))?;
    s.ok(&["cursor", "create", &log, "c1"], "")?;
    ensure!(s.ok(&["cursor", "list", &log], "")? == "c1\n");
    ensure!(s.ok(&["cursor", "read", &log, "c1", "--max", "3"], "")? == "0\tr0\n1\tr1\n2\tr2\n");
    ensure!(s.ok(&["cursor", "ack", &log, "c1", "3", "--property", "epoch=5"], "")?.trim() == "3");
    ensure!(s.ok(&["cursor", "ack", &log, "c1", "6", "--individual"], "")?.trim() == "3");
    ensure!(s.ok(&["cursor", "ack", &log, "c1", "7", "--individual"], "")?.trim() == "3");
    let stats = s.ok(&["cursor", "stats", &log, "c1"], "")?;
    for want in
        ["mark-delete offset: 3", "backlog records:    4", "2 records in 1 ranges", "epoch=5"]
    {
        ensure!(stats.contains(want), "{want} not in {stats}");
    }
    // Reading starts at the mark-delete position and skips the wholly acked entry [6, 8).
    let read = s.ok(&["cursor", "read", &log, "c1"], "")?;
    ensure!(read == "4\tr4\n5\tr5\n8\tr8\n9\tr9\n", "{read}");
    s.ok(&["cursor", "ack", &log, "c1", "4", "--individual"], "")?;
    ensure!(
        s.ok(&["cursor", "ack", &log, "c1", "5", "--individual"], "")?.trim() == "7",
        "4..=7 folded"
    );
    s.ok(&["cursor", "seek", &log, "c1", "2"], "")?;
    ensure!(s.ok(&["cursor", "stats", &log, "c1"], "")?.contains("backlog records:    8"));
    for (args, needle) in [
        (vec!["cursor", "create", log.as_str(), "c1"], "ALREADY_EXISTS"),
        (vec!["cursor", "create", log.as_str(), "bad/name"], "INVALID_ARGUMENT"),
        (vec!["cursor", "stats", log.as_str(), "nope"], "NOT_FOUND"),
        (vec!["cursor", "ack", log.as_str(), "c1", "99"], "OFFSET_OUT_OF_RANGE"),
        (vec!["cursor", "read", "424242", "c1"], "NOT_FOUND"),
    ] {
        let (code, stderr) = s.err(&args, "")?;
        ensure!(code == 1 && stderr.contains(needle), "{args:?}: {code} {stderr}");
    }
    let (code, _) = s.err(&["cursor", "ack", &log, "c1", "1", "--property", "x"], "")?;
    ensure!(code == 2, "a malformed property is refused by the CLI");
    s.ok(&["cursor", "delete", &log, "c1"], "")?;
    ensure!(s.ok(&["cursor", "list", &log], "")?.is_empty());
    Ok(())
}

#[test]
fn producing_to_an_operator_fenced_partition_fails_at_once_and_resumes_after_activate() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let described = s.ok(&["stream", "create", "held", "--partitions", "1"], "")?;
    let log = described
        .lines()
        .find_map(|l| l.split("(logs ").nth(1))
        .map(|l| l.trim_end_matches(')').to_owned())
        .context("no log id")?;
    s.ok(&["produce", "held"], "before\n")?;
    let epoch = s.ok(&["log", "fence", &log], "")?.trim().to_owned();
    let start = Instant::now();
    let (code, stderr) = s.err(&["produce", "held"], "while fenced\n")?;
    ensure!(code == 1 && stderr.contains("FENCED"), "{stderr}");
    // Not retried for the producer's 60 s: an operator's fence holds until activate.
    ensure!(start.elapsed() < Duration::from_secs(20), "took {:?}", start.elapsed());
    s.ok(&["log", "activate", &log, "--epoch", &epoch], "")?;
    s.ok(&["produce", "held"], "after\n")?;
    let out = s.ok(&["consume", "held", "--from-beginning"], "")?;
    let values: Vec<&str> = out.lines().filter_map(|l| l.split('\t').nth(3)).collect();
    ensure!(values == ["before", "after"], "{out}");
    Ok(())
}

/// Runs `lakelog` with no endpoint (commands that open the stores themselves).
fn lakelog(args: &[&str]) -> Result<Output> {
    Ok(Command::new(BIN).args(args).stdin(Stdio::null()).output()?)
}

/// The number right after the first `marker` in `text` (up to the next space).
fn number_after(text: &str, marker: &str) -> Result<u64> {
    text.split_once(marker)
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no number after {marker:?} in: {text}"))
}

/// Two logs: one of three entries (one WAL object each), deleted; then one of 20 entries (one
/// WAL chunk each, `m0`..`m19`). Their ids, and the second's `log read` output.
fn deleted_and_many(s: &Standalone) -> Result<(String, String, String)> {
    let gone = s.ok(&["log", "create"], "")?.trim().to_owned();
    for line in ["a\n", "b\n", "c\n"] {
        s.ok(&["log", "append", &gone], line)?;
    }
    s.ok(&["log", "delete", &gone], "")?;
    let many = s.ok(&["log", "create"], "")?.trim().to_owned();
    let mut lines = String::new();
    for i in 0..20 {
        s.ok(&["log", "append", &many], &format!("m{i}\n"))?;
        lines.push_str(&format!("{i}\tm{i}\n"));
    }
    Ok((gone, many, lines))
}

#[test]
fn cli_cleaner_status_names_the_holder_and_admin_clean_reclaims_a_deleted_logs_objects()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().to_str().context("path")?.to_owned();
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let (_gone, many, lines) = deleted_and_many(&s)?;
    let kept = s.ok(&["log", "create"], "")?.trim().to_owned();
    s.ok(&["log", "append", &kept], "kept\n")?;
    s.kill9()?;

    let out = lakelog(&["cleaner", "status", "--data-dir", &data])?;
    let status = String::from_utf8(out.stdout)?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ensure!(status.contains("held back by") && status.contains("wal/next_seq"), "{status}");
    let out = lakelog(&["admin", "clean", "--grace", "0s", "--data-dir", &data])?;
    let cleaned = String::from_utf8(out.stdout)?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deleted = number_after(&cleaned, "deleted ")?;
    ensure!(deleted >= 1, "nothing of the deleted log reclaimed: {cleaned}");
    // Compaction rewrites the spilled pages of `many`; the next clean reclaims their WAL.
    let out = lakelog(&["admin", "compact", "--min-chunks", "8", "--data-dir", &data])?;
    let compacted = String::from_utf8(out.stdout)?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ensure!(
        compacted.contains("compacted 1 logs") && compacted.contains("offsets [0, "),
        "{compacted}"
    );
    let out = lakelog(&["admin", "clean", "--grace", "0s", "--data-dir", &data])?;
    let cleaned = String::from_utf8(out.stdout)?;
    ensure!(!cleaned.contains("deleted 0 WAL objects"), "compaction freed nothing: {cleaned}");
    let again = String::from_utf8(
        lakelog(&["admin", "clean", "--grace", "0s", "--data-dir", &data])?.stdout,
    )?;
    ensure!(again.contains("deleted 0 WAL objects"), "{again}");

    // The live log reads back whole after cleaning.
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    ensure!(s.ok(&["log", "read", &kept], "")? == "0\tkept\n");
    ensure!(s.ok(&["log", "read", &many], "")? == lines, "compacted log reads differently");
    drop(s);

    let out = lakelog(&["admin", "clean", "--data-dir", &format!("{data}/nowhere")])?;
    let stderr = String::from_utf8(out.stderr)?;
    ensure!(out.status.code() == Some(1) && stderr.contains("NOT_FOUND"), "{stderr}");
    // Without --data-dir the cycle is asked of the role at --endpoint: none there is a clear
    // UNAVAILABLE, not a cycle run over some other store.
    let nobody = format!("http://127.0.0.1:{}", testkit::free_port()?);
    let out = lakelog(&["--endpoint", &nobody, "admin", "clean"])?;
    let stderr = String::from_utf8(out.stderr)?;
    ensure!(out.status.code() == Some(1) && stderr.contains("UNAVAILABLE"), "{stderr}");
    Ok(())
}

#[test]
fn a_running_standalone_answers_compactor_and_cleaner_status_and_cycles_on_its_one_port()
-> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    // The scheduled cycles (every 60 s) have not run yet.
    let status = s.ok(&["compactor", "status"], "")?;
    ensure!(
        status.contains("compactor standalone:") && status.contains("last cycle: none yet"),
        "{status}"
    );
    let (_gone, many, lines) = deleted_and_many(&s)?;
    // `many`'s floor holds the cutoff (at most its first chunk); the deleted log's objects
    // below it are kept inside the 10-minute grace period.
    let status = s.ok(&["cleaner", "status"], "")?;
    ensure!(status.contains(&format!("held back by log {many} (wal_floor)")), "{status}");
    let young = number_after(&status, "younger than 600s: ")?;
    ensure!(young >= 1 && status.contains("last cycle: none yet"), "{status}");

    let compacted = s.ok(&["admin", "compact", &many, "--min-chunks", "8"], "")?;
    ensure!(
        compacted.contains("compacted 1 logs")
            && compacted.contains(&format!("log {many}: offsets [0, ")),
        "{compacted}"
    );
    let status = s.ok(&["compactor", "status"], "")?;
    ensure!(
        status.contains("1 cycle(s) since it started")
            && status.contains(&format!("log {many}: offsets [0, "))
            && status.contains("claims held now: none"),
        "{status}"
    );
    let cleaned = s.ok(&["admin", "clean", "--grace", "0s"], "")?;
    let deleted = number_after(&cleaned, "deleted ")?;
    ensure!(deleted >= 3, "the deleted log's objects were not reclaimed: {cleaned}");
    let status = s.ok(&["cleaner", "status"], "")?;
    ensure!(status.contains(&format!("last cycle: deleted {deleted} WAL objects")), "{status}");
    ensure!(s.ok(&["log", "read", &many], "")? == lines, "compacted log reads differently");
    Ok(())
}

#[test]
fn kcat_lists_brokers_and_topics_of_a_standalone_and_auto_creates_a_topic() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "orders", "--partitions", "3"], "")?;
    let listed = testkit::kcat(&["-b", &s.kafka, "-L", "-m", "10"], "")?;
    let (host, port) = s.kafka.split_once(':').context("kafka address")?;
    ensure!(listed.contains(&format!("broker 0 at {host}:{port} (controller)")), "{listed}");
    ensure!(listed.contains("topic \"orders\" with 3 partitions"), "{listed}");
    ensure!(listed.contains("partition 2, leader 0, replicas: 0, isrs: 0"), "{listed}");
    // Metadata for a topic that does not exist creates it (Kafka's default), as a stream.
    let fresh = testkit::kcat(&["-b", &s.kafka, "-L", "-t", "fresh", "-m", "10"], "")?;
    ensure!(fresh.contains("topic \"fresh\" with 1 partitions"), "{fresh}");
    let streams = s.ok(&["stream", "list"], "")?;
    ensure!(streams.lines().any(|l| l.starts_with("fresh\t1\t")), "{streams}");
    Ok(())
}

#[test]
fn records_produced_by_kcat_are_consumed_by_lakelog_and_the_other_way_round() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let b = s.kafka.as_str();
    // kcat produces 100 keyed lines to a topic it creates by asking for it.
    let lines: String = (0..100).map(|i| format!("key{}:value-{i}\n", i % 7)).collect();
    testkit::kcat(&["-b", b, "-P", "-t", "mixed", "-K:"], &lines)?;
    let consumed = s.ok(&["consume", "mixed", "--from-beginning"], "")?;
    let want: String = (0..100).map(|i| format!("0\t{i}\tkey{}\tvalue-{i}\n", i % 7)).collect();
    ensure!(consumed == want, "lakelog consume read:\n{consumed}");
    // lakelog produces 50 more; kcat reads all 150 back, in order, with their keys.
    let more: String = (100..150).map(|i| format!("key{}|value-{i}\n", i % 7)).collect();
    s.ok(&["produce", "mixed", "--key-separator", "|"], &more)?;
    let read = testkit::kcat(
        &["-b", b, "-C", "-t", "mixed", "-o", "beginning", "-e", "-q", "-f", "%p\t%o\t%k\t%s\n"],
        "",
    )?;
    let want: String = (0..150).map(|i| format!("0\t{i}\tkey{}\tvalue-{i}\n", i % 7)).collect();
    ensure!(read == want, "kcat read:\n{read}");
    // From 10 before the end (ListOffsets latest, then Fetch from there).
    let tail =
        testkit::kcat(&["-b", b, "-C", "-t", "mixed", "-o", "-10", "-e", "-q", "-f", "%o\n"], "")?;
    let offsets: Vec<u64> = tail.lines().filter_map(|l| l.parse().ok()).collect();
    ensure!(offsets == (140..150).collect::<Vec<_>>(), "{tail}");
    Ok(())
}

/// Batches stay as their producer compressed them (ARCHITECTURE §5b); `lakelog consume`
/// decompresses them, and Kafka consumers get them as sent.
#[test]
fn compressed_batches_from_kcat_are_read_by_lakelog_consume_for_every_codec() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let b = s.kafka.as_str();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        // Repetitive lines, so every codec makes the batch smaller (librdkafka sends a batch
        // uncompressed when compressing does not pay).
        let lines: String = (0..500)
            .map(|i| format!("key{}:{codec} value {i} {}\n", i % 5, "x".repeat(40)))
            .collect();
        let topic = format!("z-{codec}");
        testkit::kcat(&["-b", b, "-P", "-t", &topic, "-K:", "-z", codec], &lines)?;
        let consumed = s.ok(&["consume", &topic, "--from-beginning"], "")?;
        let want: String = (0..500)
            .map(|i| format!("0\t{i}\tkey{}\t{codec} value {i} {}\n", i % 5, "x".repeat(40)))
            .collect();
        ensure!(consumed == want, "{codec}: lakelog consume read:\n{consumed}");
        let read = testkit::kcat(
            &["-b", b, "-C", "-t", &topic, "-o", "beginning", "-e", "-q", "-f", "%o\t%k\n"],
            "",
        )?;
        ensure!(read.lines().count() == 500, "{codec}: kcat read {} records", read.lines().count());
    }
    Ok(())
}

#[test]
fn python_kafka_clients_produce_100000_keyed_records_read_each_back_once_and_administer_topics()
-> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "py", "--partitions", "4"], "")?;
    // confluent-kafka (librdkafka 2.16) and kafka-python, half each; every record read back
    // once by each, at its acked offset, in its key's murmur2 partition.
    let out = Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/python_clients.py"))
        .args([&s.kafka, "py", "100000"])
        .output()
        .context("the Python clients (`make deps` installs them in .tools/venv)")?;
    ensure!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The same records through gRPC.
    let consumed = s.ok(&["consume", "py", "--from-beginning"], "")?;
    ensure!(consumed.lines().count() == 100_000, "{} lines", consumed.lines().count());
    // The admin API: create, grow, Kafka's refusals, delete.
    let out = Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/python_admin.py"))
        .arg(&s.kafka)
        .output()?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let streams = s.ok(&["stream", "list"], "")?;
    ensure!(!streams.contains("admin-made"), "the deleted topic is still a stream: {streams}");
    Ok(())
}

/// KIP-74 with a real consumer: records of about 900 KiB, a `fetch.max.bytes` that holds one of
/// them and a `receive.message.max.bytes` that holds less than three. A response filled past
/// the budget (one batch of every partition) is refused by librdkafka and the consumer never
/// gets past it.
#[test]
fn a_c_consumer_reads_large_records_within_a_small_fetch_max_bytes() -> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "large", "--partitions", "3"], "")?;
    let out = Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/fetch_max_bytes.py"))
        .args([&s.kafka, "large"])
        .output()
        .context("the Python clients (`make deps` installs them in .tools/venv)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
    ensure!(out.status.success(), "{tail:?}");
    eprintln!(
        "12 records of 900 KiB within fetch.max.bytes 1.2 MB in {}s",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(())
}

#[test]
fn the_java_kafka_client_with_its_defaults_produces_100000_records_and_reads_each_back_once()
-> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "jv", "--partitions", "3"], "")?;
    // org.apache.kafka:kafka-clients 4.x as Maven Central ships it, run from its source file:
    // idempotent, acks=all, its default partitioner; read back with its consumer.
    let out = Command::new("java")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!("{root}/.tools/java/*"))
        .arg(format!("{root}/e2e/kafka/java/JavaClients.java"))
        .args([&s.kafka, "jv", "100000"])
        .output()
        .context("java and the Java Kafka client (`make deps` puts it in .tools/java)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    ensure!(!stderr.contains("ERROR"), "{stderr}");
    let consumed = s.ok(&["consume", "jv", "--from-beginning"], "")?;
    ensure!(consumed.lines().count() == 100_000, "{} lines", consumed.lines().count());
    Ok(())
}

/// The Java client's KIP-848 consumer (`group.protocol=consumer`): the coordinator assigns a
/// 6-partition topic to one member, splits it when a second joins (revoked before it moves:
/// the test fails if two members own a partition at once or one is fenced), gives everything
/// to the second when the first leaves; every record is read, the committed offsets end at the
/// partitions' ends, and a new member reads nothing again (e2e/kafka/java/JavaGroup.java).
#[test]
fn the_java_kafka_client_consumes_in_a_kip848_group_assigned_by_the_coordinator() -> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "jg", "--partitions", "6"], "")?;
    let out = Command::new("java")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(format!("{root}/.tools/java/*"))
        .arg(format!("{root}/e2e/kafka/java/JavaGroup.java"))
        .args([&s.kafka, "jg", "20000", "jgroup"])
        .output()
        .context("java and the Java Kafka client (`make deps` puts it in .tools/java)")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{}{stderr}", String::from_utf8_lossy(&out.stdout));
    ensure!(!stderr.contains("ERROR"), "{stderr}");
    // The group's committed offsets are cursors: the whole backlog consumed.
    let described = s.ok(&["group", "describe", "jgroup", "--kafka", &s.kafka], "")?;
    eprintln!("{described}");
    Ok(())
}

/// `lakelog group`: a confluent-kafka member consumes and commits; `describe` shows it, its
/// partitions, committed offsets and lag; `reset` is refused while it is active and moves the
/// offsets once it left, and a new member then starts there; `delete` removes the group, and a
/// second delete is one clear line.
#[test]
fn lakelog_group_lists_describes_resets_and_deletes_a_kafka_consumer_group() -> Result<()> {
    group_cli_round("classic")
}

/// A cooperative-sticky classic group settles after the many subscription changes of
/// librdkafka's own test of them (e2e/kafka/cooperative_playbook.py): 8 consumers, each of
/// the three variations of the other subscription (both topics, the second, none).
#[test]
fn a_cooperative_sticky_group_settles_through_repeated_subscription_changes() -> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    for variation in ["0", "1", "2"] {
        let out = Command::new(format!("{root}/.tools/venv/bin/python"))
            .arg(format!("{root}/e2e/kafka/cooperative_playbook.py"))
            .args([s.kafka.as_str(), variation])
            .output()
            .context("confluent-kafka (`make deps` installs it in .tools/venv)")?;
        let said = String::from_utf8_lossy(&out.stdout);
        ensure!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
        eprintln!("{}", said.trim());
    }
    Ok(())
}

/// The same with the KIP-848 protocol: `describe` shows the coordinator's assignment
/// (ConsumerGroupDescribe), and `reset` is refused while the member is in the group.
#[test]
fn lakelog_group_describes_and_resets_a_kip848_consumer_group() -> Result<()> {
    group_cli_round("consumer")
}

fn group_cli_round(protocol: &str) -> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    s.ok(&["stream", "create", "ev", "--partitions", "2"], "")?;
    let lines: String = (0..40).map(|i| format!("k{i}:v{i}\n")).collect();
    testkit::kcat(&["-b", &s.kafka, "-P", "-t", "ev", "-K:"], &lines)?;
    let out = dir.path().join("member.txt");
    let member = || {
        Command::new(format!("{root}/.tools/venv/bin/python"))
            .arg(format!("{root}/e2e/kafka/group_consumer.py"))
            .args([s.kafka.as_str(), "ev", "app"])
            .arg(&out)
            .arg(protocol)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("confluent-kafka (`make deps` installs it in .tools/venv)")
    };
    let consumed = |path: &Path| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count()
    };
    let group = |args: &[&str]| -> Result<String> {
        let mut all = vec!["group", "--kafka", s.kafka.as_str()];
        all.extend_from_slice(args);
        s.ok(&all, "")
    };
    let mut m = member()?;
    let start = std::time::Instant::now();
    while consumed(&out) < 40 {
        ensure!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the member consumed {}",
            consumed(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(2)); // its auto-commit (500 ms)
    ensure!(group(&["list"])?.starts_with("app\tStable\tconsumer"), "{}", group(&["list"])?);
    let d = group(&["describe", "app"])?;
    ensure!(
        d.contains("state:    Stable") && d.contains("members:  1") && d.contains("ev:0,1"),
        "{d}"
    );
    let kind =
        if protocol == "consumer" { "protocol: consumer/uniform" } else { "protocol: consumer/" };
    ensure!(d.contains(kind), "{d}");
    let ends: Vec<&str> = d.lines().filter(|l| l.starts_with("ev\t")).collect();
    ensure!(
        ends.len() == 2 && ends.iter().all(|l| l.ends_with("\t0")),
        "committed at the end, lag 0:\n{d}"
    );
    let (code, err) = s.err(
        &["group", "--kafka", &s.kafka, "reset", "app", "--topic", "ev", "--to-earliest"],
        "",
    )?;
    ensure!(
        code == 1 && err.starts_with("lakelog: FAILED_PRECONDITION") && err.lines().count() == 1,
        "{err}"
    );
    std::fs::write(dir.path().join("member.txt.stop"), "")?;
    m.wait()?;
    // No members, offsets kept: listed Empty.
    let listed = group(&["list"])?;
    ensure!(listed == "app\tEmpty\tconsumer\n", "{listed}");
    let reset = group(&["reset", "app", "--topic", "ev", "--to-earliest"])?;
    ensure!(reset == "ev\t0\t0\nev\t1\t0\n", "{reset}");
    let d = group(&["describe", "app"])?;
    ensure!(d.contains("state:    Empty") && d.contains("members:  0"), "{d}");
    let lag: u64 = d
        .lines()
        .filter(|l| l.starts_with("ev\t"))
        .filter_map(|l| l.rsplit('\t').next()?.parse::<u64>().ok())
        .sum();
    ensure!(lag == 40, "after the reset the lag is every record: {lag}\n{d}");
    // A new member of the group starts at the reset offsets: all 40 again.
    let again = dir.path().join("again.txt");
    let mut m2 = Command::new(format!("{root}/.tools/venv/bin/python"))
        .arg(format!("{root}/e2e/kafka/group_consumer.py"))
        .args([s.kafka.as_str(), "ev", "app"])
        .arg(&again)
        .arg(protocol)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let start = std::time::Instant::now();
    while consumed(&again) < 40 {
        ensure!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "the new member consumed {}",
            consumed(&again)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::fs::write(dir.path().join("again.txt.stop"), "")?;
    m2.wait()?;
    group(&["delete", "app"])?;
    let (code, err) = s.err(&["group", "--kafka", &s.kafka, "delete", "app"], "")?;
    ensure!(code == 1 && err.contains("GroupIdNotFound") && err.lines().count() == 1, "{err}");
    Ok(())
}

/// A lake stream (docs/lake.md) end to end: kcat produces to it (plain and gzip batches, with
/// and without headers); `admin compact` makes its segments its table's Parquet files; kcat
/// then reads every record from offset 0 out of them exactly as before; DuckDB (by the
/// metadata location `lake status` names) and pyiceberg (through the catalog's Iceberg REST
/// catalog) read the same records from the table; writes through the REST catalog are refused.
#[test]
fn a_lake_streams_records_read_the_same_through_kafka_duckdb_and_pyiceberg() -> Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = tempfile::tempdir()?;
    let s = Standalone::start(dir.path(), testkit::free_port()?)?;
    let b = s.kafka.as_str();
    let created = s.ok(&["stream", "create", "lk", "--partitions", "2", "--lake-table"], "")?;
    ensure!(created.contains("lake table: yes"), "{created}");
    let plain: String = (0..300).map(|i| format!("key{}:plain value {i}\n", i % 7)).collect();
    testkit::kcat(&["-b", b, "-P", "-t", "lk", "-K:"], &plain)?;
    let zipped: String =
        (300..600).map(|i| format!("key{}:zipped {i} {}\n", i % 5, "y".repeat(30))).collect();
    testkit::kcat(&["-b", b, "-P", "-t", "lk", "-K:", "-z", "gzip", "-H", "h=v"], &zipped)?;
    let read = || {
        let out = testkit::kcat(
            &[
                "-b",
                b,
                "-C",
                "-t",
                "lk",
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
        anyhow::Ok(lines)
    };
    let before = read()?;
    ensure!(before.len() == 600, "{} records read before compaction", before.len());
    // A flush after them (to another topic) moves the writer's low-water mark past theirs;
    // then two cycles: the first sees each log's head, the second finds it idle and compacts
    // all of it.
    testkit::kcat(&["-b", b, "-P", "-t", "other"], "one\n")?;
    let status = s.ok(&["lake", "status", "lk"], "")?;
    ensure!(status.contains("lag:        600 records"), "{status}");
    let mut cycles = String::new();
    for _ in 0..2 {
        cycles += &s.ok(&["admin", "compact", "--min-chunks", "1"], "")?;
    }
    let status = s.ok(&["lake", "status", "lk"], "")?;
    ensure!(status.contains("lag:        0 records, 0.0 s"), "{status}\n{cycles}");
    let meta = status
        .lines()
        .find_map(|l| l.strip_prefix("metadata:   "))
        .context("no metadata location")?
        .to_owned();
    ensure!(meta.starts_with("file://") && meta.ends_with(".metadata.json"), "{meta}");
    // Every record, from offset 0, now out of the Parquet files: as before.
    let after = read()?;
    ensure!(after == before, "kcat reads differently from the lake segments");
    let python = format!("{root}/.tools/venv/bin/python");
    let script = format!("{root}/e2e/lake/read_table.py");
    let engine = |args: &[&str]| {
        let out = Command::new(&python)
            .arg(&script)
            .args(args)
            .output()
            .context("DuckDB and pyiceberg in .tools/venv (`make deps` installs them)")?;
        ensure!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        anyhow::Ok(String::from_utf8(out.stdout)?.lines().map(str::to_owned).collect::<Vec<_>>())
    };
    let duck = engine(&["duckdb", &meta])?;
    ensure!(
        duck == before,
        "DuckDB read {} rows: {:?}",
        duck.len(),
        duck.iter().take(3).collect::<Vec<_>>()
    );
    let uri = format!("{}/iceberg", s.endpoint);
    let py = engine(&["pyiceberg", &uri, "lk"])?;
    ensure!(
        py == before,
        "pyiceberg read {} rows: {:?}",
        py.len(),
        py.iter().take(3).collect::<Vec<_>>()
    );
    // Engines read; they never write: a create through the catalog is refused.
    let refused = Command::new(&python)
        .args(["-c", "import sys, urllib.request as u\ntry:\n    u.urlopen(u.Request(sys.argv[1], data=b'{}', method='POST'))\nexcept Exception as e:\n    print(e.code)"])
        .arg(format!("{uri}/v1/namespaces/lakelog/tables"))
        .output()?;
    ensure!(String::from_utf8_lossy(&refused.stdout).trim() == "403", "{refused:?}");
    Ok(())
}
