//! An alert as the notifier delivers it: the seed's tagged line, its fields, and
//! its identity, which stays the same across its revisions, so a receiver can drop
//! a repeat and tell a correction from one.

use apache_avro::types::Value;
use vigil_model::topology::Topic;

use crate::tail::{tag, tagged_line};

/// One alert read from an alert topic.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// The pipeline's name of the topic it came from (`payment-anomalies`).
    pub topic: &'static str,
    /// The tagged line (`ANOMALY> {…}`), as the embedded runner prints it.
    pub line: String,
    /// The line's JSON object.
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// Which rule raised it: its `anomaly_type` or health `reason`.
    pub rule: String,
    /// What it is about: the payment, device, customer or site (`pipeline` for a
    /// health alert).
    pub subject: String,
    /// Which window or moment: its window start, event time or the time input resumed.
    pub occasion: String,
    /// 1 for a first verdict; higher for each correction of it.
    pub revision: u32,
}

/// Fields naming what an alert is about, most specific first: an amount anomaly
/// names its payment and customer, a firmware failure its device and site.
const SUBJECTS: [&str; 4] = ["payment_id", "device_id", "customer_id", "site_id"];
/// Fields naming when, one per kind of alert.
const OCCASIONS: [&str; 3] = ["window_start", "event_time", "resumed_at"];

impl Alert {
    /// The alert of a record of `topic` whose value decoded to `value`.
    pub fn from_value(topic: &'static Topic, value: &Value) -> Result<Alert, String> {
        Alert::from_line(topic, tagged_line(topic, value))
    }

    /// The alert of a record written as a plain JSON object.
    pub fn from_json(topic: &'static Topic, json: &str) -> Result<Alert, String> {
        Alert::from_line(topic, format!("{}> {}", tag(topic), json.trim()))
    }

    fn from_line(topic: &'static Topic, line: String) -> Result<Alert, String> {
        let json = &line[tag(topic).len() + 2..];
        let fields = match serde_json::from_str(json) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => return Err(format!("the value is not a JSON object: {json}")),
        };
        let text = |name: &str| fields.get(name).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
        let rule = text("anomaly_type")
            .or_else(|| text("reason"))
            .ok_or_else(|| format!("an alert names its rule in anomaly_type or reason; this one does not: {json}"))?;
        let subject = SUBJECTS.iter().find_map(|f| text(f)).unwrap_or_else(|| "pipeline".to_string());
        let occasion = OCCASIONS
            .iter()
            .find_map(|f| text(f))
            .ok_or_else(|| format!("an alert says when in {}; this one does not: {json}", OCCASIONS.join(", ")))?;
        let revision = fields.get("revision").and_then(|r| r.as_u64()).map_or(1, |r| r as u32);
        Ok(Alert { topic: topic.name, line, fields, rule, subject, occasion, revision })
    }

    /// Its identity, the same for every revision: topic, rule, subject and occasion.
    pub fn id(&self) -> String {
        format!("{}/{}/{}/{}", self.topic, self.rule, self.subject, self.occasion)
    }

    /// The key a receiver drops repeats by: the identity's hash and the revision
    /// (`vigil-5f0c…-r2`), so a correction has a key of its own and a repeat the
    /// same one. Header-safe whatever the identity holds.
    pub fn idempotency_key(&self) -> String {
        format!("vigil-{:016x}-r{}", fnv1a(self.id().as_bytes()), self.revision)
    }
}

/// FNV-1a, 64 bits: stable across versions and platforms, as a key that receivers
/// store must be.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_model::topology::{DEVICE_ANOMALIES, HEALTH_ALERTS, PAYMENT_ANOMALIES};

    fn record(fields: &[(&str, Value)]) -> Value {
        Value::Union(0, Box::new(Value::Record(fields.iter().map(|(n, v)| (n.to_string(), v.clone())).collect())))
    }

    fn s(text: &str) -> Value {
        Value::String(text.into())
    }

    #[test]
    fn a_window_alert_keeps_its_identity_across_revisions_and_changes_its_key() {
        let spike = |late: i64, revision: i32| {
            record(&[
                ("record_type", s("health_alert")),
                ("reason", s("late_event_spike")),
                ("severity", s("warning")),
                ("window_start", s("2024-01-01T00:00:00Z")),
                ("window_end", s("2024-01-01T00:01:00Z")),
                ("late_events", Value::Long(late)),
                ("ceiling", Value::Long(5)),
                ("revision", Value::Int(revision)),
            ])
        };
        let first = Alert::from_value(&HEALTH_ALERTS, &spike(6, 1)).unwrap();
        let again = Alert::from_value(&HEALTH_ALERTS, &spike(6, 1)).unwrap();
        let corrected = Alert::from_value(&HEALTH_ALERTS, &spike(9, 2)).unwrap();
        assert_eq!(first.id(), "health-alerts/late_event_spike/pipeline/2024-01-01T00:00:00Z");
        assert_eq!(first.idempotency_key(), again.idempotency_key(), "a repeat has the same key");
        assert_eq!(first.id(), corrected.id());
        assert_ne!(first.idempotency_key(), corrected.idempotency_key(), "a correction has a key of its own");
        assert!(corrected.idempotency_key().ends_with("-r2"));
        assert!(first.line.starts_with("HEALTH_ALERT> {\"record_type\": \"health_alert\""));
        assert!(!first.line.contains("revision"), "a first revision prints as the seed's line");
    }

    #[test]
    fn each_kind_of_anomaly_is_named_by_what_and_when() {
        let amount = record(&[
            ("record_type", s("anomaly")),
            ("anomaly_type", s("amount")),
            ("customer_id", s("C1")),
            ("payment_id", s("P9")),
            ("order_id", s("O9")),
            ("amount", Value::Double(900.0)),
            ("threshold", Value::Double(300.0)),
            ("event_time", s("2024-01-01T00:00:05Z")),
        ]);
        let a = Alert::from_value(&PAYMENT_ANOMALIES, &amount).unwrap();
        assert_eq!((a.rule.as_str(), a.subject.as_str(), a.revision), ("amount", "P9", 1));
        let reboot = record(&[
            ("record_type", s("anomaly")),
            ("anomaly_type", s("device_reboot_loop")),
            ("device_id", s("D3")),
            ("reboot_count", Value::Long(4)),
            ("threshold", Value::Long(3)),
            ("window_start", s("2024-01-01T00:00:00Z")),
            ("window_end", s("2024-01-01T00:05:00Z")),
            ("revision", Value::Int(3)),
        ]);
        let r = Alert::from_value(&DEVICE_ANOMALIES, &reboot).unwrap();
        assert_eq!(r.id(), "device-anomalies/device_reboot_loop/D3/2024-01-01T00:00:00Z");
        assert_eq!(r.revision, 3);
    }

    #[test]
    fn a_plain_json_alert_is_read_and_a_record_without_a_rule_is_refused() {
        let json = r#"{"record_type": "health_alert", "reason": "throughput_below_floor", "severity": "critical", "gap_ms": 9000, "threshold_ms": 5000, "resumed_at": "2024-01-01T00:00:09Z"}"#;
        let a = Alert::from_json(&HEALTH_ALERTS, json).unwrap();
        assert_eq!(a.occasion, "2024-01-01T00:00:09Z");
        assert!(Alert::from_json(&HEALTH_ALERTS, r#"{"resumed_at": "x"}"#).unwrap_err().contains("rule"));
        assert!(Alert::from_json(&HEALTH_ALERTS, "[1]").is_err());
    }
}
