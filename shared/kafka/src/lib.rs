//! Vigil's Kafka runtime: the same operators as the embedded runtime, each stage's
//! members in a consumer group running an exactly-once consume-transform-produce
//! loop, their state backed by a compacted changelog topic, their records Avro in the
//! Confluent wire format.

pub mod cli;
pub mod codec;
pub mod election;
pub mod markers;
pub mod metrics;
pub mod observe;
pub mod produce;
pub mod runner;
pub mod stages;
pub mod status;
pub mod tail;
pub mod topics;
