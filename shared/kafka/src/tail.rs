//! Output topics read back in the seed's tagged NDJSON form (`read_committed`), so a
//! user can watch alerts from a terminal and tests can compare against the embedded
//! runtime's lines.

use apache_avro::types::Value;
use vigil_model::py_json;

use crate::topics::Topic;

/// The seed's tag for a topic's records (an intermediate topic, which has none,
/// prints under its name).
pub fn tag(topic: &Topic) -> String {
    topic.tag.map_or_else(|| topic.name.replace('-', "_").to_uppercase(), String::from)
}

/// One record as a tagged line, e.g. `HEALTH_ALERT> {"record_type": "health_alert", …}`.
pub fn tagged_line(topic: &Topic, value: &Value) -> String {
    let mut out = format!("{}> ", tag(topic)).into_bytes();
    write_json(&mut out, value, true);
    String::from_utf8(out).expect("py_json writes ASCII")
}

/// Fields the embedded runner leaves out at their default: a first revision, and the
/// provisional and retracted flags of an amount anomaly when they are not set.
fn at_default(name: &str, value: &Value) -> bool {
    matches!((name, value), ("revision", Value::Int(1)) | ("provisional" | "retracted", Value::Boolean(false)))
}

/// JSON as the embedded runner prints it (`json.dumps`' form, see
/// `vigil_model::py_json`), fields in schema order; fields at their default are left
/// out as it leaves them out (`at_default`).
fn write_json(out: &mut Vec<u8>, value: &Value, top: bool) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::Long(l) => out.extend_from_slice(l.to_string().as_bytes()),
        Value::Float(f) => py_json::write_f64(out, f64::from(*f)),
        Value::Double(d) => py_json::write_f64(out, *d),
        Value::String(s) | Value::Enum(_, s) => py_json::write_str(out, s),
        Value::Bytes(b) => py_json::write_str(out, &String::from_utf8_lossy(b)),
        Value::Union(_, inner) => write_json(out, inner, top),
        Value::Record(fields) => {
            out.push(b'{');
            let shown = fields.iter().filter(|(name, v)| !(top && at_default(name, v)));
            for (i, (name, v)) in shown.enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                py_json::write_str(out, name);
                out.extend_from_slice(b": ");
                write_json(out, v, false);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                write_json(out, v, false);
            }
            out.push(b']');
        }
        other => py_json::write_str(out, &format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_model::topology::HEALTH_ALERTS;

    #[test]
    fn prints_like_the_embedded_runner() {
        let alert = Value::Union(
            0,
            Box::new(Value::Record(vec![
                ("record_type".into(), Value::String("health_alert".into())),
                ("reason".into(), Value::String("late_event_spike".into())),
                ("late_events".into(), Value::Long(1)),
                ("ratio".into(), Value::Double(0.8)),
                ("site_id".into(), Value::String("Çå-1".into())),
                ("tiny".into(), Value::Double(1e-5)),
                ("missing".into(), Value::Union(0, Box::new(Value::Null))),
                ("revision".into(), Value::Int(1)),
            ])),
        );
        assert_eq!(
            tagged_line(&HEALTH_ALERTS, &alert),
            r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "late_event_spike", "late_events": 1, "ratio": 0.8, "site_id": "\u00c7\u00e5-1", "tiny": 1e-05, "missing": null}"#
        );
    }
}
