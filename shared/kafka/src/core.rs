//! The pure core of a stage member: its tasks and their operators, the source clocks
//! and upstream watermarks, the input positions, what to commit, how to restore and
//! how to rewind — everything that needs no broker. The Kafka shell (`runner`) moves
//! records in and out and runs transactions; tests drive the core directly, as Kafka
//! Streams' TopologyTestDriver drives a topology: records, markers, commits, aborts
//! and rebalances in; outputs, markers, changelog writes and offsets out.
//!
//! A task is one input partition (or all of them, in a global stage). Its state in
//! the changelog is its operator's entries, each keyed by the task and the entry's
//! own key, plus one record of the task's own: its watermarks, its source clocks'
//! progress, its upstream writers' watermarks and its ledger.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vigil_model::{Config, Millis};
use vigil_stream::changelog::{decode_value, Scalar, StateError, StateWrite, Stateful};
use vigil_stream::source_clock::{Idleness, Progress, SourceClock};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Operator;

use crate::markers::{Marker, UpstreamWatermarks, Writer};
use crate::service::{Input, InputKind, Parallelism, Service};
use crate::status::{Ledger, TaskStatus};

/// The entry key of a task's own record in the changelog (operators' namespaces are
/// small numbers; this one is theirs to never use).
const TASK_RECORD: u8 = 0xFF;

/// One input partition: (input index, partition).
pub type Slot = (usize, i32);

/// What an input partition delivered, decoded by the shell.
pub enum Incoming<In> {
    Record {
        record: In,
        event_ts: Millis,
    },
    Marker(Marker),
    /// Not a record of the input's schema: the shell sends it to the dead letters.
    Undecodable,
}

/// An output of a task's operator.
pub struct Emitted<Out> {
    pub task: i32,
    pub output: Out,
    /// A late side output.
    pub late: bool,
}

/// A changelog record: its partition, its key (task and entry), its value or a
/// tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogWrite {
    pub partition: i32,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Everything a commit writes besides the outputs already sent.
#[derive(Debug, Default)]
pub struct CommitBatch {
    /// Markers for every partition of the watermarked topics.
    pub markers: Vec<Marker>,
    pub changelog: Vec<ChangelogWrite>,
    /// The next offset to read of each input partition.
    pub offsets: Vec<(Slot, i64)>,
}

impl CommitBatch {
    pub fn changelog_bytes(&self) -> u64 {
        self.changelog.iter().map(|w| (w.key.len() + w.value.as_ref().map_or(0, Vec::len)) as u64).sum()
    }
}

/// Where to read from after an abort (`None`: from the beginning), and the tasks to
/// restore from their changelog first.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rewind {
    pub tasks: Vec<i32>,
    pub seeks: Vec<(Slot, Option<i64>)>,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("a record arrived for partition {partition} of input {input}, which this member was not given")]
    NotAssigned { input: usize, partition: i32 },
    #[error("cannot restore task {task}: {source}")]
    Restore { task: i32, source: StateError },
}

struct Task<O> {
    operator: O,
    input_watermark: Millis,
    sent_watermark: Millis,
    /// Every input is idle: the task says so downstream instead of holding it back.
    idle: bool,
    sent_idle: bool,
    ledger: Ledger,
    committed_ledger: Ledger,
    /// The task record as last written, so an unchanged one is not written again.
    written: Scalar,
}

/// A task's own record in the changelog.
#[derive(Debug, Serialize, Deserialize)]
struct TaskRecord {
    input_watermark: Millis,
    sent_watermark: Millis,
    sent_idle: bool,
    /// (input index, partition, progress) of source inputs.
    sources: Vec<(usize, i32, Progress)>,
    /// (input index, partition, writers) of upstream inputs.
    upstream: Vec<(usize, i32, Vec<Writer>)>,
    ledger: Ledger,
}

pub struct TaskCore<S: Service> {
    service: S,
    config: Config,
    parallelism: Parallelism,
    partitions: i32,
    inputs: Vec<Input>,
    clocks: Vec<Option<SourceClock>>,
    upstream: Vec<Option<UpstreamWatermarks>>,
    tasks: BTreeMap<i32, Task<S::Op>>,
    positions: BTreeMap<Slot, i64>,
    committed: BTreeMap<Slot, i64>,
    dirty: bool,
    scratch: Vec<<S::Op as Operator>::Out>,
    outputs: Vec<Emitted<<S::Op as Operator>::Out>>,
}

impl<S: Service> TaskCore<S> {
    pub fn new(service: S, config: Config) -> Self {
        let partitions = config.runtime.partitions as i32;
        let inputs = service.inputs(&config);
        let mut core = TaskCore {
            parallelism: service.parallelism(),
            service,
            config,
            partitions,
            inputs,
            clocks: Vec::new(),
            upstream: Vec::new(),
            tasks: BTreeMap::new(),
            positions: BTreeMap::new(),
            committed: BTreeMap::new(),
            dirty: false,
            scratch: Vec::new(),
            outputs: Vec::new(),
        };
        core.reset_clocks();
        core
    }

    pub fn service(&self) -> &S {
        &self.service
    }

    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// Whether anything changed since the last commit.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    pub fn tasks(&self) -> impl Iterator<Item = i32> + '_ {
        self.tasks.keys().copied()
    }

    /// The next offset to read of an input partition, if known.
    pub fn position(&self, slot: Slot) -> Option<i64> {
        self.positions.get(&slot).copied()
    }

    /// Every input partition, as (input index, partition), of the whole stage.
    pub fn all_slots(&self) -> Vec<Slot> {
        (0..self.inputs.len()).flat_map(|i| (0..self.partitions).map(move |p| (i, p))).collect()
    }

    fn slots_of(&self, task: i32) -> Vec<Slot> {
        let ps = self.parallelism.partitions_of(task, self.partitions);
        (0..self.inputs.len()).flat_map(|i| ps.iter().map(move |&p| (i, p))).collect()
    }

    fn reset_clocks(&mut self) {
        let n = self.partitions as u32;
        self.clocks = self
            .inputs
            .iter()
            .map(|i| match i.kind {
                InputKind::Source { bound_ms } => Some(SourceClock::new(n, bound_ms, Idleness::Marked)),
                InputKind::Upstream => None,
            })
            .collect();
        // Every upstream task writes every partition; there is one per partition.
        self.upstream = self
            .inputs
            .iter()
            .map(|i| matches!(i.kind, InputKind::Upstream).then(|| UpstreamWatermarks::new(n, n)))
            .collect();
    }

    // --- assignment and restore -------------------------------------------------------

    /// New partitions, with the offsets their group committed: the tasks that must now
    /// be restored from their changelog (each then needs `begin_restore`, its entries,
    /// and `finish_restore`).
    pub fn assign(&mut self, slots: &[Slot], committed: &[(Slot, Option<i64>)]) -> Vec<i32> {
        for &(slot, offset) in committed {
            if let Some(o) = offset {
                self.committed.insert(slot, o);
                self.positions.insert(slot, o);
            }
        }
        let mut new: Vec<i32> = slots.iter().map(|&(_, p)| self.parallelism.task_of(p)).collect();
        new.sort_unstable();
        new.dedup();
        new.retain(|t| !self.tasks.contains_key(t));
        new
    }

    /// Every partition taken away: nothing of them is kept (their next owner restores
    /// them from the changelog and redoes the uncommitted work).
    pub fn revoke_all(&mut self) {
        self.tasks.clear();
        self.positions.clear();
        self.committed.clear();
        self.outputs.clear();
        self.dirty = false;
        self.reset_clocks();
    }

    /// A fresh task, its partitions' clocks and upstream watermarks back to nothing:
    /// what it knew comes back from its changelog, or it starts over.
    pub fn begin_restore(&mut self, task: i32) {
        let mut operator = self.service.operator(&self.config);
        operator.track_changes();
        for (input, p) in self.slots_of(task) {
            if let Some(clock) = &mut self.clocks[input] {
                clock.restore(p as usize, Progress::default());
                clock.mark_idle(p as usize, false);
            }
            if let Some(u) = &mut self.upstream[input] {
                u.reset_partition(p as usize);
            }
        }
        let task_state = Task {
            operator,
            input_watermark: NO_WATERMARK,
            sent_watermark: NO_WATERMARK,
            idle: false,
            sent_idle: false,
            ledger: Ledger::default(),
            committed_ledger: Ledger::default(),
            written: Scalar::default(),
        };
        self.tasks.insert(task, task_state);
    }

    /// One changelog entry of `task` (its key without the task prefix).
    pub fn restore_entry(&mut self, task: i32, key: &[u8], value: Option<&[u8]>) -> Result<(), CoreError> {
        let restore = |source| CoreError::Restore { task, source };
        if key == [TASK_RECORD] {
            let Some(bytes) = value else { return Ok(()) };
            let record: TaskRecord = decode_value(bytes).map_err(restore)?;
            self.apply_task_record(task, record, bytes);
            return Ok(());
        }
        let t = self.tasks.get_mut(&task).expect("begin_restore comes first");
        t.operator.restore_entry(key, value).map_err(restore)
    }

    fn apply_task_record(&mut self, task: i32, r: TaskRecord, bytes: &[u8]) {
        for (input, p, progress) in r.sources {
            if let Some(Some(clock)) = self.clocks.get_mut(input) {
                clock.restore(p as usize, progress);
                // Idle when committed: still idle until a record says otherwise, so a
                // takeover does not hold every reader back for another idle timeout.
                clock.mark_idle(p as usize, r.sent_idle);
            }
        }
        for (input, p, writers) in r.upstream {
            if let Some(Some(u)) = self.upstream.get_mut(input) {
                u.restore_partition(p as usize, writers);
            }
        }
        let t = self.tasks.get_mut(&task).expect("begin_restore comes first");
        t.input_watermark = r.input_watermark;
        t.sent_watermark = r.sent_watermark;
        t.idle = r.sent_idle;
        t.sent_idle = r.sent_idle;
        t.ledger = r.ledger;
        t.committed_ledger = r.ledger;
        t.written.restored(bytes);
    }

    pub fn finish_restore(&mut self, task: i32) {
        if let Some(t) = self.tasks.get_mut(&task) {
            t.operator.finish_restore();
        }
    }

    // --- processing -------------------------------------------------------------------

    /// One message of an input partition, at `offset`.
    pub fn on_input(
        &mut self,
        slot: Slot,
        offset: i64,
        incoming: Incoming<<S::Op as Operator>::In>,
    ) -> Result<(), CoreError> {
        let (input, partition) = slot;
        let id = self.parallelism.task_of(partition);
        if !self.tasks.contains_key(&id) {
            return Err(CoreError::NotAssigned { input, partition });
        }
        self.positions.insert(slot, offset + 1);
        self.dirty = true;
        match incoming {
            Incoming::Marker(marker) => self.on_marker(slot, marker),
            Incoming::Undecodable => {
                let task = self.tasks.get_mut(&id).expect("checked above");
                task.ledger.read += 1;
                task.ledger.dead_letters += 1;
                task.ledger.written += 1;
            }
            Incoming::Record { record, event_ts } => {
                let task = self.tasks.get_mut(&id).expect("checked above");
                task.ledger.read += 1;
                task.operator.on_record(record, &mut self.scratch);
                // A record is late if the operator sent it to a late side output.
                if self.scratch.iter().any(|o| self.service.is_late(o)) {
                    task.ledger.late += 1;
                } else {
                    task.ledger.on_time += 1;
                }
                if let Some(clock) = &mut self.clocks[input] {
                    clock.observe(partition as usize, event_ts);
                }
                self.collect(id);
            }
        }
        self.advance_watermarks();
        Ok(())
    }

    fn on_marker(&mut self, (input, p): Slot, marker: Marker) {
        match (&mut self.clocks[input], &mut self.upstream[input], marker.task) {
            (Some(clock), _, None) if marker.watermark == Millis::MAX => clock.finish_partition(p as usize),
            (_, Some(u), Some(writer)) => u.update(p as usize, writer, marker.watermark, marker.idle),
            _ => tracing::warn!(partition = p, ?marker, "ignoring a watermark marker this input does not expect"),
        }
    }

    /// A source partition with nothing to read for a while (the shell's judgement):
    /// its task leaves it out until its next record.
    pub fn mark_idle(&mut self, (input, p): Slot) {
        let changed = match &mut self.clocks[input] {
            Some(clock) => clock.mark_idle(p as usize, true),
            None => false,
        };
        if changed {
            self.advance_watermarks();
        }
    }

    /// Gives every task the watermark of its input partitions, if it moved.
    fn advance_watermarks(&mut self) {
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        for id in ids {
            // Idle inputs are left out; a task whose inputs are all idle is idle itself.
            let active: Vec<Millis> = self
                .slots_of(id)
                .into_iter()
                .filter_map(|(i, p)| match (&self.clocks[i], &self.upstream[i]) {
                    (Some(clock), _) => clock.partition_watermark(p as usize),
                    (_, Some(u)) => u.watermark(p as usize),
                    _ => Some(NO_WATERMARK),
                })
                .collect();
            let task = self.tasks.get_mut(&id).expect("a listed task");
            let idle = active.is_empty();
            if idle != task.idle {
                task.idle = idle;
                self.dirty = true;
            }
            let watermark = active.into_iter().min().unwrap_or(task.input_watermark);
            if watermark > task.input_watermark {
                task.input_watermark = watermark;
                task.operator.on_watermark(watermark, &mut self.scratch);
                self.dirty = true;
                self.collect(id);
            }
        }
    }

    fn collect(&mut self, task: i32) {
        let outputs = &mut self.outputs;
        let service = &self.service;
        let t = self.tasks.get_mut(&task).expect("a listed task");
        t.ledger.written += self.scratch.len() as u64;
        outputs.extend(self.scratch.drain(..).map(|output| Emitted { task, late: service.is_late(&output), output }));
    }

    /// What the operators emitted since the last call, in order.
    pub fn take_outputs(&mut self) -> std::vec::Drain<'_, Emitted<<S::Op as Operator>::Out>> {
        self.outputs.drain(..)
    }

    // --- commit and abort -------------------------------------------------------------

    /// The markers, changelog writes and offsets of a commit. Calling it again before
    /// [`TaskCore::committed`] or [`TaskCore::abort`] gives only what changed since.
    pub fn prepare_commit(&mut self) -> CommitBatch {
        let mut batch = CommitBatch::default();
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        let mut writes = Vec::new();
        for id in ids {
            let record = self.task_record(id);
            let partition = id % self.partitions;
            let task = self.tasks.get_mut(&id).expect("a listed task");
            let out_watermark = task.operator.output_watermark();
            if out_watermark > task.sent_watermark || task.idle != task.sent_idle {
                batch.markers.push(Marker { task: Some(id as u32), watermark: out_watermark, idle: task.idle });
                task.sent_watermark = task.sent_watermark.max(out_watermark);
                task.sent_idle = task.idle;
            }
            task.operator.drain_changes(&mut writes);
            let record = TaskRecord { sent_watermark: task.sent_watermark, sent_idle: task.sent_idle, ..record };
            task.written.write_if_changed(vec![TASK_RECORD], &record, &mut writes);
            batch.changelog.extend(writes.drain(..).map(|StateWrite { key, value }| ChangelogWrite {
                partition,
                key: changelog_key(id, &key),
                value,
            }));
        }
        batch.offsets = self.positions.iter().map(|(&slot, &next)| (slot, next)).collect();
        batch
    }

    fn task_record(&self, id: i32) -> TaskRecord {
        let task = &self.tasks[&id];
        let mut record = TaskRecord {
            input_watermark: task.input_watermark,
            sent_watermark: task.sent_watermark,
            sent_idle: task.sent_idle,
            sources: Vec::new(),
            upstream: Vec::new(),
            ledger: task.ledger,
        };
        for (i, p) in self.slots_of(id) {
            if let Some(clock) = &self.clocks[i] {
                record.sources.push((i, p, clock.progress(p as usize)));
            }
            if let Some(u) = &self.upstream[i] {
                record.upstream.push((i, p, u.partition(p as usize)));
            }
        }
        record
    }

    /// The transaction committed: what it wrote is the state to come back to.
    pub fn committed(&mut self) {
        self.committed = self.positions.clone();
        for task in self.tasks.values_mut() {
            task.committed_ledger = task.ledger;
        }
        self.dirty = false;
    }

    /// The transaction was aborted: every task goes back to what its changelog holds
    /// (the shell restores the tasks listed), every input to its committed offset.
    pub fn abort(&mut self) -> Rewind {
        let tasks: Vec<i32> = self.tasks.keys().copied().collect();
        let mut seeks: Vec<(Slot, Option<i64>)> =
            self.positions.keys().map(|slot| (*slot, self.committed.get(slot).copied())).collect();
        seeks.sort_unstable();
        self.positions = self.committed.clone();
        self.outputs.clear();
        self.dirty = false;
        for &task in &tasks {
            self.begin_restore(task);
        }
        Rewind { tasks, seeks }
    }

    // --- reporting --------------------------------------------------------------------

    /// Every task as last committed.
    pub fn task_statuses(&self) -> Vec<TaskStatus> {
        self.tasks
            .iter()
            .map(|(&task, t)| TaskStatus {
                task,
                watermark_ms: (t.input_watermark != NO_WATERMARK).then_some(t.input_watermark),
                idle: t.idle,
                ledger: t.committed_ledger,
            })
            .collect()
    }

    /// The lowest input watermark over the tasks that have one.
    pub fn lowest_watermark(&self) -> Option<Millis> {
        self.tasks.values().map(|t| t.input_watermark).filter(|&w| w != NO_WATERMARK && w != Millis::MAX).min()
    }

    /// Entries of keyed state over every task.
    pub fn live_entries(&self) -> usize {
        self.tasks.values().map(|t| t.operator.live_entries()).sum()
    }
}

/// A changelog record's key: the task, then the entry's key.
pub fn changelog_key(task: i32, entry: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(4 + entry.len());
    key.extend_from_slice(&(task as u32).to_be_bytes());
    key.extend_from_slice(entry);
    key
}

/// The entry key of a changelog record of `task`, or `None` if it belongs to another.
pub fn entry_of(task: i32, key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&(task as u32).to_be_bytes()[..])
}
