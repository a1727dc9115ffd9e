//! How a task learns how its source input is keyed — whether records of its keys
//! reach it through the stage's repartition topics — and what it says there.

use vigil_model::Millis;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Stage;

use super::merge::Bound;
use super::{Encode, TaskCore};

/// How many records in a row a task must find on the partition of their key before it
/// says it forwards nothing (see [`TaskCore::on_input`]). Input keyed any other way
/// is off its key's partition (n-1) times in n, so eight in a row in place by chance
/// happen about once in 65 000 tasks with 4 partitions.
const IN_PLACE_TO_DECIDE: u32 = 8;

/// What a source message says of how the input is keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    InPlace,
    /// Off its key's partition; its event time.
    Off(Millis),
    /// The partition ended.
    Ended,
}

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// What one more source message tells a task about how its input is keyed (see
    /// [`TaskCore::on_input`]).
    pub(super) fn learn_placement(&mut self, id: i32, placement: Placement) {
        let forwarding_ms = self.forwarding_ms;
        let task = self.tasks.get_mut(&id).expect("a listed task");
        if let Placement::Off(event_ts) = placement {
            task.forwarding_until = task.forwarding_until.max(event_ts.saturating_add(forwarding_ms));
        }
        if task.decided_on_records {
            return;
        }
        // Undecided, or decided when its source went idle after fewer records.
        task.in_place += 1;
        if placement != Placement::InPlace || task.in_place >= IN_PLACE_TO_DECIDE {
            task.decided_on_records = true;
            task.decided = true;
            self.dirty = true;
        }
    }

    /// A source record for task `id`: if it decided how its input is keyed only
    /// because its source went idle before any record came, it looks at that input
    /// again, as at a first start (saying "no watermark", which holds its readers).
    /// (One that looked at a few records first keeps its decision, or records looked
    /// at, rewound and read again would undo it at every idle timeout; it counts on
    /// towards a decision on records.)
    pub(super) fn reconsider(&mut self, id: i32) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        if task.decided && !task.decided_on_records && task.in_place == 0 {
            task.decided = false;
            task.in_place = 0;
            // What it decides is news, wherever its source watermark then is.
            task.sent_source_watermark = NO_WATERMARK;
            self.dirty = true;
        }
    }

    /// What a task says on the repartition topics (it writes them from its source
    /// partitions): "no watermark" while undecided (see [`TaskCore::on_input`]), then
    /// the lowest watermark of its active source partitions, and whether it is idle
    /// there — it is, until it reroutes a record, so stages fed correctly keyed input
    /// never wait on their repartition topics. Once it has, it says how far it has
    /// read for as long as its source is active: a writer that went quiet by event
    /// time may still forward, and its readers must not release records past it.
    /// `None` for a stage without source inputs.
    pub(super) fn source_watermark(&self, id: i32) -> Option<(Millis, bool)> {
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
        Some((watermark, active.is_empty() || task.forwarding_until == NO_WATERMARK))
    }

    /// Whether task `id` forwards its source records, all of them: it has rerouted
    /// one lately (its source watermark has not passed `forwarding_until`).
    pub(super) fn forwarding(&self, id: i32) -> bool {
        let lowest = self
            .slots_of(id)
            .filter_map(|(i, p)| self.clocks[i].as_ref()?.partition_watermark(p as usize))
            .min()
            .unwrap_or(self.tasks[&id].sent_source_watermark)
            .max(NO_WATERMARK + 1);
        self.forwarding_at(id, lowest)
    }

    /// Whether a source record of `slot` needs its producer's sequence number: its
    /// task may forward it or merge it with forwarded ones (it is deciding, has
    /// forwarded before, or another task forwards to it).
    pub fn stamps_needed(&self, (_, p): super::Slot) -> bool {
        let id = self.parallelism.task_of(p);
        let Some(task) = self.tasks.get(&id) else { return false };
        self.inputs.iter().any(crate::inputs::Input::is_repartition)
            && (!task.decided || task.forwarding_until != NO_WATERMARK || self.merging(id))
    }

    /// Whether a writer other than task `id` forwards records of its key partitions.
    pub(super) fn merging(&self, id: i32) -> bool {
        self.slots_of(id).filter(|&(i, _)| self.inputs[i].is_repartition()).any(|(i, p)| {
            let u = self.upstream[i].as_ref().expect("a repartition input has writers");
            (0..u.writers()).any(|w| w != p as usize && u.bound(p as usize, w) != Bound::LeftOut)
        })
    }

    fn forwarding_at(&self, id: i32, watermark: Millis) -> bool {
        let until = self.tasks[&id].forwarding_until;
        until != NO_WATERMARK && until >= watermark
    }
}
