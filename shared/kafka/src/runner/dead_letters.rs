//! What cannot be read becomes a dead letter with its reason, never dropped. A message
//! is decoded as its topic's record type and checked against the record's rules by
//! [`crate::codec::Decoding`]; one that fails goes to `dead-letters` from here.

use anyhow::Result;
use rdkafka::producer::BaseRecord;
use serde::{Serialize, Serializer};
use tracing::warn;
use vigil_model::output::RecordType;
use vigil_model::topology::DEAD_LETTERS;
use vigil_stream::Stage;

use super::Runner;

/// The record a bad input becomes on `dead-letters`.
#[derive(Serialize)]
struct DeadLetter<'a> {
    record_type: RecordType,
    source: &'a str,
    partition: i32,
    offset: i64,
    reason: String,
    #[serde(serialize_with = "bytes")]
    payload: &'a [u8],
}

fn bytes<S: Serializer>(b: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(b)
}

impl<S: Stage> Runner<S> {
    pub(super) fn dead_letter(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        reason: String,
        payload: &[u8],
    ) -> Result<()> {
        warn!(topic, partition, offset, %reason, "dead letter");
        self.metrics.dead_letters.inc();
        let letter =
            DeadLetter { record_type: RecordType::DeadLetter, source: topic, partition, offset, reason, payload };
        let value = self.core.encoder().encode(&DEAD_LETTERS, &letter)?;
        self.records_out[DEAD_LETTERS.name].inc();
        self.send(BaseRecord::to(&self.output_topics[DEAD_LETTERS.name].0).key(topic).payload(&value))
    }
}
