//! Writing input records to Kafka, as the generator does and as users' producers
//! would: Avro values under the input topics' schemas, keyed so co-partitioned
//! topics line up (orders and payments by order_id, device events by site_id).

use crate::connection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseRecord, DefaultProducerContext, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use serde::Serialize;
use tracing::{error, warn};
use vigil_model::{DeviceEvent, InputRecord, Order, Payment, Source};

use crate::codec::{Codec, CodecError};
use crate::markers::{self, Marker};
use crate::topics::{Topic, DEVICE_EVENTS, ORDERS, PAYMENTS};

pub fn topic_of(source: Source) -> Topic {
    match source {
        Source::Orders => ORDERS,
        Source::Payments => PAYMENTS,
        Source::Devices => DEVICE_EVENTS,
    }
}

/// How input records are keyed (and so partitioned) as they are produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Keying {
    /// By the key the stages join on (order_id; site_id for device events), as Vigil's
    /// stages want them: every record lands where its stage reads it directly.
    #[default]
    Join,
    /// No key, as many producers and command-line tools send records: partitions
    /// picked at random, so the stages re-key them through their repartition topics.
    None,
    /// By another field (orders by customer_id, payments by payment_id, device events
    /// by device_id).
    Other,
}

impl Keying {
    fn key_of(self, record: &InputRecord) -> Option<&str> {
        match (self, record) {
            (Keying::None, _) => None,
            (Keying::Join, InputRecord::Order(o)) => Some(&o.order_id),
            (Keying::Join, InputRecord::Payment(p)) => Some(&p.order_id),
            (Keying::Join, InputRecord::Device(d)) => Some(&d.site_id),
            (Keying::Other, InputRecord::Order(o)) => Some(&o.customer_id),
            (Keying::Other, InputRecord::Payment(p)) => Some(&p.payment_id),
            (Keying::Other, InputRecord::Device(d)) => Some(&d.device_id),
        }
    }
}

/// How long a producer waits for an unreachable schema registry before it gives up.
const REGISTRY_PATIENCE: Duration = Duration::from_secs(300);
/// How long the producer waits for a broker it cannot reach before it gives up.
const BROKER_PATIENCE: Duration = Duration::from_secs(120);

/// An error that says no broker could be reached (yet), not that the request was wrong.
fn unreachable(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::{AllBrokersDown, BrokerTransportFailure, OperationTimedOut};
    matches!(e, KafkaError::MetadataFetch(AllBrokersDown | BrokerTransportFailure | OperationTimedOut))
}

/// librdkafka's delivery timeout (`message.timeout.ms`, five minutes), and a margin.
const DELIVERY_PATIENCE: Duration = Duration::from_secs(330);

pub struct InputProducer {
    producer: ThreadedProducer<Undelivered>,
    codec: Codec,
    partitions: i32,
    keying: Keying,
}

impl InputProducer {
    pub fn new(bootstrap_servers: &str, registry_url: &str, partitions: u32) -> Result<Self> {
        let producer = connection::client_config(bootstrap_servers)
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "10")
            .create_with_context(Undelivered::default())
            .context("cannot create the Kafka producer")?;
        Ok(InputProducer {
            producer,
            codec: Codec::new(registry_url)?,
            partitions: partitions as i32,
            keying: Keying::Join,
        })
    }

    pub fn keyed(self, keying: Keying) -> Self {
        InputProducer { keying, ..self }
    }

    /// Sends one NDJSON line of `source`. A line that is a record of the stream goes
    /// as Avro, even if a rule rejects it later (say, a negative amount); a line that
    /// is not goes as its raw bytes, so the service's dead-letter path sees both.
    pub fn send_line(&self, source: Source, line: &str) -> Result<()> {
        let record = match source {
            Source::Orders => serde_json::from_str::<Order>(line).map(InputRecord::Order),
            Source::Payments => serde_json::from_str::<Payment>(line).map(InputRecord::Payment),
            Source::Devices => serde_json::from_str::<DeviceEvent>(line).map(InputRecord::Device),
        };
        match record {
            Ok(record) => self.send_record(&record),
            Err(_) => self.send(BaseRecord::<str, [u8]>::to(topic_of(source).name).payload(line.as_bytes())),
        }
    }

    /// Sends one record as Avro, keyed as this producer keys.
    pub fn send_record(&self, record: &InputRecord) -> Result<()> {
        let (topic, value) = match record {
            InputRecord::Order(o) => (ORDERS, self.encode(ORDERS, o)?),
            InputRecord::Payment(p) => (PAYMENTS, self.encode(PAYMENTS, p)?),
            InputRecord::Device(d) => (DEVICE_EVENTS, self.encode(DEVICE_EVENTS, d)?),
        };
        let mut out = BaseRecord::<str, [u8]>::to(topic.name).payload(&value);
        if let Some(key) = self.keying.key_of(record) {
            out = out.key(key);
        }
        self.send(out)
    }

    /// A value as Avro; while the schema registry cannot be reached (the schema is
    /// fetched once per topic), it waits and tries again, for up to five minutes.
    fn encode<T: Serialize>(&self, topic: Topic, value: &T) -> Result<Vec<u8>> {
        let give_up = Instant::now() + REGISTRY_PATIENCE;
        let mut wait = Duration::from_millis(500);
        loop {
            match self.codec.encode(topic, value) {
                Err(CodecError::Registry { url, reason }) if Instant::now() < give_up => {
                    warn!(%url, %reason, "the schema registry is unreachable; trying again in {wait:?}");
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
                other => return Ok(other?),
            }
        }
    }

    /// Records already in the input topics (every partition's end offset, summed).
    /// A broker not reachable yet (a cluster still starting: compose starts the
    /// generator as soon as the jobmanager is healthy) is waited for, up to
    /// `BROKER_PATIENCE`.
    pub fn records_in_inputs(&self) -> Result<i64> {
        let give_up = Instant::now() + BROKER_PATIENCE;
        let mut total = 0;
        for topic in [ORDERS, PAYMENTS, DEVICE_EVENTS] {
            for p in 0..self.partitions {
                let (low, high) = loop {
                    match self.producer.client().fetch_watermarks(topic.name, p, Duration::from_secs(10)) {
                        Err(e) if unreachable(&e) && Instant::now() < give_up => {
                            warn!(error = %e, "the broker does not answer yet; trying again");
                            std::thread::sleep(Duration::from_secs(1));
                        }
                        answer => {
                            break answer.with_context(|| {
                                format!("cannot read the offsets of `{}` partition {p}", topic.name)
                            })?
                        }
                    }
                };
                total += high - low;
            }
        }
        Ok(total)
    }

    /// Says every partition of the input topics has ended: their watermark goes to
    /// the end of time and every window fires, as at the end of a bounded source.
    pub fn finish(&self) -> Result<()> {
        for topic in [ORDERS, PAYMENTS, DEVICE_EVENTS] {
            for p in 0..self.partitions {
                let headers = markers::headers(Marker::END);
                self.send(BaseRecord::<str, [u8]>::to(topic.name).partition(p).headers(headers))?;
            }
        }
        Ok(())
    }

    /// Waits until every record sent is delivered. While the broker is unreachable
    /// (restarting, say) librdkafka keeps the records and retries them for its
    /// delivery timeout, five minutes: this waits as long, saying what for. An error
    /// if any record sent was given up on, however long ago.
    pub fn flush(&self) -> Result<()> {
        let give_up = Instant::now() + DELIVERY_PATIENCE;
        loop {
            match self.producer.flush(Duration::from_secs(10)) {
                Ok(()) => return self.producer.context().verdict(),
                Err(e) if Instant::now() < give_up => {
                    warn!(waiting = self.producer.in_flight_count(), error = %e, "records not delivered yet; waiting for the broker");
                }
                Err(e) => {
                    return Err(e).context("cannot flush the producer: records still undelivered after five minutes")
                }
            }
        }
    }

    fn send(&self, record: BaseRecord<'_, str, [u8]>) -> Result<()> {
        send(&self.producer, record)
    }
}

/// An input producer's delivery reports: librdkafka drops a record it gives up on
/// (its delivery timeout passed, say, with the broker unreachable or its partition
/// unknown) and says so only there, so a producer that ignored them would lose
/// input without a word.
#[derive(Default)]
struct Undelivered {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for Undelivered {}

impl ProducerContext for Undelivered {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let Err((e, record)) = result else { return };
        let at = format!("`{}` partition {}", record.topic(), record.partition());
        if self.count.fetch_add(1, Ordering::SeqCst) == 0 {
            error!(record = %at, error = %e, "a record was not delivered; the producer fails when it flushes");
            *self.first.lock().expect("first undelivered") = Some(format!("{at}: {e}"));
        }
    }
}

impl Undelivered {
    fn verdict(&self) -> Result<()> {
        match self.count.load(Ordering::SeqCst) {
            0 => Ok(()),
            n => {
                let first = self.first.lock().expect("first undelivered").clone().unwrap_or_default();
                Err(anyhow!(
                    "{n} records were not delivered and are not in the input topics (the first, to {first}); \
                     produce them again"
                ))
            }
        }
    }
}

/// A producer whose delivery reports a thread of its own serves: a transaction's
/// abort waits for the reports of the messages it purges, so the thread that calls
/// it cannot be the one to serve them.
pub type Kafka = ThreadedProducer<DefaultProducerContext>;

/// Waits, up to `timeout`, until every record sent so far has its delivery report
/// (`false`: some still have none). rust-rdkafka's `flush` polls in 100 ms steps that
/// each run their full length, so a commit that left it to `commit_transaction`
/// waited 100 ms whenever a record was still in flight; this checks every
/// millisecond, and the flush inside the commit then finds nothing to wait for.
pub(crate) fn await_deliveries<C: ProducerContext + 'static>(
    producer: &ThreadedProducer<C>,
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Produces a record, waiting for room when the producer's queue is full.
pub(crate) fn send<K: rdkafka::message::ToBytes + ?Sized, C: ProducerContext<DeliveryOpaque = ()> + 'static>(
    producer: &ThreadedProducer<C>,
    record: BaseRecord<'_, K, [u8]>,
) -> Result<()> {
    let mut record = record;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(e).context("cannot produce"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_broker_that_cannot_be_reached_is_waited_for() {
        assert!(unreachable(&KafkaError::MetadataFetch(RDKafkaErrorCode::AllBrokersDown)));
        assert!(unreachable(&KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure)));
        assert!(!unreachable(&KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)));
        assert!(!unreachable(&KafkaError::MessageProduction(RDKafkaErrorCode::AllBrokersDown)));
    }
}
