//! gRPC health that follows the stores: NOT_SERVING until the metadata store AND object storage
//! answer, and again whenever either stops answering (probed every [`PROBE_EVERY`]). Set for
//! the server as a whole (`""`, what Kubernetes' gRPC probes ask) and for each named service.

use std::sync::Arc;
use std::time::Duration;

use metadata::MetadataStore;
use objstore::object_store::{ObjectStore, ObjectStoreExt};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// How often the stores are probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How long one probe may take before it counts as no answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether both stores answer now: a metadata read and an object HEAD (an object that does not
/// exist is an answer).
pub async fn stores_answer(
    meta: &dyn MetadataStore,
    objects: &dyn ObjectStore,
) -> Result<(), String> {
    match tokio::time::timeout(PROBE_TIMEOUT, meta.get(b"/lakelog-health-probe")).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("metadata store: {e}")),
        Err(_) => return Err("metadata store: no answer".to_owned()),
    }
    let probe = objstore::Path::from("health/probe");
    match tokio::time::timeout(PROBE_TIMEOUT, objects.head(&probe)).await {
        Ok(Ok(_)) | Ok(Err(objstore::object_store::Error::NotFound { .. })) => Ok(()),
        Ok(Err(e)) => Err(format!("object store: {e}")),
        Err(_) => Err("object store: no answer".to_owned()),
    }
}

/// Sets `services` (and the server, `""`) NOT_SERVING now, then follows the stores until the
/// returned task is aborted.
pub async fn follow_stores(
    reporter: HealthReporter,
    services: Vec<String>,
    meta: Arc<dyn MetadataStore>,
    objects: Arc<dyn ObjectStore>,
) -> tokio::task::JoinHandle<()> {
    let names: Vec<String> = std::iter::once(String::new()).chain(services).collect();
    for n in &names {
        reporter.set_service_status(n, ServingStatus::NotServing).await;
    }
    tokio::spawn(async move {
        let mut serving = false;
        loop {
            let answer = stores_answer(meta.as_ref(), objects.as_ref()).await;
            if answer.is_ok() != serving {
                serving = answer.is_ok();
                match &answer {
                    Ok(()) => tracing::info!("stores answer: SERVING"),
                    Err(e) => tracing::warn!(error = %e, "a store does not answer: NOT_SERVING"),
                }
                telemetry::set_serving(serving);
                let status =
                    if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
                for n in &names {
                    reporter.set_service_status(n, status).await;
                }
            }
            tokio::time::sleep(if serving { PROBE_EVERY } else { PROBE_EVERY / 4 }).await;
        }
    })
}
