//! Every record the pipeline emits, with the seed's field names in the seed's order,
//! so that the printed NDJSON lines read exactly like the seed's sample output.
//!
//! Window results carry a `revision`: 1 for the first result of a window, higher when
//! a late-but-allowed event changed it. Revision 1 is not printed, so first results
//! match the seed's lines byte for byte; a consumer reads a missing revision as 1.

use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};

use crate::input::{DeviceEvent, EventType, Text};
use crate::time::{iso_utc, Millis};

/// A closed set of names that serializes as a plain string: the seed's JSON has them as
/// strings, and so do the Avro schemas (an Avro enum would tie every schema to every
/// symbol of the Rust enum).
macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(into = "&'static str", try_from = "String")]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl From<$name> for &'static str {
            fn from(v: $name) -> &'static str {
                v.as_str()
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(s: String) -> Result<Self, String> {
                match s.as_str() {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!("unknown {} `{other}`", stringify!($name))),
                }
            }
        }
    };
}

string_enum!(RecordType {
    EnrichedPayment = "enriched_payment",
    WindowMetrics = "window_metrics",
    DeviceMetrics = "device_metrics",
    Anomaly = "anomaly",
    DeviceEvent = "device_event",
    HealthAlert = "health_alert",
    DeadLetter = "dead_letter",
});

string_enum!(AnomalyType {
    Amount = "amount",
    Velocity = "velocity",
    DeviceFaultSpike = "device_fault_spike",
    DeviceRebootLoop = "device_reboot_loop",
    FirmwareUpdateFailure = "firmware_update_failure",
});

fn iso<S: Serializer>(ms: &Millis, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(iso_utc(*ms).as_str())
}

/// Counts are Avro `long`s (signed 64-bit); no count comes near 2^63.
fn long<S: Serializer>(count: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(*count as i64)
}

/// Revisions are Avro `int`s.
fn int<S: Serializer>(revision: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i32(*revision as i32)
}

fn is_first(revision: &u32) -> bool {
    *revision <= 1
}

fn is_false(flag: &bool) -> bool {
    !*flag
}

/// Stage 1: a payment with the context of the order it matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrichedPayment {
    pub record_type: RecordType,
    pub payment_id: Text,
    pub order_id: Text,
    pub paid_amount: f64,
    pub method: Text,
    pub payment_ts_ms: Millis,
    pub unmatched: bool,
    pub customer_id: Option<Text>,
    pub order_amount: Option<f64>,
    pub country: Option<Text>,
    pub amount_mismatch: bool,
}

impl EnrichedPayment {
    /// Its key on Kafka: the customer, or the order when it matched none.
    pub fn key(&self) -> &str {
        self.customer_id.as_deref().unwrap_or(&self.order_id)
    }
}

/// Stage 2: the tumbling payment window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowMetrics {
    pub record_type: RecordType,
    pub window_start_ms: Millis,
    pub window_end_ms: Millis,
    #[serde(serialize_with = "long")]
    pub joined_count: u64,
    #[serde(serialize_with = "long")]
    pub unmatched_payments: u64,
    #[serde(serialize_with = "long")]
    pub amount_mismatches: u64,
    pub total_revenue: f64,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

/// Stage 2: the sliding per-site device window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceMetrics {
    pub record_type: RecordType,
    pub site_id: Text,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    #[serde(serialize_with = "long")]
    pub event_count: u64,
    #[serde(serialize_with = "long")]
    pub fault_count: u64,
    #[serde(serialize_with = "long")]
    pub reboot_count: u64,
    #[serde(serialize_with = "long")]
    pub firmware_failures: u64,
    pub fault_rate: f64,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AmountAnomaly {
    pub record_type: RecordType,
    pub anomaly_type: AnomalyType,
    pub customer_id: Text,
    pub payment_id: Text,
    pub order_id: Text,
    pub amount: f64,
    pub threshold: f64,
    #[serde(serialize_with = "iso")]
    pub event_time: Millis,
    /// Judged on arrival (`[anomalies] provisional`), before event-time order.
    #[serde(skip_serializing_if = "is_false")]
    pub provisional: bool,
    /// A provisional anomaly the event-time verdict takes back.
    #[serde(skip_serializing_if = "is_false")]
    pub retracted: bool,
    /// 2 for the event-time verdict that corrects a provisional one.
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VelocityAnomaly {
    pub record_type: RecordType,
    pub anomaly_type: AnomalyType,
    pub customer_id: Text,
    #[serde(serialize_with = "long")]
    pub transaction_count: u64,
    pub total_amount: f64,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

/// Stage 3, payments.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PaymentAnomaly {
    Amount(AmountAnomaly),
    Velocity(VelocityAnomaly),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultSpike {
    pub record_type: RecordType,
    pub anomaly_type: AnomalyType,
    pub site_id: Text,
    #[serde(serialize_with = "long")]
    pub fault_count: u64,
    #[serde(serialize_with = "long")]
    pub threshold: u64,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RebootLoop {
    pub record_type: RecordType,
    pub anomaly_type: AnomalyType,
    pub device_id: Text,
    #[serde(serialize_with = "long")]
    pub reboot_count: u64,
    #[serde(serialize_with = "long")]
    pub threshold: u64,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FirmwareFailure {
    pub record_type: RecordType,
    pub anomaly_type: AnomalyType,
    pub device_id: Text,
    pub site_id: Text,
    #[serde(serialize_with = "long")]
    pub failure_count: u64,
    #[serde(serialize_with = "iso")]
    pub event_time: Millis,
}

/// Stage 3, devices.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum DeviceAnomaly {
    FaultSpike(FaultSpike),
    RebootLoop(RebootLoop),
    FirmwareFailure(FirmwareFailure),
}

/// Stage 4: a device event behind the watermark by more than the allowed lateness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LateDeviceEvent {
    pub record_type: RecordType,
    pub device_id: Text,
    pub site_id: Text,
    pub event_type: EventType,
    pub status: Text,
    pub event_ts_ms: Millis,
    pub watermark_ms: Millis,
    pub lag_ms: Millis,
}

impl LateDeviceEvent {
    pub fn new(event: DeviceEvent, watermark_ms: Millis) -> Self {
        LateDeviceEvent {
            record_type: RecordType::DeviceEvent,
            lag_ms: watermark_ms - event.event_ts,
            device_id: event.device_id,
            site_id: event.site_id,
            event_type: event.event_type,
            status: event.status,
            event_ts_ms: event.event_ts,
            watermark_ms,
        }
    }
}

/// Stage 4 for payments: an enriched payment that reached a payment window after
/// the watermark had closed it. Rare (the join holds its watermark for pending
/// payments), but counted and shown rather than lost. It reads as the payment's
/// fields followed by `watermark_ms` and `lag_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct LatePayment {
    pub payment: Arc<EnrichedPayment>,
    pub watermark_ms: Millis,
    pub lag_ms: Millis,
}

// By hand rather than `#[serde(flatten)]`, which serializes as a map and so cannot
// be written against an Avro record schema.
impl Serialize for LatePayment {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let p = &self.payment;
        let mut r = s.serialize_struct("LatePayment", 13)?;
        r.serialize_field("record_type", &p.record_type)?;
        r.serialize_field("payment_id", &p.payment_id)?;
        r.serialize_field("order_id", &p.order_id)?;
        r.serialize_field("paid_amount", &p.paid_amount)?;
        r.serialize_field("method", &p.method)?;
        r.serialize_field("payment_ts_ms", &p.payment_ts_ms)?;
        r.serialize_field("unmatched", &p.unmatched)?;
        r.serialize_field("customer_id", &p.customer_id)?;
        r.serialize_field("order_amount", &p.order_amount)?;
        r.serialize_field("country", &p.country)?;
        r.serialize_field("amount_mismatch", &p.amount_mismatch)?;
        r.serialize_field("watermark_ms", &self.watermark_ms)?;
        r.serialize_field("lag_ms", &self.lag_ms)?;
        r.end()
    }
}

string_enum!(HealthReason {
    ThroughputBelowFloor = "throughput_below_floor",
    LateEventSpike = "late_event_spike",
    WatermarkLagExceeded = "watermark_lag_exceeded",
    FaultRateExceeded = "fault_rate_exceeded",
});

string_enum!(Severity { Warning = "warning", Critical = "critical" });

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputAlert {
    pub record_type: RecordType,
    pub reason: HealthReason,
    pub severity: Severity,
    pub gap_ms: Millis,
    pub threshold_ms: Millis,
    #[serde(serialize_with = "iso")]
    pub resumed_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LateSpikeAlert {
    pub record_type: RecordType,
    pub reason: HealthReason,
    pub severity: Severity,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    #[serde(serialize_with = "long")]
    pub late_events: u64,
    #[serde(serialize_with = "long")]
    pub ceiling: u64,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WatermarkLagAlert {
    pub record_type: RecordType,
    pub reason: HealthReason,
    pub severity: Severity,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    pub max_lag_ms: Millis,
    pub threshold_ms: Millis,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultRateAlert {
    pub record_type: RecordType,
    pub reason: HealthReason,
    pub severity: Severity,
    #[serde(serialize_with = "iso")]
    pub window_start: Millis,
    #[serde(serialize_with = "iso")]
    pub window_end: Millis,
    #[serde(serialize_with = "long")]
    pub fault_count: u64,
    #[serde(serialize_with = "long")]
    pub ceiling: u64,
    #[serde(skip_serializing_if = "is_first", serialize_with = "int")]
    pub revision: u32,
}

/// Stage 5.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum HealthAlert {
    Throughput(ThroughputAlert),
    LateSpike(LateSpikeAlert),
    WatermarkLag(WatermarkLagAlert),
    FaultRate(FaultRateAlert),
}

/// An input line that is not a valid record: its dead letter, with where it came
/// from and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvalidLine {
    pub record_type: RecordType,
    pub source: String,
    #[serde(serialize_with = "long")]
    pub line_number: u64,
    pub reason: String,
    pub line: String,
}
