//! The three input streams, exactly as the seed names their fields, and the
//! validation that turns a raw line into a record or a reason to reject it.

use serde::{Deserialize, Serialize};

use crate::flat_json;
use crate::time::Millis;

/// A record's text field. Ids, codes and statuses are short: kept inline (up to 24
/// bytes), they cost no allocation to read, copy into state or drop.
pub type Text = compact_str::CompactString;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub order_id: Text,
    pub customer_id: Text,
    pub order_amount: f64,
    pub order_ts: Millis,
    pub country: Text,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payment {
    pub payment_id: Text,
    pub order_id: Text,
    pub paid_amount: f64,
    pub payment_ts: Millis,
    pub method: Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Heartbeat,
    Fault,
    Reboot,
    FirmwareUpdate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceEvent {
    pub device_id: Text,
    pub site_id: Text,
    pub event_type: EventType,
    pub status: Text,
    pub event_ts: Millis,
}

impl DeviceEvent {
    /// A firmware update that reports failure. The seed names no status values; we
    /// accept the spellings device fleets commonly send.
    pub fn is_firmware_failure(&self) -> bool {
        self.event_type == EventType::FirmwareUpdate && matches!(self.status.as_str(), "failed" | "failure" | "error")
    }
}

/// Which input stream a record came from; also the name of its topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Orders,
    Payments,
    Devices,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::Orders, Source::Payments, Source::Devices];

    pub fn name(self) -> &'static str {
        match self {
            Source::Orders => "orders",
            Source::Payments => "payments",
            Source::Devices => "devices",
        }
    }

    pub fn from_name(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The file a dataset folder holds this stream in.
    pub fn file_name(self) -> &'static str {
        match self {
            Source::Orders => "orders.ndjson",
            Source::Payments => "payments.ndjson",
            Source::Devices => "devices.ndjson",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum InputRecord {
    Order(Order),
    Payment(Payment),
    Device(DeviceEvent),
}

impl InputRecord {
    pub fn event_ts(&self) -> Millis {
        match self {
            InputRecord::Order(o) => o.order_ts,
            InputRecord::Payment(p) => p.payment_ts,
            InputRecord::Device(d) => d.event_ts,
        }
    }
}

/// Why a line is not a valid record of its stream.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRecord(pub String);

/// Parses and validates one NDJSON line of `source`.
pub fn parse_line(source: Source, line: &str) -> Result<InputRecord, InvalidRecord> {
    let bad = |e: serde_json::Error| InvalidRecord(format!("not a valid {} record: {e}", source.name()));
    let record = match flat_json::record(source, line) {
        Some(record) => record,
        None => match source {
            Source::Orders => InputRecord::Order(serde_json::from_str(line).map_err(bad)?),
            Source::Payments => InputRecord::Payment(serde_json::from_str(line).map_err(bad)?),
            Source::Devices => InputRecord::Device(serde_json::from_str(line).map_err(bad)?),
        },
    };
    record.validate()?;
    Ok(record)
}

impl InputRecord {
    /// The rules a well-typed record must still meet, whatever format it came in.
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        match self {
            InputRecord::Order(o) => Self::check_order(o),
            InputRecord::Payment(p) => Self::check_payment(p),
            InputRecord::Device(d) => Self::check_device_event(d),
        }
    }

    pub(crate) fn check_order(o: &Order) -> Result<(), InvalidRecord> {
        non_empty("order_id", &o.order_id)?;
        non_empty("customer_id", &o.customer_id)?;
        amount("order_amount", o.order_amount)?;
        timestamp("order_ts", o.order_ts)
    }

    pub(crate) fn check_payment(p: &Payment) -> Result<(), InvalidRecord> {
        non_empty("payment_id", &p.payment_id)?;
        non_empty("order_id", &p.order_id)?;
        amount("paid_amount", p.paid_amount)?;
        timestamp("payment_ts", p.payment_ts)
    }

    pub(crate) fn check_device_event(d: &DeviceEvent) -> Result<(), InvalidRecord> {
        non_empty("device_id", &d.device_id)?;
        non_empty("site_id", &d.site_id)?;
        timestamp("event_ts", d.event_ts)
    }
}

#[inline]
fn non_empty(field: &str, value: &str) -> Result<(), InvalidRecord> {
    // An id mostly starts with a printable ASCII character: one look settles it.
    if value.as_bytes().first().is_some_and(u8::is_ascii_graphic) {
        return Ok(());
    }
    // As `trim().is_empty()`, stopping at the first character that is not white space.
    if value.chars().all(char::is_whitespace) {
        return Err(InvalidRecord(format!("`{field}` is empty")));
    }
    Ok(())
}

fn amount(field: &str, value: f64) -> Result<(), InvalidRecord> {
    if !value.is_finite() || value < 0.0 {
        return Err(InvalidRecord(format!("`{field}` must be a non-negative amount, got {value}")));
    }
    Ok(())
}

fn timestamp(field: &str, value: Millis) -> Result<(), InvalidRecord> {
    if value < 0 {
        return Err(InvalidRecord(format!("`{field}` must be epoch milliseconds, got {value}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_seed_record_shapes() {
        let o = parse_line(
            Source::Orders,
            r#"{"order_id": "order-0000", "customer_id": "cust-003", "order_amount": 143.22, "order_ts": 1700000000000, "country": "CA"}"#,
        );
        assert!(matches!(o, Ok(InputRecord::Order(ref o)) if o.order_amount == 143.22));
        let d = parse_line(
            Source::Devices,
            r#"{"device_id": "dev-100", "site_id": "site-a", "event_type": "fault", "status": "degraded", "event_ts": 1700000030000}"#,
        );
        assert!(matches!(d, Ok(InputRecord::Device(ref d)) if d.event_type == EventType::Fault));
    }

    #[test]
    fn accepts_whole_number_amounts() {
        let p = parse_line(
            Source::Payments,
            r#"{"payment_id":"p","order_id":"o","paid_amount":240,"payment_ts":1,"method":"card"}"#,
        );
        assert!(matches!(p, Ok(InputRecord::Payment(ref p)) if p.paid_amount == 240.0));
    }

    #[test]
    fn rejects_bad_lines_with_a_reason() {
        let reason = |s, l| parse_line(s, l).unwrap_err().0;
        assert!(reason(Source::Orders, "not json").contains("not a valid orders record"));
        assert!(reason(Source::Payments, r#"{"payment_id":"p","order_id":"o","payment_ts":1,"method":"card"}"#)
            .contains("missing field `paid_amount`"));
        assert!(reason(
            Source::Payments,
            r#"{"payment_id":"p","order_id":"o","paid_amount":"ten","payment_ts":1,"method":"card"}"#
        )
        .contains("invalid type"));
        assert!(reason(
            Source::Payments,
            r#"{"payment_id":"p","order_id":"o","paid_amount":-5.0,"payment_ts":1,"method":"card"}"#
        )
        .contains("non-negative"));
        assert!(reason(
            Source::Devices,
            r#"{"device_id":"d","site_id":"s","event_type":"explosion","status":"x","event_ts":1}"#
        )
        .contains("unknown variant `explosion`"));
        assert!(reason(
            Source::Devices,
            r#"{"device_id":"","site_id":"s","event_type":"fault","status":"x","event_ts":1}"#
        )
        .contains("`device_id` is empty"));
    }

    #[test]
    fn an_id_of_white_space_alone_is_empty_and_one_with_more_is_not() {
        for blank in [" ", "\t \t", "\u{3000}", "\u{a0}\u{2003}"] {
            assert!(non_empty("order_id", blank).is_err(), "{blank:?}");
        }
        for id in ["a", " a", "\u{3000}b", "é", "-"] {
            assert!(non_empty("order_id", id).is_ok(), "{id:?}");
        }
    }
}
