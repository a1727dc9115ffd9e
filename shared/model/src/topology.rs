//! The pipeline's topics, each declared once: its key, the tag its records print
//! with, its Avro value schema; and the shape of a stage's place among them (what it
//! reads, how it knows event time there, what it writes), which each stage's
//! definition fills in. Provisioning, `tail`, the dashboard's graph and the docs'
//! topic table are derived from these.
//!
//! Topics are `static`s: a runtime tells them apart by address.

use crate::{Config, Millis};

/// A topic of the pipeline.
#[derive(Debug, PartialEq, Eq)]
pub struct Topic {
    pub name: &'static str,
    /// What its records are keyed by (and so partitioned by).
    pub key: &'static str,
    /// The tag its records print with (`ANOMALY> {…}`); `None` for inputs and
    /// intermediate topics, which nobody reads as results.
    pub tag: Option<&'static str>,
    /// Written by users (and the generator), not by a stage.
    pub external: bool,
    /// A late side output: records judged late, with the watermark that judged them.
    pub late: bool,
    /// Its records are alerts for people (anomalies, health alerts): the dashboard's
    /// live pane shows them.
    pub alerts: bool,
    /// The Avro schema of its values (`schemas/<file>`).
    pub schema: &'static str,
}

impl Topic {
    /// A topic a stage writes.
    pub const fn new(name: &'static str, key: &'static str, tag: Option<&'static str>, schema: &'static str) -> Topic {
        Topic { name, key, tag, external: false, late: false, alerts: false, schema }
    }

    /// A topic users write.
    pub const fn input(name: &'static str, key: &'static str, schema: &'static str) -> Topic {
        Topic { external: true, ..Topic::new(name, key, None, schema) }
    }

    /// A topic of alerts for people.
    pub const fn alerts(name: &'static str, key: &'static str, tag: &'static str, schema: &'static str) -> Topic {
        Topic { alerts: true, ..Topic::new(name, key, Some(tag), schema) }
    }

    /// A late side output.
    pub const fn late(name: &'static str, key: &'static str, tag: &'static str, schema: &'static str) -> Topic {
        Topic { late: true, ..Topic::new(name, key, Some(tag), schema) }
    }

    /// Whether `self` and `other` are the same topic (a runtime's cheap test).
    pub fn is(&self, other: &Topic) -> bool {
        std::ptr::eq(self, other)
    }
}

pub static ORDERS: Topic = Topic::input("orders", "order_id", include_str!("../../../schemas/orders.avsc"));
pub static PAYMENTS: Topic = Topic::input("payments", "order_id", include_str!("../../../schemas/payments.avsc"));
pub static DEVICE_EVENTS: Topic =
    Topic::input("device-events", "site_id", include_str!("../../../schemas/device-events.avsc"));
pub static ENRICHED_PAYMENTS: Topic = Topic::new(
    "enriched-payments",
    "customer_id (order_id if unmatched)",
    Some("ENRICHED"),
    include_str!("../../../schemas/enriched-payments.avsc"),
);
pub static ENRICHED_PAYMENTS_LATE: Topic = Topic::late(
    "enriched-payments-late",
    "customer_id",
    "LATE_EVENT",
    include_str!("../../../schemas/enriched-payments-late.avsc"),
);
pub static PAYMENT_METRICS: Topic = Topic::new(
    "payment-metrics",
    "window start",
    Some("METRICS"),
    include_str!("../../../schemas/payment-metrics.avsc"),
);
pub static PAYMENT_ANOMALIES: Topic = Topic::alerts(
    "payment-anomalies",
    "customer_id",
    "ANOMALY",
    include_str!("../../../schemas/payment-anomalies.avsc"),
);
pub static DEVICE_EVENTS_ONTIME: Topic =
    Topic::new("device-events-ontime", "site_id", None, include_str!("../../../schemas/device-events.avsc"));
pub static DEVICE_EVENTS_LATE: Topic = Topic::late(
    "device-events-late",
    "site_id",
    "LATE_EVENT",
    include_str!("../../../schemas/device-events-late.avsc"),
);
pub static DEVICE_METRICS: Topic = Topic::new(
    "device-metrics",
    "site_id",
    Some("DEVICE_METRICS"),
    include_str!("../../../schemas/device-metrics.avsc"),
);
pub static DEVICE_ANOMALIES: Topic = Topic::alerts(
    "device-anomalies",
    "site_id (device_id for reboot loops)",
    "DEVICE_ANOMALY",
    include_str!("../../../schemas/device-anomalies.avsc"),
);
pub static HEALTH_ALERTS: Topic =
    Topic::alerts("health-alerts", "reason", "HEALTH_ALERT", include_str!("../../../schemas/health-alerts.avsc"));
/// Every stage writes here what it cannot read, with the reason.
pub static DEAD_LETTERS: Topic =
    Topic::new("dead-letters", "source topic", Some("DEAD_LETTER"), include_str!("../../../schemas/dead-letters.avsc"));

/// Where the notifier (Kafka runtime) puts a delivery that failed for good, with the
/// reason; its values are JSON objects, so it has no Avro schema.
pub static NOTIFY_DEAD_LETTERS: Topic =
    Topic::new("notify-dead-letters", "idempotency key", Some("NOTIFY_DEAD_LETTER"), "");

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

impl Bound {
    /// The bound as `config` sets it.
    pub fn ms(self, config: &Config) -> Millis {
        match self {
            Bound::Payments => config.payment_bound_ms(),
            Bound::Devices => config.devices.out_of_order_bound_ms as Millis,
        }
    }
}

/// A stage's place in the topology: what it reads, how it knows event time there,
/// and what it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageTopology {
    pub name: &'static str,
    /// One task over every partition (a global aggregate): one active member.
    pub global: bool,
    pub inputs: &'static [(&'static Topic, EventTime)],
    /// Every topic it writes records to (dead letters aside: every stage writes those).
    pub outputs: &'static [&'static Topic],
    /// The outputs other stages read, which carry this stage's watermark.
    pub watermarked: &'static [&'static Topic],
}

/// A stage's compacted changelog: its keyed state, one record per state key.
pub fn changelog(stage: &str) -> String {
    format!("{stage}-changelog")
}

/// The copy of a topic users read through which stages pass its records to each
/// other, with their watermark markers (see [`Topology::read_by_users_and_stages`]).
pub fn between_stages(topic: &str) -> String {
    format!("{topic}-between-stages")
}

/// Where a stage re-keys the records of a source input that are not on the
/// partition of their key.
pub fn repartition(stage: &str, input: &str) -> String {
    format!("{stage}-repartition-{input}")
}

/// A stage's repartition topics: one per source input, as (input topic, repartition
/// topic).
pub fn repartitions(stage: &StageTopology) -> impl Iterator<Item = (&'static Topic, String)> + '_ {
    stage
        .inputs
        .iter()
        .filter(|(_, time)| matches!(time, EventTime::Source(_)))
        .map(|&(topic, _)| (topic, repartition(stage.name, topic.name)))
}

/// A pipeline's stages, upstream first, and what follows from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub stages: Vec<StageTopology>,
}

impl Topology {
    pub fn stage(&self, name: &str) -> Option<&StageTopology> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// Every topic with records: the inputs users write, then every stage's outputs
    /// in stage order, then the dead letters.
    pub fn topics(&self) -> Vec<&'static Topic> {
        let inputs = self.stages.iter().flat_map(|s| s.inputs.iter().map(|&(t, _)| t)).filter(|t| t.external);
        let outputs = self.stages.iter().flat_map(|s| s.outputs.iter().copied());
        let mut topics: Vec<&'static Topic> = Vec::new();
        for t in inputs.chain(outputs).chain([&DEAD_LETTERS]) {
            if !topics.iter().any(|known| known.is(t)) {
                topics.push(t);
            }
        }
        topics
    }

    pub fn topic(&self, name: &str) -> Option<&'static Topic> {
        self.topics().into_iter().find(|t| t.name == name)
    }

    /// The topics users read that stages read too: on Kafka, stages pass these to
    /// each other through a copy ([`between_stages`]) that carries their watermark
    /// markers, so users' readers get records only.
    pub fn read_by_users_and_stages(&self) -> Vec<&'static Topic> {
        let read_by_stages = |t: &Topic| self.stages.iter().any(|s| s.inputs.iter().any(|&(i, _)| i.is(t)));
        self.topics().into_iter().filter(|t| t.tag.is_some() && !t.external && read_by_stages(t)).collect()
    }

    /// The topics of results a user reads: those with a tag, dead letters aside.
    pub fn result_topics(&self) -> Vec<&'static Topic> {
        self.topics().into_iter().filter(|t| t.tag.is_some() && !t.is(&DEAD_LETTERS)).collect()
    }

    /// The stages that write a topic.
    pub fn writers<'a>(&'a self, topic: &'a Topic) -> impl Iterator<Item = &'a StageTopology> + 'a {
        self.stages.iter().filter(move |s| s.outputs.iter().any(|t| t.is(topic)))
    }

    /// The table of topics in `docs/kafka.md`.
    pub fn topic_table(&self) -> String {
        let mut table = String::from("| topic | key | written by |\n|---|---|---|\n");
        for t in self.topics() {
            let written_by = if t.external {
                "users, the generator".to_string()
            } else if t.is(&DEAD_LETTERS) {
                "every stage: the bytes, topic, partition, offset and reason".to_string()
            } else {
                self.writers(t).map(|s| s.name).collect::<Vec<_>>().join(", ")
            };
            table.push_str(&format!("| `{}` | {} | {written_by} |\n", t.name, t.key));
        }
        for t in self.read_by_users_and_stages() {
            let writers = self.writers(t).map(|s| s.name).collect::<Vec<_>>().join(", ");
            table.push_str(&format!(
                "| `{}` | {} | {writers}: a copy of `{}` for the stages that read it, with the watermark markers |\n",
                between_stages(t.name),
                t.key,
                t.name
            ));
        }
        for s in &self.stages {
            for (input, name) in repartitions(s) {
                table.push_str(&format!(
                    "| `{name}` | {} | {}: records of `{}` off their key's partition |\n",
                    input.key, s.name, input.name
                ));
            }
        }
        table.push_str(
            "| `<stage>-changelog` | task and state key | each stage; compacted, one record per state key |\n",
        );
        table
    }

    /// Checks what a runtime relies on: every input is written by users or a stage
    /// upstream, and every watermarked topic is an output of its stage.
    pub fn check(&self) -> Result<(), String> {
        for (i, s) in self.stages.iter().enumerate() {
            for (input, _) in s.inputs {
                if !input.external && !self.stages[..i].iter().any(|w| w.outputs.iter().any(|t| t.is(input))) {
                    return Err(format!("stage `{}` reads `{}`, which no stage before it writes", s.name, input.name));
                }
            }
            if let Some(w) = s.watermarked.iter().find(|w| !s.outputs.iter().any(|t| t.is(w))) {
                return Err(format!(
                    "stage `{}` carries its watermark on `{}`, which it does not write",
                    s.name, w.name
                ));
            }
        }
        Ok(())
    }
}
