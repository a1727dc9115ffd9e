//! Every operator's state survives a snapshot and restore: an operator restored from
//! the snapshot taken halfway through the planted dataset emits exactly what the
//! original emits over the second half. This is what a Kafka service relies on when
//! it restores a task from its changelog after a crash or a rebalance.

use std::fmt::Debug;
use std::sync::Arc;

use vigil_datagen::planted;
use vigil_model::{Config, DeviceEvent, Millis};
use vigil_operators::{
    DeviceAnalytics, DeviceRouter, HealthInput, HealthMonitor, JoinEnrich, JoinInput, PaymentAnomalies, PaymentMetrics,
    Routed,
};
use vigil_stream::snapshot::Stateful;
use vigil_stream::watermark::BoundedOutOfOrderness;
use vigil_stream::Operator;

/// A record and the input watermark after it.
type Step<I> = (I, Millis);

fn check_restore<O>(name: &str, make: impl Fn() -> O, steps: Vec<Step<O::In>>)
where
    O: Operator + Stateful,
    O::In: Clone,
    O::Out: PartialEq + Debug,
{
    let half = steps.len() / 2;
    let mut original = make();
    let mut sink = Vec::new();
    for (record, watermark) in steps[..half].iter().cloned() {
        original.on_record(record, &mut sink);
        original.on_watermark(watermark, &mut sink);
    }
    let mut restored = make();
    restored.restore(&original.snapshot()).expect("a snapshot restores");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (record, watermark) in steps[half..].iter().cloned() {
        original.on_record(record.clone(), &mut a);
        original.on_watermark(watermark, &mut a);
        restored.on_record(record, &mut b);
        restored.on_watermark(watermark, &mut b);
    }
    original.on_watermark(Millis::MAX, &mut a);
    restored.on_watermark(Millis::MAX, &mut b);
    assert!(!a.is_empty(), "{name}: the second half emits something");
    assert_eq!(a, b, "{name}: the restored operator diverged");
    assert_eq!(original.output_watermark(), restored.output_watermark(), "{name}");
}

fn with_watermarks<I>(records: Vec<(I, Millis)>, bound: Millis) -> Vec<Step<I>> {
    let mut clock = BoundedOutOfOrderness::new(bound);
    records.into_iter().map(|(r, ts)| (r, clock.observe(ts))).collect()
}

fn join_steps() -> Vec<Step<JoinInput>> {
    let mut records: Vec<(JoinInput, Millis)> = planted::orders()
        .into_iter()
        .map(|o| (o.order_ts, JoinInput::Order(o)))
        .chain(planted::payments().into_iter().map(|p| (p.payment_ts, JoinInput::Payment(p))))
        .map(|(ts, r)| (r, ts))
        .collect();
    records.sort_by_key(|(_, ts)| *ts);
    with_watermarks(records, 2000)
}

/// What the join emits, with its output watermark after each step, to the end.
fn enriched_steps() -> Vec<Step<Arc<vigil_model::output::EnrichedPayment>>> {
    let mut join = JoinEnrich::new(&Config::default());
    let mut steps = Vec::new();
    let mut emitted = |out: Vec<_>, held| steps.extend(out.into_iter().map(|e| (Arc::new(e), held)));
    for (record, watermark) in join_steps() {
        let mut out = Vec::new();
        join.on_record(record, &mut out);
        join.on_watermark(watermark, &mut out);
        emitted(out, join.output_watermark());
    }
    let mut out = Vec::new();
    join.on_watermark(Millis::MAX, &mut out);
    emitted(out, Millis::MAX);
    steps
}

fn device_steps() -> Vec<Step<DeviceEvent>> {
    with_watermarks(planted::devices().into_iter().map(|d| (d.clone(), d.event_ts)).collect(), 2000)
}

fn routed_steps() -> Vec<Step<Routed>> {
    let mut router = DeviceRouter::new(&Config::default());
    let mut steps = Vec::new();
    for (event, watermark) in device_steps() {
        let mut out = Vec::new();
        router.on_record(event, &mut out);
        router.on_watermark(watermark, &mut out);
        steps.extend(out.into_iter().map(|r| (r, watermark)));
    }
    steps
}

#[test]
fn join_enrich_restores() {
    check_restore("join-enrich", || JoinEnrich::new(&Config::default()), join_steps());
}

#[test]
fn payment_metrics_restores() {
    check_restore("payment-metrics", || PaymentMetrics::new(&Config::default()), enriched_steps());
}

#[test]
fn payment_anomalies_restores() {
    check_restore("payment-anomalies", || PaymentAnomalies::new(&Config::default()), enriched_steps());
}

#[test]
fn device_router_restores() {
    check_restore("device-router", || DeviceRouter::new(&Config::default()), device_steps());
}

#[test]
fn device_analytics_restores() {
    let on_time = routed_steps()
        .into_iter()
        .filter_map(|(r, w)| if let Routed::OnTime(e) = r { Some((Arc::new(e), w)) } else { None })
        .collect();
    check_restore("device-analytics", || DeviceAnalytics::new(&Config::default()), on_time);
}

#[test]
fn health_monitor_restores() {
    let inputs = routed_steps()
        .into_iter()
        .map(|(r, w)| {
            let input = match r {
                Routed::OnTime(e) => HealthInput::OnTime(Arc::new(e)),
                Routed::Late(l) => HealthInput::Late(l),
            };
            (input, w)
        })
        .collect();
    check_restore("health-monitor", || HealthMonitor::new(&Config::default()), inputs);
}

#[test]
fn a_corrupt_snapshot_is_an_error_that_says_so() {
    let mut join = JoinEnrich::new(&Config::default());
    let err = join.restore(b"\xff\xff\xff").unwrap_err().to_string();
    assert!(err.contains("cannot restore operator state"), "{err}");
}
