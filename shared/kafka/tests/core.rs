//! The task core driven without Kafka, as Kafka Streams' TopologyTestDriver drives a
//! topology: records, markers, commits, aborts and rebalances in; outputs, markers,
//! changelog writes and offsets out. A [`Broker`] stands in for what the cluster
//! keeps between members: the compacted changelog and the committed offsets.

use std::collections::BTreeMap;
use std::sync::Arc;

use vigil_datagen::planted;
use vigil_datagen::traffic::Traffic;
use vigil_kafka::core::{entry_of, Incoming, Slot, TaskCore};
use vigil_kafka::markers::Marker;
use vigil_kafka::service::Service;
use vigil_kafka::stages::{DeviceAnalyticsService, DeviceRouterService, JoinEnrichService};
use vigil_model::{Config, DeviceEvent, Millis};
use vigil_operators::{DeviceOutput, JoinInput, Routed};
use vigil_stream::partition::partition_for;
use vigil_stream::Operator;

type In<S> = <<S as Service>::Op as Operator>::In;
type Out<S> = <<S as Service>::Op as Operator>::Out;

/// What a Kafka cluster keeps for a stage between its members' lives.
#[derive(Default)]
struct Broker {
    /// The changelog as compaction leaves it: (partition, key) → value.
    changelog: BTreeMap<(i32, Vec<u8>), Vec<u8>>,
    offsets: BTreeMap<Slot, i64>,
}

/// One member of a stage: its core, and its outputs (delivered once committed).
struct Member<S: Service> {
    core: TaskCore<S>,
    pending: Vec<Out<S>>,
    delivered: Vec<Out<S>>,
    markers: Vec<Marker>,
}

impl<S: Service> Member<S> {
    fn new(service: S) -> Self {
        Member {
            core: TaskCore::new(service, Config::default()),
            pending: Vec::new(),
            delivered: Vec::new(),
            markers: Vec::new(),
        }
    }

    fn assign(&mut self, broker: &Broker, slots: &[Slot]) {
        let committed: Vec<(Slot, Option<i64>)> = slots.iter().map(|s| (*s, broker.offsets.get(s).copied())).collect();
        let tasks = self.core.assign(slots, &committed);
        self.restore(broker, &tasks);
    }

    fn restore(&mut self, broker: &Broker, tasks: &[i32]) {
        for &task in tasks {
            self.core.begin_restore(task);
            let partition = task % self.core.partitions();
            for ((p, key), value) in &broker.changelog {
                if let (true, Some(entry)) = (*p == partition, entry_of(task, key)) {
                    self.core.restore_entry(task, entry, Some(value)).unwrap();
                }
            }
            self.core.finish_restore(task);
        }
    }

    fn feed(&mut self, slot: Slot, offset: i64, incoming: Incoming<In<S>>) {
        self.core.on_input(slot, offset, incoming).unwrap();
        self.pending.extend(self.core.take_outputs().map(|e| e.output));
    }

    fn commit(&mut self, broker: &mut Broker) {
        let batch = self.core.prepare_commit();
        for w in batch.changelog {
            match w.value {
                Some(v) => broker.changelog.insert((w.partition, w.key), v),
                None => broker.changelog.remove(&(w.partition, w.key)),
            };
        }
        broker.offsets.extend(batch.offsets);
        self.markers.extend(batch.markers);
        self.core.committed();
        self.delivered.append(&mut self.pending);
    }

    /// The transaction is aborted: what was produced is never seen; the tasks come
    /// back from the changelog; the positions to read from again.
    fn abort(&mut self, broker: &Broker) -> Vec<(Slot, Option<i64>)> {
        self.pending.clear();
        let rewind = self.core.abort();
        self.restore(broker, &rewind.tasks);
        rewind.seeks
    }
}

const PARTITIONS: u32 = 4;

/// The planted orders and payments in event-time order, each on the partition of its
/// order id, with its offset there: (slot, offset, record, event time).
fn join_input() -> Vec<(Slot, i64, JoinInput, Millis)> {
    let mut records: Vec<(usize, String, JoinInput, Millis)> = planted::orders()
        .into_iter()
        .map(|o| (0, o.order_id.clone(), o.order_ts, JoinInput::Order(o)))
        .chain(planted::payments().into_iter().map(|p| (1, p.order_id.clone(), p.payment_ts, JoinInput::Payment(p))))
        .map(|(input, key, ts, r)| (input, key, r, ts))
        .collect();
    records.sort_by_key(|r| r.3);
    let mut next: BTreeMap<Slot, i64> = BTreeMap::new();
    records
        .into_iter()
        .map(|(input, key, record, ts)| {
            let slot = (input, partition_for(key.as_bytes(), PARTITIONS) as i32);
            let offset = next.entry(slot).or_insert(0);
            *offset += 1;
            (slot, *offset - 1, record, ts)
        })
        .collect()
}

fn record<I>(record: I, event_ts: Millis) -> Incoming<I> {
    Incoming::Record { record, event_ts }
}

fn all_slots(inputs: usize) -> Vec<Slot> {
    (0..inputs).flat_map(|i| (0..PARTITIONS as i32).map(move |p| (i, p))).collect()
}

/// The join over the planted input with one member, committing every `every`
/// records, ended (every partition finished).
fn join_uninterrupted() -> Vec<String> {
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&broker, &all_slots(2));
    for (slot, offset, r, ts) in join_input() {
        m.feed(slot, offset, record(r, ts));
    }
    finish(&mut m, &mut broker, 2);
    sorted(&m.delivered)
}

/// Ends every input partition (the generator's end-of-input marker) and commits.
fn finish<S: Service>(m: &mut Member<S>, broker: &mut Broker, inputs: usize) {
    let end = Marker { task: None, watermark: Millis::MAX, idle: false };
    for slot in all_slots(inputs) {
        let offset = broker.offsets.get(&slot).copied().unwrap_or(0).max(m.core.position(slot).unwrap_or(0));
        m.feed(slot, offset, Incoming::Marker(end));
    }
    m.commit(broker);
}

fn sorted<T: std::fmt::Debug>(outputs: &[T]) -> Vec<String> {
    let mut lines: Vec<String> = outputs.iter().map(|o| format!("{o:?}")).collect();
    lines.sort();
    lines
}

#[test]
fn an_abort_before_the_first_commit_replays_against_fresh_clocks() {
    let expected = join_uninterrupted();
    let input = join_input();
    let half = input.len() / 2;
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&broker, &all_slots(2));
    for (slot, offset, r, ts) in input[..half].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    // No commit yet: the abort sends every partition back to the beginning, and the
    // source clocks must forget how far they ran, or the replay is all late.
    let seeks = m.abort(&broker);
    assert!(!seeks.is_empty() && seeks.iter().all(|(_, offset)| offset.is_none()), "{seeks:?}");
    for (slot, offset, r, ts) in input {
        m.feed(slot, offset, record(r, ts));
    }
    finish(&mut m, &mut broker, 2);
    assert_eq!(sorted(&m.delivered), expected);
}

#[test]
fn an_abort_after_commits_goes_back_to_the_last_one() {
    let expected = join_uninterrupted();
    let input = join_input();
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&broker, &all_slots(2));
    let (third, two_thirds) = (input.len() / 3, 2 * input.len() / 3);
    for (slot, offset, r, ts) in input[..third].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    m.commit(&mut broker);
    for (slot, offset, r, ts) in input[third..two_thirds].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    let seeks = m.abort(&broker);
    // Read again from where each partition was committed.
    let from: BTreeMap<Slot, i64> = seeks.into_iter().map(|(s, o)| (s, o.unwrap_or(0))).collect();
    for (slot, offset, r, ts) in input {
        if offset >= from.get(&slot).copied().unwrap_or(0) {
            m.feed(slot, offset, record(r, ts));
        }
    }
    finish(&mut m, &mut broker, 2);
    assert_eq!(sorted(&m.delivered), expected);
}

#[test]
fn revoked_partitions_restored_by_two_members_give_one_members_result() {
    let expected = join_uninterrupted();
    let input = join_input();
    let half = input.len() / 2;
    let mut broker = Broker::default();
    let mut first = Member::new(JoinEnrichService);
    first.assign(&broker, &all_slots(2));
    for (slot, offset, r, ts) in input[..half].iter().cloned() {
        first.feed(slot, offset, record(r, ts));
    }
    first.commit(&mut broker);
    // Uncommitted work, then a rebalance: it is dropped, the next owners redo it.
    for (slot, offset, r, ts) in input[half..half + 10].iter().cloned() {
        first.feed(slot, offset, record(r, ts));
    }
    first.pending.clear();
    first.core.revoke_all();
    let mine = |p: i32| p < 2;
    let slots = all_slots(2);
    let (a, b): (Vec<Slot>, Vec<Slot>) = slots.iter().partition(|(_, p)| mine(*p));
    let mut second = Member::new(JoinEnrichService);
    first.assign(&broker, &a);
    second.assign(&broker, &b);
    for (slot, offset, r, ts) in input {
        if offset < broker.offsets.get(&slot).copied().unwrap_or(0) {
            continue;
        }
        if mine(slot.1) {
            first.feed(slot, offset, record(r, ts))
        } else {
            second.feed(slot, offset, record(r, ts))
        }
    }
    let end = Marker { task: None, watermark: Millis::MAX, idle: false };
    for slot in slots {
        let member = if mine(slot.1) { &mut first } else { &mut second };
        let offset = member.core.position(slot).unwrap_or(0);
        member.feed(slot, offset, Incoming::Marker(end));
    }
    first.commit(&mut broker);
    second.commit(&mut broker);
    let mut all = first.delivered;
    all.extend(second.delivered);
    assert_eq!(sorted(&all), expected);
}

/// Device events of one site only: every other partition of `device-events` stays
/// empty.
fn one_site_devices() -> Vec<DeviceEvent> {
    let traffic = Traffic::new(3, 1_700_000_000_000, 0);
    (0..400).map(|k| DeviceEvent { site_id: "site-b".into(), ..traffic.device(k) }).collect()
}

#[test]
fn a_member_whose_partitions_are_empty_goes_idle_and_holds_nobody_back() {
    let busy = partition_for(b"site-b", PARTITIONS) as i32;
    let mut broker = Broker::default();
    // Two routers: one has the busy partition, the other only empty ones.
    let mut with_data = Member::new(DeviceRouterService);
    let mut empty = Member::new(DeviceRouterService);
    let (mine, theirs): (Vec<Slot>, Vec<Slot>) = all_slots(1).into_iter().partition(|(_, p)| *p == busy);
    with_data.assign(&broker, &mine);
    empty.assign(&broker, &theirs);
    for (offset, e) in one_site_devices().into_iter().enumerate() {
        let ts = e.event_ts;
        with_data.feed((0, busy), offset as i64, record(e, ts));
    }
    with_data.commit(&mut broker);
    empty.commit(&mut broker);
    // The empty member's partitions have had nothing to read for the idle timeout
    // (the shell's judgement): its tasks go idle and their markers say so.
    for slot in &theirs {
        empty.core.mark_idle(*slot);
    }
    empty.commit(&mut broker);
    assert!(empty.markers.iter().all(|m| m.idle) && empty.markers.len() == theirs.len(), "{:?}", empty.markers);

    // Downstream, device-analytics reads every router task's markers on each of its
    // partitions: the idle writers are left out, so its windows fire.
    let on_time: Vec<Arc<DeviceEvent>> = with_data
        .delivered
        .iter()
        .filter_map(|r| if let Routed::OnTime(e) = r { Some(Arc::new(e.clone())) } else { None })
        .collect();
    let mut analytics = Member::new(DeviceAnalyticsService);
    analytics.assign(&Broker::default(), &all_slots(1));
    let mut offset = 0;
    for e in on_time {
        let ts = e.event_ts;
        analytics.feed((0, busy), offset, record(e, ts));
        offset += 1;
    }
    assert!(analytics.pending.is_empty(), "no window fires before any writer's marker");
    for p in 0..PARTITIONS as i32 {
        for m in with_data.markers.iter().chain(&empty.markers) {
            analytics.feed((0, p), offset, Incoming::Marker(*m));
            offset += 1;
        }
    }
    let metrics = analytics.pending.iter().filter(|o| matches!(o, DeviceOutput::Metrics(_))).count();
    assert!(metrics > 0, "site-b's windows fired although three router tasks had no records");
}

#[test]
fn an_upstream_partition_goes_by_its_slowest_writer_until_all_have_spoken() {
    let mut analytics = Member::new(DeviceAnalyticsService);
    analytics.assign(&Broker::default(), &all_slots(1));
    let e = Arc::new(DeviceEvent { site_id: "site-b".into(), ..Traffic::new(1, 1_700_000_000_000, 0).device(0) });
    let slot = (0, partition_for(b"site-b", PARTITIONS) as i32);
    analytics.feed(slot, 0, record(e.clone(), e.event_ts));
    let later = e.event_ts + 60_000;
    // Three of the four writers speak: the window waits for the fourth.
    for task in 0..3 {
        analytics.feed(
            slot,
            1 + task as i64,
            Incoming::Marker(Marker { task: Some(task), watermark: later, idle: false }),
        );
    }
    assert!(analytics.pending.is_empty());
    analytics.feed(slot, 4, Incoming::Marker(Marker { task: Some(3), watermark: later, idle: false }));
    assert!(!analytics.pending.is_empty(), "every writer past the window: it fires");
}
