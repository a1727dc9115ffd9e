//! The merge of a key partition's records that come forwarded by several writers.
//!
//! Keyed, task k reads its key partition's records in the order their producer sent
//! them, and judges each against the watermark of those before it. Unkeyed, they come
//! through the repartition topic from every writer, each writer's in its source
//! partition's order, but interleaved by transaction. The only witness of the order
//! they were sent in is the producer's stamp (the Kafka timestamp, then Vigil's
//! producer's `vigil-seq` header, then partition and offset), so the merge releases
//! them in stamp order: the lowest head goes once every writer that may still send a
//! lower one has said (its repartition markers' `read_to`) that it has read past it.
//! docs/design-keying-lateness.md tells the guarantee and its limits.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use vigil_model::Millis;

/// Where and when a record was produced, in the order the merge releases records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// The record's Kafka timestamp (the producer's clock at send).
    pub at_ms: Millis,
    /// The producer's sequence number (`vigil-seq`), 0 without one.
    pub seq: u64,
    /// The source partition and offset it was read at.
    pub partition: i32,
    pub offset: i64,
}

impl Stamp {
    /// Past every record: an ended writer's bound.
    pub const END: Stamp = Stamp { at_ms: Millis::MAX, seq: u64::MAX, partition: i32::MAX, offset: i64::MAX };
}

/// What a writer of the merged partition lets the merge assume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Idle or ended: it sends nothing the merge must wait for.
    LeftOut,
    /// It has read its source partition up to this record (`None`: nothing said yet):
    /// whatever it forwards later is stamped above it.
    ReadTo(Option<Stamp>),
}

/// A record waiting its turn: its stamp, its offset on the repartition partition.
#[derive(Debug, Clone)]
pub struct Held<R> {
    pub stamp: Stamp,
    pub offset: i64,
    pub record: R,
    pub event_ts: Millis,
}

/// One key partition's forwarded records, per writer, waiting for their turn.
#[derive(Debug, Clone)]
pub struct Merge<R> {
    writers: Vec<VecDeque<Held<R>>>,
    /// Per writer, the source offset of its last record released (-1: none): a record
    /// read again after a restore (or forwarded again) at or below it was processed.
    released: Vec<i64>,
    /// The last stamp released.
    last: Option<Stamp>,
    /// The producer time from which the key partition has had no record: the last
    /// stamp released, or the first bound heard.
    quiet_since: Option<Millis>,
}

/// What the merge keeps across a restart (its held records are read again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeProgress {
    pub released: Vec<i64>,
    pub last: Option<Stamp>,
    pub quiet_since: Option<Millis>,
}

impl<R> Merge<R> {
    pub fn new(writers: usize) -> Self {
        Merge {
            writers: (0..writers).map(|_| VecDeque::new()).collect(),
            released: vec![-1; writers],
            last: None,
            quiet_since: None,
        }
    }

    /// A record of `writer` (`held.offset` is where it is read again after a restart);
    /// `false` (and not kept) if it was released before, or is held already.
    pub fn push(&mut self, writer: usize, held: Held<R>) -> bool {
        let fifo = &mut self.writers[writer];
        let last = fifo.back().map_or(self.released[writer], |h| h.stamp.offset);
        if held.stamp.offset <= last {
            return false;
        }
        fifo.push_back(held);
        true
    }

    /// The source offset of `writer`'s last record released (-1: none).
    pub fn released(&self, writer: usize) -> i64 {
        self.released[writer]
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.writers.iter().all(VecDeque::is_empty)
    }

    /// The next record in stamp order, if no writer may still send a lower one;
    /// whether it is below the last released (its producer's clock or keying changed).
    pub fn release(&mut self, bound: impl Fn(usize) -> Bound) -> Option<(Held<R>, bool)> {
        let (writer, head) = (self.writers.iter().enumerate())
            .filter_map(|(w, fifo)| Some((w, fifo.front()?.stamp)))
            .min_by_key(|&(_, stamp)| stamp)?;
        let waits = |(w, fifo): (usize, &VecDeque<Held<R>>)| {
            fifo.is_empty()
                && match bound(w) {
                    Bound::LeftOut => false,
                    Bound::ReadTo(read_to) => read_to.is_none_or(|b| b < head),
                }
        };
        if self.writers.iter().enumerate().any(waits) {
            return None;
        }
        let held = self.writers[writer].pop_front().expect("its head");
        self.released[writer] = held.stamp.offset;
        let behind = self.last.is_some_and(|last| held.stamp < last);
        self.last = self.last.max(Some(held.stamp));
        self.quiet_since = Some(self.last.expect("just set").at_ms);
        Some((held, behind))
    }

    /// Whether the key partition has had no record for `quiet_ms` of producer time as
    /// far as every writer taking part has read: a key partition no key hashes to
    /// goes idle as its partition would, keyed.
    pub fn quiet(&mut self, quiet_ms: Millis, bound: impl Fn(usize) -> Bound) -> bool {
        if self.writers.iter().any(|f| !f.is_empty()) {
            return false;
        }
        let mut lowest = None;
        for w in 0..self.writers.len() {
            match bound(w) {
                Bound::LeftOut => {}
                Bound::ReadTo(None) => return false,
                Bound::ReadTo(Some(b)) => lowest = Some(lowest.map_or(b.at_ms, |l: Millis| l.min(b.at_ms))),
            }
        }
        let Some(lowest) = lowest else { return false };
        let since = *self.quiet_since.get_or_insert(lowest);
        lowest.saturating_sub(since) >= quiet_ms
    }

    /// The lowest offset held of the writers `which` picks: where to read their
    /// partition again from after a restart.
    pub fn first_held(&self, which: impl Fn(usize) -> bool) -> Option<i64> {
        (self.writers.iter().enumerate()).filter(|&(w, _)| which(w)).filter_map(|(_, f)| Some(f.front()?.offset)).min()
    }

    /// A record taken out of turn (the key partition's only sub-stream with records
    /// is in place and nothing waits): counted as released.
    pub fn released_at_once(&mut self, writer: usize, stamp: Stamp) {
        self.released[writer] = stamp.offset;
        self.last = self.last.max(Some(stamp));
        self.quiet_since = Some(self.last.expect("just set").at_ms);
    }

    pub fn held(&self) -> usize {
        self.writers.iter().map(VecDeque::len).sum()
    }

    pub fn progress(&self) -> MergeProgress {
        MergeProgress { released: self.released.clone(), last: self.last, quiet_since: self.quiet_since }
    }

    /// Back to a commit: nothing held, what was released then.
    pub fn restore(&mut self, progress: MergeProgress) {
        self.writers.iter_mut().for_each(VecDeque::clear);
        for (mine, theirs) in self.released.iter_mut().zip(progress.released) {
            *mine = theirs;
        }
        self.last = progress.last;
        self.quiet_since = progress.quiet_since;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(at_ms: Millis, seq: u64, partition: i32) -> Stamp {
        Stamp { at_ms, seq, partition, offset: seq as i64 }
    }

    fn held(stamp: Stamp, offset: i64) -> Held<u64> {
        Held { stamp, offset, record: stamp.seq, event_ts: 0 }
    }

    fn drain(m: &mut Merge<u64>, bound: impl Fn(usize) -> Bound + Copy) -> Vec<u64> {
        std::iter::from_fn(|| m.release(bound).map(|(h, _)| h.record)).collect()
    }

    /// A small deterministic generator, so the test needs no crate.
    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn records_come_out_in_stamp_order_whatever_the_order_writers_deliver_them() {
        let mut seed = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2_000 {
            // 40 records sent one after another, each to a random writer's partition,
            // several in one millisecond (told apart by their sequence number).
            let sent: Vec<(usize, Stamp)> =
                (0..40).map(|n| ((next(&mut seed) % 3) as usize, stamp(n as Millis / 4, n, 0))).collect();
            let mut logs: Vec<VecDeque<Stamp>> = vec![VecDeque::new(); 3];
            for &(w, s) in &sent {
                logs[w].push_back(Stamp { partition: w as i32, ..s });
            }
            // Each writer reads its log at its own pace, forwarding what it reads and
            // saying how far it read; the reader sees them interleaved at random.
            let mut m = Merge::new(3);
            let mut read_to: Vec<Option<Stamp>> = vec![None; 3];
            let mut out = Vec::new();
            let mut offset = 0;
            while logs.iter().any(|l| !l.is_empty()) {
                let w = (next(&mut seed) % 3) as usize;
                if let Some(s) = logs[w].pop_front() {
                    m.push(w, held(s, offset));
                    offset += 1;
                    read_to[w] = Some(s);
                }
                let said = read_to.clone();
                out.extend(drain(&mut m, |w| Bound::ReadTo(said[w])));
            }
            out.extend(drain(&mut m, |_| Bound::LeftOut));
            assert_eq!(out, (0..40).collect::<Vec<u64>>());
        }
    }

    #[test]
    fn a_head_waits_for_a_writer_that_has_not_read_past_it() {
        let mut m = Merge::new(2);
        m.push(0, held(stamp(10, 1, 0), 0));
        assert!(m.release(|_| Bound::ReadTo(None)).is_none(), "writer 1 has said nothing");
        assert!(m.release(|w| Bound::ReadTo(Some(stamp(9, 0, w as i32)))).is_none(), "it read to 9 ms");
        let (h, behind) = m.release(|w| Bound::ReadTo(Some(stamp(10, 2, w as i32)))).unwrap();
        assert_eq!((h.record, behind), (1, false), "read past it");
        assert_eq!(m.first_held(|_| true), None);
    }

    #[test]
    fn an_idle_or_ended_writer_holds_nothing() {
        let mut m = Merge::new(3);
        m.push(2, held(stamp(10, 1, 2), 0));
        assert_eq!(drain(&mut m, |_| Bound::LeftOut), vec![1]);
    }

    #[test]
    fn a_record_below_the_last_released_goes_at_once_and_says_so() {
        let mut m = Merge::new(2);
        m.push(0, held(stamp(10, 5, 0), 0));
        assert_eq!(drain(&mut m, |_| Bound::LeftOut), vec![5]);
        m.push(1, held(stamp(9, 3, 1), 1));
        let (h, behind) = m.release(|_| Bound::LeftOut).unwrap();
        assert_eq!((h.record, behind), (3, true));
    }

    #[test]
    fn records_released_before_a_restore_are_not_taken_again() {
        let mut m = Merge::new(2);
        m.push(0, held(stamp(10, 1, 0), 4));
        m.push(1, held(stamp(11, 2, 1), 5));
        let (first, _) = m.release(|_| Bound::LeftOut).unwrap();
        assert_eq!(first.record, 1);
        assert_eq!(m.first_held(|_| true), Some(5), "where to read again from");
        assert_eq!(m.first_held(|w| w == 0), None);
        let progress = m.progress();
        let mut again: Merge<u64> = Merge::new(2);
        again.restore(progress);
        assert!(!again.push(0, held(stamp(10, 1, 0), 4)), "released before");
        assert!(again.push(1, held(stamp(11, 2, 1), 5)));
        assert!(!again.push(1, held(stamp(11, 2, 1), 6)), "forwarded again: held already");
        again.restore(m.progress());
        assert!(again.push(1, held(stamp(11, 2, 1), 5)));
        assert_eq!(drain(&mut again, |_| Bound::LeftOut), vec![2]);
    }

    #[test]
    fn a_key_partition_without_records_goes_quiet_by_producer_time() {
        let mut m: Merge<u64> = Merge::new(2);
        let at = |ms| move |w: usize| Bound::ReadTo(Some(stamp(ms, 0, w as i32)));
        assert!(!m.quiet(10_000, at(1_000)), "the first bound heard starts the count");
        assert!(!m.quiet(10_000, at(10_999)));
        assert!(m.quiet(10_000, at(11_000)));
        assert!(!m.quiet(10_000, |_| Bound::ReadTo(None)), "a writer not heard from may have one");
        m.push(0, held(stamp(11_500, 1, 0), 0));
        assert!(!m.quiet(10_000, at(30_000)), "a record waits");
        drain(&mut m, |_| Bound::LeftOut);
        assert!(!m.quiet(10_000, at(21_499)));
        assert!(m.quiet(10_000, at(21_500)));
    }
}
