//! Writing to Kafka. Input records, as the generator writes them and as users'
//! producers would: Avro values under the input topics' schemas, keyed so
//! co-partitioned topics line up (orders and payments by order_id, device events by
//! site_id). And the producer queue every writer here shares (`queue`).
//!
//! The input producer (`input_producer`), where a record goes (`keying`), its
//! delivery reports (`reports`), and a stalled client's replacement (`stall`) each
//! have a file of their own.

mod input_producer;
mod keying;
mod queue;
mod reports;
mod stall;

pub use input_producer::InputProducer;
pub use keying::{topic_of, Encoding, Keying};
pub use queue::Kafka;
pub(crate) use queue::{await_deliveries, send};
