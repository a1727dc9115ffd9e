//! Event time of one input topic: a watermark per partition, and the rule that keeps
//! a silent partition from stalling its readers.
//!
//! An idle partition has nothing older to deliver, so its readers follow the topic's
//! watermark (the minimum over its active partitions) instead of waiting on it. Who
//! decides idleness depends on the runtime:
//!
//! - [`Idleness::EventTime`] (the embedded runtime, which interleaves partitions by
//!   event time): a partition is idle once its topic has advanced the timeout in event
//!   time without it. A replay gives the same answer every run, and a stall of the
//!   whole stream (a real throughput gap) idles nobody.
//! - [`Idleness::Marked`] (Kafka, where one partition's batch can run minutes of event
//!   time ahead of another's): the runtime marks a partition idle when it has had no
//!   record for a while on the wall clock, as Flink's `withIdleness` does. A member of
//!   a Kafka stage knows only its own partitions, so an idle partition cannot follow
//!   the topic: its readers leave it out ([`SourceClock::partition_watermark`]), and a
//!   task whose inputs are all idle is idle itself and says so downstream.

use serde::{Deserialize, Serialize};

use crate::watermark::{BoundedOutOfOrderness, END_OF_TIME, NO_WATERMARK};
use crate::Millis;

/// Which partitions' watermarks a record may have moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// Its own partition's only: the common case, no partition being idle.
    Own,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idleness {
    EventTime { timeout: Millis },
    Marked,
}

#[derive(Debug, Clone)]
pub struct SourceClock {
    idleness: Idleness,
    partitions: Vec<Partition>,
    /// Highest event time on any partition, and the first one (the idle clock's origin).
    topic_max: Millis,
    first_ts: Option<Millis>,
    /// Every partition's watermark as its readers see it, brought up to date by each
    /// change: a runtime reads them after every record, far more often than one
    /// clock of several changes.
    watermarks: Vec<Millis>,
    /// As of the last refresh: which partitions were idle, and the topic time from
    /// which one of the others would be ([`Idleness::EventTime`]). An idle partition
    /// stays idle until a record of its own (or a mark), so until that time a record
    /// on an active partition moves only its own watermark and the idle ones'.
    idle: Vec<bool>,
    idle_from: Millis,
}

#[derive(Debug, Clone)]
struct Partition {
    watermark: BoundedOutOfOrderness,
    progress: Progress,
    /// Marked idle by the runtime ([`Idleness::Marked`]).
    marked_idle: bool,
}

/// What a runtime saves of one partition so its watermark survives a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Progress {
    max_event_ts: Option<Millis>,
    /// The topic's highest event time when this partition last received a record.
    topic_max_at_last_record: Option<Millis>,
    /// The partition's input has ended.
    finished: bool,
}

impl SourceClock {
    pub fn new(partitions: u32, bound: Millis, idleness: Idleness) -> Self {
        SourceClock {
            idleness,
            partitions: (0..partitions)
                .map(|_| Partition {
                    watermark: BoundedOutOfOrderness::new(bound),
                    progress: Progress::default(),
                    marked_idle: false,
                })
                .collect(),
            topic_max: NO_WATERMARK,
            first_ts: None,
            watermarks: vec![NO_WATERMARK; partitions as usize],
            idle: vec![false; partitions as usize],
            idle_from: Millis::MAX,
        }
    }

    /// A record of `partition` at `event_ts`; whose watermarks it may have moved.
    pub fn observe(&mut self, partition: usize, event_ts: Millis) -> Moved {
        // A record on an active partition that idles none of the others (the topic
        // has not moved past `idle_from`): most records, and far cheaper than the
        // refresh.
        let same_idleness = self.first_ts.is_some() && !self.idle[partition];
        self.first_ts.get_or_insert(event_ts);
        self.topic_max = self.topic_max.max(event_ts);
        let p = &mut self.partitions[partition];
        p.marked_idle = false;
        p.watermark.observe(event_ts);
        p.progress.max_event_ts = Some(p.watermark.max_event_ts());
        p.progress.topic_max_at_last_record = Some(self.topic_max);
        if same_idleness && self.topic_max < self.idle_from {
            self.watermarks[partition] = own_watermark(p);
            if self.follow_active() {
                return Moved::All;
            }
            return Moved::Own;
        }
        self.refresh();
        Moved::All
    }

    /// Idle partitions up to the minimum over the active ones, which an active
    /// partition's record can only raise; whether that moved any.
    fn follow_active(&mut self) -> bool {
        if !self.idle.contains(&true) {
            return false;
        }
        let active = self.watermarks.iter().zip(&self.idle).filter(|(_, &idle)| !idle);
        let topic = active.map(|(&w, _)| w).min().unwrap_or(NO_WATERMARK);
        let mut moved = false;
        for (w, _) in self.watermarks.iter_mut().zip(&self.idle).filter(|(_, &idle)| idle) {
            moved |= topic > *w;
            *w = (*w).max(topic);
        }
        moved
    }

    /// The input has ended: every partition's watermark goes to the end of time.
    pub fn finish(&mut self) {
        for p in 0..self.partitions.len() {
            self.finish_partition(p);
        }
    }

    /// One partition's input has ended.
    pub fn finish_partition(&mut self, partition: usize) {
        self.partitions[partition].progress.finished = true;
        self.refresh();
    }

    /// Marks a partition idle or active ([`Idleness::Marked`]); whether that changed it.
    pub fn mark_idle(&mut self, partition: usize, idle: bool) -> bool {
        let p = &mut self.partitions[partition];
        let changed = std::mem::replace(&mut p.marked_idle, idle) != idle;
        self.refresh();
        changed
    }

    /// What to save of one partition.
    pub fn progress(&self, partition: usize) -> Progress {
        self.partitions[partition].progress
    }

    /// Puts one partition back where a saved [`Progress`] says it was.
    pub fn restore(&mut self, partition: usize, progress: Progress) {
        let p = &mut self.partitions[partition];
        p.watermark = BoundedOutOfOrderness::new(p.watermark.bound());
        if let Some(ts) = progress.max_event_ts {
            p.watermark.observe(ts);
            self.first_ts.get_or_insert(ts);
        }
        p.progress = progress;
        self.topic_max = self.partitions.iter().filter_map(|p| p.progress.max_event_ts).max().unwrap_or(NO_WATERMARK);
        self.refresh();
    }

    /// One partition's own watermark; `None` while it is idle, when its readers go by
    /// their other inputs.
    pub fn partition_watermark(&self, partition: usize) -> Option<Millis> {
        let p = &self.partitions[partition];
        (!self.is_idle(p)).then(|| own_watermark(p))
    }

    /// The watermark an idle partition had when it went quiet, if it has had records
    /// and has not ended: where it would hold its readers if it were not idle.
    pub fn idle_watermark(&self, partition: usize) -> Option<Millis> {
        let p = &self.partitions[partition];
        let w = own_watermark(p);
        (self.is_idle(p) && w != NO_WATERMARK && w != END_OF_TIME).then_some(w)
    }

    fn is_idle(&self, p: &Partition) -> bool {
        if p.progress.finished {
            return false;
        }
        match self.idleness {
            Idleness::Marked => p.marked_idle,
            Idleness::EventTime { timeout } => match p.progress.topic_max_at_last_record.or(self.first_ts) {
                Some(since) => self.topic_max.saturating_sub(since) > timeout,
                None => false,
            },
        }
    }

    /// The topic time from which an active partition is idle, if it gets no record
    /// before.
    fn idle_from(&self, p: &Partition) -> Millis {
        match (self.idleness, p.progress.topic_max_at_last_record.or(self.first_ts)) {
            (Idleness::EventTime { timeout }, Some(since)) if !p.progress.finished => {
                since.saturating_add(timeout).saturating_add(1)
            }
            _ => Millis::MAX,
        }
    }

    /// One partition's watermark, as [`SourceClock::watermarks`] gives it.
    pub fn watermark(&self, partition: usize) -> Millis {
        self.watermarks[partition]
    }

    /// Every partition's watermark: its own, or, while it is idle, at least the
    /// minimum over the active partitions.
    pub fn watermarks(&self) -> impl Iterator<Item = Millis> + '_ {
        self.watermarks.iter().copied()
    }

    fn refresh(&mut self) {
        let mut idle_from = Millis::MAX;
        for (p, partition) in self.partitions.iter().enumerate() {
            self.watermarks[p] = own_watermark(partition);
            self.idle[p] = self.is_idle(partition);
            if !self.idle[p] {
                idle_from = idle_from.min(self.idle_from(partition));
            }
        }
        self.idle_from = idle_from;
        self.follow_active();
    }
}

fn own_watermark(p: &Partition) -> Millis {
    if p.progress.finished {
        END_OF_TIME
    } else {
        p.watermark.current()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_active_partition_goes_by_its_own_events() {
        let mut c = SourceClock::new(2, 2000, Idleness::EventTime { timeout: 10_000 });
        c.observe(0, 10_000);
        c.observe(1, 5_000);
        assert_eq!(c.watermark(0), 8_000);
        assert_eq!(c.watermark(1), 3_000);
    }

    #[test]
    fn a_silent_partition_follows_the_topic_once_the_topic_moved_on_past_the_timeout() {
        let mut c = SourceClock::new(3, 2000, Idleness::EventTime { timeout: 10_000 });
        c.observe(0, 1_000);
        c.observe(1, 1_000);
        c.observe(0, 11_000);
        c.observe(1, 11_000);
        assert_eq!(c.watermark(2), NO_WATERMARK, "never heard from, but the topic moved only 10 s");
        c.observe(0, 11_001);
        c.observe(1, 12_000);
        assert_eq!(c.watermark(2), 9_001, "idle: follows the slowest active partition");
        c.observe(2, 12_500);
        assert_eq!(c.watermark(2), 10_500, "active again: its own watermark");
    }

    #[test]
    fn a_stall_of_the_whole_topic_idles_nobody_until_one_partition_moves_on() {
        let mut c = SourceClock::new(2, 2000, Idleness::EventTime { timeout: 4_000 });
        c.observe(0, 1_000);
        c.observe(1, 1_100);
        // However long the silence, event time has not moved: both stay active.
        assert_eq!(c.watermarks().collect::<Vec<_>>(), vec![-1_000, -900]);
        c.observe(0, 20_000);
        assert_eq!(c.watermark(1), 18_000, "partition 1 is idle once partition 0 moved on");
    }

    #[test]
    fn a_restored_partition_has_its_watermark_and_idleness_back() {
        let mut c = SourceClock::new(2, 2000, Idleness::EventTime { timeout: 4_000 });
        c.observe(0, 10_000);
        c.observe(1, 3_000);
        c.observe(0, 15_000);
        let mut restored = SourceClock::new(2, 2000, Idleness::EventTime { timeout: 4_000 });
        restored.restore(0, c.progress(0));
        restored.restore(1, c.progress(1));
        assert_eq!(restored.watermarks().collect::<Vec<_>>(), c.watermarks().collect::<Vec<_>>());
        assert_eq!(restored.watermark(1), 13_000, "partition 1 is idle and follows the topic");
    }

    #[test]
    fn a_finished_partition_no_longer_holds_anyone_back() {
        let mut c = SourceClock::new(2, 2000, Idleness::EventTime { timeout: 60_000 });
        c.observe(0, 10_000);
        c.observe(1, 3_000);
        c.finish_partition(1);
        assert_eq!(c.watermarks().collect::<Vec<_>>(), vec![8_000, END_OF_TIME]);
    }

    #[test]
    fn a_partition_marked_idle_is_left_out_until_its_next_record() {
        let mut c = SourceClock::new(2, 2000, Idleness::Marked);
        c.observe(0, 60_000);
        c.observe(1, 1_000);
        assert_eq!(c.partition_watermark(1), Some(-1_000), "however far the other partition ran ahead");
        assert!(c.mark_idle(1, true));
        assert_eq!(c.partition_watermark(1), None);
        assert_eq!(c.partition_watermark(0), Some(58_000));
        c.observe(1, 59_000);
        assert_eq!(c.partition_watermark(1), Some(57_000), "active again");
        c.finish_partition(1);
        c.mark_idle(1, true);
        assert_eq!(c.partition_watermark(1), Some(END_OF_TIME), "an ended partition is never idle");
    }

    #[test]
    fn finishing_releases_everything() {
        let mut c = SourceClock::new(2, 2000, Idleness::EventTime { timeout: 10_000 });
        c.observe(0, 1_000);
        c.finish();
        assert_eq!(c.watermarks().collect::<Vec<_>>(), vec![END_OF_TIME, END_OF_TIME]);
    }

    /// Records in disorder over partitions that fall idle and come back: a record
    /// that updates its own partition only leaves every watermark as a full refresh
    /// gives it.
    #[test]
    fn a_record_that_skips_the_refresh_changes_no_watermark() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for idleness in [Idleness::EventTime { timeout: 300 }, Idleness::Marked] {
            let mut c = SourceClock::new(4, 50, idleness);
            let mut now = 0;
            for _ in 0..5_000 {
                now += random(40) as Millis;
                // Partition 3 is quiet for long spells, so it goes idle (by event
                // time, or marked so), and comes back with records that may be older
                // than its last.
                let (partition, lag) = match random(20) {
                    0 => (3, random(2_000)),
                    n => ((n % 3) as usize, random(200)),
                };
                if idleness == Idleness::Marked && random(10) == 0 {
                    c.mark_idle(3, true);
                }
                c.observe(partition, now - lag as Millis);
                let mut refreshed = c.clone();
                refreshed.refresh();
                assert_eq!(c.watermarks, refreshed.watermarks);
            }
        }
    }
}
