//! The input producer: records of the three input streams sent as Avro under their
//! topics' schemas (or as plain JSON), keyed and compressed as asked, with patience for a broker or a schema registry
//! that is not up yet, and a flush that fails if any record was lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use serde::Serialize;
use tracing::warn;
use vigil_model::topology::{Topic, DEVICE_EVENTS, ORDERS, PAYMENTS};
use vigil_model::{DeviceEvent, InputRecord, Order, Payment, Source};

use super::keying::{input_topics, topic_of, Encoding, Keying};
use super::reports::{self, Reports, Tally};
use super::stall::Watch;
use crate::codec::{Codec, CodecError};
use crate::connection;
use crate::core::Marker;
use crate::marker_headers;
use crate::names::Names;
use crate::patience::patiently;

/// How long a producer waits for an unreachable schema registry before it gives up.
const REGISTRY_PATIENCE: Duration = Duration::from_secs(300);
/// How long the producer waits for a broker it cannot reach before it gives up.
const BROKER_PATIENCE: Duration = Duration::from_secs(120);

/// librdkafka's delivery timeout (`message.timeout.ms`, five minutes), and a margin.
const DELIVERY_PATIENCE: Duration = Duration::from_secs(330);

pub struct InputProducer {
    /// The Kafka client, replaced when it stalls.
    client: Mutex<ThreadedProducer<Reports>>,
    pub(super) config: ClientConfig,
    pub(super) tally: Arc<Tally>,
    pub(super) watch: Mutex<Watch>,
    /// How many records were sent.
    numbered: AtomicUsize,
    codec: Codec,
    partitions: i32,
    keying: Keying,
    encoding: Encoding,
    /// The input topics' names on the cluster (the pipeline's namespace).
    names: Names,
}

impl InputProducer {
    pub fn new(bootstrap_servers: &str, registry_url: &str, partitions: u32) -> Result<Self> {
        let mut config = connection::client_config(bootstrap_servers);
        config.set("enable.idempotence", "true").set("partitioner", "murmur2_random").set("linger.ms", "10");
        let tally = Arc::new(Tally::new());
        Ok(InputProducer {
            client: Mutex::new(reports::client(&config, &tally)?),
            config,
            tally,
            watch: Mutex::new(Watch::new()),
            numbered: AtomicUsize::new(0),
            codec: Codec::new(registry_url)?,
            partitions: partitions as i32,
            keying: Keying::Join,
            encoding: Encoding::Avro,
            names: Names::default(),
        })
    }

    /// Produces to the input topics of the pipeline `names` names (in its namespace).
    pub fn named(self, names: Names) -> Self {
        InputProducer { codec: self.codec.named(names.clone()), names, ..self }
    }

    pub fn keyed(self, keying: Keying) -> Self {
        InputProducer { keying, ..self }
    }

    pub fn encoded(self, encoding: Encoding) -> Self {
        InputProducer { encoding, ..self }
    }

    /// Record batches compressed with `codec` (librdkafka's `compression.type`: none,
    /// gzip, snappy, lz4 or zstd), as producers of other teams may send them.
    pub fn compressed(self, codec: &str) -> Result<Self> {
        self.with_setting("compression.type", codec)
    }

    /// Keyed records placed by librdkafka's partitioner `name` (`consistent_random`,
    /// its default, hashes keys with CRC32 where Kafka's Java client uses murmur2), as
    /// producers of other teams may place them.
    pub fn partitioned(self, name: &str) -> Result<Self> {
        self.with_setting("partitioner", name)
    }

    fn with_setting(mut self, key: &str, value: &str) -> Result<Self> {
        self.config.set(key, value);
        let client = reports::client(&self.config, &self.tally)
            .with_context(|| format!("cannot make a producer with {key}={value}"))?;
        *self.client.get_mut().expect("client") = client;
        Ok(self)
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
            Err(_) => {
                let topic = self.names.of(topic_of(source).name);
                self.send(BaseRecord::<str, [u8]>::to(&topic).payload(line.as_bytes()))
            }
        }
    }

    /// Sends one record, encoded and keyed as this producer encodes and keys.
    pub fn send_record(&self, record: &InputRecord) -> Result<()> {
        let (topic, value) = match (self.encoding, record) {
            (Encoding::Json, InputRecord::Order(o)) => (&ORDERS, serde_json::to_vec(o)?),
            (Encoding::Json, InputRecord::Payment(p)) => (&PAYMENTS, serde_json::to_vec(p)?),
            (Encoding::Json, InputRecord::Device(d)) => (&DEVICE_EVENTS, serde_json::to_vec(d)?),
            (Encoding::Avro, InputRecord::Order(o)) => (&ORDERS, self.encode(&ORDERS, o)?),
            (Encoding::Avro, InputRecord::Payment(p)) => (&PAYMENTS, self.encode(&PAYMENTS, p)?),
            (Encoding::Avro, InputRecord::Device(d)) => (&DEVICE_EVENTS, self.encode(&DEVICE_EVENTS, d)?),
        };
        self.send_value(record, topic, &value)
    }

    fn send_value(&self, record: &InputRecord, topic: &'static Topic, value: &[u8]) -> Result<()> {
        let name = self.names.of(topic.name);
        let mut out = BaseRecord::<str, [u8]>::to(&name).payload(value);
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
        let mut total = 0;
        for topic in input_topics() {
            for p in 0..self.partitions {
                let name = self.names.of(topic.name);
                let (low, high) = patiently(&format!("the offsets of `{name}`"), BROKER_PATIENCE, |t| {
                    self.lock().client().fetch_watermarks(&name, p, t.min(Duration::from_secs(10)))
                })
                .with_context(|| format!("cannot read the offsets of `{}` partition {p}", topic.name))?;
                total += high - low;
            }
        }
        Ok(total)
    }

    /// Says every partition of the input topics has ended: their watermark goes to
    /// the end of time and every window fires, as at the end of a bounded source.
    pub fn finish(&self) -> Result<()> {
        for topic in input_topics() {
            for p in 0..self.partitions {
                let headers = marker_headers::headers(Marker::END);
                self.send(BaseRecord::<str, [u8]>::to(&self.names.of(topic.name)).partition(p).headers(headers))?;
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
    /// order (see [`InputProducer::restart`]); a record with a value says its number
    /// in `vigil-seq`, which orders the records sent in one millisecond to different
    /// partitions (see `core::merge`).
    fn send(&self, record: BaseRecord<'_, str, [u8]>) -> Result<()> {
        let BaseRecord { topic, partition, payload, key, timestamp, mut headers, .. } = record;
        let number = self.numbered.fetch_add(1, Ordering::SeqCst);
        if headers.is_none() && payload.is_some() {
            let seq = number.to_string();
            headers =
                Some(OwnedHeaders::new().insert(Header { key: marker_headers::SEQ, value: Some(seq.as_bytes()) }));
        }
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

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ThreadedProducer<Reports>> {
        self.client.lock().expect("the producer's client")
    }
}
