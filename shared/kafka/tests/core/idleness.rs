//! Idleness: a task whose sources have nothing to read says so downstream and holds
//! nobody back; when its sources resume, they and its repartition writers hold it again.

use std::collections::BTreeMap;

use vigil_datagen::traffic::Traffic;
use vigil_kafka::core::driver::{all_slots, commit_all, records_on, Broker, Cluster, Member, PARTITIONS};
use vigil_kafka::core::{Handling, Incoming, Marker, Slot};
use vigil_model::output::LateDeviceEvent;
use vigil_model::topology::{DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, DEVICE_METRICS};
use vigil_model::{DeviceEvent, Millis};
use vigil_operators::stages::{DeviceAnalyticsStage, DeviceRouterStage, JoinEnrichStage};
use vigil_stream::partition::partition_for;

use crate::{order_at, payment_at, record, JOIN_INPUTS};

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
    let ask = Marker { task: Some(asker), watermark: 0, idle: true, generation: 1, read_to: None };
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
