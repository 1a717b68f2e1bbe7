//! The watchers of the in-process stores (embedded and memory): each a bounded queue of event
//! batches for one key range, fed in revision order by the store's writes, read as a
//! [`WatchStream`] that first replays the past batches a watch from an old revision asked for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use crate::store::WatchStream;
use crate::types::{KeyRange, MetaError, WatchEvent};

/// Watch batches a slow watcher may have queued before it is cut off (bounded memory).
const WATCH_QUEUE: usize = 4096;

pub(crate) struct Watcher {
    range: KeyRange,
    tx: mpsc::Sender<Vec<WatchEvent>>,
    lagged: Arc<AtomicBool>,
}

/// A new watcher of `range` (to keep in the store's list) and its stream, which yields `past`
/// first, then what [`publish`] sends it.
pub(crate) fn watch(range: KeyRange, past: Vec<Vec<WatchEvent>>) -> (Watcher, WatchStream) {
    let (tx, rx) = mpsc::channel(WATCH_QUEUE);
    let lagged = Arc::new(AtomicBool::new(false));
    let watcher = Watcher { range, tx, lagged: lagged.clone() };
    let live = futures::stream::unfold(Some(rx), move |state| {
        let lagged = lagged.clone();
        async move {
            let mut rx = state?;
            match rx.recv().await {
                Some(batch) => Some((Ok(batch), Some(rx))),
                None if lagged.load(Ordering::SeqCst) => Some((
                    Err(MetaError::Unavailable(
                        "watch fell behind and was cut off; watch again from the last revision seen".to_owned(),
                    )),
                    None,
                )),
                None => Some((Err(MetaError::Unavailable("metadata store closed".to_owned())), None)),
            }
        }
    });
    let past = futures::stream::iter(past.into_iter().map(Ok));
    (watcher, Box::pin(futures::StreamExt::chain(past, live)))
}

/// Sends one revision's events to every watcher of a matching range. A watcher whose queue is
/// full is cut off (its stream ends with an error saying so) rather than buffering without
/// bound; a watcher whose stream was dropped is forgotten.
pub(crate) fn publish(watchers: &mut Vec<Watcher>, events: &[WatchEvent]) {
    watchers.retain(|w| {
        let batch: Vec<WatchEvent> =
            events.iter().filter(|e| w.range.contains(&e.kv.key)).cloned().collect();
        if batch.is_empty() {
            return !w.tx.is_closed();
        }
        match w.tx.try_send(batch) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                w.lagged.store(true, Ordering::SeqCst);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    });
}
