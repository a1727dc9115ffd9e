//! A new producer epoch's claim on every partition its member writes. librdkafka
//! lacks KIP-890, so a write of an older epoch, delayed in a broker outage, can
//! reach a partition after its transaction ended: it opens a transaction there that
//! its coordinator does not know (a "hanging" one), which holds the partition's
//! `read_committed` readers for good, or which the member's next commit completes,
//! writing what was given up (chaos runs met one on every partition of a changelog,
//! on a Kafka 4 broker that verifies transactional writes, and once doubled a
//! window's output). A partition refuses a producer id's writes of an epoch older
//! than the newest it has taken; so right after `init_transactions`, the member
//! writes one record to each partition in a transaction and aborts it. The new
//! epoch is then the partition's newest, and the abort marker ends whatever the
//! producer id held open there, under any epoch. `init_transactions` returns only
//! once every transaction its coordinator knows has ended, markers written, so any
//! transaction of this producer id still open is one no marker would end.

use std::time::Duration;

use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

use crate::produce::{self, Kafka};

/// The claim's record: no value, and a key whose task prefix is no task's (a
/// compacted changelog takes no record without a key). Never read: aborted, so
/// `read_committed` readers skip it; a reader of uncommitted records sees a
/// record without value, as Vigil's watermark markers are, with this header.
const NO_TASK: [u8; 4] = u32::MAX.to_be_bytes();
const HEADER: &str = "vigil-epoch-claim";

/// Writes the claim to every partition of `topics` (each with `partitions`) in a
/// transaction of `producer`, and aborts it.
pub fn claim_partitions(producer: &Kafka, topics: &[String], partitions: i32, timeout: Duration) -> KafkaResult<()> {
    producer.begin_transaction()?;
    for topic in topics {
        for p in 0..partitions {
            let headers = OwnedHeaders::new().insert(Header { key: HEADER, value: Some(b"1") });
            let record = BaseRecord::<[u8], [u8]>::to(topic).partition(p).key(&NO_TASK[..]).headers(headers);
            producer.send(record).map_err(|(e, _)| e)?;
        }
    }
    // The abort drops records not yet sent, and a marker reaches only the partitions
    // the transaction wrote to.
    if !produce::await_deliveries(producer, timeout) {
        return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
    }
    producer.abort_transaction(timeout)
}
