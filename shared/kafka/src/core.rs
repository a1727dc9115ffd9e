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

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use vigil_model::{Config, Millis};
use vigil_stream::changelog::{decode_value, Scalar, StateError, StateWrite, Stateful};
use vigil_stream::partition::partition_for;
use vigil_stream::source_clock::{Idleness, Progress, SourceClock};
use vigil_stream::watermark::{END_OF_TIME, NO_WATERMARK};
use vigil_stream::Operator;

use crate::markers::{Marker, UpstreamWatermarks, Writer};
use crate::service::{Input, InputKind, Parallelism, Service};
use crate::status::{Ledger, TaskStatus};

/// The entry key of a task's own record in the changelog (operators' namespaces are
/// small numbers; this one is theirs to never use).
const TASK_RECORD: u8 = 0xFF;

/// How many records in a row a task must find on the partition of their key before it
/// says it forwards nothing (see [`TaskCore::on_input`]). Input keyed any other way
/// is off its key's partition (n-1) times in n, so eight in a row in place by chance
/// happen about once in 65 000 tasks with 4 partitions.
const IN_PLACE_TO_DECIDE: u32 = 8;

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

/// What became of an input record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// Processed here (or it was a marker, or undecodable).
    Done,
    /// Not on the partition of its key: the shell writes its bytes to repartition input
    /// `input`, partition `partition`, under `key`, where this stage reads it again.
    Reroute { input: usize, partition: i32, key: String },
    /// Not processed yet (its task waits for its repartition writers): the shell sends
    /// nothing for it (no dead letter either), and, if `seek` says so, pauses the
    /// partition and reads it again from there once [`TaskCore::flow`] resumes it.
    Held { seek: Option<i64> },
}

/// What a source message says of how the input is keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    InPlace,
    /// Off its key's partition; its event time.
    Off(Millis),
    /// The partition ended.
    Ended,
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
    /// Markers for every partition of this stage's repartition topics.
    pub repartition_markers: Vec<Marker>,
    pub changelog: Vec<ChangelogWrite>,
    /// The next offset to read of each input partition.
    pub offsets: Vec<(Slot, i64)>,
}

impl CommitBatch {
    pub fn changelog_bytes(&self) -> u64 {
        self.changelog.iter().map(|w| (w.key.len() + w.value.as_ref().map_or(0, Vec::len)) as u64).sum()
    }
}

/// What an abort undoes: the tasks to restore from their changelog, then the input
/// partitions to read again from their committed offsets
/// ([`TaskCore::committed_offset`], known once the tasks are restored).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rewind {
    pub tasks: Vec<i32>,
    pub slots: Vec<Slot>,
}

/// An input partition whose offset committed with its task's state (in the
/// changelog) is not the one the shell believed committed: the group's offset
/// commit, or a commit reported failed. Offsets and state are written in one
/// transaction, but an offset commit of an earlier, aborted transaction can still
/// land after it (librdkafka lacks KIP-890), and a commit that timed out may have
/// completed. The state's offset wins: reading from anywhere else would judge
/// records against state that has, or has not yet, seen them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Correction {
    pub slot: Slot,
    pub believed: Option<i64>,
    pub changelog: i64,
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
    /// What the task last said on the repartition topics: its source watermark.
    sent_source_watermark: Millis,
    sent_source_idle: bool,
    /// The task forwards through the repartition topics until its source watermark
    /// passes this (the latest rerouted record's event time plus the idle timeout);
    /// before and after, it says it is idle there, so readers do not wait for it.
    forwarding_until: Millis,
    /// Whether it knows how its source input is keyed, and so what to say on the
    /// repartition topics; until then it says nothing, and holds every reader back.
    decided: bool,
    /// Records found in place in a row while undecided.
    in_place: u32,
    /// Whether it decided on records (one off its key's partition, eight in a row in
    /// place, or the end), not because its source went idle first (see
    /// [`TaskCore::unvouched`]).
    evidence: bool,
    /// The latest generation asked on its repartition partition, or by itself.
    asked: u64,
    /// The latest generation it answered (see `markers`): it says so on the
    /// repartition topics.
    answered: u64,
    sent_answered: u64,
    ledger: Ledger,
    committed_ledger: Ledger,
    /// The task record as last written, so an unchanged one is not written again.
    written: Scalar,
}

impl<O: Operator> Task<O> {
    /// Whether its watermark or idleness moved since its last markers downstream.
    fn has_news(&self) -> bool {
        self.operator.output_watermark() > self.sent_watermark || self.idle != self.sent_idle
    }

    /// Whether it writes markers downstream at this commit: with news, or idle and
    /// asked to repeat it (readers that took its idleness back wait for that).
    fn speaks(&self, repeat: bool) -> bool {
        self.has_news() || (repeat && self.idle)
    }

    /// Whether what it would say on the repartition topics is worth a marker. Its
    /// readers leave an idle writer out of their watermark, and use what it last
    /// said only once every other input has ended (see `advance_watermarks`), where
    /// a stale value holds them back no further than the writer's own end: so while
    /// it stays idle, its end is news, and its idleness with where it is only as
    /// the answer to a generation a reader asked (see `markers`). Otherwise every
    /// commit of a stage fed keyed input would write every repartition partition, a
    /// produce request each.
    fn source_news(&self, watermark: Millis, idle: bool) -> bool {
        self.answered > self.sent_answered
            || idle != self.sent_source_idle
            || (watermark > self.sent_source_watermark && (!idle || watermark == END_OF_TIME))
    }
}

/// A task's own record in the changelog.
#[derive(Debug, Serialize, Deserialize)]
struct TaskRecord {
    input_watermark: Millis,
    sent_watermark: Millis,
    sent_idle: bool,
    #[serde(default = "no_watermark")]
    sent_source_watermark: Millis,
    #[serde(default)]
    sent_source_idle: bool,
    #[serde(default = "no_watermark")]
    forwarding_until: Millis,
    #[serde(default = "decided")]
    decided: bool,
    #[serde(default)]
    in_place: u32,
    #[serde(default = "decided")]
    evidence: bool,
    #[serde(default)]
    asked: u64,
    #[serde(default)]
    answered: u64,
    /// (input index, partition, generation) of repartition inputs awaiting an answer.
    #[serde(default)]
    awaiting: Vec<(usize, i32, u64)>,
    /// (input index, partition, progress) of source inputs.
    sources: Vec<(usize, i32, Progress)>,
    /// (input index, partition, writers) of upstream inputs.
    upstream: Vec<(usize, i32, Vec<Writer>)>,
    ledger: Ledger,
    /// (input index, partition, next offset) of every input partition read, as
    /// committed with this state: see [`Correction`].
    #[serde(default)]
    positions: Vec<(usize, i32, i64)>,
}

fn no_watermark() -> Millis {
    NO_WATERMARK
}

/// Records written before repartitioning existed were of correctly keyed input.
fn decided() -> bool {
    true
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
    /// Idle source partitions woken since the shell last asked (see [`TaskCore::resume`]).
    woken: Vec<Slot>,
}

/// Input partitions to pause and to resume.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flow {
    pub pause: Vec<Slot>,
    /// Paused partitions to read again from an earlier offset (held ones that were
    /// looked ahead on).
    pub rewind: Vec<(Slot, i64)>,
    pub resume: Vec<Slot>,
}

impl<S: Service> TaskCore<S> {
    pub fn new(service: S, config: Config) -> Self {
        let partitions = config.runtime.partitions as i32;
        let max_skew_ms = config.runtime.max_partition_skew_ms as Millis;
        let forwarding_ms = config.runtime.idle_timeout_ms as Millis;
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
            paused: BTreeSet::new(),
            held: BTreeMap::new(),
            looked: BTreeMap::new(),
            max_skew_ms,
            forwarding_ms,
            woken: Vec::new(),
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

    /// Whether every task has decided how its source input is keyed and one has yet
    /// to say so on the repartition topics. Until it does, the tasks reading them
    /// hold their own input (see [`TaskCore::on_input`]), so this is worth a commit
    /// at once rather than at the cadence's next.
    pub fn decision_unsent(&self) -> bool {
        self.inputs.iter().any(Input::is_repartition)
            && self.tasks.values().all(|t| t.decided)
            && self.tasks.values().any(|t| t.sent_source_watermark == NO_WATERMARK)
    }

    /// Whether a task's next commit tells its readers downstream that its watermark
    /// or idleness moved.
    pub fn has_news(&self) -> bool {
        self.tasks.values().any(Task::has_news)
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
    fn slots_of(&self, task: i32) -> impl Iterator<Item = Slot> + use<S> {
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

    // --- assignment and restore -------------------------------------------------------

    /// New partitions, with the offsets their group committed: the tasks that must now
    /// be restored from their changelog (each then needs `begin_restore`, its entries
    /// through `restoring`, and `finish_restore`).
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
        self.paused.clear();
        self.held.clear();
        self.looked.clear();
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
            sent_source_watermark: NO_WATERMARK,
            sent_source_idle: false,
            forwarding_until: NO_WATERMARK,
            decided: false,
            in_place: 0,
            evidence: false,
            asked: 0,
            answered: 0,
            sent_answered: 0,
            ledger: Ledger::default(),
            committed_ledger: Ledger::default(),
            written: Scalar::default(),
        };
        self.tasks.insert(task, task_state);
        // Commit once even without input, so the task's first markers tell its readers
        // where it stands.
        self.dirty = true;
    }

    /// The tasks begun (see `begin_restore`), each a handle that takes its changelog
    /// entries apart from the rest of the core: on a thread of its own, if the shell
    /// likes. Each handle's end (`TaskRestore::finish`) goes to `finish_restore`.
    pub fn restoring(&mut self, tasks: &[i32]) -> Vec<TaskRestore<'_, S::Op>> {
        self.tasks
            .iter_mut()
            .filter(|(task, _)| tasks.contains(task))
            .map(|(&task, t)| TaskRestore { task, operator: &mut t.operator, record: None })
            .collect()
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
        for (input, p, generation) in r.awaiting {
            if let Some(Some(u)) = self.upstream.get_mut(input) {
                u.ask(p as usize, generation);
            }
        }
        let t = self.tasks.get_mut(&task).expect("begin_restore comes first");
        t.input_watermark = r.input_watermark;
        t.sent_watermark = r.sent_watermark;
        t.idle = r.sent_idle;
        t.sent_idle = r.sent_idle;
        t.sent_source_watermark = r.sent_source_watermark;
        t.sent_source_idle = r.sent_source_idle;
        t.forwarding_until = r.forwarding_until;
        t.decided = r.decided;
        t.in_place = r.in_place;
        t.evidence = r.evidence;
        t.asked = r.asked;
        // Its answers go out in the transaction that writes them down.
        t.answered = r.answered;
        t.sent_answered = r.answered;
        t.ledger = r.ledger;
        t.committed_ledger = r.ledger;
        t.written.restored(bytes);
    }

    /// The task is restored; where its state's committed offsets differ from what
    /// the shell believed committed, they replace them, and the shell must read
    /// those partitions from there.
    pub fn finish_restore(&mut self, restored: RestoredTask) -> Vec<Correction> {
        let RestoredTask { task, record } = restored;
        let Some((record, bytes)) = record else { return Vec::new() };
        let positions = record.positions.clone();
        self.apply_task_record(task, record, &bytes);
        let mut corrections = Vec::new();
        for (input, p, changelog) in positions {
            let slot = (input, p);
            let believed = self.committed.get(&slot).copied();
            if believed != Some(changelog) {
                corrections.push(Correction { slot, believed, changelog });
                self.committed.insert(slot, changelog);
                self.positions.insert(slot, changelog);
            }
        }
        corrections
    }

    // --- processing -------------------------------------------------------------------

    /// One message of an input partition, at `offset`.
    ///
    /// A task reads no record of its source partitions while a writer of its
    /// repartition partitions holds them at "no watermark": until then it cannot tell
    /// whether records of its keys are on their way there, and its watermark would run
    /// ahead of them. Every task is such a writer, and says nothing there until it
    /// knows how its own source input is keyed: it looks ahead (holding what it looks
    /// at) until a record is off its key's partition (it forwards), eight in a row are
    /// in place (it does not), or the partition ends or goes idle. So correctly keyed
    /// input is judged exactly as the embedded runtime judges it, and misplaced input
    /// against the watermarks of the tasks forwarding it.
    pub fn on_input(
        &mut self,
        slot: Slot,
        offset: i64,
        incoming: Incoming<<S::Op as Operator>::In>,
    ) -> Result<Routed, CoreError> {
        let (input, partition) = slot;
        let id = self.parallelism.task_of(partition);
        if !self.tasks.contains_key(&id) {
            return Err(CoreError::NotAssigned { input, partition });
        }
        if self.resumes(slot, &incoming) {
            self.resume(id, slot);
        }
        if self.inputs[input].is_source() && matches!(incoming, Incoming::Record { .. }) {
            self.reconsider(id);
        }
        if self.inputs[input].is_source() && (self.held.contains_key(&slot) || self.waiting(id)) {
            return Ok(self.hold(id, slot, offset, &incoming));
        }
        self.positions.insert(slot, offset + 1);
        self.dirty = true;
        let mut routed = Routed::Done;
        match incoming {
            Incoming::Marker(marker) => self.on_marker(slot, marker),
            Incoming::Undecodable => {
                let task = self.tasks.get_mut(&id).expect("checked above");
                task.ledger.read += 1;
                task.ledger.dead_letters += 1;
                task.ledger.written += 1;
            }
            Incoming::Record { record, event_ts } => {
                if let Some(clock) = &mut self.clocks[input] {
                    clock.observe(partition as usize, event_ts);
                }
                match self.misplaced(slot, &record) {
                    Some(reroute) => {
                        self.learn_placement(id, Placement::Off(event_ts));
                        self.tasks.get_mut(&id).expect("checked above").ledger.rerouted += 1;
                        routed = reroute;
                    }
                    None => {
                        if self.inputs[input].is_source() {
                            self.learn_placement(id, Placement::InPlace);
                        }
                        self.process(id, record)
                    }
                }
            }
        }
        self.advance_watermark(id);
        Ok(routed)
    }

    /// A source message its task may not read yet: looked at once (towards the task's
    /// decision), then held.
    fn hold(&mut self, id: i32, slot: Slot, offset: i64, incoming: &Incoming<<S::Op as Operator>::In>) -> Routed {
        let from = *self.held.entry(slot).or_insert(offset);
        let looked = self.looked.entry(slot).or_insert(offset);
        if offset >= *looked {
            *looked = offset + 1;
            let placement = match incoming {
                Incoming::Record { record, event_ts } => match self.misplaced(slot, record) {
                    Some(_) => Placement::Off(*event_ts),
                    None => Placement::InPlace,
                },
                Incoming::Marker(m) if m.task.is_none() => Placement::Ended,
                _ => return self.held_or_rewound(id, slot, from),
            };
            self.learn_placement(id, placement);
        }
        self.held_or_rewound(id, slot, from)
    }

    /// Held while its task is undecided (looking ahead), then paused and rewound.
    fn held_or_rewound(&mut self, id: i32, slot: Slot, from: i64) -> Routed {
        if !self.tasks[&id].decided {
            return Routed::Held { seek: None };
        }
        self.paused.insert(slot);
        Routed::Held { seek: Some(from) }
    }

    /// What one more source message tells a task about how its input is keyed (see
    /// [`TaskCore::on_input`]).
    fn learn_placement(&mut self, id: i32, placement: Placement) {
        let forwarding_ms = self.forwarding_ms;
        let task = self.tasks.get_mut(&id).expect("a listed task");
        if let Placement::Off(event_ts) = placement {
            task.forwarding_until = task.forwarding_until.max(event_ts.saturating_add(forwarding_ms));
        }
        if task.evidence {
            return;
        }
        // Undecided, or decided when its source went idle after fewer records.
        task.in_place += 1;
        if placement != Placement::InPlace || task.in_place >= IN_PLACE_TO_DECIDE {
            task.evidence = true;
            task.decided = true;
            self.dirty = true;
        }
    }

    /// A source record on another partition than its key's goes through the stage's
    /// repartition topic to the task that owns its key, as Kafka Streams re-keys.
    fn misplaced(&self, (input, partition): Slot, record: &<S::Op as Operator>::In) -> Option<Routed> {
        if !self.inputs[input].is_source() {
            return None;
        }
        let key = self.service.partition_key(record)?;
        let home = partition_for(key.as_bytes(), self.partitions as u32) as i32;
        if home == partition {
            return None;
        }
        let via = self.inputs.iter().position(|i| i.kind == InputKind::Repartition { source: input })?;
        Some(Routed::Reroute { input: via, partition: home, key: key.to_string() })
    }

    fn process(&mut self, id: i32, record: <S::Op as Operator>::In) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        task.ledger.read += 1;
        task.operator.on_record(record, &mut self.scratch);
        // A record is late if the operator sent it to a late side output.
        if self.scratch.iter().any(|o| self.service.is_late(o)) {
            task.ledger.late += 1;
        } else {
            task.ledger.on_time += 1;
        }
        self.collect(id);
    }

    fn on_marker(&mut self, (input, p): Slot, marker: Marker) {
        match (&mut self.clocks[input], &mut self.upstream[input], marker.task) {
            (Some(clock), _, None) if marker.watermark == Millis::MAX => clock.finish_partition(p as usize),
            (_, Some(u), Some(writer)) => {
                u.update(p as usize, marker);
                if self.inputs[input].is_repartition() {
                    // Only an undecided writer says "no watermark" without being idle.
                    if marker.watermark == NO_WATERMARK && !marker.idle {
                        u.undecided(p as usize, writer);
                    }
                    if let Some(task) = self.tasks.get_mut(&self.parallelism.task_of(p)) {
                        task.asked = task.asked.max(marker.generation);
                    }
                }
            }
            _ => tracing::warn!(partition = p, ?marker, "ignoring a watermark marker this input does not expect"),
        }
    }

    /// Whether a message says input resumed on a partition its task left out as
    /// idle: a record there, its end (a producer ending its input after a pause: the
    /// records it produced before that may still be on their way through the
    /// repartition topics, and the end must not carry the task past them), or an
    /// idle writer saying it is not.
    fn resumes(&self, (input, p): Slot, incoming: &Incoming<<S::Op as Operator>::In>) -> bool {
        let p = p as usize;
        match (incoming, &self.clocks[input], &self.upstream[input]) {
            (Incoming::Record { .. } | Incoming::Marker(Marker { task: None, .. }), Some(clock), _) => {
                clock.partition_watermark(p).is_none()
            }
            (Incoming::Record { .. }, _, Some(u)) => u.watermark(p).is_none(),
            (Incoming::Marker(Marker { task: Some(writer), idle: false, .. }), _, Some(u)) => u.is_idle(p, *writer),
            _ => false,
        }
    }

    /// Input of task `id` resumed on `from`: every input it leaves out as idle holds
    /// it again until that input says it is idle once more. An idle source partition
    /// wakes (the shell watches it for another spell of silence:
    /// [`TaskCore::take_woken`]); an upstream partition's idle writers hold it at
    /// what they last said, until they repeat that they are idle
    /// ([`TaskCore::prepare_commit`]). Input produced after a pause reaches a task's
    /// partitions, and the tasks upstream, moments apart, and the first to resume
    /// would otherwise carry the watermark past the records of the rest. Holding one
    /// too many delays the watermark by at most the idle timeout; holding one too few
    /// makes records late.
    ///
    /// A repartition partition is held only by what happens on it: its writers' idle
    /// says that they forward nothing (their input is keyed), not that nothing is to
    /// come, and taking it back when a source resumes would judge correctly keyed
    /// input otherwise than the embedded runtime does.
    ///
    /// Resuming on a source or repartition partition also asks the task's
    /// repartition writers a new generation ([`TaskCore::ask`]): a task whose keys
    /// come only through the repartition topics (its own partitions get no records)
    /// must not be released by an idle writer's marker written before that writer's
    /// input came. The writers' answers are also what releases a repartition
    /// partition held here: they do not repeat their idleness there otherwise.
    fn resume(&mut self, id: i32, from: Slot) {
        if !matches!(self.inputs[from.0].kind, InputKind::Upstream) && self.inputs.iter().any(Input::is_repartition) {
            self.ask(id);
        }
        let slots: Vec<Slot> = self.slots_of(id).collect();
        for (i, p) in slots {
            let held = match (&mut self.clocks[i], &mut self.upstream[i]) {
                (Some(clock), _) if clock.partition_watermark(p as usize).is_none() => {
                    clock.mark_idle(p as usize, false);
                    self.woken.push((i, p));
                    true
                }
                (_, Some(u)) if !self.inputs[i].is_repartition() || (i, p) == from => u.hold_idle(p as usize),
                _ => false,
            };
            self.dirty |= held;
        }
    }

    /// Task `id`'s source input resumed. Its writers on the repartition topics may
    /// have had input come too, not read yet: it asks them a new generation, and
    /// holds its source records until each has answered it (see `markers`), so
    /// none forwards records older than the watermark it then goes by.
    fn ask(&mut self, id: i32) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        task.asked += 1;
        let generation = task.asked;
        let slots: Vec<Slot> = self.slots_of(id).filter(|&(i, _)| self.inputs[i].is_repartition()).collect();
        for (i, p) in slots {
            if let Some(u) = &mut self.upstream[i] {
                u.ask(p as usize, generation);
            }
        }
        self.dirty = true;
    }

    /// A source record for task `id`: if it decided how its input is keyed only
    /// because its source went idle before any record came, it looks at that input
    /// again, as at a first start (saying "no watermark", which holds its readers).
    /// (One that looked at a few records first keeps its decision, or records looked
    /// at, rewound and read again would undo it at every idle timeout; it counts on
    /// towards evidence.)
    fn reconsider(&mut self, id: i32) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        if task.decided && !task.evidence && task.in_place == 0 {
            task.decided = false;
            task.in_place = 0;
            // What it decides is news, wherever its source watermark then is.
            task.sent_source_watermark = NO_WATERMARK;
            self.dirty = true;
        }
    }

    /// The source partitions whose silence task `id` cannot vouch for without the
    /// broker: every one, while it claims without evidence that it forwards nothing;
    /// else the idle ones, where nothing bounds what may still come.
    fn unvouched(&self, id: i32) -> impl Iterator<Item = Slot> + '_ {
        let task = &self.tasks[&id];
        let all = task.decided && !task.evidence;
        self.slots_of(id).filter(move |&(i, p)| {
            self.clocks[i].as_ref().is_some_and(|c| all || c.partition_watermark(p as usize).is_none())
        })
    }

    /// The generation task `id` answers now: the latest asked, if it can vouch for
    /// all its source partitions (its markers then bound what it forwards); else the
    /// latest the broker has confirmed ([`TaskCore::verified`]).
    fn answer(&self, id: i32) -> u64 {
        let task = &self.tasks[&id];
        if self.unvouched(id).next().is_some() {
            task.answered
        } else {
            task.asked
        }
    }

    /// Tasks asked a generation they cannot answer without the broker, with the
    /// source partitions it must say are read to their end: the shell calls
    /// [`TaskCore::verified`] for each once it does.
    pub fn to_verify(&self) -> Vec<(i32, Vec<Slot>)> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.asked > t.answered)
            .map(|(&id, _)| (id, self.unvouched(id).collect::<Vec<Slot>>()))
            .filter(|(_, slots)| !slots.is_empty())
            .collect()
    }

    /// The broker says task `id`'s partitions listed by [`TaskCore::to_verify`] are
    /// read to their end, since it read the generation it was last asked: it
    /// answers that.
    pub fn verified(&mut self, id: i32) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        if task.answered < task.asked {
            task.answered = task.asked;
            self.dirty = true;
        }
    }

    /// Whether a task has an answer to a generation not yet said: its readers hold
    /// their input until they hear it, so it is worth a commit at once.
    pub fn answer_unsent(&self) -> bool {
        self.tasks.iter().any(|(&id, t)| self.answer(id) > t.sent_answered)
    }

    /// The idle source partitions woken since the last call (see [`TaskCore::resume`]).
    pub fn take_woken(&mut self) -> std::vec::Drain<'_, Slot> {
        self.woken.drain(..)
    }

    /// Whether a writer of a task's repartition partitions holds them at "no
    /// watermark" (see [`TaskCore::on_input`]).
    fn waiting(&self, id: i32) -> bool {
        self.slots_of(id).any(|(i, p)| {
            self.inputs[i].is_repartition()
                && self.upstream[i]
                    .as_ref()
                    .is_some_and(|u| u.watermark(p as usize) == Some(NO_WATERMARK) || u.unanswered(p as usize))
        })
    }

    /// A source or repartition partition with nothing to read for a while (the
    /// shell's judgement). A source partition is left out of its task's watermark
    /// until its next record, and its task, if undecided, takes what it read for how
    /// its input is keyed. On a repartition partition, writers still at "no
    /// watermark" are taken for idle (gone, or their markers gone with the topic's
    /// retention).
    pub fn mark_idle(&mut self, (input, p): Slot) -> bool {
        let changed = match (&mut self.clocks[input], &mut self.upstream[input]) {
            (Some(clock), _) => {
                if let Some(task) = self.tasks.get_mut(&self.parallelism.task_of(p)) {
                    self.dirty |= !std::mem::replace(&mut task.decided, true);
                }
                clock.mark_idle(p as usize, true)
            }
            (_, Some(u)) if self.inputs[input].is_repartition() => u.stalled_are_idle(p as usize),
            _ => false,
        };
        if changed {
            self.advance_watermarks();
        }
        changed
    }

    /// Gives every task the watermark of its input partitions, if it moved.
    fn advance_watermarks(&mut self) {
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        for id in ids {
            self.advance_watermark(id);
        }
    }

    /// Gives task `id` the watermark of its input partitions, if it moved. A record or
    /// marker moves no other task's: a partition's watermark depends on that partition
    /// alone (the source clocks take idleness from the shell's marks, not from the
    /// other partitions' event times).
    fn advance_watermark(&mut self, id: i32) {
        // Idle inputs are left out; a task whose inputs are all idle is idle itself.
        let (mut active, mut quiet) = (None, None);
        for (i, p) in self.slots_of(id) {
            let p = p as usize;
            let (own, idle) = match (&self.clocks[i], &self.upstream[i]) {
                (Some(clock), _) => (clock.partition_watermark(p), clock.idle_watermark(p)),
                (_, Some(u)) => (u.watermark(p), u.idle_watermark(p)),
                _ => (Some(NO_WATERMARK), None),
            };
            active = active.into_iter().chain(own).min();
            quiet = quiet.into_iter().chain(idle).min();
        }
        let task = self.tasks.get_mut(&id).expect("a listed task");
        let idle = active.is_none();
        if idle != task.idle {
            task.idle = idle;
            self.dirty = true;
        }
        let mut watermark = active.unwrap_or(task.input_watermark);
        // Idleness lets a task go on without a quiet input, but not to the end of
        // input: an input that went quiet before its end still has records to come
        // (held up in its producer by a broker outage, say), and they would all be
        // late. Once everything else has ended, the quiet inputs hold it again.
        if watermark == END_OF_TIME {
            watermark = quiet.unwrap_or(watermark);
        }
        if watermark > task.input_watermark {
            task.input_watermark = watermark;
            task.operator.on_watermark(watermark, &mut self.scratch);
            self.dirty = true;
            self.collect(id);
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

    // --- flow control -----------------------------------------------------------------

    /// Partitions whose watermark runs more than the allowed skew ahead of their task's
    /// are paused, and resumed once back within half of it (the gap keeps a partition
    /// from being paused and resumed over and over: a resumed partition is fetched
    /// afresh). The partition holding its task back is never ahead, so a task always
    /// has input to make progress with.
    /// Held source partitions of a task waiting for its repartition writers stay
    /// paused until it can read them (those looked ahead on are rewound first).
    pub fn flow(&mut self) -> Flow {
        let (mut hold, mut looking) = (BTreeSet::new(), BTreeSet::new());
        let mut flow = Flow::default();
        for (&id, task) in &self.tasks {
            let waiting = self.waiting(id);
            for slot in self.slots_of(id) {
                let own = match (&self.clocks[slot.0], &self.upstream[slot.0]) {
                    (Some(clock), _) => clock.partition_watermark(slot.1 as usize),
                    (_, Some(u)) => u.watermark(slot.1 as usize),
                    _ => None,
                };
                let ahead = own.map_or(0, |w| w.saturating_sub(task.input_watermark));
                let limit = if self.paused.contains(&slot) { self.max_skew_ms / 2 } else { self.max_skew_ms };
                let skewed = task.input_watermark != NO_WATERMARK && ahead > limit;
                let paused = self.paused.contains(&slot);
                let keep = match self.held.get(&slot) {
                    None => false,
                    // Still looked ahead on, for the task's decision.
                    Some(_) if !task.decided => {
                        looking.insert(slot);
                        false
                    }
                    Some(&from) if !paused => {
                        flow.rewind.push((slot, from));
                        true
                    }
                    Some(_) => waiting,
                };
                if skewed || keep {
                    hold.insert(slot);
                }
            }
        }
        flow.pause = hold.difference(&self.paused).copied().collect();
        flow.resume = self.paused.difference(&hold).copied().collect();
        self.held.retain(|slot, _| hold.contains(slot) || looking.contains(slot));
        self.paused = hold;
        flow
    }

    pub fn paused(&self) -> usize {
        self.paused.len()
    }

    /// Whether an input partition is held back (see [`TaskCore::flow`]).
    pub fn is_paused(&self, slot: Slot) -> bool {
        self.paused.contains(&slot)
    }

    // --- commit and abort -------------------------------------------------------------

    /// The markers, changelog writes and offsets of a commit. Calling it again before
    /// [`TaskCore::committed`] or [`TaskCore::abort`] gives only what changed since.
    /// With `repeat` (the shell asks every half idle timeout), the idle tasks in it,
    /// those whose inputs the broker says are read to their end
    /// ([`TaskCore::idle_tasks`]), say again downstream that they are idle: readers
    /// that took their idleness back when other input resumed wait for it (see
    /// [`TaskCore::resume`]), and it keeps those readers' partitions from going
    /// silent. Not on the repartition topics: a reader there takes its writers'
    /// idleness back only with an ask, and their answers are what it waits for. A
    /// repeat there put every repartition partition into one transaction of every
    /// member at once: at 20 000 events/s, bursts of 100–300 ms in the hops' p99.
    pub fn prepare_commit(&mut self, repeat: Option<&BTreeSet<i32>>) -> CommitBatch {
        let mut batch = CommitBatch::default();
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        let mut writes = Vec::new();
        for id in ids {
            let record = self.task_record(id);
            let partition = id % self.partitions;
            let source = self.source_watermark(id);
            let answer = self.answer(id);
            let task = self.tasks.get_mut(&id).expect("a listed task");
            task.answered = task.answered.max(answer);
            if let Some((watermark, idle)) = source {
                if task.source_news(watermark, idle) {
                    let generation = task.answered;
                    batch.repartition_markers.push(Marker { task: Some(id as u32), watermark, idle, generation });
                    task.sent_source_watermark = task.sent_source_watermark.max(watermark);
                    task.sent_source_idle = idle;
                    task.sent_answered = generation;
                }
            }
            if task.speaks(repeat.is_some_and(|r| r.contains(&id))) {
                let out_watermark = task.operator.output_watermark();
                batch.markers.push(Marker::of(id as u32, out_watermark, task.idle));
                task.sent_watermark = task.sent_watermark.max(out_watermark);
                task.sent_idle = task.idle;
            }
            task.operator.drain_changes(&mut writes);
            let record = TaskRecord {
                sent_watermark: task.sent_watermark,
                sent_idle: task.sent_idle,
                sent_source_watermark: task.sent_source_watermark,
                sent_source_idle: task.sent_source_idle,
                answered: task.sent_answered,
                ..record
            };
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

    /// What a task says on the repartition topics (it writes them from its source
    /// partitions): "no watermark" while undecided (see [`TaskCore::on_input`]), then
    /// the lowest watermark of its active source partitions, and whether it is idle
    /// there — it is, unless it has rerouted records lately, so stages fed correctly
    /// keyed input never wait on their repartition topics. `None` for a stage without
    /// source inputs.
    fn source_watermark(&self, id: i32) -> Option<(Millis, bool)> {
        let mut sources = self
            .slots_of(id)
            .filter_map(|(i, p)| Some(self.clocks[i].as_ref()?.partition_watermark(p as usize)))
            .peekable();
        sources.peek()?;
        let task = &self.tasks[&id];
        if !task.decided {
            return Some((NO_WATERMARK, false));
        }
        let active: Vec<Millis> = sources.flatten().collect();
        // A forwarding task is never at "no watermark" itself, which means undecided.
        let watermark = active.iter().copied().min().unwrap_or(task.sent_source_watermark).max(NO_WATERMARK + 1);
        let forwarding = task.forwarding_until != NO_WATERMARK && task.forwarding_until >= watermark;
        Some((watermark, active.is_empty() || !forwarding))
    }

    /// The tasks idle downstream, with their input partitions: those the shell may
    /// ask to repeat it ([`TaskCore::prepare_commit`]).
    pub fn idle_tasks(&self) -> Vec<(i32, Vec<Slot>)> {
        self.tasks.iter().filter(|(_, task)| task.idle).map(|(&id, _)| (id, self.slots_of(id).collect())).collect()
    }

    fn task_record(&self, id: i32) -> TaskRecord {
        let task = &self.tasks[&id];
        let mut record = TaskRecord {
            input_watermark: task.input_watermark,
            sent_watermark: task.sent_watermark,
            sent_idle: task.sent_idle,
            sent_source_watermark: task.sent_source_watermark,
            sent_source_idle: task.sent_source_idle,
            forwarding_until: task.forwarding_until,
            decided: task.decided,
            in_place: task.in_place,
            evidence: task.evidence,
            asked: task.asked,
            answered: task.answered,
            awaiting: Vec::new(),
            sources: Vec::new(),
            upstream: Vec::new(),
            ledger: task.ledger,
            positions: Vec::new(),
        };
        for (i, p) in self.slots_of(id) {
            if let Some(&next) = self.positions.get(&(i, p)) {
                record.positions.push((i, p, next));
            }
            if let Some(clock) = &self.clocks[i] {
                record.sources.push((i, p, clock.progress(p as usize)));
            }
            if let Some(u) = &self.upstream[i] {
                record.upstream.push((i, p, u.partition(p as usize)));
                if u.awaiting(p as usize) > 0 {
                    record.awaiting.push((i, p, u.awaiting(p as usize)));
                }
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
        let slots: BTreeSet<Slot> = self.positions.keys().chain(self.held.keys()).copied().collect();
        self.positions = self.committed.clone();
        self.held.clear();
        self.looked.clear();
        self.outputs.clear();
        self.dirty = false;
        for &task in &tasks {
            self.begin_restore(task);
        }
        Rewind { tasks, slots: slots.into_iter().collect() }
    }

    /// Where an input partition was last committed (`None`: never).
    pub fn committed_offset(&self, slot: Slot) -> Option<i64> {
        self.committed.get(&slot).copied()
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

    /// Every task has read the end of its input (end-of-input markers on every
    /// partition): all its windows have fired.
    pub fn input_ended(&self) -> bool {
        !self.tasks.is_empty() && self.tasks.values().all(|t| t.input_watermark == Millis::MAX)
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

/// One task's restore, apart from the core: its changelog entries in order, then
/// `finish`.
pub struct TaskRestore<'a, O> {
    task: i32,
    operator: &'a mut O,
    /// The task's own record as last written (decoded, and its bytes): every one
    /// holds the whole of what it says, so the last one is the task's.
    record: Option<(TaskRecord, Vec<u8>)>,
}

impl<O: Stateful> TaskRestore<'_, O> {
    pub fn task(&self) -> i32 {
        self.task
    }

    /// One changelog entry of the task (its key without the task prefix).
    pub fn entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), CoreError> {
        let restore = |source| CoreError::Restore { task: self.task, source };
        if key == [TASK_RECORD] {
            let Some(bytes) = value else { return Ok(()) };
            self.record = Some((decode_value(bytes).map_err(restore)?, bytes.to_vec()));
            return Ok(());
        }
        self.operator.restore_entry(key, value).map_err(restore)
    }

    /// After the last entry: the operator rebuilds what it derives from its entries;
    /// the rest goes to [`TaskCore::finish_restore`].
    pub fn finish(self) -> RestoredTask {
        self.operator.finish_restore();
        RestoredTask { task: self.task, record: self.record }
    }
}

/// A task's restore done apart from the core, for [`TaskCore::finish_restore`].
pub struct RestoredTask {
    task: i32,
    record: Option<(TaskRecord, Vec<u8>)>,
}

/// The entry key of a changelog record of `task`, or `None` if it belongs to another.
pub fn entry_of(task: i32, key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&(task as u32).to_be_bytes()[..])
}
