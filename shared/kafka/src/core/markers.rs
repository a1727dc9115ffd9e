//! Watermarks between stages. A Kafka topic carries records, not event-time progress,
//! so every task that writes a topic also writes, at a commit that moves its
//! watermark or idleness, a marker to every partition of it: which task wrote it, its
//! output watermark, whether it is idle, and on the repartition topics the
//! generation it answers. A reader's watermark for a partition is the minimum over
//! the writers that are not idle, as Flink combines its input channels; idleness is
//! taken back when input resumes, and a writer that has not answered the generation
//! its reader asked counts as not idle. An external producer may write a marker
//! without a task to say a partition has ended. docs/kafka.md, "Watermark markers",
//! tells the whole protocol and why each part is there.

use serde::{Deserialize, Serialize};
use vigil_model::Millis;
use vigil_stream::watermark::{END_OF_TIME, NO_WATERMARK};

use super::merge::{Bound, Stamp};

/// What a marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The writing task; `None` for an external producer ending its input.
    pub task: Option<u32>,
    pub watermark: Millis,
    /// The writing task has nothing to say: its readers leave it out.
    pub idle: bool,
    /// On a repartition topic, the latest generation its writer asked or answered
    /// (see the module's comment); 0 elsewhere.
    pub generation: u64,
    /// On a repartition topic, the last record its writer read of its source
    /// partition: everything it forwards later is stamped above it (see `merge`).
    pub read_to: Option<Stamp>,
}

impl Marker {
    /// An external producer's end of a partition's input.
    pub const END: Marker = Marker { task: None, watermark: Millis::MAX, idle: false, generation: 0, read_to: None };

    /// A task's marker, on a topic without generations.
    pub fn of(task: u32, watermark: Millis, idle: bool) -> Marker {
        Marker { task: Some(task), watermark, idle, generation: 0, read_to: None }
    }
}

/// The watermark of each partition of an upstream topic: the minimum over the tasks
/// that write it and are not idle (a task not heard from yet holds it at "no
/// watermark"); a partition whose writers are all idle is idle. A writer that has
/// not answered the generation its partition awaits counts as not idle.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamWatermarks {
    /// Per partition, per writing task: its watermark and whether it is idle.
    partitions: Vec<Vec<Writer>>,
    /// Per partition, the generation its reader asked its writers (0: none).
    awaiting: Vec<u64>,
}

/// What one writing task last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writer {
    pub watermark: Millis,
    pub idle: bool,
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub read_to: Option<Stamp>,
}

const SILENT: Writer = Writer { watermark: NO_WATERMARK, idle: false, generation: 0, read_to: None };

impl UpstreamWatermarks {
    pub fn new(partitions: u32, writers: u32) -> Self {
        UpstreamWatermarks {
            partitions: vec![vec![SILENT; writers as usize]; partitions as usize],
            awaiting: vec![0; partitions as usize],
        }
    }

    pub fn update(&mut self, partition: usize, marker: Marker) {
        let Some(task) = marker.task else { return };
        if let Some(slot) = self.partitions.get_mut(partition).and_then(|p| p.get_mut(task as usize)) {
            *slot = Writer {
                watermark: slot.watermark.max(marker.watermark),
                idle: marker.idle,
                generation: slot.generation.max(marker.generation),
                read_to: slot.read_to.max(marker.read_to),
            };
        }
    }

    /// A repartition writer that looks at its input again (its source resumed after
    /// it had decided on none) holds its readers at "no watermark" once more.
    pub fn undecided(&mut self, partition: usize, task: u32) {
        if let Some(slot) = self.partitions.get_mut(partition).and_then(|p| p.get_mut(task as usize)) {
            *slot = Writer { watermark: NO_WATERMARK, idle: false, ..*slot };
        }
    }

    /// The partition's reader asks its writers `generation`: until each answers it,
    /// none counts as idle.
    pub fn ask(&mut self, partition: usize, generation: u64) {
        self.awaiting[partition] = self.awaiting[partition].max(generation);
    }

    /// The generation the partition's reader awaits.
    pub fn awaiting(&self, partition: usize) -> u64 {
        self.awaiting[partition]
    }

    /// Whether a writer of the partition has yet to answer the generation it awaits.
    pub fn unanswered(&self, partition: usize) -> bool {
        self.partitions[partition].iter().any(|w| w.generation < self.awaiting[partition])
    }

    /// Whether a writer is left out of the partition's watermark.
    fn left_out(&self, partition: usize, w: &Writer) -> bool {
        w.idle && w.generation >= self.awaiting[partition]
    }

    /// What the partition's writer `task` lets its merge assume: nothing, if it is
    /// left out or ended; else how far it has read.
    pub fn bound(&self, partition: usize, task: usize) -> Bound {
        let w = &self.partitions[partition][task];
        if self.left_out(partition, w) || w.watermark == END_OF_TIME {
            return Bound::LeftOut;
        }
        Bound::ReadTo(w.read_to)
    }

    /// Whether the partition's writer `task` is idle.
    pub fn is_idle(&self, partition: usize, task: u32) -> bool {
        self.partitions[partition].get(task as usize).is_some_and(|w| w.idle)
    }

    /// The partition's idle writers hold it again, at what they last said, until they
    /// say they are idle once more: an input of its reader resumed, and theirs may
    /// have too, only not read yet (see `TaskCore::resume`). Whether any was idle.
    pub fn hold_idle(&mut self, partition: usize) -> bool {
        let mut held = false;
        for w in self.partitions[partition].iter_mut().filter(|w| w.idle) {
            w.idle = false;
            held = true;
        }
        held
    }

    /// Writers still at "no watermark" (not heard from, or not yet sure what they
    /// will say) are taken for idle: their partition has long had nothing to read.
    /// Whether that changed anything.
    pub fn stalled_are_idle(&mut self, partition: usize) -> bool {
        let mut changed = false;
        for w in self.partitions[partition].iter_mut().filter(|w| !w.idle && w.watermark == NO_WATERMARK) {
            w.idle = true;
            changed = true;
        }
        changed
    }

    /// `None` while every writer of the partition is idle.
    pub fn watermark(&self, partition: usize) -> Option<Millis> {
        self.partitions[partition].iter().filter(|w| !self.left_out(partition, w)).map(|w| w.watermark).min()
    }

    /// The lowest watermark of the partition's idle writers that have spoken and not
    /// ended: where they would hold it if they were not idle.
    pub fn idle_watermark(&self, partition: usize) -> Option<Millis> {
        self.partitions[partition]
            .iter()
            .filter(|w| self.left_out(partition, w) && w.watermark != NO_WATERMARK && w.watermark != END_OF_TIME)
            .map(|w| w.watermark)
            .min()
    }

    /// How many tasks write each partition.
    pub fn writers(&self) -> usize {
        self.partitions.first().map_or(0, Vec::len)
    }

    /// One partition's state, for a task's snapshot.
    pub fn partition(&self, partition: usize) -> Vec<Writer> {
        self.partitions[partition].clone()
    }

    /// Forgets what the writers of one partition said (a task starting over).
    pub fn reset_partition(&mut self, partition: usize) {
        self.partitions[partition].fill(SILENT);
        self.awaiting[partition] = 0;
    }

    pub fn restore_partition(&mut self, partition: usize, writers: Vec<Writer>) {
        for (slot, w) in self.partitions[partition].iter_mut().zip(writers) {
            *slot = Writer { watermark: slot.watermark.max(w.watermark), ..w };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_goes_by_its_slowest_writer_that_is_not_idle() {
        let mut u = UpstreamWatermarks::new(2, 3);
        u.update(0, Marker::of(0, 5_000, false));
        u.update(0, Marker::of(1, 7_000, false));
        assert_eq!(u.watermark(0), Some(NO_WATERMARK), "writer 2 has not spoken");
        u.update(0, Marker::of(2, 6_000, false));
        assert_eq!(u.watermark(0), Some(5_000));
        u.update(0, Marker::of(0, 4_000, false));
        assert_eq!(u.watermark(0), Some(5_000), "a writer's watermark never goes back");
        u.update(0, Marker::of(0, 5_000, true));
        assert_eq!(u.watermark(0), Some(6_000), "an idle writer is left out");
        u.update(0, Marker::of(1, 7_000, true));
        u.update(0, Marker::of(2, 6_000, true));
        assert_eq!(u.watermark(0), None, "all writers idle: the partition is idle");
        let mut restored = UpstreamWatermarks::new(2, 3);
        restored.restore_partition(0, u.partition(0));
        assert_eq!(restored.watermark(0), None);
        restored.update(0, Marker::of(2, 6_500, false));
        assert_eq!(restored.watermark(0), Some(6_500));
    }

    #[test]
    fn idle_writers_that_have_spoken_and_not_ended_say_where_they_would_hold() {
        let mut u = UpstreamWatermarks::new(1, 4);
        u.update(0, Marker::of(0, END_OF_TIME, false));
        u.update(0, Marker::of(1, 5_000, true));
        u.update(0, Marker::of(2, END_OF_TIME, true));
        u.update(0, Marker::of(3, NO_WATERMARK, true));
        assert_eq!(u.watermark(0), Some(END_OF_TIME));
        assert_eq!(u.idle_watermark(0), Some(5_000), "not the ended one, nor the one never heard from");
        u.update(0, Marker::of(1, END_OF_TIME, true));
        assert_eq!(u.idle_watermark(0), None);
    }

    #[test]
    fn an_idle_writer_counts_until_it_answers_the_generation_its_reader_asked() {
        let mut u = UpstreamWatermarks::new(1, 2);
        u.update(0, Marker::of(0, 5_000, false));
        u.update(0, Marker { task: Some(1), watermark: 3_000, idle: true, generation: 1, read_to: None });
        assert_eq!(u.watermark(0), Some(5_000));
        u.ask(0, 2);
        assert!(u.unanswered(0));
        assert_eq!(u.watermark(0), Some(3_000), "writer 1 holds it where it last was");
        u.update(0, Marker { task: Some(1), watermark: 3_000, idle: true, generation: 1, read_to: None });
        assert_eq!(u.watermark(0), Some(3_000), "a repeat of an older generation answers nothing");
        u.update(0, Marker { task: Some(0), watermark: 6_000, idle: false, generation: 2, read_to: None });
        u.update(0, Marker { task: Some(1), watermark: 3_000, idle: true, generation: 2, read_to: None });
        assert!(!u.unanswered(0));
        assert_eq!(u.watermark(0), Some(6_000));
        u.undecided(0, 1);
        assert_eq!(u.watermark(0), Some(NO_WATERMARK), "a writer looking at its input again holds it");
    }

    #[test]
    fn writers_stalled_at_no_watermark_can_be_taken_for_idle() {
        let mut u = UpstreamWatermarks::new(1, 3);
        u.update(0, Marker::of(0, 5_000, false));
        u.update(0, Marker::of(1, NO_WATERMARK, false));
        assert!(u.stalled_are_idle(0));
        assert_eq!(u.watermark(0), Some(5_000), "the silent and the undecided writer no longer hold it back");
        assert!(!u.stalled_are_idle(0), "nothing left to change");
        u.update(0, Marker::of(2, 4_000, false));
        assert_eq!(u.watermark(0), Some(4_000), "a writer counts again once it writes a marker");
    }
}
