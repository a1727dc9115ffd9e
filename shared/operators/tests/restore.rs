//! Every operator's state survives its changelog: an operator restored from the
//! entries it wrote (a few records at a time, as commits drain them, compacted as
//! Kafka compacts the topic) a third of the way through the planted dataset, and
//! again from what that one wrote at two thirds, emits exactly what the original
//! emits over the rest. This is what a Kafka service relies on
//! when it restores a task from its changelog after a crash or a rebalance.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use vigil_datagen::planted;
use vigil_model::{Config, DeviceEvent, Millis};
use vigil_operators::{
    DeviceAnalytics, DeviceRouter, HealthInput, HealthMonitor, JoinEnrich, JoinInput, PaymentAnomalies, PaymentMetrics,
    Routed,
};
use vigil_stream::changelog::{encode_key, encode_value, StateWrite, Stateful};
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
    let (first, rest) = steps.split_at(steps.len() / 3);
    let (second, third) = rest.split_at(rest.len() / 2);
    let mut original = make();
    original.track_changes();
    let mut log = Changelog::default();
    feed(&mut original, first, &mut Vec::new(), Some(&mut log));
    // Taken over twice: the first restored operator goes on writing the changelog
    // the second restores from, so what a restore brought back and the operator
    // then dropped must leave the changelog too.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut restored = log.restore(&make);
    feed(&mut original, second, &mut a, None);
    feed(&mut restored, second, &mut b, Some(&mut log));
    let mut restored = log.restore(&make);
    assert_eq!(original.live_entries(), restored.live_entries(), "{name}: the second restore holds as much");
    feed(&mut original, third, &mut a, None);
    feed(&mut restored, third, &mut b, None);
    original.on_watermark(Millis::MAX, &mut a);
    restored.on_watermark(Millis::MAX, &mut b);
    assert!(!a.is_empty(), "{name}: the last two thirds emit something");
    assert_eq!(a, b, "{name}: the restored operator diverged");
    assert_eq!(original.output_watermark(), restored.output_watermark(), "{name}");
}

/// Each record and its watermark into `operator`; with a changelog, a commit every
/// seven records and at the end.
fn feed<O>(operator: &mut O, steps: &[Step<O::In>], out: &mut Vec<O::Out>, mut log: Option<&mut Changelog>)
where
    O: Operator + Stateful,
    O::In: Clone,
{
    for (n, (record, watermark)) in steps.iter().cloned().enumerate() {
        operator.on_record(record, out);
        operator.on_watermark(watermark, out);
        if let Some(log) = log.as_mut().filter(|_| n % 7 == 0) {
            log.commit(operator);
        }
    }
    if let Some(log) = log {
        log.commit(operator);
    }
}

/// A compacted changelog: the latest value of each key, tombstoned keys gone.
#[derive(Default)]
struct Changelog(BTreeMap<Vec<u8>, Vec<u8>>);

impl Changelog {
    fn commit(&mut self, operator: &mut impl Stateful) {
        let mut writes = Vec::new();
        operator.drain_changes(&mut writes);
        for StateWrite { key, value } in writes {
            match value {
                Some(v) => self.0.insert(key, v),
                None => self.0.remove(&key),
            };
        }
    }

    /// A new operator read back from the changelog, tracking its changes from the
    /// start, as a Kafka task's is.
    fn restore<O: Stateful>(&self, make: impl Fn() -> O) -> O {
        let mut operator = make();
        operator.track_changes();
        for (key, value) in &self.0 {
            operator.restore_entry(key, Some(value)).expect("an entry restores");
        }
        operator.finish_restore();
        operator
    }
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
        .filter_map(|(r, w)| if let Routed::OnTime(e) = r { Some((e, w)) } else { None })
        .collect();
    check_restore("device-analytics", || DeviceAnalytics::new(&Config::default()), on_time);
}

#[test]
fn health_monitor_restores() {
    let inputs = routed_steps()
        .into_iter()
        .map(|(r, w)| {
            let input = match r {
                Routed::OnTime(e) => HealthInput::OnTime(e),
                Routed::Late(l) => HealthInput::Late(l),
            };
            (input, w)
        })
        .collect();
    check_restore("health-monitor", || HealthMonitor::new(&Config::default()), inputs);
}

#[test]
fn a_corrupt_entry_is_an_error_that_says_so() {
    let mut join = JoinEnrich::new(&Config::default());
    let err = join.restore_entry(&encode_key(1, "order-1"), Some(b"\x01\xff\xff")).unwrap_err().to_string();
    assert!(err.contains("another Vigil version or is corrupt"), "{err}");
    let err = join.restore_entry(&encode_key(9, "x"), Some(b"\x01")).unwrap_err().to_string();
    assert!(err.contains("unknown namespace 9"), "{err}");
}

/// A customer's statistics as the first per-key layout wrote them, before the
/// time-to-live added `last_ms`.
#[derive(serde::Serialize)]
struct StatsBeforeTtl {
    count: u64,
    mean: f64,
    m2: f64,
}

/// Customer cust-7's payment `pay-1` of 130 at `ts`, joined with its order.
fn payment_of_130(ts: Millis) -> Arc<vigil_model::output::EnrichedPayment> {
    let order = vigil_model::Order {
        order_id: "order-1".into(),
        customer_id: "cust-7".into(),
        order_amount: 130.0,
        order_ts: ts,
        country: "US".into(),
    };
    let payment = vigil_model::Payment {
        payment_id: "pay-1".into(),
        order_id: "order-1".into(),
        paid_amount: 130.0,
        payment_ts: ts,
        method: "card".into(),
    };
    Arc::new(vigil_operators::join_enrich::enrich(payment, Some(&order), 0.01))
}

#[test]
fn statistics_written_by_the_older_layout_restore_and_keep_scoring() {
    let mut anomalies = PaymentAnomalies::new(&Config::default());
    // Five payments of 100, 110, 90, 105, 95: mean 100, sample variance 62.5.
    let old = StatsBeforeTtl { count: 5, mean: 100.0, m2: 250.0 };
    anomalies.restore_entry(&encode_key(1, "cust-7"), Some(&encode_value(&old))).expect("the old layout restores");
    anomalies.finish_restore();
    let mut out = Vec::new();
    anomalies.on_record(payment_of_130(1_700_000_000_000), &mut out);
    anomalies.on_watermark(Millis::MAX, &mut out);
    let threshold = 100.0 + 3.0 * 62.5f64.sqrt();
    match &out[..] {
        [vigil_operators::AnomalyOutput::Anomaly(vigil_model::output::PaymentAnomaly::Amount(a))] => {
            assert_eq!(
                a.threshold,
                (threshold * 100.0).round() / 100.0,
                "the threshold comes from the restored history"
            )
        }
        other => panic!("expected one amount anomaly, got {other:?}"),
    }
}

/// A payment waiting for the watermark as changelogs held them before chunks, one
/// entry a payment: restored, moved into a chunk at the next commit, and gone from
/// the changelog once the watermark releases it.
#[test]
fn waiting_payments_written_one_entry_each_restore_and_move_into_a_chunk() {
    let ts = 1_700_000_000_000;
    let enriched = payment_of_130(ts);
    let old_key = encode_key(3, &(ts, "pay-1", 1u64));
    let mut anomalies = PaymentAnomalies::new(&Config::default());
    anomalies.track_changes();
    anomalies.restore_entry(&old_key, Some(&encode_value(&enriched))).expect("the old layout restores");
    anomalies.finish_restore();
    assert_eq!(anomalies.live_entries(), 1, "the payment waits again");

    let mut writes = Vec::new();
    anomalies.drain_changes(&mut writes);
    let waiting: Vec<StateWrite> = writes.drain(..).filter(|w| matches!(w.key.first(), Some(3 | 4))).collect();
    assert_eq!(waiting.len(), 2, "{writes:?}");
    assert_eq!((&waiting[0].key, waiting[0].value.is_none()), (&old_key, true), "the old entry is deleted");
    let chunk = &waiting[1];
    assert_eq!((chunk.key[0], chunk.value.is_some()), (4, true), "and its payment written in a chunk");

    let mut out = Vec::new();
    anomalies.on_watermark(ts + 1, &mut out);
    assert_eq!(anomalies.live_entries(), 2, "released and scored: the customer's statistics and velocity");
    anomalies.drain_changes(&mut writes);
    assert!(writes.iter().any(|w| w.key == chunk.key && w.value.is_none()), "the chunk is deleted: {writes:?}");
}
