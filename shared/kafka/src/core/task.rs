//! One task's state in the core beyond its operator, and the record of it the task
//! writes to its changelog.

use serde::{Deserialize, Serialize};
use vigil_model::Millis;
use vigil_stream::changelog::{Scalar, Stateful};
use vigil_stream::source_clock::Progress;
use vigil_stream::watermark::{END_OF_TIME, NO_WATERMARK};
use vigil_stream::{Ledger, Operator, Stage, Task};

use super::markers::Writer;
use super::merge::{Merge, MergeProgress};
use super::{Encode, TaskCore};
use vigil_stream::watermark::BoundedOutOfOrderness;

/// A task, and what it has told its readers: its markers downstream and on the
/// repartition topics, how its source input is keyed, the generations asked of it.
pub(super) struct TaskState<O> {
    pub(super) task: Task<O>,
    pub(super) sent_watermark: Millis,
    /// Every input is idle: the task says so downstream instead of holding it back.
    pub(super) idle: bool,
    pub(super) sent_idle: bool,
    /// What the task last said on the repartition topics: its source watermark.
    pub(super) sent_source_watermark: Millis,
    pub(super) sent_source_idle: bool,
    /// The task forwards through the repartition topics until its source watermark
    /// passes this (the latest rerouted record's event time plus the idle timeout);
    /// before and after, it says it is idle there, so readers do not wait for it.
    pub(super) forwarding_until: Millis,
    /// Whether it knows how its source input is keyed, and so what to say on the
    /// repartition topics; until then it says nothing, and holds every reader back.
    pub(super) decided: bool,
    /// Records found in place in a row while undecided.
    pub(super) in_place: u32,
    /// Whether it decided on records (one off its key's partition, eight in a row in
    /// place, or the end), not because its source went idle first (see
    /// `unconfirmed_sources`).
    pub(super) decided_on_records: bool,
    /// The latest generation asked on its repartition partition, or by itself.
    pub(super) asked: u64,
    /// The latest generation it answered (see `markers`): it says so on the
    /// repartition topics.
    pub(super) answered: u64,
    pub(super) sent_answered: u64,
    pub(super) committed_ledger: Ledger,
    /// The task record as last written, so an unchanged one is not written again.
    pub(super) written: Scalar,
}

impl<O: Operator> TaskState<O> {
    pub(super) fn new(mut operator: O) -> Self
    where
        O: Stateful,
    {
        operator.track_changes();
        TaskState {
            task: Task::new(operator),
            sent_watermark: NO_WATERMARK,
            idle: false,
            sent_idle: false,
            sent_source_watermark: NO_WATERMARK,
            sent_source_idle: false,
            forwarding_until: NO_WATERMARK,
            decided: false,
            in_place: 0,
            decided_on_records: false,
            asked: 0,
            answered: 0,
            sent_answered: 0,
            committed_ledger: Ledger::default(),
            written: Scalar::default(),
        }
    }

    /// Whether its watermark or idleness moved since its last markers downstream.
    pub(super) fn progress_unsent(&self) -> bool {
        self.task.operator.output_watermark() > self.sent_watermark || self.idle != self.sent_idle
    }

    /// Whether it writes markers downstream at this commit: its progress is unsent,
    /// or it is idle and asked to repeat it (readers that took its idleness back wait
    /// for that).
    pub(super) fn writes_markers(&self, repeat: bool) -> bool {
        self.progress_unsent() || (repeat && self.idle)
    }

    /// Whether what it would say on the repartition topics is worth a marker. Its
    /// readers leave an idle writer out of their watermark, and use what it last
    /// said only once every other input has ended (see `advance_watermark`), where
    /// a stale value holds them back no further than the writer's own end: so while
    /// it stays idle, its end is news, and its idleness with where it is only as
    /// the answer to a generation a reader asked (see `markers`). Otherwise every
    /// commit of a stage fed keyed input would write every repartition partition, a
    /// produce request each.
    pub(super) fn repartition_marker_due(&self, watermark: Millis, idle: bool) -> bool {
        self.answered > self.sent_answered
            || idle != self.sent_source_idle
            || (watermark > self.sent_source_watermark && (!idle || watermark == END_OF_TIME))
    }
}

/// A task's own record in the changelog. Its field names are its format: they stay
/// as written, so a changelog written before restores.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct TaskRecord {
    pub(super) input_watermark: Millis,
    pub(super) sent_watermark: Millis,
    pub(super) sent_idle: bool,
    #[serde(default = "no_watermark")]
    pub(super) sent_source_watermark: Millis,
    #[serde(default)]
    pub(super) sent_source_idle: bool,
    #[serde(default = "no_watermark")]
    pub(super) forwarding_until: Millis,
    #[serde(default = "decided")]
    pub(super) decided: bool,
    #[serde(default)]
    pub(super) in_place: u32,
    #[serde(default = "decided")]
    pub(super) evidence: bool,
    #[serde(default)]
    pub(super) asked: u64,
    #[serde(default)]
    pub(super) answered: u64,
    /// (input index, partition, generation) of repartition inputs awaiting an answer.
    #[serde(default)]
    pub(super) awaiting: Vec<(usize, i32, u64)>,
    /// (input index, partition, progress) of source inputs.
    pub(super) sources: Vec<(usize, i32, Progress)>,
    /// (input index, partition, writers) of upstream inputs.
    pub(super) upstream: Vec<(usize, i32, Vec<Writer>)>,
    pub(super) ledger: Ledger,
    /// (input index, partition, next offset) of every input partition read, as
    /// committed with this state: see [`super::Correction`].
    #[serde(default)]
    pub(super) positions: Vec<(usize, i32, i64)>,
    /// (input, partition, next offset) where records held in a merge make a restart
    /// read again from before the next offset (`positions`).
    #[serde(default)]
    pub(super) read: Vec<(usize, i32, i64)>,
    /// (repartition input, partition, its merge, its key clock's highest event time).
    #[serde(default)]
    pub(super) merges: Vec<(usize, i32, MergeProgress, Millis)>,
    /// (source input, partition) of the source partitions idle when committed;
    /// `None` in a record written before they were kept, where the task's own
    /// idleness stands for them.
    #[serde(default)]
    pub(super) idle_sources: Option<Vec<(usize, i32)>>,
}

fn no_watermark() -> Millis {
    NO_WATERMARK
}

/// Records written before repartitioning existed were of correctly keyed input.
fn decided() -> bool {
    true
}

impl<S: Stage, E: Encode> TaskCore<S, E> {
    pub(super) fn task_record(&self, id: i32) -> TaskRecord {
        let task = &self.tasks[&id];
        let mut record = TaskRecord {
            input_watermark: task.task.watermark(),
            sent_watermark: task.sent_watermark,
            sent_idle: task.sent_idle,
            sent_source_watermark: task.sent_source_watermark,
            sent_source_idle: task.sent_source_idle,
            forwarding_until: task.forwarding_until,
            decided: task.decided,
            in_place: task.in_place,
            evidence: task.decided_on_records,
            asked: task.asked,
            answered: task.answered,
            awaiting: Vec::new(),
            sources: Vec::new(),
            upstream: Vec::new(),
            ledger: task.task.ledger,
            positions: Vec::new(),
            read: Vec::new(),
            merges: Vec::new(),
            idle_sources: None,
        };
        let mut idle_sources = Vec::new();
        for (i, p) in self.slots_of(id) {
            if let Some(from) = self.commit_position((i, p)) {
                record.positions.push((i, p, from));
                // Read again after a restart and not yet past where it had been read:
                // the next restart must read as far before its merge lets go.
                let next = self.positions[&(i, p)].max(self.seen_to.get(&(i, p)).copied().unwrap_or(0));
                if from < next {
                    record.read.push((i, p, next));
                }
            }
            let merge = self.merges.get((i, p)).map(|m| m.progress());
            let clock = self.key_clocks.get((i, p)).map(|c| c.max_event_ts());
            if merge.is_some() || clock.is_some() {
                record.merges.push((i, p, merge.unwrap_or_default(), clock.unwrap_or(NO_WATERMARK)));
            }
            if let Some(clock) = &self.clocks[i] {
                record.sources.push((i, p, clock.progress(p as usize)));
                if clock.partition_watermark(p as usize).is_none() {
                    idle_sources.push((i, p));
                }
            }
            if let Some(u) = &self.upstream[i] {
                record.upstream.push((i, p, u.partition(p as usize)));
                if u.awaiting(p as usize) > 0 {
                    record.awaiting.push((i, p, u.awaiting(p as usize)));
                }
            }
        }
        TaskRecord { idle_sources: Some(idle_sources), ..record }
    }

    pub(super) fn apply_task_record(&mut self, task: i32, r: TaskRecord, bytes: &[u8]) {
        for (input, p, progress) in r.sources {
            if let Some(Some(clock)) = self.clocks.get_mut(input) {
                clock.restore(p as usize, progress);
                // Idle when committed: still idle until a record says otherwise, so a
                // takeover does not hold every reader back for another idle timeout.
                // (Only the partition's own idleness: a task whose key partition has
                // no key is idle while its source partition feeds other tasks.)
                let idle = r.idle_sources.as_ref().map_or(r.sent_idle, |idle| idle.contains(&(input, p)));
                clock.mark_idle(p as usize, idle);
            }
        }
        for (input, p, writers) in r.upstream {
            if let Some(Some(u)) = self.upstream.get_mut(input) {
                u.restore_partition(p as usize, writers);
            }
        }
        for (input, p, next) in r.read {
            self.seen_to.insert((input, p), next);
        }
        for (input, p, progress, max_event_ts) in r.merges {
            let writers = self.partitions as usize;
            self.merges.get_or_insert_with((input, p), || Merge::new(writers)).restore(progress);
            if max_event_ts != NO_WATERMARK {
                let bound = self.key_clock_bound(input);
                self.key_clocks
                    .get_or_insert_with((input, p), || BoundedOutOfOrderness::new(bound))
                    .observe(max_event_ts);
            }
        }
        for (input, p, generation) in r.awaiting {
            if let Some(Some(u)) = self.upstream.get_mut(input) {
                u.ask(p as usize, generation);
            }
        }
        let t = self.tasks.get_mut(&task).expect("begin_restore comes first");
        t.task.restore_watermark(r.input_watermark);
        t.sent_watermark = r.sent_watermark;
        t.idle = r.sent_idle;
        t.sent_idle = r.sent_idle;
        t.sent_source_watermark = r.sent_source_watermark;
        t.sent_source_idle = r.sent_source_idle;
        t.forwarding_until = r.forwarding_until;
        t.decided = r.decided;
        t.in_place = r.in_place;
        t.decided_on_records = r.evidence;
        t.asked = r.asked;
        // Its answers go out in the transaction that writes them down.
        t.answered = r.answered;
        t.sent_answered = r.answered;
        t.task.ledger = r.ledger;
        t.committed_ledger = r.ledger;
        t.written.restored(bytes);
    }
}
