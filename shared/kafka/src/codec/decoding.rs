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

#[cfg(test)]
mod tests {
    use vigil_model::topology::{DEVICE_EVENTS, ORDERS};
    use vigil_model::{DeviceEvent, Order};

    use super::*;

    /// No registry is asked: a JSON value needs none.
    fn codec() -> Codec {
        Codec::new("http://127.0.0.1:9").unwrap()
    }

    #[test]
    fn a_plain_json_value_is_read_as_the_seed_writes_it() {
        let line = br#" {"order_id": "order-1", "customer_id": "cust-1", "order_amount": 12.5, "order_ts": 1700000000000, "country": "DE"}"#;
        let order: Order = Decoding::new(&codec(), &ORDERS, line).read().unwrap();
        assert_eq!((order.order_id.as_str(), order.order_amount, order.order_ts), ("order-1", 12.5, 1_700_000_000_000));
    }

    #[test]
    fn json_that_does_not_fit_its_stream_or_breaks_a_rule_is_undecodable_with_the_reason() {
        let wrong = br#"{"device_id": "d", "site_id": "s", "event_type": "explosion", "status": "ok", "event_ts": 1}"#;
        let err = Decoding::new(&codec(), &DEVICE_EVENTS, wrong).read::<DeviceEvent>().unwrap_err().to_string();
        assert!(err.starts_with("not a valid device-events record (JSON): unknown variant `explosion`"), "{err}");
        let negative =
            br#"{"order_id": "o", "customer_id": "c", "order_amount": -1.0, "order_ts": 1, "country": "DE"}"#;
        let err = Decoding::new(&codec(), &ORDERS, negative).read::<Order>().unwrap_err().to_string();
        assert!(err.contains("order_amount"), "{err}");
    }

    #[test]
    fn a_value_that_is_neither_json_nor_framed_avro_is_undecodable() {
        let err = Decoding::new(&codec(), &ORDERS, b"order-1,cust-1,12.5").read::<Order>().unwrap_err();
        assert!(matches!(err, CodecError::Decode(_)), "{err}");
    }
}
