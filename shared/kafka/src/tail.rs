//! Output topics read back in the seed's tagged NDJSON form (`read_committed`), so a
//! user can watch alerts from a terminal and tests can compare against the embedded
//! runtime's lines.

use apache_avro::types::Value;

use crate::topics::Topic;

/// The seed's tag for a topic's records (an intermediate topic, which has none,
/// prints under its name).
pub fn tag(topic: Topic) -> String {
    topic.tag.map_or_else(|| topic.name.replace('-', "_").to_uppercase(), String::from)
}

/// One record as a tagged line, e.g. `HEALTH_ALERT> {"record_type": "health_alert", …}`.
pub fn tagged_line(topic: Topic, value: &Value) -> String {
    let mut out = format!("{}> ", tag(topic));
    write_json(&mut out, value, true);
    out
}

/// JSON with `json.dumps`' separators, fields in schema order; a `revision` of 1 is
/// left out, as the embedded runner prints it.
fn write_json(out: &mut String, value: &Value, top: bool) {
    let quoted = |s: &str| serde_json::to_string(s).expect("a string serializes");
    match value {
        Value::Null => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Long(l) => out.push_str(&l.to_string()),
        Value::Float(f) => out.push_str(&serde_json::to_string(f).unwrap_or_else(|_| "null".into())),
        Value::Double(d) => out.push_str(&serde_json::to_string(d).unwrap_or_else(|_| "null".into())),
        Value::String(s) | Value::Enum(_, s) => out.push_str(&quoted(s)),
        Value::Bytes(b) => out.push_str(&quoted(&String::from_utf8_lossy(b))),
        Value::Union(_, inner) => write_json(out, inner, top),
        Value::Record(fields) => {
            out.push('{');
            let shown = fields.iter().filter(|(name, v)| !(top && name == "revision" && matches!(v, Value::Int(1))));
            for (i, (name, v)) in shown.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&quoted(name));
                out.push_str(": ");
                write_json(out, v, false);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json(out, v, false);
            }
            out.push(']');
        }
        other => out.push_str(&quoted(&format!("{other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::HEALTH_ALERTS;

    #[test]
    fn prints_like_the_embedded_runner() {
        let alert = Value::Union(
            0,
            Box::new(Value::Record(vec![
                ("record_type".into(), Value::String("health_alert".into())),
                ("reason".into(), Value::String("late_event_spike".into())),
                ("late_events".into(), Value::Long(1)),
                ("ratio".into(), Value::Double(0.8)),
                ("missing".into(), Value::Union(0, Box::new(Value::Null))),
                ("revision".into(), Value::Int(1)),
            ])),
        );
        assert_eq!(
            tagged_line(HEALTH_ALERTS, &alert),
            r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "late_event_spike", "late_events": 1, "ratio": 0.8, "missing": null}"#
        );
    }
}
