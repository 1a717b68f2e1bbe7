//! A value built from every key under a prefix and rebuilt whenever one of them changes: read
//! whole, then watched from the next revision; any event (or a watch that ends) reads the
//! prefix whole again. For small, rarely written areas every role keeps in memory
//! (credentials and ACLs, the stream names of logs).

use std::sync::Arc;
use std::time::Duration;

use crate::{KeyRange, KeyValue, MetaError, MetadataStore, RangeRequest, Revision, WatchRequest};

/// The latest value built, and the revision it was read at. Cheap to clone; the watch stops
/// once every clone is dropped.
#[derive(Debug)]
pub struct Followed<T> {
    rx: tokio::sync::watch::Receiver<Arc<(T, Revision)>>,
}

impl<T> Clone for Followed<T> {
    fn clone(&self) -> Self {
        Followed { rx: self.rx.clone() }
    }
}

impl<T> Followed<T> {
    /// The value as last built.
    pub fn current(&self) -> Arc<(T, Revision)> {
        self.rx.borrow().clone()
    }

    /// Waits, at most `within`, until the value was built at `revision` or later.
    pub async fn caught_up(&mut self, revision: Revision, within: Duration) -> bool {
        let wait = self.rx.wait_for(|v| v.1 >= revision);
        matches!(tokio::time::timeout(within, wait).await, Ok(Ok(_)))
    }
}

/// Reads `prefix` whole and builds the first value (an error if the read fails), then keeps it
/// current in a task (read failures are retried every half second and logged).
pub async fn follow<T, F>(
    meta: Arc<dyn MetadataStore>,
    prefix: Vec<u8>,
    build: F,
) -> Result<Followed<T>, MetaError>
where
    T: Send + Sync + 'static,
    F: Fn(Vec<KeyValue>) -> T + Send + Sync + 'static,
{
    let r = meta.range(RangeRequest::prefix(prefix.clone())).await?;
    let (tx, rx) = tokio::sync::watch::channel(Arc::new((build(r.kvs), r.revision)));
    tokio::spawn(keep(meta, prefix, build, tx, r.revision));
    Ok(Followed { rx })
}

async fn keep<T, F>(
    meta: Arc<dyn MetadataStore>,
    prefix: Vec<u8>,
    build: F,
    tx: tokio::sync::watch::Sender<Arc<(T, Revision)>>,
    mut revision: Revision,
) where
    F: Fn(Vec<KeyValue>) -> T,
{
    let retry = Duration::from_millis(500);
    loop {
        let req =
            WatchRequest { range: KeyRange::prefix(prefix.clone()), start_revision: revision + 1 };
        // Biased: a closed receiver wins over a ready event, so what runs does not depend on
        // tokio's random branch order (the simulation replays every run exactly).
        match meta.watch(req).await {
            Ok(mut events) => tokio::select! {
                biased;
                _ = tx.closed() => return,
                _ = futures::StreamExt::next(&mut events) => {}
            },
            Err(_) => tokio::select! {
                biased;
                _ = tx.closed() => return,
                _ = tokio::time::sleep(retry) => {}
            },
        }
        match meta.range(RangeRequest::prefix(prefix.clone())).await {
            Ok(r) => {
                revision = r.revision;
                let _ = tx.send(Arc::new((build(r.kvs), r.revision)));
            }
            Err(e) => {
                tracing::warn!(prefix = %String::from_utf8_lossy(&prefix), error = %e, "re-reading a followed prefix failed; retrying");
                tokio::select! {
                    biased;
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
        }
    }
}
