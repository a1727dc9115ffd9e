//! End to end on the built-in planted dataset: every planted scenario of the seed
//! fires with its values, the seed's sample lines come out byte for byte, and the
//! result does not depend on the partition count or the run.

use std::sync::Arc;

use vigil_datagen::planted::SEED_LINES;
use vigil_datagen::Dataset;
use vigil_embedded::{run, RunStats};
use vigil_ingest::{Line, MergedInput};
use vigil_model::output::{
    DeviceAnomaly, DeviceMetrics, EnrichedPayment, HealthAlert, InvalidLine, LateDeviceEvent, LatePayment,
    PaymentAnomaly, WindowMetrics,
};
use vigil_model::topology::{
    Topic, DEAD_LETTERS, DEVICE_ANOMALIES, DEVICE_EVENTS_LATE, DEVICE_METRICS, ENRICHED_PAYMENTS,
    ENRICHED_PAYMENTS_LATE, HEALTH_ALERTS, PAYMENT_ANOMALIES, PAYMENT_METRICS,
};
use vigil_model::{Config, InputRecord, Millis, Printed};
use vigil_operators::SeedPipeline;

const T0: Millis = 1_700_000_000_000;
/// Where the planted section ends and normal traffic begins.
const PLANTED_END: Millis = T0 + 45_000;

type Outputs = Vec<(&'static Topic, Arc<dyn Printed>)>;

fn run_planted(partitions: u32, scale: u64) -> (Outputs, RunStats) {
    let mut config = Config::default();
    config.runtime.partitions = partitions;
    let mut outputs = Vec::new();
    let input = MergedInput::from_dataset(Dataset::planted(scale, 7));
    let stats = run(
        &SeedPipeline::default(),
        &config,
        input,
        |topic, record| {
            outputs.push((topic, record));
            Ok(())
        },
        |_, _| {},
    )
    .expect("the planted dataset runs");
    (outputs, stats)
}

fn tagged((topic, record): &(&'static Topic, Arc<dyn Printed>)) -> String {
    record.tagged_line(topic.tag.expect("outputs have tags"))
}

/// The records written to `topic`, as their type.
fn on<'a, T: 'static>(outputs: &'a Outputs, topic: &'static Topic) -> Vec<&'a T> {
    outputs
        .iter()
        .filter(|(t, _)| t.is(topic))
        .map(|(_, r)| r.as_any().downcast_ref::<T>().unwrap_or_else(|| panic!("{} holds another type", topic.name)))
        .collect()
}

#[test]
fn the_seed_sample_lines_come_out_verbatim() {
    let (outputs, _) = run_planted(4, 1);
    let lines: Vec<String> = outputs.iter().map(tagged).collect();
    for expected in SEED_LINES {
        assert!(lines.iter().any(|l| l == expected), "missing: {expected}");
    }
}

#[test]
fn every_planted_scenario_fires_with_its_values() {
    let (outputs, stats) = run_planted(4, 1);

    let payments = on::<EnrichedPayment>(&outputs, &ENRICHED_PAYMENTS);
    let enriched = |id: &str| {
        payments.iter().find(|e| e.payment_id == id).copied().unwrap_or_else(|| panic!("{id} was not enriched"))
    };
    let mismatch = enriched("pay-9001");
    assert!(!mismatch.unmatched && mismatch.amount_mismatch);
    assert_eq!((mismatch.paid_amount, mismatch.order_amount), (90.0, Some(240.0)));
    let unmatched = enriched("pay-9002");
    assert!(unmatched.unmatched && !unmatched.amount_mismatch && unmatched.customer_id.is_none());
    let input = MergedInput::from_dataset(Dataset::planted(1, 7));
    let read_payments = input.filter(|l| matches!(l, Ok(Line::Record(InputRecord::Payment(_))))).count();
    assert_eq!(payments.len(), read_payments, "every payment is enriched exactly once");

    let planted = |ts: Millis| ts < PLANTED_END;
    let anomalies = on::<PaymentAnomaly>(&outputs, &PAYMENT_ANOMALIES);
    let amounts: Vec<_> = anomalies
        .iter()
        .filter_map(|o| match o {
            PaymentAnomaly::Amount(a) if planted(a.event_time) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(amounts.len(), 1, "only pay-9003 is an amount anomaly in the planted section");
    assert_eq!((amounts[0].payment_id.as_str(), amounts[0].amount, amounts[0].threshold), ("pay-9003", 9800.0, 130.87));

    let velocity: Vec<_> = anomalies
        .iter()
        .filter_map(|o| match o {
            PaymentAnomaly::Velocity(v) if planted(v.window_start) => Some(v),
            _ => None,
        })
        .collect();
    assert_eq!(velocity.len(), 1, "cust-004's burst fills exactly one window");
    assert_eq!(
        (velocity[0].customer_id.as_str(), velocity[0].transaction_count, velocity[0].total_amount),
        ("cust-004", 5, 430.52)
    );
    assert_eq!((velocity[0].window_start, velocity[0].window_end), (T0 + 13_000, T0 + 18_000));

    let windows = on::<WindowMetrics>(&outputs, &PAYMENT_METRICS);
    let metrics = |start: Millis| windows.iter().find(|m| m.window_start_ms == start).copied().unwrap();
    let m = metrics(T0 + 10_000);
    assert_eq!((m.joined_count, m.unmatched_payments, m.amount_mismatches, m.total_revenue), (12, 0, 0, 965.6));
    let m = metrics(T0 + 20_000);
    assert_eq!((m.joined_count, m.unmatched_payments, m.amount_mismatches), (7, 1, 1), "pay-9001 and pay-9002");

    let site_b = on::<DeviceMetrics>(&outputs, &DEVICE_METRICS)
        .into_iter()
        .find(|m| m.site_id == "site-b" && m.window_start == T0 + 31_000)
        .unwrap();
    assert_eq!((site_b.event_count, site_b.fault_count, site_b.fault_rate), (10, 8, 0.8));

    let device_anomalies = on::<DeviceAnomaly>(&outputs, &DEVICE_ANOMALIES);
    let spikes: Vec<_> = device_anomalies
        .iter()
        .filter_map(|o| match o {
            DeviceAnomaly::FaultSpike(s) if planted(s.window_start) => Some(s),
            _ => None,
        })
        .collect();
    assert!(spikes.iter().all(|s| s.site_id == "site-b"));
    let first = spikes.iter().min_by_key(|s| s.window_start).unwrap();
    assert_eq!((first.window_start, first.fault_count, first.threshold), (T0 + 30_000, 6, 3), "the spike as it builds");

    let loops: Vec<_> = device_anomalies
        .iter()
        .filter_map(|o| match o {
            DeviceAnomaly::RebootLoop(r) if planted(r.window_start) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(loops.len(), 1);
    assert_eq!(
        (loops[0].device_id.as_str(), loops[0].reboot_count, loops[0].window_start),
        ("dev-300", 4, T0 + 32_000)
    );

    let firmware: Vec<(Millis, u64)> = device_anomalies
        .iter()
        .filter_map(|o| match o {
            DeviceAnomaly::FirmwareFailure(f) if f.device_id == "dev-100" => Some((f.event_time - T0, f.failure_count)),
            _ => None,
        })
        .collect();
    assert_eq!(firmware, vec![(37_507, 1), (38_207, 2), (38_907, 3)]);

    assert_eq!(on::<LatePayment>(&outputs, &ENRICHED_PAYMENTS_LATE), Vec::<&LatePayment>::new());
    let late = on::<LateDeviceEvent>(&outputs, &DEVICE_EVENTS_LATE);
    assert_eq!(late.len(), 1);
    assert_eq!(
        (late[0].device_id.as_str(), late[0].event_ts_ms, late[0].watermark_ms, late[0].lag_ms),
        ("dev-101", T0 + 3_507, T0 + 39_650, 36_143)
    );

    let alerts = on::<HealthAlert>(&outputs, &HEALTH_ALERTS);
    let gaps: Vec<_> =
        alerts.iter().filter_map(|a| if let HealthAlert::Throughput(t) = a { Some(t) } else { None }).collect();
    assert_eq!(gaps.len(), 1, "normal traffic has no gaps");
    assert_eq!((gaps[0].gap_ms, gaps[0].resumed_at), (12_650, T0 + 31_607));
    assert!(alerts
        .iter()
        .any(|a| matches!(a, HealthAlert::LateSpike(s) if s.window_start == T0 && s.late_events == 1)));
    assert!(alerts
        .iter()
        .any(|a| matches!(a, HealthAlert::WatermarkLag(l) if l.window_start == T0 && l.max_lag_ms == 36_143)));
    assert!(alerts
        .iter()
        .any(|a| matches!(a, HealthAlert::FaultRate(f) if f.window_start == T0 + 30_000 && f.fault_count == 6)));

    let dead: Vec<&str> = on::<InvalidLine>(&outputs, &DEAD_LETTERS).iter().map(|d| d.source.as_str()).collect();
    assert_eq!(dead, vec!["orders", "payments", "devices", "devices"]);

    assert!(stats.ledger.balanced(), "{}", stats.ledger);
    assert_eq!((stats.ledger.late, stats.ledger.dead_letters), (1, 4));
}

fn canonical(outputs: &Outputs) -> Vec<String> {
    let mut lines: Vec<String> = outputs.iter().map(tagged).collect();
    lines.sort();
    lines
}

#[test]
fn the_result_does_not_depend_on_the_partition_count() {
    let (one, _) = run_planted(1, 3);
    let reference = canonical(&one);
    for partitions in [2, 4, 7] {
        let (outputs, _) = run_planted(partitions, 3);
        assert_eq!(canonical(&outputs), reference, "{partitions} partitions");
    }
}

#[test]
fn the_same_input_gives_the_same_output_in_the_same_order() {
    let (a, _) = run_planted(4, 2);
    let (b, _) = run_planted(4, 2);
    assert_eq!(a.iter().map(tagged).collect::<Vec<_>>(), b.iter().map(tagged).collect::<Vec<_>>());
}

#[test]
fn more_normal_traffic_leaves_the_planted_scenarios_as_they_are() {
    let (small, _) = run_planted(4, 1);
    let (large, stats) = run_planted(4, 40);
    assert!(stats.ledger.read > 40_000 && stats.ledger.balanced(), "{}", stats.ledger);
    let lines: Vec<String> = large.iter().map(tagged).collect();
    for expected in SEED_LINES {
        assert!(lines.iter().any(|l| l == expected), "missing at scale 40: {expected}");
    }
    let planted_alerts = |o: &Outputs| {
        let alert = |t: &Topic| t.is(&HEALTH_ALERTS) || t.late;
        o.iter().filter(|(t, _)| alert(t)).map(tagged).collect::<Vec<_>>()
    };
    assert_eq!(planted_alerts(&large), planted_alerts(&small), "quiet normal traffic raises no health alert");
}
