//! Flow control: input partitions running far ahead of their task are paused, and
//! held-back ones are rewound and resumed when their task can read them.

use std::collections::BTreeSet;

use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Stage;

use super::{Encode, Slot, TaskCore};

/// Input partitions to pause and to resume.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Flow {
    pub pause: Vec<Slot>,
    /// Paused partitions to read again from an earlier offset (held ones that were
    /// looked ahead on).
    pub rewind: Vec<(Slot, i64)>,
    pub resume: Vec<Slot>,
}

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// Partitions whose watermark runs more than the allowed skew ahead of their task's
    /// are paused, and resumed once back within half of it (the gap keeps a partition
    /// from being paused and resumed over and over: a resumed partition is fetched
    /// afresh). The partition holding its task back is never ahead, so a task always
    /// has input to make progress with.
    /// Not a repartition partition, nor the source of a task that forwards or merges
    /// forwarded records (see `merge`).
    /// Held source partitions of a task waiting for its repartition writers stay
    /// paused until it can read them (those looked ahead on are rewound first).
    pub fn flow(&mut self) -> Flow {
        let (mut hold, mut looking) = (BTreeSet::new(), BTreeSet::new());
        let mut flow = Flow::default();
        for (&id, task) in &self.tasks {
            let waiting = self.waiting(id);
            // A merge waits on what every writer has read: pausing a writer's source,
            // or a merge's input, for skew could hold the merge that would let the
            // task catch up.
            let merging = self.forwarding(id) || self.merging(id);
            for slot in self.slots_of(id) {
                let own = match (&self.clocks[slot.0], &self.upstream[slot.0]) {
                    (Some(clock), _) => clock.partition_watermark(slot.1 as usize),
                    (_, Some(u)) => u.watermark(slot.1 as usize),
                    _ => None,
                };
                let ahead = own.map_or(0, |w| w.saturating_sub(task.task.watermark()));
                let limit = if self.paused.contains(&slot) { self.max_skew_ms / 2 } else { self.max_skew_ms };
                // A partition read again after a restart, below where it had been read,
                // brings what its task's merge waits for (its clock already at its end).
                let merged = self.inputs[slot.0].is_repartition()
                    || (merging && self.inputs[slot.0].is_source())
                    || self.replaying(slot);
                let skewed = task.task.watermark() != NO_WATERMARK && ahead > limit && !merged;
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
}
