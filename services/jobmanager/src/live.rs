//! The live pane: the newest anomalies, late events, health alerts and dead letters,
//! read from their topics with read_committed (so only what the stages committed) and
//! pushed to every open dashboard. Counting them here also gives Prometheus alerts
//! per minute.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vigil_kafka::connection;

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tracing::warn;
use vigil_kafka::codec::Codec;
use vigil_kafka::markers;
use vigil_kafka::tail::tagged_line;
use vigil_kafka::topics::{self, Topic};

use crate::metrics::JobMetrics;

/// Events kept for a newly opened page.
pub const KEPT: usize = 200;
/// How far back each partition is read when the jobmanager starts.
const BACKLOG_PER_PARTITION: i64 = 50;

/// The topics of the live pane and the kind of event each holds.
pub const TOPICS: [(&str, &str); 6] = [
    ("payment-anomalies", "anomaly"),
    ("device-anomalies", "anomaly"),
    ("device-events-late", "late_event"),
    ("enriched-payments-late", "late_event"),
    ("health-alerts", "health_alert"),
    ("dead-letters", "dead_letter"),
];

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
pub fn event(kind: &str, topic: &str, partition: i32, offset: i64, timestamp_ms: Option<i64>, line: &str) -> Value {
    let record = line.split_once("> ").and_then(|(_, json)| serde_json::from_str(json).ok()).unwrap_or(Value::Null);
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
    live: &Live,
    metrics: &JobMetrics,
    shutdown: &AtomicBool,
) -> Result<()> {
    let consumer: BaseConsumer = connection::client_config(bootstrap)
        .set("group.id", "vigil-jobmanager-live")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "100")
        .create()
        .context("cannot create the live pane's consumer")?;
    let codec = Codec::new(registry_url)?;
    let mut tpl = TopicPartitionList::new();
    for (name, _) in TOPICS {
        let partitions = topics::partition_count(&consumer, name)? as i32;
        for p in 0..partitions {
            let (low, high) = consumer.fetch_watermarks(name, p, Duration::from_secs(10))?;
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
        if markers::read(&m).is_some() {
            continue;
        }
        let Some((topic, kind)) = TOPICS.iter().find(|(t, _)| *t == m.topic()) else { continue };
        let value = match codec.decode_value(m.payload().unwrap_or_default()) {
            Ok(v) => v,
            Err(e) => {
                warn!(topic, partition = m.partition(), offset = m.offset(), "cannot decode a record: {e}");
                continue;
            }
        };
        let t: Topic = topics::by_name(topic).expect("a Vigil topic");
        let line = tagged_line(t, &value);
        let event = event(kind, topic, m.partition(), m.offset(), m.timestamp().to_millis(), &line);
        metrics.count_event(kind, topic, &event["record"]);
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
            live.push(event("health_alert", "health-alerts", 0, offset, Some(1), line));
        }
        let newest = live.newest();
        assert_eq!(newest.len(), KEPT);
        assert_eq!(newest[0]["offset"], json!(KEPT as i64 + 4));
        assert_eq!(newest[0]["seq"], json!(KEPT as u64 + 5));
        assert_eq!(newest[0]["record"]["reason"], json!("late_event_spike"));
        let first: Value = serde_json::from_str(&pages.try_recv().unwrap()).unwrap();
        assert_eq!((first["seq"].clone(), first["line"].clone()), (json!(1), json!(line)));
    }
}
