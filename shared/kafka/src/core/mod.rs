//! The pure core of a stage member: its tasks and their operators, the source clocks
//! and upstream watermarks, the input positions, what to commit, how to restore and
//! how to rewind — everything that needs no broker, and no Kafka client's types. The
//! Kafka shell (`runner`) moves records in and out and runs transactions; tests drive
//! the core directly ([`driver`]), as Kafka Streams' TopologyTestDriver drives a
//! topology.
//!
//! A task is one input partition (or all of them, in a global stage). Its state in
//! the changelog is its operator's entries, each keyed by the task and the entry's
//! own key, plus one record of the task's own ([`task`]): its watermarks, its source
//! clocks' progress, its upstream writers' watermarks and its ledger.
//!
//! The shell calls the core in this order, events in and effects out:
//!
//! 1. **Assignment** ([`restore`]): `assign` the partitions the group gave, with
//!    their committed offsets; for each new task `begin_restore`, its changelog
//!    entries through `restoring`, then `finish_restore`, which may correct where a
//!    partition is read from. `revoke_all` when the group takes them away.
//! 2. **Input** ([`input`]): `on_input` for every message of an assigned partition,
//!    at its offset. It says what became of the record ([`Handling`]: processed,
//!    rerouted through a repartition topic, or held back); `take_outputs` gives what
//!    the operators wrote, encoded.
//! 3. **Idleness** ([`idleness`]): `mark_idle` for a partition the shell found read
//!    to its end and silent ([`idle_check`] says when); `take_woken` for idle
//!    partitions to watch again; `to_verify` and `verified` for the generations a
//!    task must answer with the broker's word that its input is read to its end.
//! 4. **Flow** ([`flow`]): `flow` says which partitions to pause, rewind and resume.
//! 5. **Commit** ([`commit`]): [`commit_policy`] says when; `prepare_commit` gives
//!    the markers, changelog writes and offsets of the transaction; then `committed`,
//!    or `abort` (restore the tasks it lists, read the partitions again from
//!    `committed_offset`).

pub mod commit;
pub mod commit_policy;
pub mod driver;
pub mod flow;
pub mod idle_check;
pub mod idleness;
pub mod input;
pub mod keying;
pub mod markers;
pub mod merge;
mod per_slot;
mod query;
pub mod restore;
pub mod task;
pub mod watermarks;

use std::collections::{BTreeMap, BTreeSet};

use vigil_model::topology::Topic;
use vigil_model::{Config, Millis, Record, Text};
use vigil_stream::changelog::StateError;
use vigil_stream::changelog::Stateful;
use vigil_stream::partition::Partitioner;
use vigil_stream::source_clock::{Idleness, SourceClock};
use vigil_stream::stage::In;
use vigil_stream::stage::Out;
use vigil_stream::watermark::{BoundedOutOfOrderness, NO_WATERMARK};
use vigil_stream::{Stage, WriteRecord};

use crate::inputs::{self, Input, InputKind, Parallelism};
use crate::status::TaskStatus;
pub use commit::{ChangelogWrite, CommitBatch, Rewind};
pub use flow::Flow;
pub use markers::{Marker, UpstreamWatermarks};
use merge::Merge;
pub use merge::Stamp;
use per_slot::PerSlot;
pub use restore::{changelog_key, entry_of, Correction, RestoredTask, TaskRestore};
use task::TaskState;

/// One input partition: (input index, partition).
pub type Slot = (usize, i32);

/// What an input partition delivered, decoded by the shell.
pub enum Incoming<In> {
    Record {
        record: In,
        event_ts: Millis,
        /// A source record's producer stamp (its partition and offset are the core's
        /// to set); a forwarded record's origin (`None`: forwarded before stamps
        /// existed, processed as it comes).
        stamp: Option<Stamp>,
    },
    Marker(Marker),
    /// Not a record of the input's schema: the shell sends it to the dead letters.
    Undecodable,
}

/// What became of an input message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handling {
    /// Processed here (or it was a marker, or undecodable).
    Processed,
    /// Not on the partition of its key: the shell writes its bytes to repartition input
    /// `input`, partition `partition`, under `key`, where this stage reads it again.
    /// `origin` goes with it, for the merge at its key's task ([`merge`]).
    Reroute { input: usize, partition: i32, key: String, origin: Stamp },
    /// Read before a restart and forwarded then: nothing to do, nothing to count.
    Seen,
    /// Not processed yet (its task waits for its repartition writers): the shell sends
    /// nothing for it (no dead letter either), and, if `seek` says so, pauses the
    /// partition and reads it again from there once [`TaskCore::flow`] resumes it.
    Held { seek: Option<i64> },
}

/// How the shell encodes an output record as a Kafka record's value.
pub trait Encode {
    type Error: std::error::Error + Send + Sync + 'static;
    fn encode<T: Record>(&self, topic: &'static Topic, record: &T) -> Result<Vec<u8>, Self::Error>;
}

/// An output of a task's operator, encoded: what the shell produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    pub topic: &'static Topic,
    pub key: Text,
    pub value: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("a record arrived for partition {partition} of input {input}, which this member was not given")]
    NotAssigned { input: usize, partition: i32 },
    #[error("cannot restore task {task}: {source}")]
    Restore { task: i32, source: StateError },
}

pub struct TaskCore<S: Stage, E: Encode> {
    stage: S,
    encoder: E,
    /// The first output that could not be encoded since the last `take_outputs`.
    failed: Option<E::Error>,
    config: Config,
    parallelism: Parallelism,
    partitions: i32,
    partitioner: Partitioner,
    inputs: Vec<Input>,
    clocks: Vec<Option<SourceClock>>,
    upstream: Vec<Option<UpstreamWatermarks>>,
    tasks: BTreeMap<i32, TaskState<S::Op>>,
    positions: BTreeMap<Slot, i64>,
    committed: BTreeMap<Slot, i64>,
    dirty: bool,
    scratch: Vec<Out<S>>,
    outputs: Vec<Emitted>,
    /// Input partitions held back: running ahead of their task, or waiting for it to
    /// hear from its repartition writers.
    paused: BTreeSet<Slot>,
    /// Where each held-back source partition is to be read again from.
    held: BTreeMap<Slot, i64>,
    /// How far each held-back source partition has been looked at (records looked at
    /// while their task is undecided count towards its decision, once).
    looked: BTreeMap<Slot, i64>,
    max_skew_ms: Millis,
    /// How long after its last rerouted record a task still counts as forwarding.
    forwarding_ms: Millis,
    /// Idle source partitions woken since the shell last asked (see `resume`).
    woken: Vec<Slot>,
    /// Per source partition, the last record read and not held: how far its task's
    /// markers on the repartition topics say it has forwarded.
    read_to: PerSlot<Stamp>,
    /// Per source partition restored, how far it had been read at the commit: records
    /// below, read again, were forwarded then (see `commit_position`).
    seen_to: BTreeMap<Slot, i64>,
    /// Per source partition, the `read_to` its task's last markers said.
    sent_read_to: BTreeMap<Slot, Stamp>,
    /// Per input, the repartition input that carries its records (source inputs).
    repartitions: Vec<Option<usize>>,
    /// Per repartition partition, the records forwarded to its task, in their merge.
    merges: PerSlot<Merge<In<S>>>,
    /// Per repartition partition, the clock of its task's key partition: every
    /// record of the source input it processed, in place or forwarded.
    key_clocks: PerSlot<BoundedOutOfOrderness>,
    /// The input offsets the last `prepare_commit` gave.
    to_commit: BTreeMap<Slot, i64>,
    /// Records released by a merge below the last it released (see [`merge`]).
    out_of_order: u64,
}

/// How a task's outputs are written in the core: encoded at once, with their topic.
struct Encoding<'a, E>(&'a E);

impl<E: Encode> WriteRecord for Encoding<'_, E> {
    type Written = Result<Emitted, E::Error>;

    fn write<T: Record>(self, topic: &'static Topic, key: Text, record: T) -> Self::Written {
        Ok(Emitted { topic, key, value: self.0.encode(topic, &record)? })
    }
}

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// The core of a member of `stage`, with no task yet; `encoder` gives the
    /// operators' outputs the bytes the shell writes.
    pub fn new(stage: S, config: Config, encoder: E) -> Self {
        let partitions = config.runtime.partitions as i32;
        let max_skew_ms = config.runtime.max_partition_skew_ms as Millis;
        let forwarding_ms = config.runtime.idle_timeout_ms as Millis;
        let topology = stage.topology();
        let inputs = inputs::inputs(&topology, &config);
        let repartitions = (0..inputs.len())
            .map(|s| inputs.iter().position(|i| i.kind == InputKind::Repartition { source: s }))
            .collect();
        let mut core = TaskCore {
            parallelism: Parallelism::of(&topology),
            stage,
            encoder,
            failed: None,
            config,
            partitions,
            partitioner: Partitioner::new(partitions as u32),
            inputs,
            clocks: Vec::new(),
            upstream: Vec::new(),
            tasks: BTreeMap::new(),
            positions: BTreeMap::new(),
            committed: BTreeMap::new(),
            dirty: false,
            scratch: Vec::new(),
            outputs: Vec::new(),
            paused: BTreeSet::new(),
            held: BTreeMap::new(),
            looked: BTreeMap::new(),
            max_skew_ms,
            forwarding_ms,
            woken: Vec::new(),
            read_to: PerSlot::new(0, 0),
            seen_to: BTreeMap::new(),
            sent_read_to: BTreeMap::new(),
            repartitions,
            merges: PerSlot::new(0, 0),
            key_clocks: PerSlot::new(0, 0),
            to_commit: BTreeMap::new(),
            out_of_order: 0,
        };
        let slots = (core.inputs.len(), partitions as usize);
        (core.read_to, core.merges, core.key_clocks) =
            (PerSlot::new(slots.0, slots.1), PerSlot::new(slots.0, slots.1), PerSlot::new(slots.0, slots.1));
        core.reset_clocks();
        core
    }

    pub fn stage(&self) -> &S {
        &self.stage
    }

    pub fn encoder(&self) -> &E {
        &self.encoder
    }

    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    pub fn tasks(&self) -> impl Iterator<Item = i32> + '_ {
        self.tasks.keys().copied()
    }

    /// The next offset of an input partition not yet read (records looked at and
    /// held count as read), if known.
    pub fn position(&self, slot: Slot) -> Option<i64> {
        let looked = self.looked.get(&slot).copied();
        self.positions.get(&slot).copied().max(looked)
    }

    /// The offset of the next record of an input partition to count: every record
    /// before it has been counted (processed since the last commit, or committed).
    pub fn next_to_count(&self, slot: Slot) -> Option<i64> {
        self.positions.get(&slot).copied()
    }

    /// Every input partition, as (input index, partition), of the whole stage.
    pub fn all_slots(&self) -> Vec<Slot> {
        (0..self.inputs.len()).flat_map(|i| (0..self.partitions).map(move |p| (i, p))).collect()
    }

    /// A task's input partitions, input by input; borrows nothing, so the caller may
    /// change the core meanwhile (and nothing is allocated: it runs for every record).
    fn slots_of(&self, task: i32) -> impl Iterator<Item = Slot> + use<S, E> {
        let ps = self.parallelism.partitions_of(task, self.partitions);
        (0..self.inputs.len()).flat_map(move |i| ps.clone().map(move |p| (i, p)))
    }

    fn reset_clocks(&mut self) {
        let n = self.partitions as u32;
        self.clocks = self
            .inputs
            .iter()
            .map(|i| match i.kind {
                InputKind::Source { bound_ms } => Some(SourceClock::new(n, bound_ms, Idleness::Marked)),
                InputKind::Upstream | InputKind::Repartition { .. } => None,
            })
            .collect();
        // Every writing task writes every partition; there is one per partition (of
        // the upstream stage, or of this one for its repartition topics).
        self.upstream = self.inputs.iter().map(|i| (!i.is_source()).then(|| UpstreamWatermarks::new(n, n))).collect();
    }

    /// Every task as last committed.
    pub fn task_statuses(&self) -> Vec<TaskStatus> {
        self.tasks
            .iter()
            .map(|(&task, t)| TaskStatus {
                task,
                watermark_ms: (t.task.watermark() != NO_WATERMARK).then_some(t.task.watermark()),
                idle: t.idle,
                ledger: t.committed_ledger,
            })
            .collect()
    }

    /// Records a merge released below the last it released, since the start.
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Forwarded records waiting in a merge for their turn.
    pub fn held_for_order(&self) -> usize {
        self.merges.values().map(Merge::held).sum()
    }

    /// Entries of keyed state over every task.
    pub fn live_entries(&self) -> usize {
        self.tasks.values().map(|t| t.task.operator.live_entries()).sum()
    }
}
