//! Assignment and restore: the tasks of newly assigned partitions begin afresh and
//! take back, entry by entry, what their changelog holds; the task record says where
//! their partitions were committed.

use vigil_stream::changelog::{decode_value, Stateful};
use vigil_stream::source_clock::Progress;
use vigil_stream::Stage;

use super::task::{TaskRecord, TaskState};
use super::{CoreError, Encode, Slot, TaskCore};

/// The entry key of a task's own record in the changelog (operators' namespaces are
/// small numbers; this one is theirs to never use).
pub(super) const TASK_RECORD: u8 = 0xFF;

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

impl<S: Stage, E: Encode> TaskCore<S, E> {
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
        let operator = self.stage.operator(&self.config);
        for (input, p) in self.slots_of(task) {
            if let Some(clock) = &mut self.clocks[input] {
                clock.restore(p as usize, Progress::default());
                clock.mark_idle(p as usize, false);
            }
            if let Some(u) = &mut self.upstream[input] {
                u.reset_partition(p as usize);
            }
            // Read again from where the commit says; its markers say it again.
            self.read_to.remove((input, p));
            self.sent_read_to.remove(&(input, p));
            self.seen_to.remove(&(input, p));
            self.merges.remove((input, p));
            self.key_clocks.remove((input, p));
        }
        let task_state = TaskState::new(operator);
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
            .map(|(&task, t)| TaskRestore { task, operator: &mut t.task.operator, record: None })
            .collect()
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
