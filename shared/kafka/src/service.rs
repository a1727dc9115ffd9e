//! What makes a stage a Kafka service: its operator, its topics, and how its records
//! map to both. The six stages implement [`Service`] in `stages`.

use vigil_model::output::LatePayment;
use vigil_model::topology::{self, Bound, EventTime};
use vigil_model::{Config, Millis};
use vigil_stream::changelog::Stateful;
use vigil_stream::Operator;

use crate::codec::{Codec, CodecError};
use crate::topics::{Topic, ENRICHED_PAYMENTS_LATE};

/// Where a service's input comes from, which decides how its watermark is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Written by users: the watermark trails the records' event times by `bound_ms`.
    Source { bound_ms: Millis },
    /// Written by another Vigil service: the watermark comes in its markers.
    Upstream,
    /// The stage's own re-keyed records of source input `source`: the watermark comes
    /// in the markers of the stage's tasks, which write it.
    Repartition { source: usize },
}

#[derive(Debug, Clone)]
pub struct Input {
    /// The Kafka topic read.
    pub name: String,
    /// The topic whose records it holds (a repartition topic holds its source's).
    pub records: Topic,
    pub kind: InputKind,
}

impl Input {
    pub fn is_source(&self) -> bool {
        matches!(self.kind, InputKind::Source { .. })
    }

    pub fn is_repartition(&self) -> bool {
        matches!(self.kind, InputKind::Repartition { .. })
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
    pub fn partitions_of(self, task: i32, partitions: i32) -> std::ops::Range<i32> {
        match self {
            Parallelism::PerPartition => task..task + 1,
            Parallelism::Global => 0..partitions,
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

/// What makes a service: its stage in the topology, its operator, and how records map
/// to both.
pub trait Service {
    /// Sent to a thread of its own while it restores.
    type Op: Operator + Stateful + Send;

    /// The stage as the topology declares it.
    fn spec(&self) -> topology::Stage;
    fn operator(&self, config: &Config) -> Self::Op;
    fn decode(&self, codec: &Codec, topic: Topic, payload: &[u8]) -> Result<<Self::Op as Operator>::In, CodecError>;
    /// Event time of an input record (used for `Source` inputs).
    fn event_ts(&self, record: &<Self::Op as Operator>::In) -> Millis;
    fn encode(&self, codec: &Codec, output: <Self::Op as Operator>::Out) -> Result<Outgoing, CodecError>;
    /// Whether an output is a late side output (counted in the metrics).
    fn is_late(&self, output: &<Self::Op as Operator>::Out) -> bool;
    /// The key a source record must be partitioned by for this stage (its join key):
    /// a record on another partition is re-keyed through the repartition topic.
    fn partition_key<'a>(&self, record: &'a <Self::Op as Operator>::In) -> Option<&'a str>;

    fn name(&self) -> &'static str {
        self.spec().name
    }

    fn parallelism(&self) -> Parallelism {
        if self.spec().global {
            Parallelism::Global
        } else {
            Parallelism::PerPartition
        }
    }

    /// The topics it reads: its inputs as declared, then a repartition topic for each
    /// source input.
    fn inputs(&self, config: &Config) -> Vec<Input> {
        let spec = self.spec();
        let mut inputs: Vec<Input> = spec
            .inputs
            .iter()
            .map(|&(topic, time)| {
                let kind = match time {
                    EventTime::Source(Bound::Payments) => InputKind::Source { bound_ms: config.payment_bound_ms() },
                    EventTime::Source(Bound::Devices) => {
                        InputKind::Source { bound_ms: config.devices.out_of_order_bound_ms as Millis }
                    }
                    EventTime::Upstream => InputKind::Upstream,
                };
                Input { name: topic.name.to_string(), records: topic, kind }
            })
            .collect();
        let repartitioned: Vec<Input> = inputs
            .iter()
            .enumerate()
            .filter(|(_, i)| i.is_source())
            .map(|(source, i)| Input {
                name: topology::repartition(spec.name, i.records.name),
                records: i.records,
                kind: InputKind::Repartition { source },
            })
            .collect();
        inputs.extend(repartitioned);
        inputs
    }

    /// Every topic it writes records to (dead letters aside).
    fn outputs(&self) -> Vec<Topic> {
        self.spec().outputs.to_vec()
    }

    /// The outputs other services read, which carry this service's watermark.
    fn watermarked(&self) -> Vec<Topic> {
        self.spec().watermarked.to_vec()
    }
}
