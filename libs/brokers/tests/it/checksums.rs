//! A batch's entry checksum is derived from the batch's own CRC (checked by the front end)
//! rather than computed over every byte again: the entry stored is whole for a batch as sent
//! and for one the writer stamped with its time (a copy whose CRC was computed again).

use std::sync::Arc;

use anyhow::{Result, anyhow, ensure};
use catalog::Catalog;
use futures::TryStreamExt;
use kafka::Partitions;
use metadata::MetadataStore;
use objstore::object_store::{ObjectStore, ObjectStoreExt};
use recordbatch::{BatchHeader, ProducerFields, Record};

const CLUSTER: &str = "t";

/// One batch of three records, with or without a producer.
fn batch(producer_id: i64) -> Result<bytes::Bytes> {
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            offset_delta: i,
            value: Some(bytes::Bytes::from(vec![b'a' + i as u8; 700])),
            ..Default::default()
        })
        .collect();
    let producer = ProducerFields { producer_id, producer_epoch: 0, base_sequence: 0 };
    Ok(recordbatch::encode(&records, producer)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_of_sent_and_stamped_batches_are_stored_whole() -> Result<()> {
    let meta: Arc<dyn MetadataStore> = Arc::new(metadata::MemoryStore::new());
    let objects: Arc<dyn ObjectStore> = Arc::new(objstore::object_store::memory::InMemory::new());
    let (w, broker) = crate::writer(&meta, &objects, CLUSTER, "w0").await?;
    let catalog = Catalog::new(meta.clone(), w.reader().clone(), CLUSTER);
    let stamped = catalog::StreamConfig::from_pairs([("message.timestamp.type", "LogAppendTime")])?;
    catalog.create("sent", 1, Default::default()).await?;
    catalog.create("stamped", 1, stamped).await?;
    let (id, _) =
        broker.init_producer_id(None).await.map_err(|c| anyhow!("InitProducerId: error {c}"))?;
    let mut sent = Vec::new();
    for (topic, producer) in [("sent", -1), ("stamped", -1), ("sent", id), ("stamped", id)] {
        let b = batch(producer)?;
        let header = BatchHeader::parse(&b)?;
        let commit = broker
            .produce(topic, 0, None, b.clone(), &header, None)
            .await
            .map_err(|r| anyhow!("{topic}: refused {r:?}"))?;
        commit.await.map_err(|r| anyhow!("{topic}: not committed {r:?}"))?;
        sent.push((topic, b));
    }
    w.shutdown().await;

    // Every entry of every WAL object decodes (its checksum checked) and holds a valid batch:
    // the ones sent as they were, the stamped ones with the writer's time.
    let mut stored = Vec::new();
    let prefix = objstore::object_store::path::Path::from(objstore::keys::WAL_DIR);
    let listed: Vec<_> = objects.list(Some(&prefix)).try_collect().await?;
    for o in listed {
        let bytes = objects.get(&o.location).await?.bytes().await?;
        for (_, entries) in wal::decode_object(&bytes, wal::ObjectKind::Wal)? {
            stored.extend(entries.into_iter().map(|e| e.payload));
        }
    }
    ensure!(stored.len() == sent.len(), "{} entries stored of {}", stored.len(), sent.len());
    for (payload, (topic, b)) in stored.iter().zip(&sent) {
        let h = recordbatch::validate(payload)?;
        match *topic {
            "sent" => ensure!(payload == b, "a batch was stored other than sent"),
            _ => ensure!(h.log_append_time() && payload != b, "a batch was stored unstamped"),
        }
    }
    Ok(())
}
