//! Where an input record is produced: its source's topic, and the key that picks its
//! partition there.

use vigil_model::topology::{Topic, DEVICE_EVENTS, ORDERS, PAYMENTS};
use vigil_model::{InputRecord, Source};

pub fn topic_of(source: Source) -> &'static Topic {
    match source {
        Source::Orders => &ORDERS,
        Source::Payments => &PAYMENTS,
        Source::Devices => &DEVICE_EVENTS,
    }
}

/// The input streams' topics, one a source.
pub(super) fn input_topics() -> impl Iterator<Item = &'static Topic> {
    Source::ALL.into_iter().map(topic_of)
}

/// How input records are keyed (and so partitioned) as they are produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Keying {
    /// By the key the stages join on (order_id; site_id for device events), as Vigil's
    /// stages want them: every record lands where its stage reads it directly.
    #[default]
    Join,
    /// No key, as many producers and command-line tools send records: partitions
    /// picked at random, so the stages re-key them through their repartition topics.
    None,
    /// By another field (orders by customer_id, payments by payment_id, device events
    /// by device_id).
    Other,
}

impl Keying {
    pub(super) fn key_of(self, record: &InputRecord) -> Option<&str> {
        match (self, record) {
            (Keying::None, _) => None,
            (Keying::Join, InputRecord::Order(o)) => Some(&o.order_id),
            (Keying::Join, InputRecord::Payment(p)) => Some(&p.order_id),
            (Keying::Join, InputRecord::Device(d)) => Some(&d.site_id),
            (Keying::Other, InputRecord::Order(o)) => Some(&o.customer_id),
            (Keying::Other, InputRecord::Payment(p)) => Some(&p.payment_id),
            (Keying::Other, InputRecord::Device(d)) => Some(&d.device_id),
        }
    }
}

/// How input record values are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Encoding {
    /// Avro in the Confluent wire format, under the topic's registered schema.
    #[default]
    Avro,
    /// A plain JSON object with the seed's field names, as the seed's generator writes.
    Json,
}
