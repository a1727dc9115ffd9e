//! Vigil's Kafka runtime: the same operators as the embedded runtime, each service a
//! consumer-group member running an exactly-once consume-transform-produce loop, its
//! state backed by a compacted changelog topic, its records Avro in the Confluent
//! wire format.

pub mod cli;
pub mod codec;
pub mod markers;
pub mod observe;
pub mod produce;
pub mod runner;
pub mod tail;
pub mod topics;
