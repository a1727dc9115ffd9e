//! What a stage's member reads on Kafka: its inputs as the topology declares them,
//! then a repartition topic for each source input, and how its tasks map to their
//! partitions.

use vigil_model::topology::{self, EventTime, StageTopology, Topic};
use vigil_model::{Config, Millis};

/// Where an input comes from, which decides how its watermark is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Written by users: the watermark trails the records' event times by `bound_ms`.
    Source { bound_ms: Millis },
    /// Written by another stage: the watermark comes in its markers.
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
    pub records: &'static Topic,
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

/// The topics a stage reads: its inputs as declared (at their indexes in the
/// topology), then a repartition topic for each source input.
pub fn inputs(stage: &StageTopology, config: &Config) -> Vec<Input> {
    let mut inputs: Vec<Input> = stage
        .inputs
        .iter()
        .map(|&(topic, time)| {
            let kind = match time {
                EventTime::Source(bound) => InputKind::Source { bound_ms: bound.ms(config) },
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
            name: topology::repartition(stage.name, i.records.name),
            records: i.records,
            kind: InputKind::Repartition { source },
        })
        .collect();
    inputs.extend(repartitioned);
    inputs
}

/// Input `input`'s index in the stage's topology: a repartition topic's records are
/// its source's.
pub fn declared(inputs: &[Input], input: usize) -> usize {
    match inputs[input].kind {
        InputKind::Repartition { source } => source,
        InputKind::Source { .. } | InputKind::Upstream => input,
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
    pub fn of(stage: &StageTopology) -> Self {
        if stage.global {
            Parallelism::Global
        } else {
            Parallelism::PerPartition
        }
    }

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
