//! The task core driven without Kafka through its test driver (`core::driver`):
//! records, markers, commits, aborts and rebalances in; outputs, markers, changelog
//! writes and offsets out.

use std::collections::BTreeMap;

use vigil_datagen::planted;
use vigil_datagen::traffic::Traffic;
use vigil_kafka::core::driver::{
    all_slots, commit_all, finish, records_on, sorted, Broker, Cluster, Member, PARTITIONS,
};
use vigil_kafka::core::{Flow, Handling, Incoming, Marker, Slot};
use vigil_model::output::LateDeviceEvent;
use vigil_model::topology::{DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, DEVICE_METRICS};
use vigil_model::{Config, DeviceEvent, Millis, Text};
use vigil_operators::stages::{DeviceAnalyticsStage, DeviceRouterStage, JoinEnrichStage};
use vigil_operators::JoinInput;
use vigil_stream::partition::partition_for;
use vigil_stream::watermark::NO_WATERMARK;

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

/// The join over the planted input with one member, committing every `every`
/// records, ended (every partition finished).
fn join_uninterrupted() -> Vec<String> {
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichStage);
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

#[test]
fn an_abort_before_the_first_commit_replays_against_fresh_clocks() {
    let expected = join_uninterrupted();
    let input = join_input();
    let half = input.len() / 2;
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichStage);
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
    m: Member<JoinEnrichStage>,
    /// The offsets committed at one third.
    at_a_third: BTreeMap<Slot, i64>,
}

fn two_thirds_read() -> TwoThirdsRead {
    let input = join_input();
    let mut broker = Broker::default();
    let mut m = Member::new(JoinEnrichStage);
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
fn feed_from_committed(m: &mut Member<JoinEnrichStage>, input: &[(Slot, i64, JoinInput, Millis)]) {
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
    let mut next = Member::new(JoinEnrichStage);
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
    let mut first = Member::new(JoinEnrichStage);
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
    let mut second = Member::new(JoinEnrichStage);
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
    let mut m = Member::new(JoinEnrichStage);
    m.assign(&broker, &all_slots(JOIN_INPUTS));
    m.hear_idle_writers();
    let order = planted::orders().remove(0);
    let home = partition_for(order.order_id.as_bytes(), PARTITIONS) as i32;
    let away = (home + 1) % PARTITIONS as i32;
    let ts = order.order_ts;
    let routed = m.feed((0, away), 0, record(JoinInput::Order(order.clone()), ts));
    // Input 2 is the orders' repartition topic.
    assert_eq!(routed, Handling::Reroute { input: 2, partition: home, key: order.order_id.to_string() });
    let next = PARTITIONS as i64;
    let again = m.feed((2, home), next, record(JoinInput::Order(order), ts));
    assert_eq!(again, Handling::Processed, "read again at home: joined");
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
    let mut with_data = Member::new(DeviceRouterStage);
    let mut empty = Member::new(DeviceRouterStage);
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
        assert!(matches!(looked, Handling::Held { .. }));
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
    let on_time: Vec<DeviceEvent> = records_on(&with_data.delivered, &DEVICE_EVENTS_ONTIME);
    let mut analytics = Member::new(DeviceAnalyticsStage);
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
    let metrics = analytics.pending.iter().filter(|o| o.topic.is(&DEVICE_METRICS)).count();
    assert!(metrics > 0, "site-b's windows fired although three router tasks had no records");
}

#[test]
fn with_every_source_idle_a_task_says_so_downstream() {
    let mut broker = Broker::default();
    let mut router = Member::new(DeviceRouterStage);
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
    let mut router = Member::new(DeviceRouterStage);
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
    let first = said_busy(&decided).expect("the busy task writes a marker").watermark;

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
fn analytics_with_a_site_b_event() -> (Member<DeviceAnalyticsStage>, DeviceEvent, Slot) {
    let mut analytics = Member::new(DeviceAnalyticsStage);
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
    let late: Vec<_> = analytics.pending.iter().filter(|o| o.topic.is(&DEVICE_EVENTS_LATE)).collect();
    assert!(late.is_empty(), "{late:?}");
}

#[test]
fn a_partition_far_ahead_of_its_task_is_paused_until_the_others_catch_up() {
    let mut m = Member::new(JoinEnrichStage);
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
    assert_eq!(m.core.flow(), Flow::default());
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
    let mut m = Member::new(JoinEnrichStage);
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
    assert_eq!(resumed, Handling::Held { seek: Some(1) });
    assert_eq!(m.core.take_woken().collect::<Vec<_>>(), vec![orders, payments], "the shell watches them for a spell");
    m.hear_answers();
    assert_eq!(m.core.flow().resume, vec![payments]);
    m.feed(payments, 1, payment_at(t0 + 120_000, later));
    let watermark = |m: &Member<JoinEnrichStage>| {
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
    let mut m = Member::new(JoinEnrichStage);
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
    assert!(matches!(m.core.on_input((1, 1), 0, payment_at(t0, home(1))).unwrap(), Handling::Held { .. }));
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
    let routed = Cluster::new(|| DeviceRouterStage, 2, BTreeMap::from([(busy, log)])).paused_before_input().run(1);
    let late: Vec<Millis> =
        records_on::<LateDeviceEvent>(&routed, &DEVICE_EVENTS_LATE).iter().map(|l| l.event_ts_ms).collect();
    assert_eq!(late, vec![behind.event_ts], "{} routed", routed.len());
}

#[test]
fn when_an_idle_writer_resumes_the_other_idle_writers_hold_its_readers_until_they_repeat_it() {
    let (mut analytics, e, slot) = analytics_with_a_site_b_event();
    let marker = |task, watermark, idle| Incoming::Marker(Marker::of(task, watermark, idle));
    let mut offset = 0;
    let mut feed = |analytics: &mut Member<DeviceAnalyticsStage>, incoming| {
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
    let watermark = |m: &Member<DeviceAnalyticsStage>| {
        m.core.task_statuses().into_iter().find(|t| t.task == slot.1).and_then(|t| t.watermark_ms)
    };
    assert!(watermark(&analytics) < Some(e.event_ts), "the other writers may resume too");
    // Tasks 2 and 3 had nothing after all, and say so again; task 1's record comes.
    feed(&mut analytics, marker(2, NO_WATERMARK, true));
    feed(&mut analytics, marker(3, NO_WATERMARK, true));
    feed(&mut analytics, record(e.clone(), e.event_ts));
    feed(&mut analytics, marker(1, hour_on, false));
    let late: Vec<_> = analytics.pending.iter().filter(|o| o.topic.is(&DEVICE_EVENTS_LATE)).collect();
    assert!(late.is_empty(), "{late:?}");
    assert!(analytics.pending.iter().any(|o| o.topic.is(&DEVICE_METRICS)), "its window fired");
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
    assert!(analytics.pending.iter().any(|o| o.topic.is(&DEVICE_METRICS)), "its window fired");
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
        let keyed = Cluster::new(|| JoinEnrichStage, 2, join_logs(home)).run(batch);
        assert_eq!(sorted(&keyed), expected, "keyed, batches of {batch}");
        let unkeyed = Cluster::new(|| JoinEnrichStage, 2, join_logs(spread)).run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, batches of {batch}");
    }
}

#[test]
fn input_that_comes_after_every_partition_went_idle_is_joined_as_if_it_had_come_at_once() {
    let expected = join_uninterrupted();
    let home = |_: usize, key: &str| partition_for(key.as_bytes(), PARTITIONS) as i32;
    let spread = |n: usize, _: &str| ((n * 7 + n / 3) % PARTITIONS as usize) as i32;
    for batch in [1, 5, 10_000] {
        let keyed = Cluster::new(|| JoinEnrichStage, 2, join_logs(home)).paused_before_input().run(batch);
        assert_eq!(sorted(&keyed), expected, "keyed, batches of {batch}");
        let unkeyed = Cluster::new(|| JoinEnrichStage, 2, join_logs(spread)).paused_before_input().run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, batches of {batch}");
        // A producer's sticky partitioner may leave a partition without records: its
        // task gets its keys only through the repartition topics.
        let sparse = |n: usize, _: &str| 1 + (n % 3) as i32;
        let unkeyed = Cluster::new(|| JoinEnrichStage, 2, join_logs(sparse)).paused_before_input().run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, partition 0 empty, batches of {batch}");
        // Its end then comes first, and must not carry it past the records forwarded
        // to it, even from writers it has never heard.
        let unkeyed = Cluster::new(|| JoinEnrichStage, 2, join_logs(sparse)).silent_before_input().run(batch);
        assert_eq!(sorted(&unkeyed), expected, "unkeyed, partition 0 empty, writers silent, batches of {batch}");
    }
}

#[test]
fn a_task_reads_no_source_record_until_every_repartition_writer_has_decided() {
    let mut router = Member::new(DeviceRouterStage);
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
        assert_eq!(r, Handling::Held { seek: None });
    }
    assert_eq!(router.core.on_input(source, 7, record(e(site, 7), 0)).unwrap(), Handling::Held { seek: Some(0) });
    assert!(!router.core.decision_unsent(), "no commit is hurried while other tasks are still deciding");
    // Its own marker says it forwards nothing; the other three writers are silent.
    let markers = router.commit(&mut Broker::default());
    assert_eq!(markers.len(), 1, "only the decided task writes markers: {markers:?}");
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
    assert_eq!(router.feed(source, 0, record(e(site, 0), 0)), Handling::Processed);
}
