//! Commit and abort: what a transaction writes besides the outputs (markers for the
//! readers downstream and on the repartition topics, the changelog entries that
//! changed, the input offsets), and going back to the last commit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use vigil_stream::changelog::StateWrite;
use vigil_stream::changelog::Stateful;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::{Operator, Stage};

use super::commit_policy::{CommitPolicy, Reading};
use super::markers::Marker;
use super::restore::{changelog_key, TASK_RECORD};
use super::task::{TaskRecord, TaskState};
use super::{Encode, Slot, Stamp, TaskCore};
use crate::inputs::{Input, InputKind};

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
    /// Markers for every partition of this stage's repartition topics: (the
    /// repartition input, its marker).
    pub repartition_markers: Vec<(usize, Marker)>,
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

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// Whether to commit now, `since_commit` after the last commit: at once when a
    /// task has a decision or an answer its readers on the repartition topics wait
    /// for; else as the policy says. Going quiet hurries a commit only for what
    /// readers wait for (records written in the transaction, a watermark that
    /// moved): committed early, the records a stage holds for the watermark (a join's
    /// orders, the amount rule's payments) went to the changelog at nearly every
    /// commit, and out again at the next.
    pub fn commit_due(&self, policy: &CommitPolicy, since_commit: Duration, reading: Reading) -> bool {
        let quiet = reading.caught_up && (reading.carries_records || self.progress_unsent());
        self.decision_unsent() || self.answer_unsent() || policy.due(self.dirty, since_commit, quiet, reading.busy)
    }

    /// Whether anything changed since the last commit.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Whether every task has decided how its source input is keyed and one has yet
    /// to say so on the repartition topics. Until it does, the tasks reading them
    /// hold their own input (see [`TaskCore::on_input`]), so this is worth a commit
    /// at once rather than when the commit policy would.
    pub fn decision_unsent(&self) -> bool {
        self.inputs.iter().any(Input::is_repartition)
            && self.tasks.values().all(|t| t.decided)
            && self.tasks.values().any(|t| t.sent_source_watermark == NO_WATERMARK)
    }

    /// Whether a task's next commit tells its readers downstream that its watermark
    /// or idleness moved.
    pub fn progress_unsent(&self) -> bool {
        self.tasks.values().any(TaskState::progress_unsent)
    }

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
    /// member at once, and bursts in the hops' latency (docs/decisions.md).
    pub fn prepare_commit(&mut self, repeat: Option<&BTreeSet<i32>>) -> CommitBatch {
        let mut batch = CommitBatch::default();
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        let mut writes = Vec::new();
        let carriers: Vec<(usize, usize)> = (0..self.inputs.len())
            .filter_map(|r| match self.inputs[r].kind {
                InputKind::Repartition { source } => Some((r, source)),
                _ => None,
            })
            .collect();
        for id in ids {
            let record = self.task_record(id);
            let partition = id % self.partitions;
            let source = self.source_watermark(id);
            let answer = self.answer(id);
            let read_to: BTreeMap<Slot, Stamp> =
                self.slots_of(id).filter_map(|slot| Some((slot, *self.read_to.get(slot)?))).collect();
            let sent_read_to = &mut self.sent_read_to;
            let task = self.tasks.get_mut(&id).expect("a listed task");
            task.answered = task.answered.max(answer);
            if let Some((watermark, idle)) = source {
                // What it forwarded moved: its readers' merges wait to hear it.
                let forwarded = !idle
                    && watermark != NO_WATERMARK
                    && read_to.iter().any(|(slot, at)| sent_read_to.get(slot) != Some(at));
                if task.repartition_marker_due(watermark, idle) || forwarded {
                    let generation = task.answered;
                    for &(r, source) in &carriers {
                        let read_to = read_to.get(&(source, id)).copied();
                        let marker = Marker { task: Some(id as u32), watermark, idle, generation, read_to };
                        batch.repartition_markers.push((r, marker));
                    }
                    sent_read_to.extend(read_to.iter().map(|(&slot, &at)| (slot, at)));
                    task.sent_source_watermark = task.sent_source_watermark.max(watermark);
                    task.sent_source_idle = idle;
                    task.sent_answered = generation;
                }
            }
            if task.writes_markers(repeat.is_some_and(|r| r.contains(&id))) {
                let out_watermark = task.task.operator.output_watermark();
                batch.markers.push(Marker::of(id as u32, out_watermark, task.idle));
                task.sent_watermark = task.sent_watermark.max(out_watermark);
                task.sent_idle = task.idle;
            }
            task.task.operator.drain_changes(&mut writes);
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
        self.to_commit = self.positions.keys().filter_map(|&slot| Some((slot, self.commit_position(slot)?))).collect();
        batch.offsets = self.to_commit.iter().map(|(&slot, &next)| (slot, next)).collect();
        batch
    }

    /// The transaction committed: what it wrote is the state to come back to.
    pub fn committed(&mut self) {
        self.committed = std::mem::take(&mut self.to_commit);
        for task in self.tasks.values_mut() {
            task.committed_ledger = task.task.ledger;
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

    /// Where a restart reads an input partition from: its next offset, or the first
    /// record its merge holds (a merge's records are read again, not written down).
    pub(super) fn commit_position(&self, (i, p): Slot) -> Option<i64> {
        let next = *self.positions.get(&(i, p))?;
        let own = p as usize;
        let held = match self.inputs[i].kind {
            InputKind::Source { .. } => {
                let merge = self.repartition_of(i).and_then(|r| self.merges.get((r, p)));
                merge.and_then(|m| m.first_held(|w| w == own))
            }
            InputKind::Repartition { .. } => self.merges.get((i, p)).and_then(|m| m.first_held(|w| w != own)),
            InputKind::Upstream => None,
        };
        Some(held.map_or(next, |held| held.min(next)))
    }

    /// Where an input partition was last committed (`None`: never).
    pub fn committed_offset(&self, slot: Slot) -> Option<i64> {
        self.committed.get(&slot).copied()
    }
}
