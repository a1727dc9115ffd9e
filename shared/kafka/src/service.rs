//! What makes a stage a Kafka service: its operator, its topics, and how its records
//! map to both. The six stages implement [`Service`] in `stages`.

use vigil_model::output::LatePayment;
use vigil_model::{Config, Millis};
use vigil_stream::changelog::Stateful;
use vigil_stream::Operator;

use crate::codec::{Codec, CodecError};
use crate::topics::{Topic, ENRICHED_PAYMENTS_LATE};

/// Where a service's input comes from, which decides how its watermark is known.
#[derive(Debug, Clone, Copy)]
pub enum InputKind {
    /// Written by users: the watermark trails the records' event times by `bound_ms`.
    Source { bound_ms: Millis },
    /// Written by another Vigil service: the watermark comes in its markers.
    Upstream,
}

#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub topic: Topic,
    pub kind: InputKind,
}

impl Input {
    pub fn is_source(&self) -> bool {
        matches!(self.kind, InputKind::Source { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// One task per input partition; partitions are shared out in a consumer group.
    PerPartition,
    /// One task over every partition (a global aggregate): one active instance.
    Global,
}

impl Parallelism {
    /// The task that processes `partition`.
    pub fn task_of(self, partition: i32) -> i32 {
        match self {
            Parallelism::PerPartition => partition,
            Parallelism::Global => 0,
        }
    }

    /// The partitions task `task` reads, of each input.
    pub fn partitions_of(self, task: i32, partitions: i32) -> Vec<i32> {
        match self {
            Parallelism::PerPartition => vec![task],
            Parallelism::Global => (0..partitions).collect(),
        }
    }
}

/// A record a service writes.
pub struct Outgoing {
    pub topic: Topic,
    pub key: String,
    pub value: Vec<u8>,
}

impl Outgoing {
    /// A payment that reached a payment window after it closed, on the late topic.
    pub fn late_payment(codec: &Codec, late: &LatePayment) -> Result<Self, CodecError> {
        let value = codec.encode(ENRICHED_PAYMENTS_LATE, late)?;
        Ok(Outgoing { topic: ENRICHED_PAYMENTS_LATE, key: late.payment.key().to_string(), value })
    }
}

/// What makes a service: its operator, its topics, and how records map to both.
pub trait Service {
    type Op: Operator + Stateful;

    fn name(&self) -> &'static str;
    fn parallelism(&self) -> Parallelism;
    fn inputs(&self, config: &Config) -> Vec<Input>;
    /// Every topic this service writes records to.
    fn outputs(&self) -> Vec<Topic>;
    /// The outputs other services read, which carry this service's watermark.
    fn watermarked(&self) -> Vec<Topic>;
    fn operator(&self, config: &Config) -> Self::Op;
    fn decode(&self, codec: &Codec, topic: Topic, payload: &[u8]) -> Result<<Self::Op as Operator>::In, CodecError>;
    /// Event time of an input record (used for `Source` inputs).
    fn event_ts(&self, record: &<Self::Op as Operator>::In) -> Millis;
    fn encode(&self, codec: &Codec, output: <Self::Op as Operator>::Out) -> Result<Outgoing, CodecError>;
    /// Whether an output is a late side output (counted in the metrics).
    fn is_late(&self, output: &<Self::Op as Operator>::Out) -> bool;
}
