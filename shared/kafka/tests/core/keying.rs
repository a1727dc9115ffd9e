//! Keying: a task reads its source records only once it knows whether its input is
//! keyed; records off their key's partition go through the repartition topics, and
//! unkeyed input is joined as keyed input is.

use std::collections::BTreeMap;

use vigil_datagen::planted;
use vigil_datagen::traffic::Traffic;
use vigil_kafka::core::driver::{all_slots, sorted, Broker, Cluster, Member, PARTITIONS};
use vigil_kafka::core::{Handling, Incoming, Marker, Slot, Stamp};
use vigil_model::{DeviceEvent, Millis};
use vigil_operators::stages::{DeviceRouterStage, JoinEnrichStage};
use vigil_operators::JoinInput;
use vigil_stream::partition::partition_for;

use crate::{join_input, join_uninterrupted, record, JOIN_INPUTS};

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
    let origin = Stamp { partition: away, ..Stamp::default() };
    let key = order.order_id.to_string();
    assert_eq!(routed, Handling::Reroute { input: 2, partition: home, key, origin });
    let next = PARTITIONS as i64;
    let forwarded = Incoming::Record { record: JoinInput::Order(order), event_ts: ts, stamp: Some(origin) };
    let again = m.feed((2, home), next, forwarded);
    assert_eq!(again, Handling::Processed, "read again at home");
    // Its writers were idle: it asks them where they stand, and joins it once each
    // has answered, the one forwarding saying it has read past it, and its own
    // orders partition is known to have nothing older (the others have nothing to
    // read).
    for slot in all_slots(2).into_iter().filter(|&(_, p)| p != away) {
        m.core.mark_idle(slot);
    }
    m.hear_answers();
    // Their answers woke its own source partitions, which have nothing to read.
    m.core.mark_idle((0, home));
    m.commit(&mut broker);
    let ledgers: Vec<_> =
        m.core.task_statuses().into_iter().map(|t| (t.task, t.ledger.read, t.ledger.rerouted)).collect();
    assert!(ledgers.contains(&(away, 0, 1)) && ledgers.contains(&(home, 1, 0)), "{ledgers:?}");
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

/// The planted orders and payments on the partitions `place` picks (from the record's
/// index and its order id), each source partition ended.
fn join_logs(place: impl Fn(usize, &str) -> i32) -> BTreeMap<Slot, Vec<Incoming<JoinInput>>> {
    let mut logs: BTreeMap<Slot, Vec<Incoming<JoinInput>>> = BTreeMap::new();
    for (n, ((input, _), _, r, ts)) in join_input().into_iter().enumerate() {
        let key = match &r {
            JoinInput::Order(o) => o.order_id.clone(),
            JoinInput::Payment(p) => p.order_id.clone(),
        };
        // Produced in dataset order, a millisecond apart.
        let stamp = Some(Stamp { at_ms: n as Millis, ..Stamp::default() });
        logs.entry((input, place(n, &key))).or_default().push(Incoming::Record { record: r, event_ts: ts, stamp });
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

/// The planted device events with three blocks at the edge of lateness
/// (`Dataset::with_lateness_edges`), in the order produced, on the partitions `place`
/// picks (from the record's index and its site), each source partition ended.
pub(crate) fn device_logs(place: impl Fn(usize, &str) -> i32) -> BTreeMap<Slot, Vec<Incoming<DeviceEvent>>> {
    // Produced 50 a millisecond.
    device_logs_produced(place, |n| (n / 50) as Millis)
}

/// As [`device_logs`], the n-th record produced at `produced(n)`, numbered as Vigil's
/// producer numbers them.
pub(crate) fn device_logs_produced(
    place: impl Fn(usize, &str) -> i32,
    produced: impl Fn(usize) -> Millis,
) -> BTreeMap<Slot, Vec<Incoming<DeviceEvent>>> {
    let devices = vigil_model::Config::default().devices;
    let dataset = vigil_datagen::Dataset::planted(1, 7).with_lateness_edges(&devices, 3);
    let mut logs: BTreeMap<Slot, Vec<Incoming<DeviceEvent>>> = BTreeMap::new();
    let events = dataset.devices.iter().filter_map(|line| serde_json::from_str::<DeviceEvent>(line).ok());
    for (n, e) in events.enumerate() {
        let stamp = Some(Stamp { at_ms: produced(n), seq: n as u64, ..Stamp::default() });
        let event_ts = e.event_ts;
        let slot = (0, place(n, &e.site_id));
        logs.entry(slot).or_default().push(Incoming::Record { record: e, event_ts, stamp });
    }
    for slot in all_slots(1) {
        logs.entry(slot).or_default().push(Incoming::Marker(Marker::END));
    }
    logs
}

#[test]
fn device_events_are_judged_late_as_if_keyed_whatever_their_partition() {
    let home = |_: usize, site: &str| partition_for(site.as_bytes(), PARTITIONS) as i32;
    let keyed = sorted(&Cluster::new(|| DeviceRouterStage, 2, device_logs(home)).run(1));
    assert!(keyed.iter().any(|l| l.starts_with("device-events-late")), "the planted late heartbeat");
    // Unkeyed: runs of records on one partition (a sticky partitioner), or spread.
    let sticky = |n: usize, _: &str| ((n / 37) % PARTITIONS as usize) as i32;
    let spread = |n: usize, _: &str| ((n * 7 + n / 3) % PARTITIONS as usize) as i32;
    for batch in [1, 5, 10_000] {
        let got = sorted(&Cluster::new(|| DeviceRouterStage, 2, device_logs(sticky)).run(batch));
        assert_eq!(got, keyed, "sticky, batches of {batch}");
        let got = sorted(&Cluster::new(|| DeviceRouterStage, 2, device_logs(spread)).run(batch));
        assert_eq!(got, keyed, "spread, batches of {batch}");
    }
}

#[test]
fn a_task_taken_over_while_its_merge_holds_records_judges_as_if_keyed() {
    let home = |_: usize, site: &str| partition_for(site.as_bytes(), PARTITIONS) as i32;
    let keyed = sorted(&Cluster::new(|| DeviceRouterStage, 2, device_logs(home)).run(1));
    let spread = |n: usize, _: &str| ((n * 7 + n / 3) % PARTITIONS as usize) as i32;
    for batch in [1, 5, 50] {
        for rounds in [3, 20, 60] {
            let mut cluster = Cluster::new(|| DeviceRouterStage, 2, device_logs(spread));
            for _ in 0..rounds {
                cluster.round(batch, false);
            }
            cluster.replace(1, Member::new(DeviceRouterStage));
            cluster.settle(batch);
            let got = sorted(&cluster.members.into_iter().flat_map(|m| m.delivered).collect::<Vec<_>>());
            assert_eq!(got, keyed, "member 1 replaced after {rounds} rounds of {batch}");
        }
    }
}
