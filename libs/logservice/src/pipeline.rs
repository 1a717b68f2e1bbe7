//! AppendStream: a client's pipeline of appends on one gRPC stream. Requests are admitted one
//! at a time in the order they arrive (so they commit in that order, invariant 7) and answered
//! in that order; a client keeps several in flight instead of waiting a flush per entry.
//!
//! Order on failure: each log's appends in one stream share a [`Chain`]. Once one fails —
//! refused at admission, or failed at its commit — every later append to that log in the
//! stream fails with nothing applied (refused before admission, or culled by the writer before
//! its commit), so the client can send them again, in order, after the one that failed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{FuturesOrdered, Stream, StreamExt};
use logstore::{Chain, Conditions, LogEntryHeader, LogError, LogId, LogStorage};
use proto::log::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

use crate::status::append_error;

/// Appends one stream may have admitted and not yet answered; at this many it reads no further
/// request until the oldest is answered (the buffer's budget bounds their bytes).
pub const MAX_IN_FLIGHT: usize = 64;

/// Logs one stream may append to; a request naming one more is refused (INVALID_ARGUMENT), so
/// a stream's state stays bounded.
pub const MAX_LOGS: usize = 4096;

/// The answers of one stream, in request order.
pub type Answers = Pin<Box<dyn Stream<Item = Result<pb::AppendStreamResponse, Status>> + Send>>;

type Answer = Pin<Box<dyn std::future::Future<Output = pb::AppendStreamResponse> + Send>>;

/// Serves one AppendStream: admits `requests` in order through `storage`, answers each in
/// order. Appends admitted before the client hangs up still commit or fail as usual.
pub fn serve<S>(storage: LogStorage, mut requests: S) -> Answers
where
    S: Stream<Item = Result<pb::AppendRequest, Status>> + Send + Unpin + 'static,
{
    let (tx, mut rx) = mpsc::channel(MAX_IN_FLIGHT);
    let closed = storage.closed();
    tokio::spawn(async move {
        tokio::pin!(closed);
        let mut chains: HashMap<u64, Arc<Chain>> = HashMap::new();
        let mut answers: FuturesOrdered<Answer> = FuturesOrdered::new();
        let (mut reading, mut closing) = (true, false);
        // A request refused before it was read (by the gRPC guard: PERMISSION_DENIED): the
        // stream ends with it once the appends before it are answered.
        let mut refused: Option<Status> = None;
        loop {
            tokio::select! {
                biased;
                Some(a) = answers.next(), if !answers.is_empty() => {
                    if tx.send(Ok(a)).await.is_err() {
                        return;
                    }
                }
                // The writer is closing: admit nothing more, answer what was admitted, then end
                // the stream saying so (a client holding it open must not hold the drain up).
                () = &mut closed, if reading => (reading, closing) = (false, true),
                next = requests.next(), if reading && answers.len() < MAX_IN_FLIGHT => match next {
                    Some(Ok(req)) => answers.push_back(admit(&storage, &mut chains, req).await),
                    Some(Err(s)) if s.metadata().get(codes::CODE_KEY).is_some() => {
                        (reading, refused) = (false, Some(s));
                    }
                    // The client finished sending (or went away): answer what was admitted.
                    Some(Err(_)) | None => reading = false,
                },
                else => break,
            }
        }
        if let Some(s) = refused {
            let _ = tx.send(Err(s)).await;
        } else if closing {
            let e = LogError::Unavailable {
                message: "writer is shutting down: appends of this stream not answered were not \
                          admitted"
                    .to_owned(),
                outcome_unknown: false,
            };
            let _ = tx.send(Err(crate::status::to_status(e))).await;
        }
    });
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// Admits one request (waiting for buffer room as Append does) and returns its answer to come.
async fn admit(
    storage: &LogStorage,
    chains: &mut HashMap<u64, Arc<Chain>>,
    req: pb::AppendRequest,
) -> Answer {
    let refused = |e: LogError| -> Answer { Box::pin(std::future::ready(answer(Err(e)))) };
    if req.expected_offset.is_some() {
        return refused(LogError::InvalidArgument(
            "expected_offset is not taken in AppendStream: send conditional appends with Append"
                .to_owned(),
        ));
    }
    if !chains.contains_key(&req.log_id) && chains.len() >= MAX_LOGS {
        return refused(LogError::InvalidArgument(format!(
            "one AppendStream appends to at most {MAX_LOGS} logs: open another stream"
        )));
    }
    let chain = chains.entry(req.log_id).or_default().clone();
    let log = LogId(req.log_id);
    let slot = if req.slot.is_empty() { storage.config().zone.clone() } else { req.slot };
    // A refusal breaks the chain too: the stream's later appends to the log fail.
    let opts =
        Conditions { chain: Some(chain), overhead: crate::STREAMED_OVERHEAD, ..Default::default() };
    let payload = crate::own(req.payload);
    match storage.submit_in_slot(log, &slot, req.record_count, payload, opts).await {
        Ok(committing) => Box::pin(async move { answer(committing.await) }),
        Err(e) => refused(e),
    }
}

fn answer(r: Result<LogEntryHeader, LogError>) -> pb::AppendStreamResponse {
    match r {
        Ok(h) => pb::AppendStreamResponse { header: Some(crate::service::header(h)), error: None },
        Err(e) => pb::AppendStreamResponse { header: None, error: Some(append_error(&e)) },
    }
}
