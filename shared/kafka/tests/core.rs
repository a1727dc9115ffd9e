//! The task core driven without Kafka, as Kafka Streams' TopologyTestDriver drives a
//! topology: records, markers, commits, aborts and rebalances in; outputs, markers,
//! changelog writes and offsets out. A [`Broker`] stands in for what the cluster
//! keeps between members: the compacted changelog and the committed offsets.

use std::collections::{BTreeMap, BTreeSet};

use vigil_datagen::planted;
use vigil_datagen::traffic::Traffic;
use vigil_kafka::core::{self, entry_of, Incoming, Slot, TaskCore};
use vigil_kafka::markers::Marker;
use vigil_kafka::service::{InputKind, Service};
use vigil_kafka::stages::{DeviceAnalyticsService, DeviceRouterService, JoinEnrichService};
use vigil_model::{Config, DeviceEvent, Millis, Text};
use vigil_operators::{DeviceOutput, JoinInput, Routed};
use vigil_stream::partition::partition_for;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Operator;

type In<S> = <<S as Service>::Op as Operator>::In;
type Out<S> = <<S as Service>::Op as Operator>::Out;

/// What a Kafka cluster keeps for a stage between its members' lives.
#[derive(Default)]
struct Broker {
    /// The changelog as compaction leaves it: (partition, key) → value.
    changelog: BTreeMap<(i32, Vec<u8>), Vec<u8>>,
    offsets: BTreeMap<Slot, i64>,
    /// The next offset of each partition of the stage's repartition topics.
    repartition_ends: BTreeMap<Slot, i64>,
}

/// One member of a stage: its core, and its outputs (delivered once committed).
struct Member<S: Service> {
    core: TaskCore<S>,
    pending: Vec<Out<S>>,
    delivered: Vec<Out<S>>,
    markers: Vec<Marker>,
    /// What restores found committed with the state that the member did not know.
    corrections: Vec<core::Correction>,
}

impl<S: Service> Member<S> {
    fn new(service: S) -> Self {
        Member {
            core: TaskCore::new(service, Config::default()),
            pending: Vec::new(),
            delivered: Vec::new(),
            markers: Vec::new(),
            corrections: Vec::new(),
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
        }
        let partitions = self.core.partitions();
        let restored: Vec<_> = self
            .core
            .restoring(tasks)
            .into_iter()
            .map(|mut restore| {
                let task = restore.task();
                for ((p, key), value) in &broker.changelog {
                    if let (true, Some(entry)) = (*p == task % partitions, entry_of(task, key)) {
                        restore.entry(entry, Some(value)).unwrap();
                    }
                }
                restore.finish()
            })
            .collect();
        for task in restored {
            self.corrections.extend(self.core.finish_restore(task));
        }
    }

    fn feed(&mut self, slot: Slot, offset: i64, incoming: Incoming<In<S>>) -> core::Routed {
        let routed = self.core.on_input(slot, offset, incoming).unwrap();
        assert!(!matches!(routed, core::Routed::Held { .. }), "{slot:?} is held back");
        self.pending.extend(self.core.take_outputs().map(|e| e.output));
        routed
    }

    /// The stage's repartition topics' partitions this member reads.
    fn repartition_slots(&self) -> Vec<Slot> {
        let tasks: Vec<i32> = self.core.tasks().collect();
        let inputs = self.core.inputs();
        (0..inputs.len())
            .filter(|&i| matches!(inputs[i].kind, InputKind::Repartition { .. }))
            .flat_map(|i| tasks.iter().map(move |&p| (i, p)))
            .collect()
    }

    /// Every writer of the repartition partitions says it forwards nothing, at their
    /// first offsets (as the markers of every task's first commit would).
    fn hear_idle_writers(&mut self) {
        let idle = |writer| Incoming::Marker(Marker::of(writer, 0, true));
        for slot in self.repartition_slots() {
            for writer in 0..PARTITIONS {
                self.feed(slot, writer as i64, idle(writer));
            }
        }
    }

    /// As the shell does for a task whose source resumed: the member commits and
    /// reads the markers it wrote to the repartition topics (the ask, then the
    /// answers), every task asked answering (its source read to its end).
    fn hear_answers(&mut self) {
        for _ in 0..2 {
            for (task, _) in self.core.to_verify() {
                self.core.verified(task);
            }
            let markers = self.commit(&mut Broker::default());
            for slot in self.repartition_slots() {
                for marker in &markers {
                    let offset = self.core.position(slot).unwrap_or(0);
                    self.feed(slot, offset, Incoming::Marker(*marker));
                }
            }
        }
    }

    /// Commits, and returns the markers it wrote to the repartition topics.
    fn commit(&mut self, broker: &mut Broker) -> Vec<Marker> {
        self.commit_repeating(broker, false)
    }

    /// A commit; with `repeat_idle`, one at which the shell asks every idle task to
    /// say again that it is idle.
    fn commit_repeating(&mut self, broker: &mut Broker, repeat_idle: bool) -> Vec<Marker> {
        let batch = self.write_transaction(broker, repeat_idle);
        self.markers.extend(batch.markers);
        self.core.committed();
        batch.repartition_markers
    }

    /// A commit that completed on the broker while the member was told it failed (a
    /// commit that timed out, say): its outputs are out, the member does not know.
    fn commit_unbeknownst(&mut self, broker: &mut Broker) {
        self.write_transaction(broker, false);
    }

    /// What a committed transaction leaves on the broker and delivers.
    fn write_transaction(&mut self, broker: &mut Broker, repeat_idle: bool) -> core::CommitBatch {
        let repeat: Option<BTreeSet<i32>> =
            repeat_idle.then(|| self.core.idle_tasks().into_iter().map(|(task, _)| task).collect());
        let mut batch = self.core.prepare_commit(repeat.as_ref());
        for w in batch.changelog.drain(..) {
            match w.value {
                Some(v) => broker.changelog.insert((w.partition, w.key), v),
                None => broker.changelog.remove(&(w.partition, w.key)),
            };
        }
        broker.offsets.extend(batch.offsets.iter().copied());
        self.delivered.append(&mut self.pending);
        batch
    }

    /// The transaction is aborted: what was produced is never seen; the tasks come
    /// back from the changelog; the positions to read from again.
    fn abort(&mut self, broker: &Broker) -> Vec<(Slot, Option<i64>)> {
        self.pending.clear();
        let rewind = self.core.abort();
        self.restore(broker, &rewind.tasks);
        rewind.slots.into_iter().map(|slot| (slot, self.core.committed_offset(slot))).collect()
    }
}

/// Every member commits, and reads the markers every member wrote to the stage's
/// repartition topics (as they would come over Kafka), until nothing moves.
fn commit_all<S: Service>(members: &mut [&mut Member<S>], broker: &mut Broker) {
    for _ in 0..3 {
        let markers: Vec<Marker> = members.iter_mut().flat_map(|m| m.commit(broker)).collect();
        for m in members.iter_mut() {
            for slot in m.repartition_slots() {
                for marker in &markers {
                    let end = broker.repartition_ends.entry(slot).or_insert(0);
                    *end += 1;
                    m.feed(slot, *end - 1, Incoming::Marker(*marker));
                }
            }
        }
    }
}

const PARTITIONS: u32 = 4;

/// The planted orders and payments in event-time order, each on the partition of its
/// order id, with its offset there: (slot, offset, record, event time).
fn join_input() -> Vec<(Slot, i64, JoinInput, Millis)> {
    let mut records: Vec<(usize, Text, JoinInput, Millis)> = planted::orders()
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

/// Every partition of a stage's inputs, its repartition topics included.
fn all_slots(inputs: usize) -> Vec<Slot> {
    (0..inputs).flat_map(|i| (0..PARTITIONS as i32).map(move |p| (i, p))).collect()
}

/// The join over the planted input with one member, committing every `every`
/// records, ended (every partition finished).
fn join_uninterrupted() -> Vec<String> {
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    for (slot, offset, r, ts) in join_input() {
        m.feed(slot, offset, record(r, ts));
    }
    finish(&mut [&mut m], &mut broker);
    sorted(&m.delivered)
}

/// The join's inputs: orders, payments, and their two repartition topics.
const JOIN_INPUTS: usize = 4;

/// Ends every source partition (the generator's end-of-input marker) and commits.
fn finish<S: Service>(members: &mut [&mut Member<S>], broker: &mut Broker) {
    let end = Marker::END;
    for m in members.iter_mut() {
        let sources: Vec<Slot> = all_slots(m.core.inputs().len())
            .into_iter()
            .filter(|&(i, p)| m.core.inputs()[i].is_source() && m.core.tasks().any(|t| t == p))
            .collect();
        for slot in sources {
            let offset = broker.offsets.get(&slot).copied().unwrap_or(0).max(m.core.position(slot).unwrap_or(0));
            m.feed(slot, offset, Incoming::Marker(end));
        }
    }
    commit_all(members, broker);
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
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    for (slot, offset, r, ts) in input[..half].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    // No commit yet: the abort sends every partition back to the beginning, and the
    // source clocks must forget how far they ran, or the replay is all late.
    let seeks = m.abort(&broker);
    assert!(!seeks.is_empty() && seeks.iter().all(|(_, offset)| offset.is_none()), "{seeks:?}");
    m.hear_idle_writers();
    for (slot, offset, r, ts) in input {
        m.feed(slot, offset, record(r, ts));
    }
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), expected);
}

/// The join's input, and one member that committed its first third and then read
/// the second, uncommitted.
struct TwoThirdsRead {
    input: Vec<(Slot, i64, JoinInput, Millis)>,
    broker: Broker,
    m: Member<JoinEnrichService>,
    /// The offsets committed at one third.
    at_a_third: BTreeMap<Slot, i64>,
}

fn two_thirds_read() -> TwoThirdsRead {
    let input = join_input();
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    let (third, two_thirds) = (input.len() / 3, 2 * input.len() / 3);
    for (slot, offset, r, ts) in input[..third].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    commit_all(&mut [&mut m], &mut broker);
    for (slot, offset, r, ts) in input[third..two_thirds].iter().cloned() {
        m.feed(slot, offset, record(r, ts));
    }
    let at_a_third = broker.offsets.clone();
    TwoThirdsRead { input, broker, m, at_a_third }
}

/// Feeds the input from where the member's core says each partition was committed.
fn feed_from_committed(m: &mut Member<JoinEnrichService>, input: &[(Slot, i64, JoinInput, Millis)]) {
    for (slot, offset, r, ts) in input.iter().cloned() {
        if offset >= m.core.committed_offset(slot).unwrap_or(0) {
            m.feed(slot, offset, record(r, ts));
        }
    }
}

#[test]
fn an_abort_after_commits_goes_back_to_the_last_one() {
    let TwoThirdsRead { input, mut broker, mut m, at_a_third } = two_thirds_read();
    let seeks = m.abort(&broker);
    // Read again from where each partition was committed.
    for (slot, offset) in &seeks {
        assert_eq!(*offset, at_a_third.get(slot).copied(), "{slot:?}");
    }
    feed_from_committed(&mut m, &input);
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), join_uninterrupted());
}

#[test]
fn a_commit_reported_failed_that_completed_is_not_redone() {
    let TwoThirdsRead { input, mut broker, mut m, .. } = two_thirds_read();
    m.commit_unbeknownst(&mut broker);
    let seeks = m.abort(&broker);
    // The state restored is the completed commit's: so are the offsets to read from.
    for (slot, offset) in &seeks {
        assert_eq!(*offset, broker.offsets.get(slot).copied(), "{slot:?}");
    }
    assert!(!m.corrections.is_empty());
    feed_from_committed(&mut m, &input);
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), join_uninterrupted());
}

/// A consumer whose fetch position disagrees with the tasks' (its own read of the
/// group's offsets at an assignment, say) delivers records again that were counted
/// already: the shell skips every record before the next offset the core counts.
#[test]
fn records_delivered_again_are_told_by_the_next_offset_to_count() {
    let TwoThirdsRead { input, mut broker, mut m, .. } = two_thirds_read();
    for (slot, offset, ..) in &input[..2 * input.len() / 3] {
        assert!(m.core.next_to_count(*slot) > Some(*offset), "{slot:?} {offset}");
    }
    // Everything delivered again from the first offsets, the rest with it.
    for (slot, offset, r, ts) in input.iter().cloned() {
        if m.core.next_to_count(slot).is_none_or(|next| offset >= next) {
            m.feed(slot, offset, record(r, ts));
        }
    }
    finish(&mut [&mut m], &mut broker);
    assert_eq!(sorted(&m.delivered), join_uninterrupted());
}

#[test]
fn group_offsets_left_behind_the_state_are_read_from_the_states() {
    let TwoThirdsRead { input, mut broker, mut m, at_a_third } = two_thirds_read();
    commit_all(&mut [&mut m], &mut broker);
    // An earlier transaction's offset commit lands after the last one (no KIP-890),
    // then the member restarts: its state is at two thirds, the group's offsets at one.
    let state_at = std::mem::replace(&mut broker.offsets, at_a_third);
    let mut next = Member::new(JoinEnrichService);
    next.delivered = std::mem::take(&mut m.delivered);
    next.assign(&broker, &all_slots(JOIN_INPUTS));
    let corrected: BTreeMap<Slot, i64> = next.corrections.iter().map(|c| (c.slot, c.changelog)).collect();
    let moved: BTreeMap<Slot, i64> =
        state_at.iter().filter(|(s, o)| broker.offsets.get(s) != Some(o)).map(|(s, o)| (*s, *o)).collect();
    assert!(!moved.is_empty());
    assert_eq!(corrected, moved);
    feed_from_committed(&mut next, &input);
    finish(&mut [&mut next], &mut broker);
    assert_eq!(sorted(&next.delivered), join_uninterrupted());
}

#[test]
fn revoked_partitions_restored_by_two_members_give_one_members_result() {
    let expected = join_uninterrupted();
    let input = join_input();
    let half = input.len() / 2;
    let mut broker = Broker::default();
    let mut first = Member::new(JoinEnrichService);
    first.assign(&broker, &all_slots(JOIN_INPUTS));
    first.hear_idle_writers();
    for (slot, offset, r, ts) in input[..half].iter().cloned() {
        first.feed(slot, offset, record(r, ts));
    }
    commit_all(&mut [&mut first], &mut broker);
    // Uncommitted work, then a rebalance: it is dropped, the next owners redo it.
    for (slot, offset, r, ts) in input[half..half + 10].iter().cloned() {
        first.feed(slot, offset, record(r, ts));
    }
    first.pending.clear();
    first.core.revoke_all();
    let mine = |p: i32| p < 2;
    let (a, b): (Vec<Slot>, Vec<Slot>) = all_slots(JOIN_INPUTS).iter().partition(|(_, p)| mine(*p));
    let mut second = Member::new(JoinEnrichService);
    first.assign(&broker, &a);
    second.assign(&broker, &b);
    for (slot, offset, r, ts) in input {
        if offset < broker.offsets.get(&slot).copied().unwrap_or(0) {
            continue;
        }
        let member = if mine(slot.1) { &mut first } else { &mut second };
        member.feed(slot, offset, record(r, ts));
    }
    finish(&mut [&mut first, &mut second], &mut broker);
    let mut all = first.delivered;
    all.extend(second.delivered);
    assert_eq!(sorted(&all), expected);
}

#[test]
fn a_record_off_its_keys_partition_goes_through_the_repartition_topic() {
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    let order = planted::orders().remove(0);
    let home = partition_for(order.order_id.as_bytes(), PARTITIONS) as i32;
    let away = (home + 1) % PARTITIONS as i32;
    let ts = order.order_ts;
    let routed = m.feed((0, away), 0, record(JoinInput::Order(order.clone()), ts));
    // Input 2 is the orders' repartition topic.
    assert_eq!(routed, core::Routed::Reroute { input: 2, partition: home, key: order.order_id.to_string() });
    let next = PARTITIONS as i64;
    let again = m.feed((2, home), next, record(JoinInput::Order(order), ts));
    assert_eq!(again, core::Routed::Done, "read again at home: joined");
    m.commit(&mut broker);
    let ledgers: Vec<_> =
        m.core.task_statuses().into_iter().map(|t| (t.task, t.ledger.read, t.ledger.rerouted)).collect();
    assert!(ledgers.contains(&(away, 0, 1)) && ledgers.contains(&(home, 1, 0)), "{ledgers:?}");
}

/// Device events of one site only: every other partition of `device-events` stays
/// empty.
fn one_site_devices() -> Vec<DeviceEvent> {
    let traffic = Traffic::new(3, 1_700_000_000_000, 0);
    (0..400).map(|k| DeviceEvent { site_id: "site-b".into(), ..traffic.device(k) }).collect()
}

#[test]
fn a_member_whose_partitions_are_empty_holds_nobody_back() {
    let busy = partition_for(b"site-b", PARTITIONS) as i32;
    let mut broker = Broker::default();
    // Two routers: one has the busy partition, the other only empty ones.
    let mut with_data = Member::new(DeviceRouterService);
    let mut empty = Member::new(DeviceRouterService);
    let (mine, theirs): (Vec<Slot>, Vec<Slot>) = all_slots(2).into_iter().partition(|(_, p)| *p == busy);
    with_data.assign(&broker, &mine);
    empty.assign(&broker, &theirs);
    // The empty member's partitions have had nothing to read for the idle timeout
    // (the shell's judgement), and nobody forwards through the repartition topic: its
    // tasks are idle, and say so.
    for slot in theirs.iter().filter(|(i, _)| *i == 0) {
        empty.core.mark_idle(*slot);
    }
    // The busy task looks at its first records until it knows its input is keyed by
    // site, then reads them from the first once every writer has said so.
    let events = one_site_devices();
    for (offset, e) in events.iter().take(8).enumerate() {
        let looked = with_data.core.on_input((0, busy), offset as i64, record(e.clone(), e.event_ts)).unwrap();
        assert!(matches!(looked, core::Routed::Held { .. }));
    }
    commit_all(&mut [&mut with_data, &mut empty], &mut broker);
    assert_eq!(with_data.core.flow().resume, vec![(0, busy)]);
    for (offset, e) in events.into_iter().enumerate() {
        let ts = e.event_ts;
        with_data.feed((0, busy), offset as i64, record(e, ts));
    }
    commit_all(&mut [&mut with_data, &mut empty], &mut broker);
    assert!(empty.markers.iter().all(|m| m.idle) && !empty.markers.is_empty(), "{:?}", empty.markers);

    // Downstream, device-analytics reads every router task's markers on each of its
    // partitions: its windows fire, though three router tasks had no records.
    let on_time: Vec<DeviceEvent> = with_data
        .delivered
        .iter()
        .filter_map(|r| if let Routed::OnTime(e) = r { Some(e.clone()) } else { None })
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
fn with_every_source_idle_a_task_says_so_downstream() {
    let mut broker = Broker::default();
    let mut router = Member::new(DeviceRouterService);
    router.assign(&broker, &all_slots(2));
    for p in 0..PARTITIONS as i32 {
        router.core.mark_idle((0, p));
    }
    commit_all(&mut [&mut router], &mut broker);
    assert_eq!(router.markers.len(), PARTITIONS as usize);
    assert!(router.markers.iter().all(|m| m.idle), "{:?}", router.markers);
}

#[test]
fn an_idle_writer_speaks_on_the_repartition_topics_when_its_idleness_changes_its_input_ends_or_it_is_asked() {
    let mut broker = Broker::default();
    let mut router = Member::new(DeviceRouterService);
    router.assign(&broker, &all_slots(2));
    router.hear_idle_writers();
    let busy = partition_for(b"site-b", PARTITIONS) as i32;
    for q in (0..PARTITIONS as i32).filter(|&q| q != busy) {
        router.core.mark_idle((0, q));
    }
    let events = one_site_devices();
    for (offset, e) in events.iter().take(8).enumerate() {
        router.core.on_input((0, busy), offset as i64, record(e.clone(), e.event_ts)).unwrap();
    }
    let decided = router.commit(&mut broker);
    assert_eq!(decided.len(), PARTITIONS as usize);
    assert!(decided.iter().all(|m| m.idle), "keyed input: nobody forwards: {decided:?}");
    let said_busy = |markers: &[Marker]| markers.iter().find(|m| m.task == Some(busy as u32)).copied();
    let first = said_busy(&decided).expect("the busy task speaks").watermark;

    // Its records in place move its source watermark, which an idle writer's readers
    // do not use: nothing to say, even when the shell asks idle tasks to repeat that
    // they are idle (that is for the readers downstream), until a reader asks it a
    // generation: it answers with where it has got to.
    let (keyed, rest) = events.split_at(200);
    for (offset, e) in keyed.iter().enumerate() {
        router.feed((0, busy), offset as i64, record(e.clone(), e.event_ts));
    }
    assert!(router.commit(&mut broker).is_empty());
    assert!(router.commit_repeating(&mut broker, true).is_empty());
    let asker = (busy as u32 + 1) % PARTITIONS;
    let ask = Marker { task: Some(asker), watermark: 0, idle: true, generation: 1 };
    router.feed((1, busy), i64::from(PARTITIONS), Incoming::Marker(ask));
    let answered = router.commit(&mut broker);
    let moved = said_busy(&answered).expect("the busy task answers");
    assert!(moved.idle && moved.generation == 1 && moved.watermark > first, "{moved:?} after {first}");

    // A record off its key's partition: it forwards, and says where it is.
    let elsewhere =
        ["site-a", "site-c", "site-d"].into_iter().find(|s| partition_for(s.as_bytes(), PARTITIONS) as i32 != busy);
    let off = DeviceEvent { site_id: elsewhere.expect("a site of another partition").into(), ..rest[0].clone() };
    let mut offset = keyed.len() as i64;
    let ts = off.event_ts;
    router.feed((0, busy), offset, record(off, ts));
    let forwarding = said_busy(&router.commit(&mut broker)).expect("idleness changed");
    assert!(!forwarding.idle && forwarding.watermark >= moved.watermark, "{forwarding:?} after {moved:?}");

    // Its input ends: its readers must hear it, idle or not.
    offset += 1;
    router.feed((0, busy), offset, Incoming::Marker(Marker::END));
    let ended = router.commit(&mut broker);
    assert_eq!(ended.iter().map(|m| m.watermark).collect::<Vec<_>>(), vec![Millis::MAX], "{ended:?}");
}

/// A device-analytics member, a device event of site-b, and its partition.
fn analytics_with_a_site_b_event() -> (Member<DeviceAnalyticsService>, DeviceEvent, Slot) {
    let mut analytics = Member::new(DeviceAnalyticsService);
    analytics.assign(&Broker::default(), &all_slots(1));
    let e = DeviceEvent { site_id: "site-b".into(), ..Traffic::new(1, 1_700_000_000_000, 0).device(0) };
    (analytics, e, (0, partition_for(b"site-b", PARTITIONS) as i32))
}

#[test]
fn an_upstream_partition_goes_by_its_slowest_writer_until_all_have_spoken() {
    let (mut analytics, e, slot) = analytics_with_a_site_b_event();
    analytics.feed(slot, 0, record(e.clone(), e.event_ts));
    let later = e.event_ts + 60_000;
    // Three of the four writers speak: the window waits for the fourth.
    for task in 0..3 {
        analytics.feed(slot, 1 + task as i64, Incoming::Marker(Marker::of(task, later, false)));
    }
    assert!(analytics.pending.is_empty());
    analytics.feed(slot, 4, Incoming::Marker(Marker::of(3, later, false)));
    assert!(!analytics.pending.is_empty(), "every writer past the window: it fires");
}

#[test]
fn a_writer_gone_quiet_before_its_end_holds_its_readers_back_from_the_end_of_input() {
    let (mut analytics, e, slot) = analytics_with_a_site_b_event();
    let marker = |task, watermark, idle| Incoming::Marker(Marker::of(task, watermark, idle));
    // Writer 3 goes quiet (its input held up), the others reach the end of input.
    analytics.feed(slot, 0, marker(3, e.event_ts - 1_000, true));
    for task in 0..3 {
        analytics.feed(slot, 1 + task as i64, marker(task, Millis::MAX, false));
    }
    assert!(analytics.pending.is_empty(), "nothing fires past the quiet writer: {:?}", analytics.pending);
    // Its records come after all: on time.
    analytics.feed(slot, 4, record(e.clone(), e.event_ts));
    analytics.feed(slot, 5, marker(3, Millis::MAX, false));
    assert!(!analytics.pending.is_empty());
    let late: Vec<_> = analytics.pending.iter().filter(|o| matches!(o, DeviceOutput::Late(_))).collect();
    assert!(late.is_empty(), "{late:?}");
}

#[test]
fn a_partition_far_ahead_of_its_task_is_paused_until_the_others_catch_up() {
    let mut m = Member::new(JoinEnrichService);
    m.assign(&Broker::default(), &all_slots(JOIN_INPUTS));
    let (orders, payments) = ((0, 1), (1, 1));
    let t0 = 1_700_000_000_000;
    // A step of event time: the allowed skew is 60 of them.
    let step = Config::default().runtime.max_partition_skew_ms as i64 / 60;
    let order = |i: i64| order_at(t0 + i * step, i);
    let payment = |i: i64| payment_at(t0 + i * step, i);
    // Nothing comes through the repartition topics (every writer says it is idle);
    // orders stay at t0 while payments run 120 steps ahead.
    m.hear_idle_writers();
    m.feed(orders, 0, order(0));
    for i in 0..120 {
        m.feed(payments, i, payment(i));
    }
    let flow = m.core.flow();
    assert_eq!(flow.pause, vec![payments], "payments run about twice the skew ahead of the task");
    assert!(m.core.flow().pause.is_empty(), "paused once, not again");
    // Orders catch up to 70 steps behind payments: still paused (hysteresis).
    m.feed(orders, 1, order(50));
    assert_eq!(m.core.flow(), core::Flow::default());
    m.feed(orders, 2, order(100));
    assert_eq!(m.core.flow().resume, vec![payments], "back within half the skew: resumed");
}

/// Order `o{i}` at `ts`, as join-enrich reads it.
fn order_at(ts: i64, i: i64) -> Incoming<JoinInput> {
    let o = vigil_model::Order {
        order_id: format!("o{i}").into(),
        customer_id: "c".into(),
        order_amount: 1.0,
        order_ts: ts,
        country: "US".into(),
    };
    record(JoinInput::Order(o), ts)
}

/// Payment `p{i}` of order `o{i}` at `ts`.
fn payment_at(ts: i64, i: i64) -> Incoming<JoinInput> {
    let p = vigil_model::Payment {
        payment_id: format!("p{i}").into(),
        order_id: format!("o{i}").into(),
        paid_amount: 1.0,
        payment_ts: ts,
        method: "card".into(),
    };
    record(JoinInput::Payment(p), ts)
}

#[test]
fn when_a_task_resumes_its_idle_source_partitions_hold_its_watermark_again() {
    let (orders, payments) = ((0, 1), (1, 1));
    let t0 = 1_700_000_000_000;
    let mut ids = (0..).filter(|i| partition_for(format!("o{i}").as_bytes(), PARTITIONS) == 1);
    // Both partitions read (eight records in place: the task knows its input is
    // keyed), then idle (the input paused); it resumes and payments are fetched
    // first, two minutes on, while orders' records are still on their way.
    let mut m = Member::new(JoinEnrichService);
    m.assign(&Broker::default(), &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    for slot in all_slots(2).into_iter().filter(|&(_, p)| p != 1) {
        m.core.mark_idle(slot);
    }
    for offset in 0..8 {
        m.feed(orders, offset, order_at(t0, ids.next().unwrap()));
    }
    m.feed(payments, 0, payment_at(t0, ids.next().unwrap()));
    m.core.mark_idle(orders);
    m.core.mark_idle(payments);
    // The task holds the record until its repartition writers answer (see the next
    // test), then reads it again.
    let later = ids.next().unwrap();
    let resumed = m.core.on_input(payments, 1, payment_at(t0 + 120_000, later)).unwrap();
    assert_eq!(resumed, core::Routed::Held { seek: Some(1) });
    assert_eq!(m.core.take_woken().collect::<Vec<_>>(), vec![orders, payments], "the shell watches them for a spell");
    m.hear_answers();
    assert_eq!(m.core.flow().resume, vec![payments]);
    m.feed(payments, 1, payment_at(t0 + 120_000, later));
    let watermark = |m: &Member<JoinEnrichService>| {
        m.core.task_statuses().into_iter().find(|t| t.task == 1).and_then(|t| t.watermark_ms).unwrap()
    };
    assert!(watermark(&m) <= t0, "orders hold the watermark");
    // Nothing came: orders is idle again, and payments carry the task on.
    m.core.mark_idle(orders);
    assert!(watermark(&m) > t0 + 60_000);
}

#[test]
fn a_writer_that_decided_on_too_few_records_answers_a_resumed_task_once_the_broker_says_it_read_them() {
    let t0 = 1_700_000_000_000;
    let home = |p: i32| (0..).find(|i| partition_for(format!("o{i}").as_bytes(), PARTITIONS) == p as u32).unwrap();
    let mut m = Member::new(JoinEnrichService);
    m.assign(&Broker::default(), &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    // Task 2 looks at one order in place, then its partitions go idle: it decides
    // that it forwards nothing on too little to vouch for it. Every other task
    // decides so on nothing.
    m.feed((0, 2), 0, order_at(t0, home(2)));
    for slot in all_slots(2) {
        m.core.mark_idle(slot);
    }
    m.hear_answers();
    // Task 1's payments resume: it asks.
    assert!(matches!(m.core.on_input((1, 1), 0, payment_at(t0, home(1))).unwrap(), core::Routed::Held { .. }));
    let markers = m.commit(&mut Broker::default());
    let ask = markers.iter().find(|k| k.task == Some(1)).expect("task 1 asks").generation;
    for (offset, marker) in markers.iter().enumerate() {
        for slot in m.repartition_slots() {
            m.feed(slot, 100 + offset as i64, Incoming::Marker(*marker));
        }
    }
    let verify = m.core.to_verify();
    assert!(verify.contains(&(2, vec![(0, 2), (1, 2)])), "task 2's source partitions need the broker: {verify:?}");
    let answer = |markers: &[Marker], task| markers.iter().find(|k| k.task == Some(task)).map(|k| k.generation);
    let before = m.commit(&mut Broker::default());
    assert!(answer(&before, 2).is_none_or(|g| g < ask), "task 2 answers nothing yet: {before:?}");
    m.core.verified(2);
    let after = m.commit(&mut Broker::default());
    assert!(answer(&after, 2).is_some_and(|g| g >= ask), "task 2 answers it: {after:?}");
}

#[test]
fn a_source_resuming_does_not_hold_a_task_on_repartition_writers_that_forward_nothing() {
    let busy = (0, partition_for(b"site-b", PARTITIONS) as i32);
    // Input starts after the pause: judged by the partition's own watermark, as the
    // embedded runtime judges it, so a record two minutes behind is late at once.
    let events = one_site_devices();
    let last = events.last().expect("events").event_ts;
    let behind = DeviceEvent { event_ts: last - 120_000, ..events[0].clone() };
    let log = events.iter().chain([&behind]).map(|e| record(e.clone(), e.event_ts)).collect();
    let routed = Cluster::new(|| DeviceRouterService, 2, BTreeMap::from([(busy, log)])).paused_before_input().run(1);
    let late: Vec<Millis> =
        routed.iter().filter_map(|r| if let Routed::Late(l) = r { Some(l.event_ts_ms) } else { None }).collect();
    assert_eq!(late, vec![behind.event_ts], "{} routed", routed.len());
}

#[test]
fn when_an_idle_writer_resumes_the_other_idle_writers_hold_its_readers_until_they_repeat_it() {
    let (mut analytics, e, slot) = analytics_with_a_site_b_event();
    let marker = |task, watermark, idle| Incoming::Marker(Marker::of(task, watermark, idle));
    let mut offset = 0;
    let mut feed = |analytics: &mut Member<DeviceAnalyticsService>, incoming| {
        analytics.feed(slot, offset, incoming);
        offset += 1;
    };
    // Every router task went idle before any input came.
    for task in 0..4 {
        feed(&mut analytics, marker(task, NO_WATERMARK, true));
    }
    // Input produced after that reaches router task 0 first: it runs an hour of
    // event time ahead before task 1 has read its own first records.
    let hour_on = e.event_ts + 3_600_000;
    feed(&mut analytics, marker(0, hour_on, false));
    let watermark = |m: &Member<DeviceAnalyticsService>| {
        m.core.task_statuses().into_iter().find(|t| t.task == slot.1).and_then(|t| t.watermark_ms)
    };
    assert!(watermark(&analytics) < Some(e.event_ts), "the other writers may resume too");
    // Tasks 2 and 3 had nothing after all, and say so again; task 1's record comes.
    feed(&mut analytics, marker(2, NO_WATERMARK, true));
    feed(&mut analytics, marker(3, NO_WATERMARK, true));
    feed(&mut analytics, record(e.clone(), e.event_ts));
    feed(&mut analytics, marker(1, hour_on, false));
    let late: Vec<_> = analytics.pending.iter().filter(|o| matches!(o, DeviceOutput::Late(_))).collect();
    assert!(late.is_empty(), "{late:?}");
    assert!(analytics.pending.iter().any(|o| matches!(o, DeviceOutput::Metrics(_))), "its window fired");
}

#[test]
fn a_record_on_a_partition_whose_writers_are_all_idle_holds_them_until_they_speak() {
    let (mut analytics, e, slot) = analytics_with_a_site_b_event();
    let marker = |task, watermark, idle| Incoming::Marker(Marker::of(task, watermark, idle));
    for task in 0..4 {
        analytics.feed(slot, task as i64, marker(task, NO_WATERMARK, true));
    }
    // A writer's records come before the marker of the commit that wrote them.
    analytics.feed(slot, 4, record(e.clone(), e.event_ts));
    let hour_on = e.event_ts + 3_600_000;
    analytics.feed(slot, 5, marker(0, hour_on, false));
    assert!(analytics.pending.is_empty(), "{:?}", analytics.pending);
    for task in 1..4 {
        analytics.feed(slot, 5 + task as i64, marker(task, NO_WATERMARK, true));
    }
    assert!(analytics.pending.iter().any(|o| matches!(o, DeviceOutput::Metrics(_))), "its window fired");
}

/// A stage's members over a simulated cluster: a log per partition of the source and
/// repartition topics, each member reading its partitions in batches as a consumer
/// fetches them (pausing, rewinding and resuming as its core says), and committing
/// after each batch, which makes its rerouted records and repartition markers
/// readable.
struct Cluster<S: Service> {
    members: Vec<Member<S>>,
    logs: BTreeMap<Slot, Vec<Incoming<In<S>>>>,
    next: BTreeMap<Slot, usize>,
    paused: BTreeSet<Slot>,
    broker: Broker,
}

impl<S: Service> Cluster<S>
where
    In<S>: Clone,
{
    /// `members` members, each given every `members`-th task.
    fn new(service: impl Fn() -> S, members: i32, source: BTreeMap<Slot, Vec<Incoming<In<S>>>>) -> Self {
        let broker = Broker::default();
        let members = (0..members)
            .map(|m| {
                let mut member = Member::new(service());
                let slots: Vec<Slot> =
                    all_slots(member.core.inputs().len()).into_iter().filter(|(_, p)| p % members == m).collect();
                member.assign(&broker, &slots);
                member
            })
            .collect();
        Cluster { members, logs: source, next: BTreeMap::new(), paused: Default::default(), broker }
    }

    /// Every source partition judged idle before any input came, and what the tasks
    /// then said read by every member: a stage started a while before its input. Its
    /// idle tasks' last repeat is written just before the input comes, and read after.
    fn paused_before_input(mut self) -> Self {
        let input = std::mem::take(&mut self.logs);
        self.mark_idle(|input, inputs| input < inputs / 2);
        self.settle(1);
        for m in 0..self.members.len() {
            self.commit(m, true);
        }
        self.logs.extend(input);
        self
    }

    /// As [`Cluster::paused_before_input`], but the input comes before the idle tasks
    /// said anything on the repartition topics (a member busy when its partitions
    /// went idle commits later): their readers, hearing nothing there either, took
    /// them for idle too.
    fn silent_before_input(mut self) -> Self {
        self.mark_idle(|_, _| true);
        self
    }

    /// Every member judges idle its partitions of the inputs `which` picks (by index,
    /// of how many), source inputs first.
    fn mark_idle(&mut self, which: impl Fn(usize, usize) -> bool) {
        for m in &mut self.members {
            let inputs = m.core.inputs().len();
            let tasks: Vec<i32> = m.core.tasks().collect();
            let slots = all_slots(inputs).into_iter().filter(|&(i, p)| which(i, inputs) && tasks.contains(&p));
            for slot in slots.collect::<Vec<_>>() {
                m.core.mark_idle(slot);
            }
        }
    }

    /// Runs until nothing moves; what every member delivered.
    fn run(mut self, batch: usize) -> Vec<Out<S>> {
        self.settle(batch);
        self.members.into_iter().flat_map(|m| m.delivered).collect()
    }

    /// Every member reads `batch` messages of each of its partitions in turn, and
    /// commits, until nothing moves; then, as the shell's timer does, a commit at
    /// which idle tasks repeat that they are idle, read by all; and on, until a whole
    /// turn of that reads no record.
    fn settle(&mut self, batch: usize) {
        loop {
            let mut records = 0;
            while let Some(read) = self.round(batch, false) {
                records += read;
            }
            records += self.round(batch, true).unwrap_or(0);
            while let Some(read) = self.round(batch, false) {
                records += read;
            }
            if records == 0 {
                break;
            }
        }
    }

    /// One turn of every member, committing with `repeat_idle`: `None` if nothing
    /// moved, else how many records were read (not held).
    fn round(&mut self, batch: usize, repeat_idle: bool) -> Option<usize> {
        let (mut progress, mut records) = (false, 0);
        {
            for m in 0..self.members.len() {
                let mut rerouted = Vec::new();
                let slots = all_slots(self.members[m].core.inputs().len());
                let mine = slots.into_iter().filter(|&(_, p)| self.members[m].core.tasks().any(|t| t == p));
                for slot in mine.collect::<Vec<_>>() {
                    for _ in 0..batch {
                        let at = *self.next.entry(slot).or_default();
                        let Some(entry) = self.logs.get(&slot).and_then(|l| l.get(at)).map(clone_incoming) else {
                            break;
                        };
                        if self.paused.contains(&slot) {
                            break;
                        }
                        progress = true;
                        self.next.insert(slot, at + 1);
                        let incoming = clone_incoming(&entry);
                        let member = &mut self.members[m];
                        let routed = member.core.on_input(slot, at as i64, incoming).unwrap();
                        let is_record = matches!(entry, Incoming::Record { .. });
                        records += usize::from(is_record && !matches!(routed, core::Routed::Held { .. }));
                        match routed {
                            core::Routed::Reroute { input, partition, .. } => {
                                rerouted.push(((input, partition), entry))
                            }
                            core::Routed::Held { seek: Some(from) } => {
                                self.paused.insert(slot);
                                self.next.insert(slot, from as usize);
                            }
                            _ => {}
                        }
                        member.pending.extend(member.core.take_outputs().map(|e| e.output));
                    }
                }
                // As the shell does: a task asked a generation answers it once its
                // source partitions are read to their end.
                for (task, slots) in self.members[m].core.to_verify() {
                    let end = |slot| self.logs.get(&slot).map_or(0, Vec::len);
                    if slots.iter().all(|&slot| self.next.get(&slot).copied().unwrap_or(0) >= end(slot)) {
                        self.members[m].core.verified(task);
                        progress = true;
                    }
                }
                let flow = self.members[m].core.flow();
                self.paused.extend(flow.pause);
                for (slot, from) in flow.rewind {
                    self.next.insert(slot, from as usize);
                }
                for slot in flow.resume {
                    progress |= self.paused.remove(&slot);
                }
                for (slot, entry) in rerouted {
                    self.logs.entry(slot).or_default().push(entry);
                }
                progress |= self.commit(m, repeat_idle);
            }
        }
        progress.then_some(records)
    }
}

impl<S: Service> Cluster<S> {
    /// Member `m` commits, with `repeat_idle` as in [`Cluster::round`]; its markers go
    /// to every partition of the repartition topics. Whether it wrote any.
    fn commit(&mut self, m: usize, repeat_idle: bool) -> bool {
        let markers = self.members[m].commit_repeating(&mut self.broker, repeat_idle);
        let inputs = self.members[m].core.inputs();
        let repartitions: Vec<usize> = (0..inputs.len()).filter(|&i| inputs[i].is_repartition()).collect();
        for marker in &markers {
            for &i in &repartitions {
                for p in 0..PARTITIONS as i32 {
                    self.logs.entry((i, p)).or_default().push(Incoming::Marker(*marker));
                }
            }
        }
        !markers.is_empty()
    }
}

fn clone_incoming<I: Clone>(incoming: &Incoming<I>) -> Incoming<I> {
    match incoming {
        Incoming::Record { record, event_ts } => Incoming::Record { record: record.clone(), event_ts: *event_ts },
        Incoming::Marker(m) => Incoming::Marker(*m),
        Incoming::Undecodable => Incoming::Undecodable,
    }
}

/// The planted orders and payments on the partitions `place` picks (from the record's
/// index and its order id), each source partition ended.
fn join_logs(place: impl Fn(usize, &str) -> i32) -> BTreeMap<Slot, Vec<Incoming<JoinInput>>> {
    let mut logs: BTreeMap<Slot, Vec<Incoming<JoinInput>>> = BTreeMap::new();
    for (n, ((input, _), _, r, ts)) in join_input().into_iter().enumerate() {
        let key = match &r {
            JoinInput::Order(o) => o.order_id.clone(),
            JoinInput::Payment(p) => p.order_id.clone(),
        };
        logs.entry((input, place(n, &key))).or_default().push(record(r, ts));
    }
    let end = Marker::END;
    for slot in all_slots(2) {
        logs.entry(slot).or_default().push(Incoming::Marker(end));
    }
    logs
}

#[test]
fn unkeyed_input_read_in_bursts_is_joined_as_keyed_input_is() {
    let expected = join_uninterrupted();
    let home = |_: usize, key: &str| partition_for(key.as_bytes(), PARTITIONS) as i32;
    // Unkeyed: spread over the partitions regardless of the key.
    let spread = |n: usize, _: &str| ((n * 7 + n / 3) % PARTITIONS as usize) as i32;
    for batch in [1, 5, 10_000] {
        let keyed = Cluster::new(|| JoinEnrichService, 2, join_logs(home)).run(batch);
        assert_eq!(sorted(&keyed), expected, "keyed, batches of {batch}");
        let unkeyed = Cluster::new(|| JoinEnrichService, 2, join_logs(spread)).run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, batches of {batch}");
    }
}

#[test]
fn input_that_comes_after_every_partition_went_idle_is_joined_as_if_it_had_come_at_once() {
    let expected = join_uninterrupted();
    let home = |_: usize, key: &str| partition_for(key.as_bytes(), PARTITIONS) as i32;
    let spread = |n: usize, _: &str| ((n * 7 + n / 3) % PARTITIONS as usize) as i32;
    for batch in [1, 5, 10_000] {
        let keyed = Cluster::new(|| JoinEnrichService, 2, join_logs(home)).paused_before_input().run(batch);
        assert_eq!(sorted(&keyed), expected, "keyed, batches of {batch}");
        let unkeyed = Cluster::new(|| JoinEnrichService, 2, join_logs(spread)).paused_before_input().run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, batches of {batch}");
        // A producer's sticky partitioner may leave a partition without records: its
        // task gets its keys only through the repartition topics.
        let sparse = |n: usize, _: &str| 1 + (n % 3) as i32;
        let unkeyed = Cluster::new(|| JoinEnrichService, 2, join_logs(sparse)).paused_before_input().run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, partition 0 empty, batches of {batch}");
        // Its end then comes first, and must not carry it past the records forwarded
        // to it, even from writers it has never heard.
        let unkeyed = Cluster::new(|| JoinEnrichService, 2, join_logs(sparse)).silent_before_input().run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, partition 0 empty, writers silent, batches of {batch}");
    }
}

#[test]
fn a_task_reads_no_source_record_until_every_repartition_writer_has_decided() {
    let mut router = Member::new(DeviceRouterService);
    router.assign(&Broker::default(), &all_slots(2));
    let e = |site: &str, k: i64| DeviceEvent {
        site_id: site.into(),
        ..Traffic::new(1, 1_700_000_000_000, 0).device(k as u64)
    };
    let site = "site-b";
    let p = partition_for(site.as_bytes(), PARTITIONS) as i32;
    let (source, repartition) = ((0, p), (1, p));
    // Records in place are looked at, not read, until the task knows its input is
    // keyed (eight in a row): then it rewinds to the first.
    for k in 0..7 {
        let r = router.core.on_input(source, k, record(e(site, k), 0)).unwrap();
        assert_eq!(r, core::Routed::Held { seek: None });
    }
    assert_eq!(router.core.on_input(source, 7, record(e(site, 7), 0)).unwrap(), core::Routed::Held { seek: Some(0) });
    assert!(!router.core.decision_unsent(), "no commit is hurried while other tasks are still deciding");
    // Its own marker says it forwards nothing; the other three writers are silent.
    let markers = router.commit(&mut Broker::default());
    assert_eq!(markers.len(), 1, "only the decided task speaks: {markers:?}");
    for (offset, marker) in markers.iter().enumerate() {
        router.feed(repartition, offset as i64, Incoming::Marker(*marker));
    }
    assert!(router.core.flow().resume.is_empty(), "three writers undecided");
    // The others' partitions have nothing to read for the idle timeout: they decide.
    for q in (0..PARTITIONS as i32).filter(|&q| q != p) {
        router.core.mark_idle((0, q));
    }
    assert!(router.core.decision_unsent(), "every task decided, three not said: worth a commit at once");
    let markers = router.commit(&mut Broker::default());
    assert!(!router.core.decision_unsent());
    assert_eq!(markers.len(), 3);
    for (offset, marker) in markers.iter().enumerate() {
        router.feed(repartition, 1 + offset as i64, Incoming::Marker(*marker));
    }
    assert_eq!(router.core.flow().resume, vec![source]);
    assert_eq!(router.feed(source, 0, record(e(site, 0), 0)), core::Routed::Done);
}
