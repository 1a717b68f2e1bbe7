//! The embedded store survives kill -9: a child process writes and reports each acknowledged
//! write; the test kills it mid-stream and checks, after reopening, that every acknowledged
//! write is there and that no transaction was applied in part.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use metadata::*;

const DB_ENV: &str = "LAKELOG_CRASH_CHILD_DB";

/// The child's body. Ignored in normal runs: the crash test starts it in a separate process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run only as the child process of embedded_store_keeps_acknowledged_writes_across_kill_9"]
async fn embedded_crash_child() -> Result<()> {
    let path = std::env::var(DB_ENV).context("child started without its database path")?;
    let store = EmbeddedStore::open(std::path::Path::new(&path)).await?;
    for i in 0u64.. {
        // Two keys per txn: after the crash, both exist or neither does.
        let txn = Txn::new().and_then([
            TxnOp::put(format!("/crash/a/{i:08}"), i.to_string()),
            TxnOp::put(format!("/crash/b/{i:08}"), i.to_string()),
        ]);
        let rev = store.txn(txn).await?.revision;
        println!("ACK {i} {rev}");
    }
    Ok(())
}

#[test]
fn embedded_store_keeps_acknowledged_writes_across_kill_9() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("meta.redb");
    let mut acked_total = 0u64;
    // Two crashes in a row: recovery after a crash must itself be crash-safe.
    for round in 0..2 {
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                "--ignored",
                "--exact",
                "embedded_crash::embedded_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DB_ENV, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().context("child stdout")?;
        let mut last_ack = None;
        let target = 150;
        let mut count = 0;
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            if let Some(rest) = line.strip_prefix("ACK ") {
                let mut parts = rest.split(' ');
                let i: u64 = parts.next().context("ack index")?.parse()?;
                let rev: i64 = parts.next().context("ack revision")?.parse()?;
                last_ack = Some((i, rev));
                count += 1;
                if count >= target {
                    break;
                }
            }
        }
        // SIGKILL while the child keeps writing.
        child.kill()?;
        child.wait()?;
        let (last_i, last_rev) = last_ack.context("child acknowledged nothing")?;
        acked_total = acked_total.max(last_i + 1);

        let rt = tokio::runtime::Runtime::new()?;
        rt.block_on(async {
            let store = EmbeddedStore::open(&db).await?;
            let a = store.range(RangeRequest::prefix("/crash/a/")).await?;
            let b = store.range(RangeRequest::prefix("/crash/b/")).await?;
            ensure!(
                a.count as u64 >= acked_total,
                "round {round}: {} of {acked_total} acknowledged writes survived",
                a.count
            );
            ensure!(
                a.count == b.count,
                "round {round}: a half-applied transaction survived the crash"
            );
            for i in 0..acked_total {
                let kv = store.get(format!("/crash/a/{i:08}").as_bytes()).await?;
                ensure!(
                    kv.map(|kv| kv.value) == Some(i.to_string().into_bytes()),
                    "acknowledged write {i} lost"
                );
            }
            ensure!(a.revision >= last_rev, "revision went back from {last_rev} to {}", a.revision);
            anyhow::Ok(())
        })?;
        drop(rt);
        // Let the file lock go before the next child opens the database.
        std::thread::sleep(Duration::from_millis(100));
        let _ = round;
    }
    Ok(())
}
