//! A task's input watermark: the minimum over its input partitions that are not
//! idle, given to its operator when it moves.

use vigil_model::Millis;
use vigil_stream::watermark::{END_OF_TIME, NO_WATERMARK};
use vigil_stream::Stage;

use super::merge::{Bound, Merge};
use super::{Encode, TaskCore};
use crate::inputs::InputKind;

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
        // Records whose turn came go first: an end or idleness just heard must not
        // carry the watermark past them.
        self.release(id);
        self.move_watermark(id);
    }

    /// Gives task `id` the watermark of its input partitions, if it moved.
    pub(super) fn move_watermark(&mut self, id: i32) {
        // Idle inputs are left out; a task whose inputs are all idle is idle itself.
        let (mut active, mut quiet) = (None, None);
        let slots: Vec<(usize, i32)> = self.slots_of(id).collect();
        for (i, p) in slots {
            let (own, idle) = match (&self.clocks[i], &self.upstream[i]) {
                // Valued with its repartition partition, where its key partition merges.
                (Some(_), _) if self.repartition_of(i).is_some() => (None, None),
                (Some(clock), _) => (clock.partition_watermark(p as usize), clock.idle_watermark(p as usize)),
                (_, Some(_)) if self.inputs[i].is_repartition() => self.merged_watermark((i, p)),
                (_, Some(u)) => (u.watermark(p as usize), u.idle_watermark(p as usize)),
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

    /// What a source input gives task k's watermark (active, and where its idle part
    /// would hold it), valued at its repartition partition `(r, k)`: the clock of the
    /// key partition's records in the order produced, wherever they came from, as a
    /// keyed partition's clock would be (see `merge`). Idle once no record of it has
    /// come for the idle timeout of producer time (a key partition no key hashes
    /// to). While nothing takes part (its source partition idle or ended, no writer
    /// forwarding), as those say.
    fn merged_watermark(&mut self, (r, p): (usize, i32)) -> (Option<Millis>, Option<Millis>) {
        let InputKind::Repartition { source } = self.inputs[r].kind else { unreachable!("a repartition input") };
        let u = self.upstream[r].as_ref().expect("a repartition input has writers");
        let clock = self.key_clocks.get((r, p)).map_or(NO_WATERMARK, |c| c.current());
        let own = self.own_bound((r, p));
        let replaying = self.replaying_merge((r, p));
        let bound = |w: usize| if w == p as usize { own } else { u.bound(p as usize, w) };
        let merge = self.merges.get_or_insert_with((r, p), || Merge::new(u.writers()));
        if !merge.is_empty() || replaying {
            // Records still to release, or to read again: nothing carries the task past them.
            return (Some(clock), None);
        }
        if (0..u.writers()).all(|w| bound(w) == Bound::LeftOut) {
            let c = self.clocks[source].as_ref().expect("a source input has a clock");
            let active = [c.partition_watermark(p as usize), u.watermark(p as usize)].into_iter().flatten().min();
            let quiet = [c.idle_watermark(p as usize), u.idle_watermark(p as usize)].into_iter().flatten().min();
            return (active, quiet);
        }
        let quiet_ms = self.config.runtime.idle_wall_clock_ms as Millis;
        if merge.quiet(quiet_ms, bound) {
            (None, (clock != NO_WATERMARK).then_some(clock))
        } else {
            (Some(clock), None)
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
