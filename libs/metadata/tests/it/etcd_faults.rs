//! Fault injection against a real etcd: a paused server makes writes "outcome unknown" and
//! reads "unavailable", never a definite answer and never a silent retry.

use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use metadata::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_write_timeout_reports_outcome_unknown() -> Result<()> {
    let etcd = testkit::Etcd::start()?;
    let mut cfg = testkit::etcd_config(etcd.endpoint());
    cfg.request_timeout = config::Duration(Duration::from_millis(500));
    let store = EtcdStore::connect(&cfg).await?;
    store.put(b"/faults/k", b"before", 0).await?;

    etcd.pause()?;
    let write = store.put(b"/faults/k", b"during", 0).await;
    let read = store.get(b"/faults/k").await;
    etcd.resume()?;

    match write {
        Err(e @ MetaError::OutcomeUnknown { .. }) => {
            ensure!(!e.outcome_known() && e.is_retryable())
        }
        other => return Err(anyhow!("write to a paused etcd answered {other:?}")),
    }
    match read {
        Err(MetaError::Unavailable(_)) => {}
        other => return Err(anyhow!("read from a paused etcd answered {other:?}")),
    }
    // The store did not retry on its own; whatever landed is resolved by reading.
    let after = store.get(b"/faults/k").await?.map(|kv| kv.value);
    ensure!(after == Some(b"before".to_vec()) || after == Some(b"during".to_vec()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_connect_to_nothing_fails_with_unavailable() -> Result<()> {
    let port = testkit::free_port()?;
    let mut cfg = testkit::etcd_config(&format!("http://127.0.0.1:{port}"));
    cfg.connect_timeout = config::Duration(Duration::from_millis(500));
    match EtcdStore::connect(&cfg).await {
        Err(MetaError::Unavailable(m)) => ensure!(m.contains(&port.to_string()), "{m}"),
        other => return Err(anyhow!("connect to a closed port answered {other:?}")),
    }
    Ok(())
}
