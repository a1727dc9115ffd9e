//! An input producer's delivery reports: librdkafka drops a record it gives up on
//! (its delivery timeout passed, say, with the broker unreachable or its partition
//! unknown) and says so only there, so a producer that ignored them would lose
//! input without a word. They are tallied over every client the producer has had.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use tracing::error;

/// A Kafka client of an input producer, its reports going to `tally`.
pub(super) fn client(config: &ClientConfig, tally: &Arc<Tally>) -> Result<ThreadedProducer<Reports>> {
    config.create_with_context(Reports(Arc::clone(tally))).context("cannot create the Kafka producer")
}

/// A record taken out of a stalled client's queues, to be sent again.
pub(super) struct Purged {
    /// Its place in the order records were sent.
    pub(super) number: usize,
    pub(super) topic: String,
    /// Where it was bound (-1: not yet partitioned).
    pub(super) partition: i32,
    pub(super) key: Option<Vec<u8>>,
    pub(super) payload: Option<Vec<u8>>,
    pub(super) headers: Option<OwnedHeaders>,
}

/// What an input producer's delivery reports said, over every client it has had.
pub(super) struct Tally {
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

pub(super) struct Reports(Arc<Tally>);

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
    pub(super) fn new() -> Self {
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

    pub(super) fn since_last_report(&self) -> Duration {
        self.born.elapsed().saturating_sub(Duration::from_millis(self.last_report_ms.load(Ordering::SeqCst)))
    }

    pub(super) fn take_purged(&self) -> Vec<Purged> {
        std::mem::take(&mut *self.purged.lock().expect("purged records"))
    }

    pub(super) fn verdict(&self) -> Result<()> {
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
