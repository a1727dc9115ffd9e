//! The notifier: the stage that takes alerts to people. Its members read
//! `payment-anomalies`, `device-anomalies` and `health-alerts` (committed records
//! only) in the consumer group `vigil-notifier` and deliver each alert to every
//! configured channel (`settings`: webhooks, a rolling file, standard output). Each
//! delivery carries the alert's idempotency key (`alert`): a member killed after a
//! delivery and before its offset commit delivers the alert again under the same
//! key, and the receiver drops the repeat; a correction has a key of its own.
//! Offsets are committed only after delivery; a delivery that fails for good goes
//! to `notify-dead-letters` with the reason before its offset is. Like the other
//! stages it runs in the taskmanagers' slots and as `vigil notifier`; with no
//! channel configured it is off. docs/notifications.md is the user's guide.

pub mod alert;
pub mod channels;
pub mod delivery;
pub mod metrics;
pub mod policy;
pub mod settings;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;
use tracing::{info, warn};
use vigil_model::topology::{EventTime, StageTopology, Topic, DEVICE_ANOMALIES, HEALTH_ALERTS, PAYMENT_ANOMALIES};
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

use self::alert::Alert;
use self::channels::{Channel, RollingFile, Stdout, Webhook};
use self::delivery::{Deliverer, Outcome};
use self::metrics::NotifyMetrics;
use self::policy::{Breaker, RateLimit};
use self::settings::NotifySettings;
use crate::codec::{is_json_object, Codec};
use crate::connection;
use crate::inputs::Parallelism;
use crate::marker_headers;
use crate::names::Names;
use crate::runner::{Common, Observers};
use crate::services::Service;
use crate::settings::Settings;
use crate::status::{Deliveries, Role};
use crate::topics;

/// The stage's name, and its consumer group's (`vigil-notifier`).
pub const NAME: &str = "notifier";
/// Where deliveries that failed for good go, with the reason.
pub const DEAD_LETTERS: &str = vigil_model::topology::NOTIFY_DEAD_LETTERS.name;

static INPUTS: [(&Topic, EventTime); 3] = [
    (&PAYMENT_ANOMALIES, EventTime::Upstream),
    (&DEVICE_ANOMALIES, EventTime::Upstream),
    (&HEALTH_ALERTS, EventTime::Upstream),
];

/// The notifier as a service of the cluster.
pub struct Notifier;

impl Service for Notifier {
    fn topology(&self) -> StageTopology {
        StageTopology { name: NAME, global: false, inputs: &INPUTS, outputs: &[], watermarked: &[] }
    }

    fn run(
        &self,
        member: &str,
        group_id: Option<String>,
        common: &Common,
        observers: Observers,
        shutdown: &AtomicBool,
    ) -> Result<()> {
        let settings = settings::loaded();
        if settings.is_off() {
            // It would read the alerts and commit them delivered to nowhere.
            anyhow::bail!(
                "the notifier has no channel: set VIGIL_NOTIFY_WEBHOOK_URL, VIGIL_NOTIFY_FILE_PATH or \
                 VIGIL_NOTIFY_STDOUT=true, or [notify] in the configuration file (docs/notifications.md)"
            );
        }
        let names = Names::new(&common.config.topics, &SeedPipeline::default().topology());
        let member_settings = Settings::for_member(NAME, Parallelism::PerPartition, member, group_id, common, names);
        Member::new(settings, &member_settings, observers)?.run(shutdown)
    }
}

/// The channels `settings` configures, each with its pacing and breaker.
pub fn deliverers(settings: &NotifySettings) -> Result<Vec<Deliverer>> {
    let mut channels: Vec<(Box<dyn Channel>, Option<RateLimit>)> = Vec::new();
    for hook in &settings.webhooks {
        let limit = RateLimit::new(hook.rate_per_second, hook.burst);
        channels.push((Box::new(Webhook::new(hook.clone())?), Some(limit)));
    }
    if let Some(file) = &settings.file {
        channels.push((Box::new(RollingFile::new(file.clone())), None));
    }
    if settings.stdout {
        channels.push((Box::new(Stdout), None));
    }
    let breaker = Breaker::new(settings.breaker.failures, Duration::from_millis(settings.breaker.open_ms));
    let give_up = Duration::from_millis(settings.retry.give_up_after_ms);
    Ok(channels
        .into_iter()
        .map(|(channel, limit)| Deliverer::new(channel, limit, breaker.clone(), settings.backoff(), give_up))
        .collect())
}

struct Member {
    consumer: BaseConsumer,
    work: Work,
}

/// What a member delivers with.
struct Work {
    producer: BaseProducer,
    codec: Codec,
    deliverers: Vec<Deliverer>,
    /// The alert topics on the cluster, and the dead letters'.
    inputs: Vec<(&'static Topic, String)>,
    dead_letters: String,
    metrics: NotifyMetrics,
    observers: Observers,
}

impl Member {
    fn new(settings: &NotifySettings, member: &Settings, observers: Observers) -> Result<Member> {
        let names = &member.names;
        let deliverers = deliverers(settings)?;
        // A record may wait on every channel's retries before the next poll.
        let max_poll_ms = settings.retry.give_up_after_ms.saturating_mul(deliverers.len().max(1) as u64) + 60_000;
        let mut config = connection::client_config(&member.bootstrap_servers);
        config
            .set("group.id", &member.group_id)
            .set("client.id", &member.transactional_id)
            .set("group.instance.id", &member.transactional_id)
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .set("max.poll.interval.ms", max_poll_ms.min(86_400_000).to_string())
            // Offsets are stored once their alert is delivered, and committed from there.
            .set("enable.auto.offset.store", "false")
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "200");
        let consumer: BaseConsumer = config.create().context("cannot create the notifier's consumer")?;
        let mut config = connection::client_config(&member.bootstrap_servers);
        config.set("enable.idempotence", "true").set("acks", "all").set("linger.ms", "0");
        let producer: BaseProducer = config.create().context("cannot create the notifier's dead-letter producer")?;
        let inputs: Vec<(&'static Topic, String)> = INPUTS.iter().map(|(t, _)| (*t, names.of(t.name))).collect();
        let dead_letters = names.of(DEAD_LETTERS);
        for name in inputs.iter().map(|(_, n)| n).chain([&dead_letters]) {
            if topics::partition_count(&consumer, name)? == 0 {
                anyhow::bail!("topic `{name}` does not exist; run `vigil provision` (the jobmanager does at start)");
            }
        }
        let subscribed: Vec<&str> = inputs.iter().map(|(_, n)| n.as_str()).collect();
        consumer.subscribe(&subscribed).context("cannot subscribe to the alert topics")?;
        let codec = Codec::new(&member.registry_url)?;
        let metrics = observers.metrics.notifier();
        let channels: Vec<&str> = deliverers.iter().map(|d| d.channel.name()).collect();
        info!(service = NAME, member = %member.member, ?channels, "running");
        Ok(Member { consumer, work: Work { producer, codec, deliverers, inputs, dead_letters, metrics, observers } })
    }

    fn run(self, shutdown: &AtomicBool) -> Result<()> {
        let Member { consumer, mut work } = self;
        work.observers.status.lock().expect("status").role = Role::Active;
        work.publish();
        while !shutdown.load(Ordering::SeqCst) {
            work.observers.loop_health.went_round();
            let message = match consumer.poll(Duration::from_millis(200)) {
                None => continue,
                // A fatal consumer error (a static member fenced after its session
                // ran out while a broker was down, say) ends this consumer: the
                // member fails and its supervisor starts it again with a new one,
                // which reads on from the last committed offset.
                Some(Err(e)) => match consumer.client().fatal_error() {
                    Some((_, reason)) => anyhow::bail!("the notifier's consumer failed fatally: {reason} ({e})"),
                    None => {
                        warn!("the notifier's consumer: {e}");
                        continue;
                    }
                },
                Some(Ok(message)) => message,
            };
            if marker_headers::read(&message).is_some() {
                store_offset(&consumer, &message);
                continue;
            }
            let delivered = deliver(&message, &mut work, shutdown)?;
            work.publish();
            if !delivered {
                break;
            }
            store_offset(&consumer, &message);
        }
        // What was delivered is committed; what was not is read again by the next member.
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
            warn!("the notifier could not commit its last offsets ({e}); their alerts come again, under the same keys");
        }
        Ok(())
    }
}

/// Marks a record done, for the next commit. A partition taken away meanwhile (a
/// rebalance during a long delivery) refuses it: its new owner delivers the record
/// again, under the same key.
fn store_offset(consumer: &BaseConsumer, message: &BorrowedMessage) {
    if let Err(e) = consumer.store_offset_from_message(message) {
        warn!(topic = message.topic(), partition = message.partition(), "not storing the offset: {e}");
    }
}

impl Work {
    /// Tells the member's status (what its taskmanager reports to the jobmanager)
    /// its ledger and breakers.
    fn publish(&self) {
        let m = &self.metrics;
        let deliveries = Deliveries {
            read: m.read.get(),
            delivered: m.delivered.get(),
            dead_lettered: m.dead_lettered.get(),
            in_flight: m.in_flight.get().max(0) as u64,
            breakers_open: self.deliverers.iter().filter(|d| d.breaker_open()).count() as u64,
        };
        self.observers.status.lock().expect("status").deliveries = Some(deliveries);
    }
}

/// Delivers one record's alert to every channel, dead letters included; false if the
/// process began stopping first.
fn deliver(message: &BorrowedMessage, m: &mut Work, shutdown: &AtomicBool) -> Result<bool> {
    let topic = m.inputs.iter().find(|(_, name)| name == message.topic()).map(|(t, _)| *t).expect("a subscribed topic");
    m.metrics.read.inc();
    m.metrics.in_flight.set(1);
    let payload = message.payload().unwrap_or_default();
    let alert = if is_json_object(payload) {
        Alert::from_json(topic, &String::from_utf8_lossy(payload))
    } else {
        match m.codec.decode_value(payload) {
            Ok(value) => Alert::from_value(topic, &value),
            Err(crate::codec::CodecError::Registry { url, reason }) => {
                // Not the record's fault: the member starts again and reads it again.
                anyhow::bail!("the schema registry at {url} did not answer: {reason}")
            }
            Err(e) => Err(e.to_string()),
        }
    };
    let alert = match alert {
        Ok(alert) => alert,
        Err(reason) => {
            dead_letter(m, message, None, "-", &format!("cannot read the alert: {reason}"))?;
            m.metrics.in_flight.set(0);
            return Ok(true);
        }
    };
    let written_ms = message.timestamp().to_millis().unwrap_or_else(crate::metrics::now_ms);
    let mut failed = false;
    for i in 0..m.deliverers.len() {
        let alive = || m.observers.loop_health.went_round();
        let d = &mut m.deliverers[i];
        let outcome = d.deliver(&alert, shutdown, &alive);
        let channel = d.channel.name().to_string();
        m.metrics.breaker(&channel, d.breaker_open());
        let seconds = (crate::metrics::now_ms() - written_ms) as f64 / 1000.0;
        match outcome {
            Outcome::Delivered { retries } => m.metrics.delivery(&channel, retries, true, seconds),
            Outcome::Failed { retries, reason } => {
                m.metrics.delivery(&channel, retries, false, seconds);
                warn!(%channel, key = %alert.idempotency_key(), "delivery failed for good: {reason}");
                dead_letter(m, message, Some(&alert), &channel, &reason)?;
                failed = true;
            }
            Outcome::Interrupted => return Ok(false),
        }
    }
    if failed {
        m.metrics.dead_lettered.inc();
    } else {
        m.metrics.delivered.inc();
    }
    m.metrics.in_flight.set(0);
    Ok(true)
}

/// Writes the dead letter of a delivery to `channel` that failed for good, and waits
/// until Kafka has it: only then may the alert's offset be committed.
fn dead_letter(m: &Work, message: &BorrowedMessage, alert: Option<&Alert>, channel: &str, reason: &str) -> Result<()> {
    let key = alert.map_or_else(
        || format!("{}/{}/{}", message.topic(), message.partition(), message.offset()),
        Alert::idempotency_key,
    );
    let value = json!({
        "record_type": "notify_dead_letter",
        "channel": channel,
        "reason": reason,
        "idempotency_key": alert.map(Alert::idempotency_key),
        "alert_id": alert.map(Alert::id),
        "revision": alert.map(|a| a.revision),
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "line": alert.map(|a| a.line.as_str()),
    })
    .to_string();
    m.producer
        .send(BaseRecord::to(&m.dead_letters).key(&key).payload(&value))
        .map_err(|(e, _)| anyhow::anyhow!("cannot write a dead letter to {}: {e}", m.dead_letters))?;
    m.producer
        .flush(Duration::from_secs(30))
        .with_context(|| format!("cannot write a dead letter to {}", m.dead_letters))
}
