//! The transaction APIs a partition's owner serves (ARCHITECTURE §12): WriteTxnMarkers, the
//! inter-broker request by which a transaction's coordinator ends it on each of its
//! partitions. CLUSTER_ACTION on the cluster, as Kafka asks of it.

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use security::acl::Operation;

use crate::api::{Admission, Ctx, Handler};
use crate::session::Session;
use crate::transactions::Marker;
use crate::{Broker, Refused};

/// WriteTxnMarkers: each marker appended to each of its partitions (those led elsewhere
/// answered NOT_LEADER_OR_FOLLOWER), each answered once its marker is durable.
#[derive(Debug)]
pub struct WriteTxnMarkers;

impl Handler for WriteTxnMarkers {
    const KEY: ApiKey = ApiKey::WriteTxnMarkers;
    const VERSIONS: (i16, i16) = (1, 1);
    type Request = WriteTxnMarkersRequest;

    fn serve(req: Self::Request, ctx: Ctx, _: &mut Session) -> Admission<'_> {
        let allowed = crate::authz::cluster(ctx.access(), Operation::Admin);
        ctx.later(move |ctx| async move {
            let code = (!allowed).then_some(crate::authz::CLUSTER_AUTHORIZATION_FAILED);
            write_markers(req, ctx.broker.as_ref(), code).await
        })
    }
}

/// Appends every marker of `req` (each refused with `refused`, when given), in order: a
/// partition's markers are admitted in the request's order; all are awaited together.
pub(crate) async fn write_markers(
    req: WriteTxnMarkersRequest,
    broker: &dyn Broker,
    refused: Option<i16>,
) -> WriteTxnMarkersResponse {
    let mut admitted = Vec::new();
    for m in &req.markers {
        let marker = Marker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
        };
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in &m.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for p in &t.partition_indexes {
                let r = match refused {
                    Some(code) => Err(Refused::new(code, "may not write transaction markers")),
                    None => broker.write_marker(&t.name.0, *p, marker).await,
                };
                partitions.push((*p, r));
            }
            topics.push((t.name.clone(), partitions));
        }
        admitted.push((m.producer_id, topics));
    }
    let mut markers = Vec::with_capacity(admitted.len());
    for (producer_id, topics) in admitted {
        let mut out = Vec::with_capacity(topics.len());
        for (name, partitions) in topics {
            let mut results = Vec::with_capacity(partitions.len());
            for (index, r) in partitions {
                let code = match r {
                    Ok(commit) => commit.await.err().map_or(0, |e| e.code),
                    Err(e) => e.code,
                };
                results.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code),
                );
            }
            out.push(
                WritableTxnMarkerTopicResult::default().with_name(name).with_partitions(results),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default().with_producer_id(producer_id).with_topics(out),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}
