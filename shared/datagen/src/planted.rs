//! The planted dataset: the first 45 s of event time, written by hand so that every
//! scenario of the seed's sample output fires with the seed's values.
//!
//! | scenario | records | expected |
//! |---|---|---|
//! | amount mismatch | order-9001 240.0 (cust-003), pay-9001 90.0 at +26.157 s | `amount_mismatch: true` |
//! | unmatched | pay-9002 55.0 for order-DOES-NOT-EXIST at +26.557 s | `unmatched: true` |
//! | amount anomaly | cust-001 history 114.15, 98.94, 104.62, 117.60, 106.68; pay-9003 9800.0 at +28.057 s | threshold 130.87 |
//! | velocity | cust-004 pays 5 times at +13.1 … +17.1 s, 430.52 in all | window [+13 s, +18 s) |
//! | payment metrics | 12 joined payments in [+10 s, +20 s) | revenue 965.6 |
//! | fault spike | site-b: 6 faults in [+30 s, +35 s), 8 of 10 events in [+31 s, +36 s) | fault_count 6; fault_rate 0.8 |
//! | reboot loop | dev-300 reboots 4 times in [+32 s, +37 s) | reboot_count 4 |
//! | firmware failures | dev-100 fails at +37.507, +38.207, +38.907 s | failure_count 1, 2, 3 |
//! | late event | dev-101 heartbeat at +3.507 s arriving after +41.650 s | watermark +39.650 s, lag 36 143 ms |
//! | throughput gap | no device event between +18.957 s and +31.607 s | gap 12 650 ms |
//! | health | the late event; the 6 faults | late spike, watermark lag, fault rate |
//! | bad input | one bad line per stream, two for devices | dead letters |
//!
//! Every site has an event at exactly +41.650 s before the late heartbeat arrives, so
//! the watermark that judges it is +39.650 s whatever the partition count.

use vigil_model::{DeviceEvent, EventType, Millis, Order, Payment};

use crate::PLANTED_START_MS as T0;

/// Where the planted section ends and normal traffic begins.
pub const PLANTED_SPAN_MS: Millis = 45_000;

type Pair = (&'static str, &'static str, f64, &'static str, Millis, &'static str, f64, &'static str, Millis);

/// (order_id, customer, order amount, country, order at, payment_id, paid, method, paid at)
const PAIRS: &[Pair] = &[
    ("order-0000", "cust-003", 143.22, "CA", 0, "pay-0000", 143.22, "card", 866),
    ("order-0001", "cust-001", 114.15, "US", 1_200, "pay-0001", 114.15, "card", 2_050),
    ("order-0002", "cust-002", 75.40, "GB", 2_400, "pay-0002", 75.40, "wallet", 3_100),
    ("order-0003", "cust-005", 212.00, "DE", 3_300, "pay-0003", 212.00, "card", 4_250),
    ("order-0004", "cust-001", 98.94, "US", 4_700, "pay-0004", 98.94, "bank_transfer", 5_300),
    ("order-0005", "cust-003", 151.80, "CA", 5_900, "pay-0005", 151.80, "card", 6_700),
    // Paid before it was ordered: the join buffers the payment first.
    ("order-0006", "cust-002", 81.25, "GB", 8_300, "pay-0006", 81.25, "card", 7_600),
    ("order-0007", "cust-001", 104.62, "US", 8_900, "pay-0007", 104.62, "card", 9_450),
    // [+10 s, +20 s): twelve joined payments, 965.60 in all, five of them cust-004's burst.
    ("order-0008", "cust-002", 79.90, "GB", 10_050, "pay-0008", 79.90, "card", 10_400),
    ("order-0009", "cust-006", 64.35, "FR", 11_000, "pay-0009", 64.35, "wallet", 11_600),
    ("order-0010", "cust-002", 72.15, "GB", 11_900, "pay-0010", 72.15, "card", 12_300),
    ("order-0011", "cust-004", 82.10, "US", 12_700, "pay-0011", 82.10, "card", 13_100),
    ("order-0016", "cust-006", 68.40, "FR", 13_500, "pay-0016", 68.40, "card", 14_650),
    ("order-0012", "cust-004", 91.45, "US", 13_700, "pay-0012", 91.45, "card", 14_100),
    ("order-0013", "cust-004", 78.30, "US", 14_700, "pay-0013", 78.30, "card", 15_100),
    ("order-0017", "cust-002", 84.60, "GB", 15_650, "pay-0017", 84.60, "card", 16_500),
    ("order-0014", "cust-004", 95.12, "US", 15_700, "pay-0014", 95.12, "card", 16_100),
    ("order-0015", "cust-004", 83.55, "US", 16_700, "pay-0015", 83.55, "card", 17_100),
    ("order-0018", "cust-006", 71.28, "FR", 17_900, "pay-0018", 71.28, "wallet", 18_400),
    ("order-0019", "cust-005", 94.40, "DE", 18_800, "pay-0019", 94.40, "card", 19_500),
    ("order-0020", "cust-001", 117.60, "US", 20_500, "pay-0020", 117.60, "card", 21_300),
    ("order-0021", "cust-005", 205.50, "DE", 20_900, "pay-0021", 205.50, "card", 21_800),
    ("order-0022", "cust-006", 66.90, "FR", 23_300, "pay-0022", 66.90, "wallet", 23_900),
    ("order-0023", "cust-001", 106.68, "US", 24_100, "pay-0023", 106.68, "card", 24_600),
    ("order-9001", "cust-003", 240.00, "US", 25_800, "pay-9001", 90.00, "card", 26_157),
    ("order-9003", "cust-001", 9_800.00, "US", 27_600, "pay-9003", 9_800.00, "card", 28_057),
    ("order-0024", "cust-002", 78.00, "GB", 29_000, "pay-0024", 78.00, "card", 29_600),
    ("order-0025", "cust-003", 139.90, "CA", 30_400, "pay-0025", 139.90, "card", 31_200),
    ("order-0026", "cust-006", 69.75, "FR", 32_000, "pay-0026", 69.75, "wallet", 32_700),
    ("order-0027", "cust-005", 198.40, "DE", 33_600, "pay-0027", 198.40, "card", 34_300),
    ("order-0028", "cust-002", 80.10, "GB", 35_200, "pay-0028", 80.10, "card", 35_900),
    ("order-0029", "cust-004", 88.20, "US", 36_800, "pay-0029", 88.20, "card", 37_400),
    ("order-0030", "cust-003", 146.35, "CA", 38_300, "pay-0030", 146.35, "card", 39_000),
    ("order-0031", "cust-006", 67.20, "FR", 39_900, "pay-0031", 67.20, "card", 40_600),
    ("order-0032", "cust-005", 207.10, "DE", 41_500, "pay-0032", 207.10, "wallet", 42_200),
    ("order-0033", "cust-002", 76.85, "GB", 43_100, "pay-0033", 76.85, "card", 43_800),
    ("order-0034", "cust-001", 109.30, "US", 44_000, "pay-0034", 109.30, "card", 44_600),
];

/// The payment whose order never comes.
const UNMATCHED: (&str, &str, f64, &str, Millis) = ("pay-9002", "order-DOES-NOT-EXIST", 55.0, "wallet", 26_557);

/// (device, site, type, status, at) after the throughput gap, in arrival order.
const AFTER_GAP: &[(&str, &str, EventType, &str, Millis)] = {
    use EventType::*;
    &[
        ("dev-201", "site-b", Heartbeat, "ok", 31_607),
        ("dev-200", "site-b", Fault, "degraded", 31_900),
        ("dev-100", "site-a", Heartbeat, "ok", 32_207),
        ("dev-300", "site-c", Reboot, "rebooting", 32_500),
        ("dev-201", "site-b", Fault, "degraded", 32_600),
        ("dev-301", "site-c", Heartbeat, "ok", 32_907),
        ("dev-200", "site-b", Heartbeat, "ok", 33_000),
        ("dev-101", "site-a", Heartbeat, "ok", 33_207),
        ("dev-200", "site-b", Fault, "degraded", 33_400),
        ("dev-301", "site-c", Heartbeat, "ok", 33_907),
        ("dev-300", "site-c", Reboot, "rebooting", 34_000),
        ("dev-201", "site-b", Fault, "degraded", 34_100),
        ("dev-100", "site-a", Heartbeat, "ok", 34_207),
        ("dev-200", "site-b", Fault, "degraded", 34_400),
        ("dev-201", "site-b", Fault, "degraded", 34_700),
        ("dev-301", "site-c", Heartbeat, "ok", 34_907),
        ("dev-200", "site-b", Fault, "degraded", 35_200),
        ("dev-101", "site-a", Heartbeat, "ok", 35_207),
        ("dev-300", "site-c", Reboot, "rebooting", 35_500),
        ("dev-201", "site-b", Fault, "degraded", 35_600),
        ("dev-301", "site-c", Heartbeat, "ok", 35_907),
        ("dev-100", "site-a", Heartbeat, "ok", 36_207),
        ("dev-200", "site-b", Heartbeat, "ok", 36_300),
        ("dev-300", "site-c", Reboot, "rebooting", 36_800),
        ("dev-301", "site-c", Heartbeat, "ok", 36_907),
        ("dev-101", "site-a", FirmwareUpdate, "ok", 37_207),
        ("dev-201", "site-b", Heartbeat, "ok", 37_300),
        ("dev-100", "site-a", FirmwareUpdate, "failed", 37_507),
        ("dev-301", "site-c", Heartbeat, "ok", 37_907),
        ("dev-100", "site-a", FirmwareUpdate, "failed", 38_207),
        ("dev-200", "site-b", Heartbeat, "ok", 38_300),
        ("dev-100", "site-a", FirmwareUpdate, "failed", 38_907),
        ("dev-300", "site-c", Heartbeat, "ok", 38_950),
        ("dev-101", "site-a", Heartbeat, "ok", 39_207),
        ("dev-201", "site-b", Heartbeat, "ok", 39_300),
        ("dev-301", "site-c", Heartbeat, "ok", 39_907),
        ("dev-100", "site-a", Heartbeat, "ok", 40_207),
        ("dev-200", "site-b", Heartbeat, "ok", 40_300),
        ("dev-300", "site-c", Heartbeat, "ok", 40_907),
        ("dev-101", "site-a", Heartbeat, "ok", 41_207),
        ("dev-100", "site-a", Heartbeat, "ok", 41_650),
        ("dev-201", "site-b", Heartbeat, "ok", 41_650),
        ("dev-301", "site-c", Heartbeat, "ok", 41_650),
        // The late heartbeat: 36.143 s behind the watermark of 41.650 − 2 s.
        ("dev-101", "site-a", Heartbeat, "ok", 3_507),
        ("dev-101", "site-a", Heartbeat, "ok", 42_207),
        ("dev-200", "site-b", Heartbeat, "ok", 42_300),
        ("dev-300", "site-c", Heartbeat, "ok", 42_907),
        ("dev-100", "site-a", Heartbeat, "ok", 43_207),
        ("dev-201", "site-b", Heartbeat, "ok", 43_300),
        ("dev-301", "site-c", Heartbeat, "ok", 43_907),
        ("dev-101", "site-a", Heartbeat, "ok", 44_207),
        ("dev-200", "site-b", Heartbeat, "ok", 44_300),
        ("dev-300", "site-c", Heartbeat, "ok", 44_907),
    ]
};

/// Lines that are not valid records, one kind of fault each.
pub const BAD_ORDER_LINES: &[&str] = &[
    r#"{"order_id": "order-0099", "customer_id": "cust-007", "order_amount": "lots", "order_ts": 1700000012000, "country": "US"}"#,
];
pub const BAD_PAYMENT_LINES: &[&str] = &[
    r#"{"payment_id": "pay-0099", "order_id": "order-0099", "paid_amount": -20.0, "payment_ts": 1700000012500, "method": "card"}"#,
];
pub const BAD_DEVICE_LINES: &[&str] = &[
    r#"{"device_id": "dev-102", "site_id": "site-a", "event_type": "meltdown", "status": "critical", "event_ts": 1700000010000}"#,
    r#"{"device_id": "dev-102", "site_id": "site-a", "event_type": "heartb"#,
];

pub fn orders() -> Vec<Order> {
    let mut orders: Vec<Order> = PAIRS
        .iter()
        .map(|&(order_id, customer, amount, country, at, ..)| Order {
            order_id: order_id.into(),
            customer_id: customer.into(),
            order_amount: amount,
            order_ts: T0 + at,
            country: country.into(),
        })
        .collect();
    orders.sort_by_key(|o| o.order_ts);
    orders
}

pub fn payments() -> Vec<Payment> {
    let (payment_id, order_id, paid, method, at) = UNMATCHED;
    let unmatched = Payment {
        payment_id: payment_id.into(),
        order_id: order_id.into(),
        paid_amount: paid,
        payment_ts: T0 + at,
        method: method.into(),
    };
    let mut payments: Vec<Payment> = PAIRS
        .iter()
        .map(|&(order_id, _, _, _, _, payment_id, paid, method, at)| Payment {
            payment_id: payment_id.into(),
            order_id: order_id.into(),
            paid_amount: paid,
            payment_ts: T0 + at,
            method: method.into(),
        })
        .chain(std::iter::once(unmatched))
        .collect();
    payments.sort_by_key(|p| p.payment_ts);
    payments
}

pub fn devices() -> Vec<DeviceEvent> {
    let event = |device: &str, site: &str, event_type, status: &str, at| DeviceEvent {
        device_id: device.into(),
        site_id: site.into(),
        event_type,
        status: status.into(),
        event_ts: T0 + at,
    };
    // Four heartbeats a second on three sites until +18.957 s, then silence.
    let before_gap = (0..19).flat_map(|s: Millis| {
        let rotating = [("dev-101", "site-a"), ("dev-201", "site-b"), ("dev-301", "site-c")][(s % 3) as usize];
        [
            ("dev-100", "site-a", s * 1000 + 207),
            ("dev-200", "site-b", s * 1000 + 457),
            ("dev-300", "site-c", s * 1000 + 707),
            (rotating.0, rotating.1, s * 1000 + 957),
        ]
    });
    before_gap
        .map(|(d, site, at)| event(d, site, EventType::Heartbeat, "ok", at))
        .chain(AFTER_GAP.iter().map(|&(d, site, t, status, at)| event(d, site, t, status, at)))
        .collect()
}

/// The tagged lines of the seed's sample output, which the planted dataset makes
/// Vigil print verbatim (every runtime, every deployment).
pub const SEED_LINES: &[&str] = &[
    r#"ENRICHED> {"record_type": "enriched_payment", "payment_id": "pay-9001", "order_id": "order-9001", "paid_amount": 90.0, "method": "card", "payment_ts_ms": 1700000026157, "unmatched": false, "customer_id": "cust-003", "order_amount": 240.0, "country": "US", "amount_mismatch": true}"#,
    r#"ENRICHED> {"record_type": "enriched_payment", "payment_id": "pay-9002", "order_id": "order-DOES-NOT-EXIST", "paid_amount": 55.0, "method": "wallet", "payment_ts_ms": 1700000026557, "unmatched": true, "customer_id": null, "order_amount": null, "country": null, "amount_mismatch": false}"#,
    r#"METRICS> {"record_type": "window_metrics", "window_start_ms": 1700000010000, "window_end_ms": 1700000020000, "joined_count": 12, "unmatched_payments": 0, "amount_mismatches": 0, "total_revenue": 965.6}"#,
    r#"DEVICE_METRICS> {"record_type": "device_metrics", "site_id": "site-b", "window_start": "2023-11-14T22:13:51+00:00", "window_end": "2023-11-14T22:13:56+00:00", "event_count": 10, "fault_count": 8, "reboot_count": 0, "firmware_failures": 0, "fault_rate": 0.8}"#,
    r#"ANOMALY> {"record_type": "anomaly", "anomaly_type": "amount", "customer_id": "cust-001", "payment_id": "pay-9003", "order_id": "order-9003", "amount": 9800.0, "threshold": 130.87, "event_time": "2023-11-14T22:13:48.057000+00:00"}"#,
    r#"ANOMALY> {"record_type": "anomaly", "anomaly_type": "velocity", "customer_id": "cust-004", "transaction_count": 5, "total_amount": 430.52, "window_start": "2023-11-14T22:13:33+00:00", "window_end": "2023-11-14T22:13:38+00:00"}"#,
    r#"DEVICE_ANOMALY> {"record_type": "anomaly", "anomaly_type": "device_fault_spike", "site_id": "site-b", "fault_count": 6, "threshold": 3, "window_start": "2023-11-14T22:13:50+00:00", "window_end": "2023-11-14T22:13:55+00:00"}"#,
    r#"DEVICE_ANOMALY> {"record_type": "anomaly", "anomaly_type": "device_reboot_loop", "device_id": "dev-300", "reboot_count": 4, "threshold": 3, "window_start": "2023-11-14T22:13:52+00:00", "window_end": "2023-11-14T22:13:57+00:00"}"#,
    r#"DEVICE_ANOMALY> {"record_type": "anomaly", "anomaly_type": "firmware_update_failure", "device_id": "dev-100", "site_id": "site-a", "failure_count": 1, "event_time": "2023-11-14T22:13:57.507000+00:00"}"#,
    r#"LATE_EVENT> {"record_type": "device_event", "device_id": "dev-101", "site_id": "site-a", "event_type": "heartbeat", "status": "ok", "event_ts_ms": 1700000003507, "watermark_ms": 1700000039650, "lag_ms": 36143}"#,
    r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "throughput_below_floor", "severity": "warning", "gap_ms": 12650, "threshold_ms": 4000, "resumed_at": "2023-11-14T22:13:51.607000+00:00"}"#,
    r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "late_event_spike", "severity": "warning", "window_start": "2023-11-14T22:13:20+00:00", "window_end": "2023-11-14T22:13:25+00:00", "late_events": 1, "ceiling": 0}"#,
    r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "watermark_lag_exceeded", "severity": "critical", "window_start": "2023-11-14T22:13:20+00:00", "window_end": "2023-11-14T22:13:25+00:00", "max_lag_ms": 36143, "threshold_ms": 5000}"#,
    r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "fault_rate_exceeded", "severity": "critical", "window_start": "2023-11-14T22:13:50+00:00", "window_end": "2023-11-14T22:13:55+00:00", "fault_count": 6, "ceiling": 4}"#,
];
