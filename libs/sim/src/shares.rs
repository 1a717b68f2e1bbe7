//! Kafka share groups (KIP-932) for the simulation's shares plan: members of one share group
//! acquire the topic's records from each partition's owner (the writer leading it, as a
//! ShareFetch finds it: a refusal names the leader), then accept most, release some, reject a
//! few, and let the locks of others expire (their acknowledgement lost, or sent too late);
//! now and then a member crashes holding what it acquired and comes back under a new id. The
//! nemesis crashes, pauses and starts writers meanwhile, so share-partitions change owners
//! under the members, and the metadata faults lose answers of the stores that carry them.
//! At the end, with faults off, one member accepts whatever is left, and each partition's
//! share-partition start offset is read.
//!
//! The history records every acquisition answered (offset, delivery count, when it was sent)
//! and every acknowledgement answered; [`check`] holds them to the share-group rules: no
//! record delivered past the delivery limit, none accepted twice, no delivery count going
//! back and no record delivered again once its acceptance or rejection was answered (the state
//! never regresses across owners), and every record done at the end (each start offset at its
//! partition's end).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka::share::{Reset, Settings};
use kafka::{Isolation, Refused, code};

use crate::history::Violation;
use crate::kafka::TOPIC;
use crate::scenario::SharedRef;

/// The share group.
const GROUP: &str = "sim-share";
/// The group's delivery limit.
pub(crate) const LIMIT: i16 = 3;
/// How long one request waits for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the end waits for every record to be done.
const SETTLE: Duration = Duration::from_secs(120);

/// The group's settings: 2 s locks, 3 deliveries, 40 records in flight per partition.
fn settings() -> Settings {
    Settings {
        lock: Duration::from_secs(2),
        delivery_limit: LIMIT as u16,
        max_locks: 40,
        reset: Reset::Earliest,
        isolation: Isolation::ReadUncommitted,
        renew: true,
    }
}

/// What the members saw of the share group.
#[derive(Clone, Debug, Default)]
pub struct ShareHistory {
    /// Records acquired, as answered: partition, offset, delivery count, member, and the
    /// order numbers of the request (taken when it was sent) and of its answer.
    pub deliveries: Vec<(u32, i64, i16, String, u64, u64)>,
    /// Acknowledgements answered: partition, offset, type (1 accept, 2 release, 3 reject),
    /// the order number of the answer.
    pub acks: Vec<(u32, i64, i8, u64)>,
    /// Each partition's share-partition start offset and lag at the end (none read: empty).
    pub finals: BTreeMap<u32, (i64, i64)>,
    /// The topic's partitions (set once the end was read).
    pub partitions: u32,
    /// Order numbers, one per request sent or answer received.
    pub next: u64,
}

impl ShareHistory {
    fn tick(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

type Owner = (Arc<brokers::LogBroker>, Arc<kafka::groups::Groups>, i32);

/// A live broker with its group state: node `node`'s if it lives, else any.
fn pick(shared: &SharedRef, node: Option<i32>) -> Option<Owner> {
    let b = crate::kafka::broker(shared, node)?;
    let n = kafka::Cluster::node_id(b.as_ref());
    let s = shared.lock();
    s.brokers
        .iter()
        .flatten()
        .find(|x| x.node == n)
        .map(|x| (x.broker.clone(), x.groups.clone(), n))
}

/// Runs `f` at partition `p`'s owner: any live broker first, then the leader a refusal names
/// (three tries).
async fn at_owner<T, F, Fut>(shared: &SharedRef, f: F) -> Option<Result<T, Refused>>
where
    F: Fn(Owner) -> Fut,
    Fut: std::future::Future<Output = Result<T, Refused>>,
{
    let mut node = None;
    for _ in 0..3 {
        let owner = pick(shared, node)?;
        match tokio::time::timeout(REQUEST_TIMEOUT, f(owner)).await {
            Ok(Err(r)) if r.code == code::NOT_LEADER_OR_FOLLOWER && r.leader.is_some() => {
                node = r.leader;
            }
            Ok(answer) => return Some(answer),
            Err(_) => return None,
        }
    }
    None
}

/// Member `m` of the share group, over `partitions` partitions, until aborted.
pub(crate) async fn member(m: u64, partitions: u32, shared: SharedRef) {
    let mut incarnation = 0u64;
    loop {
        let (think, crash, p, late) = {
            let mut s = shared.lock();
            let r = &mut s.rng;
            (
                r.below(150),
                r.below(40) == 0,
                r.below(u64::from(partitions)) as u32,
                r.below(10) == 0,
            )
        };
        tokio::time::sleep(Duration::from_millis(50 + think)).await;
        if crash {
            // Crashed: what it holds is left to the locks.
            incarnation += 1;
            shared.lock().trace.record(("share member crashed", m, incarnation));
            continue;
        }
        let id: Arc<str> = Arc::from(format!("m{m}-{incarnation}"));
        let Some(Ok(lent)) = acquire(&shared, &id, p, 10).await else { continue };
        let mut batches = Vec::new();
        {
            let mut sh = shared.lock();
            for &(first, last, _) in &lent.acquired {
                for o in first..=last {
                    let t = match sh.rng.below(100) {
                        0..80 => 1,
                        80..88 => 2,
                        88..92 => 3,
                        _ => continue, // lost: its lock expires
                    };
                    batches.push((o, o, vec![t]));
                }
            }
            sh.trace.record(("share acquired", m, p, lent.acquired.len()));
        }
        if batches.is_empty() {
            continue;
        }
        if late {
            // Acknowledged after the lock ran out: refused, or another's by then.
            tokio::time::sleep(Duration::from_millis(2_500)).await;
        }
        acknowledge(&shared, &id, p, batches).await;
    }
}

/// Acquires up to `max` of partition `p`'s records for `id` at its owner, each delivery
/// recorded with the order numbers of the request and of its answer.
async fn acquire(
    shared: &SharedRef,
    id: &Arc<str>,
    p: u32,
    max: u64,
) -> Option<Result<kafka::share::Lent, Refused>> {
    let sent = shared.lock().history.shares.tick();
    let s = settings();
    let lent = at_owner(shared, |(b, g, _)| {
        let (id, s) = (id.clone(), s.clone());
        async move {
            let broker: Arc<dyn kafka::Broker> = b;
            g.shares().acquire(broker.as_ref(), GROUP, &id, TOPIC, p as i32, max, 1 << 20, &s).await
        }
    })
    .await;
    if let Some(Ok(lent)) = &lent {
        let mut sh = shared.lock();
        let answered = sh.history.shares.tick();
        for &(first, last, count) in &lent.acquired {
            for o in first..=last {
                sh.history.shares.deliveries.push((p, o, count, id.to_string(), sent, answered));
            }
        }
    }
    lent
}

/// Acknowledges `batches` (one offset and one type each) of partition `p` for `id` at its
/// owner; if answered, each is recorded with the order number of the answer.
async fn acknowledge(shared: &SharedRef, id: &Arc<str>, p: u32, batches: Vec<(i64, i64, Vec<i8>)>) {
    let s = settings();
    let acked = at_owner(shared, |(b, g, _)| {
        let (id, s, batches) = (id.clone(), s.clone(), batches.clone());
        async move {
            let broker: Arc<dyn kafka::Broker> = b;
            g.shares().acknowledge(broker.as_ref(), GROUP, &id, TOPIC, p as i32, &batches, &s).await
        }
    })
    .await;
    if let Some(Ok(())) = acked {
        let mut sh = shared.lock();
        let at = sh.history.shares.tick();
        for (o, _, t) in &batches {
            sh.history.shares.acks.push((p, *o, t[0], at));
        }
    }
}

/// The end, faults off: one member accepts whatever is left until every partition's start
/// offset reaches its end (or [`SETTLE`] passes), then each partition's start and end are
/// recorded.
pub(crate) async fn settle(logs: &[u64], shared: &SharedRef) {
    let partitions = u32::try_from(logs.len()).unwrap_or(0);
    let deadline = tokio::time::Instant::now() + SETTLE;
    let id: Arc<str> = Arc::from("drainer");
    let mut finals: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    while tokio::time::Instant::now() < deadline {
        for p in 0..partitions {
            drain_one(shared, &id, p).await;
        }
        // What the store holds: each partition's start offset and lag (records at or past the
        // start not done).
        finals.clear();
        if let Some((b, ..)) = pick(shared, None)
            && let Ok(offsets) = kafka::ShareStates::share_offsets(b.as_ref(), GROUP).await
        {
            for o in offsets {
                finals.insert(u32::try_from(o.partition).unwrap_or(0), (o.start, o.lag));
            }
        }
        if finals.len() == partitions as usize && finals.values().all(|(_, lag)| *lag == 0) {
            break;
        }
        // Locks of crashed members run out meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut sh = shared.lock();
    sh.history.shares.partitions = partitions;
    sh.history.shares.finals = finals;
}

/// One acquisition of partition `p`'s records for `id`, each accepted.
async fn drain_one(shared: &SharedRef, id: &Arc<str>, p: u32) {
    let lent = match acquire(shared, id, p, 40).await {
        Some(Ok(lent)) => lent,
        other => {
            let err = other.map(|r| r.err().map(|e| (e.code, e.message)));
            shared.lock().trace.record(("share drain refused", p, format!("{err:?}")));
            return;
        }
    };
    shared.lock().trace.record(("share drained", p, lent.acquired.len(), lent.end));
    let batches: Vec<(i64, i64, Vec<i8>)> = lent
        .acquired
        .iter()
        .flat_map(|&(first, last, _)| (first..=last).map(|o| (o, o, vec![1i8])))
        .collect();
    if !batches.is_empty() {
        acknowledge(shared, id, p, batches).await;
    }
}

/// One delivery of a record: its count, and the order numbers of its request and answer.
type Delivery = (i16, u64, u64);

/// The share-group rules over what the members saw.
pub fn check(h: &ShareHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    // Per record: its deliveries (count, sent, answered).
    let mut deliveries: BTreeMap<(u32, i64), Vec<Delivery>> = BTreeMap::new();
    for (p, o, count, _, sent, answered) in &h.deliveries {
        deliveries.entry((*p, *o)).or_default().push((*count, *sent, *answered));
        if *count > LIMIT || *count < 1 {
            out.push(Violation::ShareDeliveredPastLimit {
                partition: *p,
                offset: *o,
                count: *count,
            });
        }
    }
    for ((p, o), ds) in &deliveries {
        if ds.len() > LIMIT as usize {
            out.push(Violation::ShareDeliveredPastLimit {
                partition: *p,
                offset: *o,
                count: i16::try_from(ds.len()).unwrap_or(i16::MAX),
            });
        }
        // A delivery asked for after another was answered comes with a larger count (requests
        // in flight together may be applied in either order).
        let regressed =
            ds.iter().find_map(|a| ds.iter().find(|b| b.1 > a.2 && b.0 <= a.0).map(|b| (a.0, b.0)));
        if let Some((before, after)) = regressed {
            out.push(Violation::ShareStateRegressed {
                partition: *p,
                offset: *o,
                what: format!("delivery count {after} after {before}"),
            });
        }
    }
    let mut accepted: BTreeMap<(u32, i64), u32> = BTreeMap::new();
    for (p, o, t, at) in &h.acks {
        if *t == 1 {
            *accepted.entry((*p, *o)).or_default() += 1;
        }
        if *t == 1 || *t == 3 {
            // Done once this was answered: no delivery sent after it.
            let again =
                deliveries.get(&(*p, *o)).into_iter().flatten().any(|(_, sent, _)| sent > at);
            if again {
                out.push(Violation::ShareStateRegressed {
                    partition: *p,
                    offset: *o,
                    what: "delivered again after its acknowledgement was answered".to_owned(),
                });
            }
        }
    }
    for ((p, o), n) in accepted {
        if n > 1 {
            out.push(Violation::ShareAcceptedTwice { partition: p, offset: o, times: n });
        }
    }
    for p in 0..h.partitions {
        match h.finals.get(&p) {
            Some((_, 0)) => {}
            Some((start, lag)) => {
                out.push(Violation::ShareRecordsLeft { partition: p, start: *start, left: *lag })
            }
            None => out.push(Violation::ShareRecordsLeft { partition: p, start: -1, left: -1 }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partition 0: offset 5 delivered twice (counts 1, 2) and accepted; offset 6 delivered
    /// once and rejected; the share-partition done at the end.
    fn clean() -> ShareHistory {
        ShareHistory {
            deliveries: vec![
                (0, 5, 1, "a".into(), 1, 2),
                (0, 6, 1, "a".into(), 1, 2),
                (0, 5, 2, "b".into(), 4, 5),
            ],
            acks: vec![(0, 6, 3, 3), (0, 5, 1, 6)],
            finals: [(0, (7, 0))].into(),
            partitions: 1,
            next: 6,
        }
    }

    #[test]
    fn a_clean_history_passes_and_each_rule_catches_its_break() {
        assert_eq!(check(&clean()), vec![]);

        let mut h = clean();
        h.deliveries.push((0, 5, 4, "c".into(), 7, 8));
        assert!(matches!(
            check(&h)[..],
            [Violation::ShareDeliveredPastLimit { offset: 5, .. }, ..]
        ));

        let mut h = clean();
        h.deliveries.retain(|d| d.1 != 6);
        for (i, count) in [1, 2, 3, 3].into_iter().enumerate() {
            let at = 10 + 2 * i as u64;
            h.deliveries.push((0, 9, count, "a".into(), at, at + 1));
        }
        // Two requests in flight together may be applied in either order: no regression.
        h.deliveries.push((0, 10, 2, "a".into(), 20, 23));
        h.deliveries.push((0, 10, 1, "b".into(), 21, 22));
        let v = check(&h);
        assert!(
            v.iter().any(|v| matches!(
                v,
                Violation::ShareDeliveredPastLimit { offset: 9, count: 4, .. }
            ))
        );
        assert!(
            v.iter().any(|v| matches!(v, Violation::ShareStateRegressed { offset: 9, .. })),
            "{v:?}"
        );
        assert!(
            !v.iter().any(|v| matches!(v, Violation::ShareStateRegressed { offset: 10, .. })),
            "{v:?}"
        );

        let mut h = clean();
        h.acks.push((0, 5, 1, 9));
        assert!(
            check(&h)
                .iter()
                .any(|v| matches!(v, Violation::ShareAcceptedTwice { offset: 5, times: 2, .. }))
        );

        // Rejected (answered at order 3), delivered again by a request sent at order 4.
        let mut h = clean();
        h.deliveries.push((0, 6, 2, "b".into(), 4, 5));
        assert!(
            check(&h).iter().any(|v| matches!(v, Violation::ShareStateRegressed { offset: 6, .. }))
        );

        let mut h = clean();
        h.finals.insert(0, (7, 2));
        assert!(matches!(check(&h)[..], [Violation::ShareRecordsLeft { left: 2, .. }]));
        h.finals.clear();
        assert!(matches!(check(&h)[..], [Violation::ShareRecordsLeft { start: -1, .. }]));
    }
}
