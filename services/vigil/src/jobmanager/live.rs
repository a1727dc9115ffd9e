//! The live pane: the newest anomalies, late events, health alerts and dead letters,
//! read from their topics with read_committed (so only what the stages committed) and
//! pushed to every open dashboard. Counting them here also gives Prometheus alerts
//! per minute.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vigil_kafka::connection;
use vigil_kafka::names::Names;
use vigil_kafka::patience::{patiently, QUERY_PATIENCE};

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tracing::warn;
use vigil_kafka::codec::Codec;
use vigil_kafka::marker_headers;
use vigil_kafka::tail::tagged_line;
use vigil_kafka::topics;
use vigil_model::topology::{Topic, Topology, DEAD_LETTERS};

use crate::jobmanager::metrics::JobMetrics;

/// Events kept for a newly opened page.
pub const KEPT: usize = 200;
/// How far back each partition is read when the jobmanager starts.
const BACKLOG_PER_PARTITION: i64 = 50;

/// The topics of the live pane: alerts for people, late side outputs, dead letters.
pub fn topics(topology: &Topology) -> Vec<&'static Topic> {
    topology.topics().into_iter().filter(|t| t.alerts || t.late || t.is(&DEAD_LETTERS)).collect()
}

/// The kind of event a record of `topic` is: late events and dead letters by their
/// topic, alerts by their record type (`anomaly`, `health_alert`).
fn kind_of(topic: &Topic, record: &Value) -> String {
    match (topic.late, topic.is(&DEAD_LETTERS)) {
        (true, _) => "late_event".into(),
        (_, true) => "dead_letter".into(),
        _ => record.get("record_type").and_then(Value::as_str).unwrap_or("alert").into(),
    }
}

pub struct Live {
    kept: Mutex<VecDeque<Arc<Value>>>,
    sender: broadcast::Sender<Arc<String>>,
    next_seq: Mutex<u64>,
}

impl Live {
    pub fn new() -> Arc<Live> {
        Arc::new(Live {
            kept: Mutex::new(VecDeque::new()),
            sender: broadcast::channel(1024).0,
            next_seq: Mutex::new(1),
        })
    }

    /// The kept events, newest first.
    pub fn newest(&self) -> Vec<Arc<Value>> {
        self.kept.lock().expect("live").iter().rev().cloned().collect()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<String>> {
        self.sender.subscribe()
    }

    /// Numbers an event, keeps it and sends it to every open page.
    pub fn push(&self, mut event: Value) {
        let mut seq = self.next_seq.lock().expect("live");
        event["seq"] = json!(*seq);
        *seq += 1;
        let event = Arc::new(event);
        let mut kept = self.kept.lock().expect("live");
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(event.clone());
        // No page open is fine.
        let _ = self.sender.send(Arc::new(event.to_string()));
    }
}

/// An event of the live pane from a record's tagged line.
pub fn event(topic: &Topic, partition: i32, offset: i64, timestamp_ms: Option<i64>, line: &str) -> Value {
    let record = line.split_once("> ").and_then(|(_, json)| serde_json::from_str(json).ok()).unwrap_or(Value::Null);
    let (kind, topic) = (kind_of(topic, &record), topic.name);
    json!({
        "kind": kind,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp_ms": timestamp_ms,
        "line": line,
        "record": record,
    })
}

/// Follows the live pane's topics until `shutdown`, starting a little before their ends.
pub fn follow(
    bootstrap: &str,
    registry_url: &str,
    topology: &Topology,
    names: &Names,
    live: &Live,
    metrics: &JobMetrics,
    shutdown: &AtomicBool,
) -> Result<()> {
    let consumer: BaseConsumer = connection::client_config(bootstrap)
        .set("group.id", names.of("vigil-jobmanager-live"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "100")
        .create()
        .context("cannot create the live pane's consumer")?;
    let codec = Codec::new(registry_url)?;
    let followed: Vec<(&'static Topic, String)> = topics(topology).into_iter().map(|t| (t, names.of(t.name))).collect();
    let mut tpl = TopicPartitionList::new();
    for (_, name) in &followed {
        let partitions = topics::partition_count(&consumer, name)? as i32;
        for p in 0..partitions {
            let (low, high) = patiently(&format!("the offsets of `{name}`"), QUERY_PATIENCE, |t| {
                consumer.fetch_watermarks(name, p, t)
            })?;
            tpl.add_partition_offset(name, p, Offset::Offset((high - BACKLOG_PER_PARTITION).max(low)))?;
        }
    }
    consumer.assign(&tpl).context("cannot assign the live pane's topics")?;
    while !shutdown.load(Ordering::SeqCst) {
        let Some(polled) = consumer.poll(Duration::from_millis(200)) else { continue };
        let m = match polled {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e, "live pane consumer error");
                continue;
            }
        };
        if marker_headers::read(&m).is_some() {
            continue;
        }
        let Some(&(topic, _)) = followed.iter().find(|(_, name)| name == m.topic()) else { continue };
        let value = match codec.decode_value(m.payload().unwrap_or_default()) {
            Ok(v) => v,
            Err(e) => {
                warn!(
                    topic = topic.name,
                    partition = m.partition(),
                    offset = m.offset(),
                    "cannot decode a record: {e}"
                );
                continue;
            }
        };
        let line = tagged_line(topic, &value);
        let event = event(topic, m.partition(), m.offset(), m.timestamp().to_millis(), &line);
        let kind = event["kind"].as_str().unwrap_or_default();
        metrics.count_event(kind, topic.name, &event["record"]);
        live.push(event);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_the_record_and_the_newest_are_kept_newest_first() {
        let live = Live::new();
        let mut pages = live.subscribe();
        let line = r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "late_event_spike", "severity": "warning", "late_events": 1}"#;
        for offset in 0..(KEPT as i64 + 5) {
            live.push(event(&vigil_model::topology::HEALTH_ALERTS, 0, offset, Some(1), line));
        }
        let newest = live.newest();
        assert_eq!(newest.len(), KEPT);
        assert_eq!(newest[0]["offset"], json!(KEPT as i64 + 4));
        assert_eq!(newest[0]["seq"], json!(KEPT as u64 + 5));
        assert_eq!(newest[0]["record"]["reason"], json!("late_event_spike"));
        assert_eq!(newest[0]["kind"], json!("health_alert"));
        let first: Value = serde_json::from_str(&pages.try_recv().unwrap()).unwrap();
        assert_eq!((first["seq"].clone(), first["line"].clone()), (json!(1), json!(line)));
    }
}
