//! The pipeline's topology, declared once: every topic (its key, the tag its records
//! print with, its Avro value schema) and every stage (what it reads, how it knows
//! event time there, what it writes). The Kafka services, provisioning, `tail`, the
//! dashboard's graph and the README's topic table are derived from it.

/// A topic of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topic {
    pub name: &'static str,
    /// What its records are keyed by (and so partitioned by).
    pub key: &'static str,
    /// The tag its records print with (`ANOMALY> {…}`); `None` for inputs and
    /// intermediate topics, which nobody reads as results.
    pub tag: Option<&'static str>,
    /// Written by users (and the generator), not by a stage.
    pub external: bool,
    /// The Avro schema of its values (`schemas/<file>`).
    pub schema: &'static str,
}

const fn topic(name: &'static str, key: &'static str, tag: Option<&'static str>, schema: &'static str) -> Topic {
    Topic { name, key, tag, external: false, schema }
}

const fn input(name: &'static str, key: &'static str, schema: &'static str) -> Topic {
    Topic { name, key, tag: None, external: true, schema }
}

pub const ORDERS: Topic = input("orders", "order_id", include_str!("../../../schemas/orders.avsc"));
pub const PAYMENTS: Topic = input("payments", "order_id", include_str!("../../../schemas/payments.avsc"));
pub const DEVICE_EVENTS: Topic = input("device-events", "site_id", include_str!("../../../schemas/device-events.avsc"));
pub const ENRICHED_PAYMENTS: Topic = topic(
    "enriched-payments",
    "customer_id (order_id if unmatched)",
    Some("ENRICHED"),
    include_str!("../../../schemas/enriched-payments.avsc"),
);
pub const ENRICHED_PAYMENTS_LATE: Topic = topic(
    "enriched-payments-late",
    "customer_id",
    Some("LATE_EVENT"),
    include_str!("../../../schemas/enriched-payments-late.avsc"),
);
pub const PAYMENT_METRICS: Topic =
    topic("payment-metrics", "window start", Some("METRICS"), include_str!("../../../schemas/payment-metrics.avsc"));
pub const PAYMENT_ANOMALIES: Topic =
    topic("payment-anomalies", "customer_id", Some("ANOMALY"), include_str!("../../../schemas/payment-anomalies.avsc"));
pub const DEVICE_EVENTS_ONTIME: Topic =
    topic("device-events-ontime", "site_id", None, include_str!("../../../schemas/device-events.avsc"));
pub const DEVICE_EVENTS_LATE: Topic = topic(
    "device-events-late",
    "site_id",
    Some("LATE_EVENT"),
    include_str!("../../../schemas/device-events-late.avsc"),
);
pub const DEVICE_METRICS: Topic =
    topic("device-metrics", "site_id", Some("DEVICE_METRICS"), include_str!("../../../schemas/device-metrics.avsc"));
pub const DEVICE_ANOMALIES: Topic = topic(
    "device-anomalies",
    "site_id (device_id for reboot loops)",
    Some("DEVICE_ANOMALY"),
    include_str!("../../../schemas/device-anomalies.avsc"),
);
pub const HEALTH_ALERTS: Topic =
    topic("health-alerts", "reason", Some("HEALTH_ALERT"), include_str!("../../../schemas/health-alerts.avsc"));
pub const DEAD_LETTERS: Topic =
    topic("dead-letters", "source topic", Some("DEAD_LETTER"), include_str!("../../../schemas/dead-letters.avsc"));

/// Every topic with records, inputs first.
pub const TOPICS: [Topic; 13] = [
    ORDERS,
    PAYMENTS,
    DEVICE_EVENTS,
    ENRICHED_PAYMENTS,
    ENRICHED_PAYMENTS_LATE,
    PAYMENT_METRICS,
    PAYMENT_ANOMALIES,
    DEVICE_EVENTS_ONTIME,
    DEVICE_EVENTS_LATE,
    DEVICE_METRICS,
    DEVICE_ANOMALIES,
    HEALTH_ALERTS,
    DEAD_LETTERS,
];

/// How a stage knows event time on an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTime {
    /// Written by users: the watermark trails the records by an out-of-orderness
    /// bound; records not on the partition of their key are re-keyed through the
    /// stage's repartition topic.
    Source(Bound),
    /// Written by a stage: its watermark comes in its markers.
    Upstream,
}

/// Which of the seed's out-of-orderness bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `payments.allowed_lateness_seconds` (orders and payments).
    Payments,
    /// `devices.out_of_order_bound_ms`.
    Devices,
}

/// A stage of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    pub name: &'static str,
    /// One task over every partition (a global aggregate): one active member.
    pub global: bool,
    pub inputs: &'static [(Topic, EventTime)],
    /// Every topic it writes records to (dead letters aside: every stage writes those).
    pub outputs: &'static [Topic],
    /// The outputs other stages read, which carry this stage's watermark.
    pub watermarked: &'static [Topic],
}

pub const STAGE_JOIN_ENRICH: Stage = Stage {
    name: "join-enrich",
    global: false,
    inputs: &[(ORDERS, EventTime::Source(Bound::Payments)), (PAYMENTS, EventTime::Source(Bound::Payments))],
    outputs: &[ENRICHED_PAYMENTS],
    watermarked: &[ENRICHED_PAYMENTS],
};
pub const STAGE_PAYMENT_METRICS: Stage = Stage {
    name: "payment-metrics",
    global: true,
    inputs: &[(ENRICHED_PAYMENTS, EventTime::Upstream)],
    outputs: &[PAYMENT_METRICS, ENRICHED_PAYMENTS_LATE],
    watermarked: &[],
};
pub const STAGE_PAYMENT_ANOMALIES: Stage = Stage {
    name: "payment-anomalies",
    global: false,
    inputs: &[(ENRICHED_PAYMENTS, EventTime::Upstream)],
    outputs: &[PAYMENT_ANOMALIES, ENRICHED_PAYMENTS_LATE],
    watermarked: &[],
};
pub const STAGE_DEVICE_ROUTER: Stage = Stage {
    name: "device-router",
    global: false,
    inputs: &[(DEVICE_EVENTS, EventTime::Source(Bound::Devices))],
    outputs: &[DEVICE_EVENTS_ONTIME, DEVICE_EVENTS_LATE],
    watermarked: &[DEVICE_EVENTS_ONTIME, DEVICE_EVENTS_LATE],
};
pub const STAGE_DEVICE_ANALYTICS: Stage = Stage {
    name: "device-analytics",
    global: false,
    inputs: &[(DEVICE_EVENTS_ONTIME, EventTime::Upstream)],
    outputs: &[DEVICE_METRICS, DEVICE_ANOMALIES, DEVICE_EVENTS_LATE],
    watermarked: &[],
};
pub const STAGE_HEALTH_MONITOR: Stage = Stage {
    name: "health-monitor",
    global: true,
    inputs: &[(DEVICE_EVENTS_ONTIME, EventTime::Upstream), (DEVICE_EVENTS_LATE, EventTime::Upstream)],
    outputs: &[HEALTH_ALERTS],
    watermarked: &[],
};

/// Every stage, upstream first.
pub const STAGES: [Stage; 6] = [
    STAGE_JOIN_ENRICH,
    STAGE_PAYMENT_METRICS,
    STAGE_PAYMENT_ANOMALIES,
    STAGE_DEVICE_ROUTER,
    STAGE_DEVICE_ANALYTICS,
    STAGE_HEALTH_MONITOR,
];

pub fn topic_named(name: &str) -> Option<Topic> {
    TOPICS.into_iter().find(|t| t.name == name)
}

pub fn stage_named(name: &str) -> Option<Stage> {
    STAGES.into_iter().find(|s| s.name == name)
}

/// A stage's compacted changelog: its keyed state, one record per state key.
pub fn changelog(stage: &str) -> String {
    format!("{stage}-changelog")
}

/// Where a stage re-keys the records of a source input that are not on the
/// partition of their key.
pub fn repartition(stage: &str, input: &str) -> String {
    format!("{stage}-repartition-{input}")
}

/// A stage's repartition topics: one per source input, as (input topic, repartition
/// topic).
pub fn repartitions(stage: &Stage) -> impl Iterator<Item = (Topic, String)> + '_ {
    stage
        .inputs
        .iter()
        .filter(|(_, time)| matches!(time, EventTime::Source(_)))
        .map(|&(topic, _)| (topic, repartition(stage.name, topic.name)))
}

/// The stages that write a topic.
pub fn writers(topic: Topic) -> impl Iterator<Item = Stage> {
    STAGES.into_iter().filter(move |s| s.outputs.contains(&topic))
}

/// The README's table of topics, derived from the declaration.
pub fn topic_table() -> String {
    let mut table = String::from("| topic | key | written by |\n|---|---|---|\n");
    for t in TOPICS {
        let writers: Vec<String> = writers(t).map(|s| s.name.to_string()).collect();
        let written_by = match (t.external, t.name) {
            (true, _) => "users, the generator".to_string(),
            (_, "dead-letters") => "every stage: the bytes, topic, partition, offset and reason".to_string(),
            _ => writers.join(", "),
        };
        table.push_str(&format!("| `{}` | {} | {written_by} |\n", t.name, t.key));
    }
    for s in STAGES {
        for (input, time) in s.inputs {
            if let EventTime::Source(_) = time {
                let name = repartition(s.name, input.name);
                table.push_str(&format!(
                    "| `{name}` | {} | {}: records of `{}` off their key's partition |\n",
                    input.key, s.name, input.name
                ));
            }
        }
    }
    table.push_str("| `<stage>-changelog` | task and state key | each stage; compacted, one record per state key |\n");
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_reads_a_topic_someone_writes() {
        for s in STAGES {
            for (input, _) in s.inputs {
                assert!(input.external || writers(*input).next().is_some(), "{} reads {}", s.name, input.name);
            }
            for w in s.watermarked {
                assert!(
                    s.outputs.contains(w),
                    "{} carries its watermark on {}, which it does not write",
                    s.name,
                    w.name
                );
            }
        }
    }

    #[test]
    fn the_kafka_doc_lists_the_topics_as_declared() {
        let doc = include_str!("../../../docs/kafka.md");
        assert!(
            doc.contains(&topic_table()),
            "docs/kafka.md's topic table is not the declared one:\n{}",
            topic_table()
        );
    }
}
