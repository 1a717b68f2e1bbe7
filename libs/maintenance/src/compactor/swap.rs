//! A rewrite's swap: ONE constant-size transaction that replaces the pages it read with the
//! segment's page, moves the floor and, for a lake log, commits the segment to its table,
//! comparing everything the plan was made from (the claim, the start, the first page, no page
//! of the range modified since the read). Invariant 4 (ARCHITECTURE §7) rests on these
//! compares: a trim, a delete or another swap in between makes the segment an orphan the
//! cleaner reclaims, never a page readers would miss.

use metadata::{Compare, CompareOp, KeyRange, Txn, TxnOp};
use prost::Message;

use super::build::Built;
use super::plan::{LogView, Rewrite};
use super::{Compaction, Compactor, Pass, Skipped, Step, StepHook};
use crate::lakes;
use logstore::LogError;
use logstore::records::IndexPage;

/// The index's operations and compares of one swap.
struct Swap {
    compares: Vec<Compare>,
    ops: Vec<TxnOp>,
}

/// The key just after `k`.
fn after(k: &[u8]) -> Vec<u8> {
    let mut k = k.to_vec();
    k.push(0);
    k
}

impl Compactor {
    /// Swaps the segment `built`, stored at `path`, in for the pages of `rw`.
    pub(super) async fn swap(
        &self,
        view: &LogView,
        rw: &Rewrite,
        built: Built,
        path: objstore::Path,
        hook: Option<StepHook>,
    ) -> Result<Pass, LogError> {
        let swap = self.index_swap(view, rw, &built);
        // What the rewrite did, once swapped in (for a lake segment, with its table snapshot).
        let done = |table_snapshot| Compaction {
            log: view.log,
            first_offset: rw.first_offset,
            end_offset: rw.end_offset,
            chunks: rw.runs.iter().filter(|l| l.in_wal()).count(),
            segments: rw.runs.iter().filter(|l| !l.in_wal()).count(),
            bytes: built.object.len() as u64,
            object: path.to_string(),
            wal_floor: rw.floor,
            table_snapshot,
        };
        let raced = || Pass::Done(Err(Skipped::Raced { orphan: path.to_string() }));
        let (Some(_), Some(_)) = (&view.lake, &built.lake) else {
            let txn = Txn::new().when(swap.compares).and_then(swap.ops);
            if !self.meta.txn(txn).await?.succeeded {
                return Ok(raced());
            }
            return Ok(Pass::Done(Ok(done(None))));
        };
        match self.swap_lake(view, rw, &built, &path, swap, hook).await? {
            Some(snapshot) => Ok(Pass::Done(Ok(done(snapshot)))),
            None => Ok(raced()),
        }
    }

    /// The index's side of the swap: put the segment's page at its first offset, delete the
    /// rest of the range (and the page a trim cut through, keyed below it), put the floor and
    /// what a day's cut left as a page of its own.
    fn index_swap(&self, view: &LogView, rw: &Rewrite, built: &Built) -> Swap {
        let (keys, log) = (&self.keys, view.log);
        let (a, b) = (rw.first_offset, rw.end_offset);
        let page_a = rw.first_page(view);
        let a_revision = rw.pages.first().map_or(0, |i| view.pages[*i].revision);
        let index_page_a = keys.index_page(log, page_a);
        let index_a = keys.index_page(log, a);
        let index_b = keys.index_page(log, b);
        let index_end = keys.index_page(log, rw.range_end);
        let mut ops = Vec::with_capacity(6);
        if page_a < a {
            // The page a trim cut through goes; the segment's page is keyed at its first
            // offset, as every page is.
            ops.push(TxnOp::delete(KeyRange::between(index_page_a.clone(), index_a.clone())));
        }
        let page = IndexPage { locators: vec![built.locator.clone()] };
        ops.extend([
            TxnOp::put(index_a.clone(), page.encode_to_vec()),
            TxnOp::delete(KeyRange::between(after(&index_a), index_b.clone())),
            TxnOp::put(keys.wal_floor(log), rw.floor.to_string()),
        ]);
        if let Some(rest) = &rw.rest {
            // What a day's cut left of its page: a page at the cut (no key is both put and
            // deleted in one transaction).
            ops.push(TxnOp::put(index_b.clone(), rest.encode_to_vec()));
            ops.push(TxnOp::delete(KeyRange::between(after(&index_b), index_end.clone())));
        }
        let compares = vec![
            Compare::create_revision(keys.compaction_task(log), CompareOp::Equal, view.claim),
            Compare::mod_revision(keys.start(log), CompareOp::Equal, view.start_revision),
            Compare::mod_revision(index_page_a.clone(), CompareOp::Equal, a_revision),
            Compare::mod_revision(index_page_a, CompareOp::Less, view.revision + 1)
                .with_range_end(index_end),
        ];
        Swap { compares, ops }
    }

    /// A lake segment's swap: the table's commit goes in the same transaction, comparing the
    /// table's state as read. Another partition's commit moving the table first is no race of
    /// this log's: the commit is planned again on the table as it is now. The table snapshot
    /// that added the segment, or `None` if the log's own compares failed.
    async fn swap_lake(
        &self,
        view: &LogView,
        rw: &Rewrite,
        built: &Built,
        path: &objstore::Path,
        swap: Swap,
        hook: Option<StepHook>,
    ) -> Result<Option<Option<i64>>, LogError> {
        let (Some(l), Some(seg)) = (&view.lake, &built.lake) else {
            return Err(LogError::Internal("a lake swap of no lake segment".to_owned()));
        };
        let (log, a, b) = (view.log, rw.first_offset, rw.end_offset);
        let lakes_cfg = &self.cfg.lakes;
        let table_key = self.keys.lake_table(&l.log.stream_identity);
        let mut table_kv = l.table.clone();
        let claim = built.locator.compacted_claim;
        let segment = format!("{:020}-{a:020}-{claim:020}", log.0);
        let partition = i32::try_from(l.log.partition).unwrap_or(i32::MAX);
        let file = lake::iceberg::data_file(seg, lakes_cfg.uri(path), partition)
            .map_err(lakes::lake_error)?;
        let summary = vec![
            ("lakelog.log-id".to_owned(), log.0.to_string()),
            ("lakelog.segment".to_owned(), path.to_string()),
            ("lakelog.first-offset".to_owned(), a.to_string()),
            ("lakelog.end-offset".to_owned(), b.to_string()),
            ("lakelog.metadata-revision".to_owned(), view.revision.to_string()),
        ];
        // The lake segments merged leave the table in the same snapshot (a replace); one no
        // longer in it (table retention took it out) must not come back.
        let replaced: Vec<String> = rw
            .runs
            .iter()
            .filter(|l| l.lake.is_some())
            .map(|l| lakes_cfg.uri(&l.object(log)))
            .collect();
        for attempt in 0.. {
            let state = match &table_kv {
                Some(kv) => lakes::decode_table(&kv.value)?,
                None => lakes_cfg.new_table(&l.log),
            };
            let append = lake::table::Append {
                segment: segment.clone(),
                file: file.clone(),
                now_ms: self.cfg.clock.now_ms(),
                summary: summary.clone(),
                deletes: state.deletes(&file, &built.hidden).map_err(lakes::lake_error)?,
            };
            // Manifests the commit rewrites (one a replace cuts through; each day's, once
            // there are many) are read first.
            let read = lakes::read_manifests(
                &self.objects,
                lakes_cfg,
                &state.manifests_to_read(&replaced),
            )
            .await?;
            let Some(mut commit) = state.commit(&append, &replaced, &read) else { break };
            commit.state.ends.insert(log.0.to_string(), b);
            lakes::write_commit_files(&self.objects, lakes_cfg, &commit).await?;
            if attempt == 0
                && let Some(h) = &hook
            {
                h(Step::TableWritten).await;
            }
            let table_compare = match &table_kv {
                Some(kv) => {
                    Compare::mod_revision(table_key.clone(), CompareOp::Equal, kv.mod_revision)
                }
                None => Compare::create_revision(table_key.clone(), CompareOp::Equal, 0),
            };
            let mut when = swap.compares.clone();
            when.push(table_compare);
            let mut then = swap.ops.clone();
            then.push(TxnOp::put(table_key.clone(), lakes::encode_table(&commit.state)?));
            if self.meta.txn(Txn::new().when(when).and_then(then)).await?.succeeded {
                return Ok(Some(commit.state.snapshots.last().map(|s| s.id)));
            }
            // Did only the table move? The log's own compares, evaluated alone, say.
            if attempt >= lakes::TABLE_RETRIES
                || !self.meta.txn(Txn::new().when(swap.compares.clone())).await?.succeeded
            {
                break;
            }
            table_kv = self.meta.get(&table_key).await?;
        }
        Ok(None)
    }
}
