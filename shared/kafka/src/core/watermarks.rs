//! A task's input watermark: the minimum over its input partitions that are not
//! idle, given to its operator when it moves.

use vigil_model::Millis;
use vigil_stream::watermark::{END_OF_TIME, NO_WATERMARK};
use vigil_stream::Stage;

use super::{Encode, TaskCore};

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// Gives every task the watermark of its input partitions, if it moved.
    pub(super) fn advance_watermarks(&mut self) {
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        for id in ids {
            self.advance_watermark(id);
        }
    }

    /// Gives task `id` the watermark of its input partitions, if it moved. A record or
    /// marker moves no other task's: a partition's watermark depends on that partition
    /// alone (the source clocks take idleness from the shell's marks, not from the
    /// other partitions' event times).
    pub(super) fn advance_watermark(&mut self, id: i32) {
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
        let mut watermark = active.unwrap_or(task.task.watermark());
        // Idleness lets a task go on without a quiet input, but not to the end of
        // input: an input that went quiet before its end still has records to come
        // (held up in its producer by a broker outage, say), and they would all be
        // late. Once everything else has ended, the quiet inputs hold it again.
        if watermark == END_OF_TIME {
            watermark = quiet.unwrap_or(watermark);
        }
        if task.task.advance(watermark, &mut self.scratch) {
            self.dirty = true;
            self.collect(id);
        }
    }

    /// The lowest input watermark over the tasks that have one.
    pub fn lowest_watermark(&self) -> Option<Millis> {
        self.tasks.values().map(|t| t.task.watermark()).filter(|&w| w != NO_WATERMARK && w != Millis::MAX).min()
    }

    /// Every task has read the end of its input (end-of-input markers on every
    /// partition): all its windows have fired.
    pub fn input_ended(&self) -> bool {
        !self.tasks.is_empty() && self.tasks.values().all(|t| t.task.watermark() == Millis::MAX)
    }
}
