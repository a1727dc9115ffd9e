//! Writing input records to Kafka, as the generator does and as users' producers
//! would: Avro values under the input topics' schemas, keyed so co-partitioned
//! topics line up (orders and payments by order_id, device events by site_id).

use crate::connection;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message, OwnedHeaders};
use rdkafka::producer::{
    BaseRecord, DefaultProducerContext, DeliveryResult, Producer, ProducerContext, PurgeConfig, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use serde::Serialize;
use tracing::{error, warn};
use vigil_model::{DeviceEvent, InputRecord, Order, Payment, Source};

use crate::codec::{Codec, CodecError};
use crate::core::Marker;
use crate::marker_headers;
use vigil_model::topology::{Topic, DEVICE_EVENTS, ORDERS, PAYMENTS};

pub fn topic_of(source: Source) -> &'static Topic {
    match source {
        Source::Orders => &ORDERS,
        Source::Payments => &PAYMENTS,
        Source::Devices => &DEVICE_EVENTS,
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
/// How long records may wait without a single delivery report, the broker answering,
/// before the producer's client is taken for stalled (see [`InputProducer::restart`]).
const STALL: Duration = Duration::from_secs(30);
/// How long a stalled client is given to report the records it did send.
const STALLED_FLUSH: Duration = Duration::from_secs(30);

pub struct InputProducer {
    /// The Kafka client, replaced when it stalls.
    client: Mutex<ThreadedProducer<Reports>>,
    config: ClientConfig,
    tally: Arc<Tally>,
    watch: Mutex<Watch>,
    /// How many records were sent.
    numbered: AtomicUsize,
    codec: Codec,
    partitions: i32,
    keying: Keying,
}

impl InputProducer {
    pub fn new(bootstrap_servers: &str, registry_url: &str, partitions: u32) -> Result<Self> {
        let mut config = connection::client_config(bootstrap_servers);
        config.set("enable.idempotence", "true").set("partitioner", "murmur2_random").set("linger.ms", "10");
        let tally = Arc::new(Tally::new());
        Ok(InputProducer {
            client: Mutex::new(client(&config, &tally)?),
            config,
            tally,
            watch: Mutex::new(Watch::new()),
            numbered: AtomicUsize::new(0),
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
            InputRecord::Order(o) => (&ORDERS, self.encode(&ORDERS, o)?),
            InputRecord::Payment(p) => (&PAYMENTS, self.encode(&PAYMENTS, p)?),
            InputRecord::Device(d) => (&DEVICE_EVENTS, self.encode(&DEVICE_EVENTS, d)?),
        };
        let mut out = BaseRecord::<str, [u8]>::to(topic.name).payload(&value);
        if let Some(key) = self.keying.key_of(record) {
            out = out.key(key);
        }
        self.send(out)
    }

    /// A value as Avro; while the schema registry cannot be reached (the schema is
    /// fetched once per topic), it waits and tries again, for up to five minutes.
    fn encode<T: Serialize>(&self, topic: &'static Topic, value: &T) -> Result<Vec<u8>> {
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
        for topic in [&ORDERS, &PAYMENTS, &DEVICE_EVENTS] {
            for p in 0..self.partitions {
                let (low, high) = loop {
                    match self.lock().client().fetch_watermarks(topic.name, p, Duration::from_secs(10)) {
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
        for topic in [&ORDERS, &PAYMENTS, &DEVICE_EVENTS] {
            for p in 0..self.partitions {
                let headers = marker_headers::headers(Marker::END);
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
            self.restart_if_stalled()?;
            let flushed = self.lock().flush(Duration::from_secs(10));
            match flushed {
                Ok(()) => return self.tally.verdict(),
                Err(e) if Instant::now() < give_up => {
                    let waiting = self.lock().in_flight_count();
                    warn!(waiting, error = %e, "records not delivered yet; waiting for the broker");
                }
                Err(e) => {
                    return Err(e).context("cannot flush the producer: records still undelivered after five minutes")
                }
            }
        }
    }

    /// Produces a record, waiting for room when the client's queue is full. Each
    /// record is numbered, so that records carried over to a new client keep their
    /// order (see [`InputProducer::restart`]).
    fn send(&self, record: BaseRecord<'_, str, [u8]>) -> Result<()> {
        let BaseRecord { topic, partition, payload, key, timestamp, headers, .. } = record;
        let number = self.numbered.fetch_add(1, Ordering::SeqCst);
        let mut record = BaseRecord { topic, partition, payload, key, timestamp, headers, delivery_opaque: number };
        loop {
            self.restart_if_stalled()?;
            match self.lock().send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => record = r,
                Err((e, _)) => return Err(e).context("cannot produce"),
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ThreadedProducer<Reports>> {
        self.client.lock().expect("the producer's client")
    }

    /// Restarts the client if records have waited `STALL` without a delivery report
    /// while the broker answers with a leader for every input partition. librdkafka
    /// can leave a partition without a leader for good after a broker restart
    /// (confluentinc/librdkafka#5430: a metadata update with leader -1 is skipped),
    /// and its records then wait out their delivery timeout and are dropped.
    fn restart_if_stalled(&self) -> Result<()> {
        let mut watch = self.watch.lock().expect("the stall watch");
        if watch.checked.elapsed() < STALL / 10 {
            return Ok(());
        }
        watch.checked = Instant::now();
        if self.lock().in_flight_count() == 0 {
            watch.waiting_since = None;
            return Ok(());
        }
        let waiting = watch.waiting_since.get_or_insert_with(Instant::now).elapsed();
        let stalled = waiting >= STALL && self.tally.since_last_report() >= STALL;
        drop(watch);
        if stalled && self.broker_leads_every_input_partition() {
            let carried = self.restart()?;
            warn!(
                carried,
                "records waited {STALL:?} without a delivery report, the broker up: a new Kafka client sends \
                 those not sent yet (librdkafka can lose a partition's leader over a broker restart)"
            );
        }
        Ok(())
    }

    fn broker_leads_every_input_partition(&self) -> bool {
        let metadata = match self.lock().client().fetch_metadata(None, Duration::from_secs(10)) {
            Ok(metadata) => metadata,
            Err(_) => return false,
        };
        [&ORDERS, &PAYMENTS, &DEVICE_EVENTS].iter().all(|topic| {
            metadata.topics().iter().any(|t| {
                t.name() == topic.name && !t.partitions().is_empty() && t.partitions().iter().all(|p| p.leader() >= 0)
            })
        })
    }

    /// Replaces the Kafka client with a new one, which sends again the records the
    /// old one had not sent yet (taken out of its queues, so none is sent twice);
    /// records it had sent keep their delivery reports. How many were carried over.
    pub fn restart(&self) -> Result<usize> {
        let mut client = self.lock();
        client.purge(PurgeConfig::default().queue());
        // The purged records' reports, and those of records sent, come in meanwhile.
        if let Err(e) = client.flush(STALLED_FLUSH) {
            warn!(error = %e, "a stalled producer's records sent are still unreported; they count as undelivered");
        }
        *client = self::client(&self.config, &self.tally)?;
        let mut carried = self.tally.take_purged();
        carried.sort_by_key(|r| r.number);
        for r in &carried {
            let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&r.topic, r.number);
            if r.partition >= 0 {
                record = record.partition(r.partition);
            }
            if let Some(key) = &r.key {
                record = record.key(key);
            }
            if let Some(payload) = &r.payload {
                record = record.payload(payload);
            }
            if let Some(headers) = &r.headers {
                record = record.headers(headers.clone());
            }
            send(&client, record)?;
        }
        drop(client);
        *self.watch.lock().expect("the stall watch") = Watch::new();
        Ok(carried.len())
    }
}

fn client(config: &ClientConfig, tally: &Arc<Tally>) -> Result<ThreadedProducer<Reports>> {
    config.create_with_context(Reports(Arc::clone(tally))).context("cannot create the Kafka producer")
}

/// What the stall check last saw.
struct Watch {
    checked: Instant,
    /// Since when records have been waiting for their delivery reports.
    waiting_since: Option<Instant>,
}

impl Watch {
    fn new() -> Self {
        Watch { checked: Instant::now(), waiting_since: None }
    }
}

/// A record taken out of a stalled client's queues, to be sent again.
struct Purged {
    /// Its place in the order records were sent.
    number: usize,
    topic: String,
    /// Where it was bound (-1: not yet partitioned).
    partition: i32,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    headers: Option<OwnedHeaders>,
}

/// An input producer's delivery reports: librdkafka drops a record it gives up on
/// (its delivery timeout passed, say, with the broker unreachable or its partition
/// unknown) and says so only there, so a producer that ignored them would lose
/// input without a word. Kept over every client the producer has had.
struct Tally {
    undelivered: AtomicU64,
    /// Records a stalled client had sent before, then queued again: whether the
    /// broker took them is unknown, so they are not sent again.
    uncertain: AtomicU64,
    first: Mutex<Option<String>>,
    born: Instant,
    /// When the last delivery report came, in milliseconds since `born`.
    last_report_ms: AtomicU64,
    purged: Mutex<Vec<Purged>>,
}

struct Reports(Arc<Tally>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, number: usize) {
        let tally = &self.0;
        tally.reported();
        let Err((e, record)) = result else { return };
        if *e == KafkaError::MessageProduction(RDKafkaErrorCode::PurgeQueue) {
            // One sent before and queued again for a retry may be in the topic already.
            if !never_sent(record) {
                tally.uncertain.fetch_add(1, Ordering::SeqCst);
                return;
            }
            tally.purged.lock().expect("purged records").push(Purged {
                number,
                topic: record.topic().to_string(),
                partition: record.partition(),
                key: record.key().map(<[u8]>::to_vec),
                payload: record.payload().map(<[u8]>::to_vec),
                headers: record.headers().map(|h| h.detach()),
            });
            return;
        }
        let at = format!("`{}` partition {}", record.topic(), record.partition());
        if tally.undelivered.fetch_add(1, Ordering::SeqCst) == 0 {
            error!(record = %at, error = %e, "a record was not delivered; the producer fails when it flushes");
            *tally.first.lock().expect("first undelivered") = Some(format!("{at}: {e}"));
        }
    }
}

/// Whether librdkafka knows a record never reached the broker, so that sending it
/// again cannot write it twice (rust-rdkafka does not expose a message's status).
fn never_sent(record: &BorrowedMessage<'_>) -> bool {
    use rdkafka::bindings::{rd_kafka_message_status, rd_kafka_msg_status_t};
    // SAFETY: the message stays valid for the whole delivery callback, and
    // rd_kafka_message_status only reads it.
    let status = unsafe { rd_kafka_message_status(record.ptr()) };
    status == rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED
}

impl Tally {
    fn new() -> Self {
        Tally {
            undelivered: AtomicU64::new(0),
            uncertain: AtomicU64::new(0),
            first: Mutex::new(None),
            born: Instant::now(),
            last_report_ms: AtomicU64::new(0),
            purged: Mutex::new(Vec::new()),
        }
    }

    fn reported(&self) {
        self.last_report_ms.store(self.born.elapsed().as_millis() as u64, Ordering::SeqCst);
    }

    fn since_last_report(&self) -> Duration {
        self.born.elapsed().saturating_sub(Duration::from_millis(self.last_report_ms.load(Ordering::SeqCst)))
    }

    fn take_purged(&self) -> Vec<Purged> {
        std::mem::take(&mut *self.purged.lock().expect("purged records"))
    }

    fn verdict(&self) -> Result<()> {
        let uncertain = self.uncertain.load(Ordering::SeqCst);
        if uncertain > 0 {
            return Err(anyhow!(
                "{uncertain} records a stalled Kafka client had sent once may or may not be in the input topics \
                 (the broker restarted before it answered): look for them before producing them again"
            ));
        }
        match self.undelivered.load(Ordering::SeqCst) {
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

/// Sends at once every record the producer holds (`linger.ms` is set aside while
/// this waits) and waits, up to `timeout`, until the broker has answered for each,
/// whether or not the producer reports deliveries (`false`: some are still held).
/// A commit's changelog records and markers are produced just before it, and would
/// otherwise wait out the linger first. rust-rdkafka's `flush` (which its
/// `commit_transaction` calls first) polls for the reports in 100 ms steps that each
/// run their full length, since the producer's own thread takes them; librdkafka's,
/// in the event mode rust-rdkafka uses, waits on its count of records held and wakes
/// when that reaches zero. The flush inside the commit then finds nothing to wait for.
pub(crate) fn await_deliveries<C: ProducerContext + 'static>(
    producer: &ThreadedProducer<C>,
    timeout: Duration,
) -> bool {
    use rdkafka::bindings::{rd_kafka_flush, rd_kafka_resp_err_t};
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the client handle lives as long as `producer`, and librdkafka's flush
    // may be called from any thread.
    let err = unsafe { rd_kafka_flush(producer.client().native_ptr(), ms) };
    err == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
}

/// Produces a record, waiting for room when the producer's queue is full.
pub(crate) fn send<K: rdkafka::message::ToBytes + ?Sized, C: ProducerContext + 'static>(
    producer: &ThreadedProducer<C>,
    record: BaseRecord<'_, K, [u8], C::DeliveryOpaque>,
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
