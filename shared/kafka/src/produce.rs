//! Writing input records to Kafka, as the generator does and as users' producers
//! would: Avro values under the input topics' schemas, keyed so co-partitioned
//! topics line up (orders and payments by order_id, device events by site_id).

use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use vigil_model::{DeviceEvent, Millis, Order, Payment, Source};

use crate::codec::Codec;
use crate::markers::{self, Marker};
use crate::topics::{Topic, DEVICE_EVENTS, ORDERS, PAYMENTS};

pub fn topic_of(source: Source) -> Topic {
    match source {
        Source::Orders => ORDERS,
        Source::Payments => PAYMENTS,
        Source::Devices => DEVICE_EVENTS,
    }
}

pub struct InputProducer {
    producer: BaseProducer,
    codec: Codec,
    partitions: i32,
}

impl InputProducer {
    pub fn new(bootstrap_servers: &str, registry_url: &str, partitions: u32) -> Result<Self> {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap_servers)
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "10")
            .create()
            .context("cannot create the Kafka producer")?;
        Ok(InputProducer { producer, codec: Codec::new(registry_url)?, partitions: partitions as i32 })
    }

    /// Sends one NDJSON line of `source`. A line that is a record of the stream goes
    /// as Avro, even if a rule rejects it later (say, a negative amount); a line that
    /// is not goes as its raw bytes, so the service's dead-letter path sees both.
    pub fn send_line(&self, source: Source, line: &str) -> Result<()> {
        let topic = topic_of(source);
        let (key, value) = match source {
            Source::Orders => match serde_json::from_str::<Order>(line) {
                Ok(o) => (Some(o.order_id.clone()), self.codec.encode(topic, &o)?),
                Err(_) => (None, line.as_bytes().to_vec()),
            },
            Source::Payments => match serde_json::from_str::<Payment>(line) {
                Ok(p) => (Some(p.order_id.clone()), self.codec.encode(topic, &p)?),
                Err(_) => (None, line.as_bytes().to_vec()),
            },
            Source::Devices => match serde_json::from_str::<DeviceEvent>(line) {
                Ok(d) => (Some(d.site_id.clone()), self.codec.encode(topic, &d)?),
                Err(_) => (None, line.as_bytes().to_vec()),
            },
        };
        let mut record = BaseRecord::<str, [u8]>::to(topic.name).payload(&value);
        if let Some(key) = &key {
            record = record.key(key.as_str());
        }
        self.send(record)
    }

    /// Says every partition of the input topics has ended: their watermark goes to
    /// the end of time and every window fires, as at the end of a bounded source.
    pub fn finish(&self) -> Result<()> {
        for topic in [ORDERS, PAYMENTS, DEVICE_EVENTS] {
            for p in 0..self.partitions {
                let headers = markers::headers(Marker { task: None, watermark: Millis::MAX });
                self.send(BaseRecord::<str, [u8]>::to(topic.name).partition(p).headers(headers))?;
            }
        }
        Ok(())
    }

    pub fn flush(&self) -> Result<()> {
        self.producer.flush(Duration::from_secs(60)).context("cannot flush the producer")
    }

    fn send(&self, record: BaseRecord<'_, str, [u8]>) -> Result<()> {
        send(&self.producer, record)
    }
}

/// Produces a record, waiting for room when the producer's queue is full.
pub(crate) fn send(producer: &BaseProducer, record: BaseRecord<'_, str, [u8]>) -> Result<()> {
    let mut record = record;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e).context("cannot produce"),
        }
    }
}
