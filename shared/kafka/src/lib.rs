//! Vigil's Kafka runtime: the same operators as the embedded runtime, each stage's
//! members in a consumer group running an exactly-once consume-transform-produce
//! loop, their state backed by a compacted changelog topic, their records Avro in the
//! Confluent wire format.

pub mod avro_direct;
pub mod cli;
pub mod client_stats;
pub mod codec;
pub mod connection;
pub mod core;
pub mod election;
pub mod epoch;
pub mod group;
pub mod inputs;
pub mod marker_headers;
pub mod metrics;
pub mod names;
pub mod notify;
pub mod observe;
pub mod patience;
pub mod produce;
pub mod queries;
pub mod reset;
pub mod restore;
pub mod runner;
pub mod services;
pub mod settings;
pub mod status;
pub mod supervise;
pub mod tail;
pub mod topics;
