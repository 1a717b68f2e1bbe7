//! The writer's gRPC service against a real etcd and a real S3 server (SeaweedFS).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use client::LogClient;
use logstore::{LogStorage, LogStorageConfig, SystemClock};

/// A writer role served on a free port, with the stores it uses.
struct Served {
    addr: std::net::SocketAddr,
    storage: LogStorage,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<()>,
}

async fn serve_writer() -> Result<Served> {
    serve_writer_with(|_| {}).await
}

async fn serve_writer_with(tune: impl FnOnce(&mut LogStorageConfig)) -> Result<Served> {
    let etcd = testkit::shared_etcd()?;
    let cluster = testkit::unique_prefix("writer");
    let meta = metadata::EtcdStore::connect(&testkit::etcd_config(etcd.endpoint())).await?;
    let s3 = testkit::shared_s3()?.s3().config(&cluster);
    let objects = objstore::build(&config::ObjectStoreConfig::S3(s3))?;
    let mut cfg = LogStorageConfig::new(&cluster, "w1");
    cfg.flush_interval = Duration::from_millis(5);
    tune(&mut cfg);
    let storage = LogStorage::open(Arc::new(meta), objects, cfg, Arc::new(SystemClock)).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = storage.clone();
    let server = tokio::spawn(async move {
        let _ = writer::serve(served, listener, async {
            let _ = stopped.await;
        })
        .await;
    });
    Ok(Served { addr, storage, stop, server })
}

async fn start_writer()
-> Result<(LogClient, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)> {
    let s = serve_writer().await?;
    let client = LogClient::connect(&format!("http://{}", s.addr)).await?;
    Ok((client, s.stop, s.server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grpc_append_read_and_errors_over_etcd_and_s3() -> Result<()> {
    let (c, stop, server) = start_writer().await?;
    let log = c.create_log().await?;
    let mut offsets = Vec::new();
    for i in 0..5u32 {
        offsets.push(c.append(log, i + 1, Bytes::from(format!("e{i}")), None).await?.offset);
    }
    ensure!(offsets == [0, 1, 3, 6, 10], "{offsets:?}");
    let read = c.read_entries(log, 0, 0, 0).await?;
    ensure!(read.entries.len() == 5 && read.next_offset == 15);
    ensure!(read.entries[4].payload == Bytes::from_static(b"e4"));
    ensure!(c.last_offset(log).await?.map(|h| h.offset) == Some(10));

    let err = c
        .append(log + 1000, 1, Bytes::from_static(b"x"), None)
        .await
        .err()
        .context("unknown log")?;
    ensure!(err.code == "NOT_FOUND", "{err}");
    let err =
        c.append(log, 1, Bytes::from_static(b"x"), Some(3)).await.err().context("stale offset")?;
    ensure!(err.code == "OFFSET_MISMATCH", "{err}");
    let err =
        c.append(log, 0, Bytes::from_static(b"x"), None).await.err().context("zero records")?;
    ensure!(err.code == "INVALID_ARGUMENT", "{err}");
    let err = c.read_entries(log, 16, 1, 0).await.err().context("past the end")?;
    ensure!(err.code == "OFFSET_OUT_OF_RANGE", "{err}");
    let epoch = c.fence(log).await?;
    let err = c.append(log, 1, Bytes::from_static(b"x"), None).await.err().context("fenced")?;
    ensure!(err.code == "FENCED", "{err}");
    c.activate(log, epoch).await?;
    let _ = stop.send(());
    server.await?;
    Ok(())
}

/// A writer with a 64 KiB buffer, no tail cache, entries up to `max_entry_bytes`, that flushes
/// nothing until it drains (what is admitted keeps its room); a client of it and a new log.
async fn stalled_writer(max_entry_bytes: usize) -> Result<(Served, LogClient, u64)> {
    let s = serve_writer_with(|cfg| {
        cfg.buffer_bytes = 64 << 10;
        cfg.max_entry_bytes = max_entry_bytes;
        cfg.tail_cache_bytes = 0;
        cfg.flush_interval = Duration::from_secs(3600);
        cfg.append_timeout = Duration::from_secs(3600);
    })
    .await?;
    let c = LogClient::connect(&format!("http://{}", s.addr)).await?;
    let log = c.create_log().await?;
    Ok((s, c, log))
}

/// An overloaded writer holds a bounded number of remote appends: each takes buffer room from
/// its headers on (what its request holds while received), keeps its payload and what its
/// request holds until answered, and once the buffer has no room for one more request the rest
/// are refused at once with RESOURCE_EXHAUSTED, unread, which the SDK retries. Those it took
/// commit when it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overloaded_writer_refuses_appends_beyond_its_buffer_at_once() -> Result<()> {
    let (s, c, log) = stalled_writer(16 << 10).await?;
    let appends: Vec<_> = (0..100)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.append(log, 1, Bytes::from(vec![7u8; 1024]), None).await })
        })
        .collect();
    // Each keeps 1 KiB of payload, 256 B of bookkeeping and 12 KiB for its request, and one
    // more is let in only while the buffer has RECEPTION_ROOM free: 3 in 64 KiB at most, fewer
    // when requests arrive together (each takes RECEPTION_ROOM until admitted). (Without the
    // request's share kept, up to 26 would be.)
    let keeps = 1024 + 256 + logservice::UNARY_OVERHEAD;
    let most = 1 + ((64 << 10) - logservice::reception::RECEPTION_ROOM) / keeps;
    let t0 = Instant::now();
    let (mut refused, mut pending) = (0, appends);
    loop {
        if refused >= 100 - most || t0.elapsed() > Duration::from_secs(20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (done, still): (Vec<_>, Vec<_>) = pending.into_iter().partition(|a| a.is_finished());
        pending = still;
        for a in done {
            let e = a.await?.err().context("an append committed before any flush")?;
            ensure!(e.code == "RESOURCE_EXHAUSTED" && e.is_retryable(), "{e}");
            refused += 1;
        }
    }
    let held = pending.len();
    ensure!(refused + held == 100 && (1..=most).contains(&held), "{refused} refused, {held} held");
    // Draining commits what the writer took; what still waited for room is answered
    // UNAVAILABLE (nothing applied, retried elsewhere).
    let _ = s.stop.send(());
    let mut committed = 0;
    for a in pending {
        match a.await? {
            Ok(_) => committed += 1,
            Err(e) => ensure!(e.code == "UNAVAILABLE" && e.is_retryable(), "{e}"),
        }
    }
    ensure!(committed == held, "{committed} of the {held} held appends committed");
    s.server.await?;
    Ok(())
}

/// A unary Append takes room for its whole message once its length prefix arrives: one the
/// buffer has no room for is refused with RESOURCE_EXHAUSTED at once, the rest of its body
/// unread, instead of being received into memory outside the buffer and waiting for room.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_larger_than_the_free_room_is_refused_while_received() -> Result<()> {
    let (s, c, log) = stalled_writer(60 << 10).await?;
    // 1 KiB admitted keeps 1 KiB + 256 B + the request's 12 KiB: about 50.7 KiB stay free.
    let small = {
        let c = c.clone();
        tokio::spawn(async move { c.append(log, 1, Bytes::from(vec![1u8; 1024]), None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 50 KiB and the 8 KiB it holds besides while received do not fit: refused at once (it
    // would have waited for room).
    let big = c.append(log, 1, Bytes::from(vec![2u8; 50 << 10]), None);
    let e = tokio::time::timeout(Duration::from_secs(10), big).await?.err();
    let e = e.context("a 50 KiB append was admitted into 50.7 KiB")?;
    ensure!(e.code == "RESOURCE_EXHAUSTED" && e.is_retryable(), "{e}");
    // 36 KiB (and 8 KiB) does; admitted, it keeps 36 KiB + 256 B + 12 KiB.
    let fits = {
        let c = c.clone();
        tokio::spawn(async move { c.append(log, 1, Bytes::from(vec![3u8; 36 << 10]), None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!fits.is_finished() && !small.is_finished(), "an admitted append was answered");
    // Both commit when the writer drains.
    let _ = s.stop.send(());
    small.await??;
    fits.await??;
    s.server.await?;
    Ok(())
}

fn req(log: u64, records: u32, payload: &str) -> client::AppendRequest {
    client::AppendRequest {
        log_id: log,
        record_count: records,
        payload: Bytes::from(payload.to_owned()),
        ..Default::default()
    }
}

/// AppendStream: a pipeline's appends are answered in the order sent and commit in it; once
/// one to a log fails, the stream's later appends to that log fail with nothing applied (other
/// logs go on); conditional appends are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn append_stream_commits_in_order_and_fails_a_logs_rest_after_a_failure() -> Result<()> {
    let (c, stop, server) = start_writer().await?;
    let (a, b) = (c.create_log().await?, c.create_log().await?);
    let mut pipe = c.append_stream(64).await?;
    for i in 0..40u32 {
        ensure!(pipe.send(req(if i % 2 == 0 { a } else { b }, 1 + i % 3, &format!("e{i}"))).await);
    }
    let mut next = [0u64, 0u64];
    for i in 0..40u32 {
        let h = pipe.answer().await?.map_err(|(e, _)| e)?;
        let at = &mut next[(i % 2) as usize];
        ensure!(h.offset == *at, "append {i} answered at {}, expected {at}", h.offset);
        *at += u64::from(1 + i % 3);
    }
    let read = c.read_entries(a, 0, 0, 0).await?;
    let payloads: Vec<Bytes> = read.entries.iter().map(|e| e.payload.clone()).collect();
    let sent: Vec<Bytes> = (0..40).step_by(2).map(|i| Bytes::from(format!("e{i}"))).collect();
    ensure!(payloads == sent, "log {a} holds {payloads:?}");

    // A refused append to `a`: the stream's later appends to `a` fail, `b`'s commit.
    let (a_end, b_end) = (next[0], next[1]);
    ensure!(pipe.send(req(a, 1, "kept")).await);
    ensure!(pipe.send(req(a, 0, "refused")).await);
    for i in 0..3 {
        ensure!(pipe.send(req(a, 1, &format!("after-{i}"))).await);
    }
    ensure!(pipe.send(req(b, 1, "other log")).await);
    ensure!(
        pipe.send(client::AppendRequest { expected_offset: Some(b_end + 1), ..req(b, 1, "c") })
            .await
    );
    ensure!(pipe.answer().await?.map_err(|(e, _)| e)?.offset == a_end);
    let refused = pipe.answer().await?.err().context("zero records admitted")?.0;
    ensure!(refused.code == "INVALID_ARGUMENT", "{refused}");
    for i in 0..3 {
        let e = pipe.answer().await?.err().with_context(|| format!("after-{i} committed"))?.0;
        ensure!(e.code == "UNAVAILABLE" && e.is_retryable(), "after-{i}: {e}");
    }
    ensure!(pipe.answer().await?.map_err(|(e, _)| e)?.offset == b_end);
    let conditional = pipe.answer().await?.err().context("a conditional append taken")?.0;
    ensure!(conditional.code == "INVALID_ARGUMENT", "{conditional}");
    ensure!(c.last_offset(a).await?.map(|h| h.offset) == Some(a_end), "log {a} moved on");

    // A fenced log: the first append says so, the rest of the stream's fail with it or
    // retryably (in its flush or after it), and nothing is applied.
    c.fence(b).await?;
    let mut pipe = c.append_stream(8).await?;
    for i in 0..3 {
        ensure!(pipe.send(req(b, 1, &format!("fenced-{i}"))).await);
    }
    let fenced = pipe.answer().await?.err().context("a fenced log took an append")?.0;
    ensure!(fenced.code == "FENCED" && fenced.log_fenced && !fenced.is_retryable(), "{fenced}");
    for _ in 0..2 {
        let e = pipe.answer().await?.err().context("an append after a fence committed")?.0;
        ensure!(matches!(e.code.as_str(), "FENCED" | "UNAVAILABLE") && !e.outcome_unknown, "{e}");
    }
    ensure!(c.last_offset(b).await?.map(|h| h.offset) == Some(b_end), "log {b} moved on");

    // A writer that shuts down ends the streams clients hold open (it would wait for them
    // otherwise), saying that nothing unanswered was admitted.
    let _ = stop.send(());
    let ended = tokio::time::timeout(Duration::from_secs(30), pipe.answer())
        .await
        .context("an open stream held the shutdown up")?;
    let e = ended.err().context("an answer with nothing sent")?;
    ensure!(e.code == "UNAVAILABLE" && e.is_retryable(), "the stream ended with {e}");
    tokio::time::timeout(Duration::from_secs(30), server).await.context("shutdown hung")??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn long_poll_returns_when_a_commit_lands() -> Result<()> {
    let (c, stop, server) = start_writer().await?;
    let log = c.create_log().await?;
    c.append(log, 1, Bytes::from_static(b"first"), None).await?;
    // Nothing new: the poll waits its full time and answers empty.
    let t = Instant::now();
    let empty = c.read_entries(log, 1, 0, 300).await?;
    ensure!(empty.entries.is_empty() && t.elapsed() >= Duration::from_millis(300));
    // A commit during the poll ends it early, with the new entry.
    let poller = {
        let c = c.clone();
        tokio::spawn(async move { c.read_entries(log, 1, 0, 30_000).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    c.append(log, 1, Bytes::from_static(b"second"), None).await?;
    let got = poller.await??;
    ensure!(got.entries.len() == 1 && got.entries[0].payload == Bytes::from_static(b"second"));
    ensure!(
        t.elapsed() < Duration::from_secs(20),
        "the poll waited for its deadline, not the commit"
    );
    let _ = stop.send(());
    server.await?;
    Ok(())
}

/// Hostile sizes over gRPC (ARCHITECTURE §6: untrusted lengths are bounded): reads are capped
/// whatever the request asks, and a read by index is checked (overflowing and out-of-object
/// ranges, too many indexes) and follows its entries through compaction and cleaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_read_sizes_are_capped_and_reads_by_index_are_checked() -> Result<()> {
    use proto::log::v1 as pb;
    let s = serve_writer().await?;
    let mut raw = pb::log_service_client::LogServiceClient::connect(format!("http://{}", s.addr))
        .await?
        .max_decoding_message_size(256 << 20);
    let w = s.storage.clone();

    // ReadEntries asking for everything: 24 MiB stored, at most the byte cap (and one entry).
    let big = w.create_log().await?;
    for i in 0..24u8 {
        w.append(big, 1, Bytes::from(vec![i; 1 << 20]), None).await?;
    }
    let everything = |stored| pb::ReadEntriesRequest {
        log_id: big.0,
        start_offset: 0,
        max_records: u64::MAX,
        max_bytes: u64::MAX,
        max_wait_ms: 0,
        stored,
    };
    let read = raw.read_entries(everything(false)).await?.into_inner();
    let bytes: usize = read.entries.iter().map(|e| e.payload.len()).sum();
    ensure!(
        !read.entries.is_empty() && bytes as u64 <= logservice::service::MAX_READ_BYTES + (1 << 20),
        "a read asking for u64::MAX bytes returned {bytes} bytes in {} entries",
        read.entries.len()
    );
    // The same read as stored runs: the same entries, split and checked by the client.
    let stored = raw.read_entries(everything(true)).await?.into_inner();
    ensure!(stored.entries.is_empty() && !stored.runs.is_empty(), "no runs in a stored read");
    ensure!(stored.next_offset == read.next_offset, "next offsets differ");
    let mut split = Vec::new();
    for run in stored.runs {
        split.extend(client::split_stored(big.0, run)?);
    }
    ensure!(split == read.entries, "stored runs split into other entries than the read's");

    // ReadIndexRange asking for u32::MAX entries of a log holding more than the cap.
    let many = w.create_log().await?;
    let cap = logservice::service::MAX_INDEX_ENTRIES as usize;
    let mut tasks = Vec::new();
    for t in 0..64u64 {
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..(cap as u64 / 64 + 2) {
                w.append(many, 1, Bytes::from(format!("{t}-{i}")), None).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    ensure!(w.info(many).await?.next_offset as usize > cap);
    let idx = raw
        .read_index_range(pb::ReadIndexRangeRequest {
            log_id: many.0,
            start_offset: 0,
            max_entries: u32::MAX,
        })
        .await?
        .into_inner()
        .indexes;
    ensure!(idx.len() == cap, "u32::MAX index entries asked: {} returned", idx.len());

    // ReadEntriesByIndex: hostile ranges and counts are INVALID_ARGUMENT, never a panic.
    let small = w.create_log().await?;
    for i in 0..24u8 {
        w.append(small, 1, Bytes::from(vec![i; 10]), None).await?;
    }
    let index = |start: u64, n: u32| {
        let mut raw = raw.clone();
        async move {
            let r =
                pb::ReadIndexRangeRequest { log_id: small.0, start_offset: start, max_entries: n };
            anyhow::Ok(raw.read_index_range(r).await?.into_inner().indexes)
        }
    };
    let by_index = |indexes: Vec<pb::EntryIndex>| {
        let mut raw = raw.clone();
        async move { raw.read_entries_by_index(pb::ReadEntriesByIndexRequest { indexes }).await }
    };
    let good = index(0, 24).await?;
    ensure!(good.len() == 24 && good.iter().all(|i| i.log_id == small.0));
    let mut overflow = good[0].clone();
    overflow.byte_start = u64::MAX - 5;
    let mut past_end = good[23].clone();
    past_end.byte_len += 1000;
    let too_many = vec![good[0].clone(); logstore::MAX_BY_INDEX_ENTRIES + 1];
    for (what, ask) in [
        ("an overflowing range", vec![overflow]),
        ("a range past the object", vec![past_end]),
        ("too many indexes", too_many),
    ] {
        match by_index(ask).await {
            Err(st) if st.code() == tonic::Code::InvalidArgument => {}
            other => {
                return Err(anyhow::anyhow!(
                    "{what} was answered {:?}",
                    other.map(|r| r.into_inner().entries.len())
                ));
            }
        }
    }
    let got = by_index(good.clone()).await?.into_inner().entries;
    ensure!(got.len() == 24 && got.iter().enumerate().all(|(i, e)| e.payload == vec![i as u8; 10]));

    // Compacted: the index names a segment, and the old WAL indexes (objects cleaned) are
    // found again through the log's index. (The other logs go, so only this one's floor holds
    // the cleaner's cutoff.)
    w.delete_log(big).await?;
    w.delete_log(many).await?;
    let reader =
        logstore::LogReader::new(w.metadata(), w.reader().objects().clone(), &w.config().cluster);
    let cfg = maintenance::compactor::CompactorConfig { min_chunks: 8, ..Default::default() };
    let r = maintenance::compactor::compact_all(reader, "c", cfg, Some(small), &Default::default())
        .await?;
    ensure!(r.compacted.len() == 1, "{r:?}");
    let mut cleaner = maintenance::cleaner::Cleaner::new(
        w.metadata(),
        w.reader().objects().clone(),
        &w.config().cluster,
        Arc::new(SystemClock),
    );
    cleaner.grace = Duration::ZERO;
    ensure!(cleaner.cycle().await?.deleted > 0, "no WAL object was cleaned");
    let compacted = index(0, 24).await?;
    ensure!(compacted[0].object.starts_with("compacted/"), "{:?}", compacted[0].object);
    for (what, ask) in [("a segment", compacted), ("cleaned WAL objects", good)] {
        let got = by_index(ask)
            .await
            .map_err(|e| anyhow::anyhow!("reading by index from {what}: {e}"))?
            .into_inner()
            .entries;
        ensure!(
            got.len() == 24 && got.iter().enumerate().all(|(i, e)| e.payload == vec![i as u8; 10]),
            "{what}: {} entries",
            got.len()
        );
    }
    let _ = s.stop.send(());
    s.server.await?;
    Ok(())
}

/// One idempotent record batch of producer 77 at `epoch`, sequences `seq..seq + n`.
fn idempotent_batch(epoch: i16, seq: i32, n: usize) -> Result<Bytes> {
    let records: Vec<recordbatch::Record> = (0..n)
        .map(|i| recordbatch::Record {
            offset_delta: i as u32,
            timestamp_ms: 1_700_000_000_000,
            value: Some(Bytes::from(format!("s{}", seq as usize + i))),
            ..Default::default()
        })
        .collect();
    let p =
        recordbatch::ProducerFields { producer_id: 77, producer_epoch: epoch, base_sequence: seq };
    Ok(recordbatch::encode(&records, p)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_idempotent_batches_are_appended_once_and_answered_with_their_first_offset()
-> Result<()> {
    use kafka::Partitions as _;
    let s = serve_writer().await?;
    let cluster = s.storage.config().cluster.clone();
    let catalog = catalog::Catalog::new(s.storage.metadata(), s.storage.reader().clone(), &cluster);
    catalog.create("idem", 1, Default::default()).await?;
    let broker = brokers::LogBroker::writer(catalog.clone(), &cluster, s.storage.clone());
    let produce = |epoch: i16, seq: i32, n: usize| {
        let broker = broker.clone();
        async move {
            let batch = idempotent_batch(epoch, seq, n)?;
            let header = recordbatch::validate(&batch)?;
            anyhow::Ok(match broker.produce("idem", 0, None, batch, &header, None).await {
                Ok(commit) => commit.await.map(|p| p.base_offset).map_err(|r| r.code),
                Err(r) => Err(r.code),
            })
        }
    };
    ensure!(produce(0, 0, 3).await? == Ok(0));
    ensure!(produce(0, 3, 2).await? == Ok(3));
    // A retry of either batch (its answer lost) is answered with its first offset, and not
    // appended again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is fenced.
    ensure!(produce(0, 0, 3).await? == Ok(0));
    ensure!(produce(0, 3, 2).await? == Ok(3));
    ensure!(produce(0, 9, 1).await? == Err(kafka::code::OUT_OF_ORDER_SEQUENCE_NUMBER));
    ensure!(produce(0, 5, 1).await? == Ok(5));
    ensure!(produce(1, 4, 1).await? == Err(kafka::code::OUT_OF_ORDER_SEQUENCE_NUMBER));
    ensure!(produce(1, 0, 1).await? == Ok(6));
    ensure!(produce(0, 6, 1).await? == Err(kafka::code::INVALID_PRODUCER_EPOCH));
    let log = catalog.route("idem", 0).await?;
    let info = s.storage.info(log).await?;
    ensure!(info.next_offset == 7 && info.entries == 4, "{info:?}");
    // InitProducerId: a new id, then the same id at the next epoch (KIP-360).
    let (id, epoch) = broker.init_producer_id(None).await.map_err(|c| anyhow::anyhow!("{c}"))?;
    let (id2, _) = broker.init_producer_id(None).await.map_err(|c| anyhow::anyhow!("{c}"))?;
    ensure!(epoch == 0 && id2 == id + 1, "{id} {epoch} {id2}");
    ensure!(broker.init_producer_id(Some((id, 0))).await == Ok((id, 1)));
    let _ = s.stop.send(());
    s.server.await?;
    Ok(())
}

/// M12: in a log one slot serves, a new idempotent producer's first batch reads nothing of
/// the log (every batch since the tenure began was admitted here): ten new producers after
/// 1 MB of other batches each read 0 bytes (about 1 MB each before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_idempotent_producers_first_batch_reads_nothing_of_a_log_one_slot_serves()
-> Result<()> {
    use kafka::Partitions as _;
    let s = serve_writer().await?;
    let cluster = s.storage.config().cluster.clone();
    let catalog = catalog::Catalog::new(s.storage.metadata(), s.storage.reader().clone(), &cluster);
    catalog.create("busy", 1, Default::default()).await?;
    let broker = brokers::LogBroker::writer(catalog.clone(), &cluster, s.storage.clone());
    let produce = |producer: i64, size: usize| {
        let broker = broker.clone();
        async move {
            let record = recordbatch::Record {
                value: Some(Bytes::from(vec![b'x'; size])),
                ..Default::default()
            };
            let p = match producer {
                -1 => recordbatch::ProducerFields::NONE,
                id => recordbatch::ProducerFields {
                    producer_id: id,
                    producer_epoch: 0,
                    base_sequence: 0,
                },
            };
            let batch = recordbatch::encode(&[record], p)?;
            let header = recordbatch::validate(&batch)?;
            let commit = broker.produce("busy", 0, None, batch, &header, None).await;
            let commit = commit.map_err(|r| anyhow::anyhow!("refused: {r:?}"))?;
            commit.await.map_err(|r| anyhow::anyhow!("{r:?}"))
        }
    };
    // The tenure begins with a first idempotent producer.
    produce(999, 100).await?;
    let before = broker.caught_up_bytes();
    for round in 0..10 {
        for _ in 0..4 {
            produce(-1, 256 << 10).await?;
        }
        produce(1000 + round, 100).await?;
    }
    let read = broker.caught_up_bytes() - before;
    ensure!(read == 0, "ten new producers' first batches read {read} bytes of the log");
    let _ = s.stop.send(());
    s.server.await?;
    Ok(())
}

/// A cluster of its own on the shared etcd and S3 server, for writers that come and go.
struct Stores {
    cluster: String,
    meta: Arc<dyn metadata::MetadataStore>,
    objects: Arc<dyn objstore::object_store::ObjectStore>,
}

impl Stores {
    async fn new(prefix: &str) -> Result<Stores> {
        let etcd = testkit::shared_etcd()?;
        let cluster = testkit::unique_prefix(prefix);
        let meta =
            Arc::new(metadata::EtcdStore::connect(&testkit::etcd_config(etcd.endpoint())).await?);
        let s3 = testkit::shared_s3()?.s3().config(&cluster);
        let objects = objstore::build(&config::ObjectStoreConfig::S3(s3))?;
        Ok(Stores { cluster, meta, objects })
    }

    /// Writer `id` in `zone`, flushing every 5 ms.
    async fn writer(&self, id: &str, zone: &str) -> Result<LogStorage> {
        let mut cfg = LogStorageConfig::new(&self.cluster, id);
        cfg.zone = zone.to_owned();
        cfg.flush_interval = Duration::from_millis(5);
        Ok(LogStorage::open(self.meta.clone(), self.objects.clone(), cfg, Arc::new(SystemClock))
            .await?)
    }

    /// The catalog and the Kafka broker of a writer.
    fn broker(&self, storage: &LogStorage) -> (catalog::Catalog, brokers::LogBroker) {
        let catalog =
            catalog::Catalog::new(storage.metadata(), storage.reader().clone(), &self.cluster);
        (catalog.clone(), brokers::LogBroker::writer(catalog, &self.cluster, storage.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_idempotent_state_survives_a_change_of_owner() -> Result<()> {
    use kafka::Partitions as _;
    let stores = Stores::new("handoff").await?;
    let (cluster, meta) = (&stores.cluster, &stores.meta);
    let produce = |broker: brokers::LogBroker, seq: i32, n: usize| async move {
        let batch = idempotent_batch(0, seq, n)?;
        let header = recordbatch::validate(&batch)?;
        anyhow::Ok(match broker.produce("moving", 0, None, batch, &header, None).await {
            Ok(commit) => commit.await.map(|p| p.base_offset).map_err(|r| r.code),
            Err(r) => Err(r.code),
        })
    };
    let a = stores.writer("a", "*").await?;
    let (catalog, on_a) = stores.broker(&a);
    catalog.create("moving", 1, Default::default()).await?;
    ensure!(produce(on_a.clone(), 0, 3).await? == Ok(0));
    ensure!(produce(on_a.clone(), 3, 2).await? == Ok(3));
    // Checkpointed with both; the next batch is only in the log.
    on_a.checkpoint_all().await;
    ensure!(produce(on_a.clone(), 5, 1).await? == Ok(5));
    let log = catalog.route("moving", 0).await?;
    let key = format!("/{cluster}/logs/{:020}/producers/*", log.0);
    let pointer = meta.get(key.as_bytes()).await?.context("a checkpoint pointer")?;
    ensure!(pointer.value.starts_with(b"5 "), "{:?}", String::from_utf8_lossy(&pointer.value));
    // The owner goes away; the only writer left takes the partition over.
    a.shutdown().await;
    let b = stores.writer("b", "*").await?;
    let (_, on_b) = stores.broker(&b);
    // Retries of a checkpointed batch and of one found by the replay: their first offsets,
    // nothing appended. The state is known: a gap is still a gap.
    ensure!(produce(on_b.clone(), 3, 2).await? == Ok(3));
    ensure!(produce(on_b.clone(), 5, 1).await? == Ok(5));
    ensure!(produce(on_b.clone(), 9, 1).await? == Err(kafka::code::OUT_OF_ORDER_SEQUENCE_NUMBER));
    ensure!(produce(on_b.clone(), 6, 2).await? == Ok(6));
    let info = b.info(log).await?;
    ensure!(info.next_offset == 8 && info.entries == 4, "{info:?}");
    // The new owner saved its own checkpoint before accepting: it names the tenure's start.
    let pointer = meta.get(key.as_bytes()).await?.context("a checkpoint pointer")?;
    ensure!(pointer.value.starts_with(b"6 "), "{:?}", String::from_utf8_lossy(&pointer.value));
    b.shutdown().await;
    Ok(())
}

/// A producer in zone b appends through zone b's writer; that writer goes, and the producer's
/// retry of a batch whose answer it lost goes to the `*` slot's owner in zone a. The `*`
/// slot's first tenure starts from every slot's checkpoint, so the retry is answered with the
/// batch's first offset, not appended again; and zone b's checkpoint, whose owner is gone, is
/// moved forward so that it does not hold every later replay back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_idempotent_state_follows_a_producer_from_its_zone_slot_to_any() -> Result<()> {
    follow_a_producer_between_slots(false).await
}

/// The same with zone b's checkpoint object lost (a pointer naming nothing): the new tenure
/// replays the log from its start rather than refusing produce for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_idempotent_state_is_rebuilt_from_the_log_when_a_checkpoint_is_lost() -> Result<()> {
    follow_a_producer_between_slots(true).await
}

async fn follow_a_producer_between_slots(lose_checkpoint: bool) -> Result<()> {
    use kafka::Partitions as _;
    use objstore::object_store::ObjectStoreExt;
    let stores = Stores::new("zones").await?;
    let (cluster, meta, objects) = (&stores.cluster, &stores.meta, &stores.objects);
    // Until the broker leads the partition for zone b (member views settle).
    let produce = |broker: brokers::LogBroker, seq: i32, n: usize| async move {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let batch = idempotent_batch(0, seq, n)?;
            let header = recordbatch::validate(&batch)?;
            let got = match broker.produce("zoned", 0, Some("b"), batch, &header, None).await {
                Ok(commit) => commit.await.map(|p| p.base_offset).map_err(|r| r.code),
                Err(r) => Err(r.code),
            };
            if got != Err(kafka::code::NOT_LEADER_OR_FOLLOWER) || Instant::now() > deadline {
                return anyhow::Ok(got);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let a = stores.writer("wa", "a").await?;
    let b = stores.writer("wb", "b").await?;
    let (catalog, on_a) = stores.broker(&a);
    let (_, on_b) = stores.broker(&b);
    catalog.create("zoned", 1, Default::default()).await?;
    ensure!(produce(on_b.clone(), 0, 3).await? == Ok(0));
    ensure!(produce(on_b.clone(), 3, 2).await? == Ok(3));
    on_b.checkpoint_all().await;
    let log = catalog.route("zoned", 0).await?;
    let key = |slot: &str| format!("/{cluster}/logs/{:020}/producers/{slot}", log.0);
    let pointer = meta.get(key("b").as_bytes()).await?.context("zone b's checkpoint")?;
    ensure!(pointer.value.starts_with(b"5 "), "{:?}", String::from_utf8_lossy(&pointer.value));
    ensure!(meta.get(key("*").as_bytes()).await?.is_none(), "no tenure of `*` yet");
    if lose_checkpoint {
        let value = String::from_utf8(pointer.value.clone())?;
        let object = value.splitn(3, ' ').nth(2).context("a pointer names an object")?;
        objects.delete(&objstore::Path::from(object)).await?;
    }
    // The log moves on in zone a (not a Kafka batch): zone b's checkpoint is now behind.
    a.append(log, 1, Bytes::from_static(b"plain"), None).await?;
    // Zone b has no writer left: the producer falls back to `*`, led by zone a's writer.
    b.shutdown().await;
    let retry = produce(on_a.clone(), 3, 2).await?;
    ensure!(retry == Ok(3), "the retry, answered {retry:?}, was not found in the log");
    ensure!(produce(on_a.clone(), 9, 1).await? == Err(kafka::code::OUT_OF_ORDER_SEQUENCE_NUMBER));
    ensure!(produce(on_a.clone(), 5, 1).await? == Ok(6));
    let info = a.info(log).await?;
    ensure!(info.next_offset == 7 && info.entries == 4, "{info:?}");
    // Zone b's owner is gone: its checkpoint now names where `*`'s tenure began.
    let pointer = meta.get(key("b").as_bytes()).await?.context("zone b's checkpoint")?;
    ensure!(pointer.value.starts_with(b"6 "), "{:?}", String::from_utf8_lossy(&pointer.value));
    a.shutdown().await;
    Ok(())
}
