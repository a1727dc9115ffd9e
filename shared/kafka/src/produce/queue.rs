//! A Kafka producer's queue of records, as every writer here uses it: a record sent
//! waits for room in the queue, and a commit waits until the queue is empty.

use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use crate::client_stats::StatsContext;

/// A producer whose delivery reports a thread of its own serves: a transaction's
/// abort waits for the reports of the messages it purges, so the thread that calls
/// it cannot be the one to serve them. Its context reports librdkafka's statistics
/// (`client_stats`).
pub type Kafka = ThreadedProducer<StatsContext>;

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
