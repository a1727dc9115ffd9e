//! A message value read as a stage reads it: decoded as the record type the stage
//! asks for, then checked against that record's rules. The Kafka runtime reads every
//! input this way; whoever wants to know what a stage would make of a value (a fuzz
//! target, a tool) reads it the same way.

use serde::de::DeserializeOwned;
use vigil_model::topology::Topic;
use vigil_model::Record;
use vigil_stream::ReadRecord;

use super::{Codec, CodecError};

/// How a stage reads a message's value: decoded as the record type it asks for.
/// A value that is not a valid record of that type is a [`CodecError::Decode`].
pub struct Decoding<'a> {
    codec: &'a Codec,
    topic: &'static Topic,
    payload: &'a [u8],
}

impl<'a> Decoding<'a> {
    /// `payload`, a value of `topic`'s records (on a repartition topic, its source
    /// topic's), to be decoded by `codec`.
    pub fn new(codec: &'a Codec, topic: &'static Topic, payload: &'a [u8]) -> Self {
        Decoding { codec, topic, payload }
    }
}

impl ReadRecord for Decoding<'_> {
    type Error = CodecError;

    fn read<T: Record + DeserializeOwned>(self) -> Result<T, CodecError> {
        let record: T = self.codec.decode(self.topic, self.payload)?;
        record.check().map_err(|e| CodecError::Decode(e.0))?;
        Ok(record)
    }
}
