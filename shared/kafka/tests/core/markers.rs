//! Markers: a repartition partition's readers go by every writer's markers, the
//! slowest first, and an idle writer holds them until it speaks again.

use vigil_datagen::traffic::Traffic;
use vigil_kafka::core::driver::{all_slots, Broker, Member, PARTITIONS};
use vigil_kafka::core::{Incoming, Marker, Slot};
use vigil_model::topology::{DEVICE_EVENTS_LATE, DEVICE_METRICS};
use vigil_model::{DeviceEvent, Millis};
use vigil_operators::stages::DeviceAnalyticsStage;
use vigil_stream::partition::partition_for;
use vigil_stream::watermark::NO_WATERMARK;

use crate::record;

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
