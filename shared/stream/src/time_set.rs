//! A set of event times in order, kept in a deque. Times mostly come in order, so
//! most inserts append and every release pops the front, with none of a tree's node
//! allocations and rebalancing (the health monitor's tree of unreleased times was
//! 6 % of the embedded runtime's processing). A time out of order is found by binary
//! search and shifted in. Where partitions are read in turns, times come far out of
//! order and the set grows to thousands; `insert_keeping_ends` keeps it at two times
//! a span.
//!
//! Its changelog entries are those of an `OrderedState<Millis, ()>`, so either reads
//! what the other wrote.

use std::collections::{BTreeMap, VecDeque};

use crate::changelog::{decode_key, decode_value, encode_key, encode_value, StateError, StateWrite};
use crate::Millis;

#[derive(Debug, Clone, Default)]
pub struct TimeSet {
    times: VecDeque<Millis>,
    /// Times changed since the last drain, with whether each was in the set at that
    /// drain; `None` until change tracking is asked for.
    changed: Option<BTreeMap<Millis, bool>>,
}

impl TimeSet {
    /// Adds `time`; a time already in the set is left as it is.
    pub fn insert(&mut self, time: Millis) {
        if self.place(time) {
            self.note(time, false);
        }
    }

    /// Puts `time` in its place unless it is there already; whether it was put.
    fn place(&mut self, time: Millis) -> bool {
        let at = match self.times.back() {
            Some(&last) if last >= time => match self.times.binary_search(&time) {
                Ok(_) => return false,
                Err(at) => at,
            },
            _ => self.times.len(),
        };
        self.times.insert(at, time);
        true
    }

    /// Adds `time`, keeping of the times in its span (the `span` ms from a multiple
    /// of `span`) only the first and the last: a time between them is not added, and
    /// a new first or last takes the place of the old. Where only gaps wider than
    /// `span - 1` between consecutive times matter, these are all the times that can
    /// border one (a gap inside a span is narrower), and the set stays at two times
    /// a span however out of order the times come (the health monitor's, reading
    /// partitions in turns, grew to thousands).
    pub fn insert_keeping_ends(&mut self, time: Millis, span: Millis) {
        let start = time - time.rem_euclid(span);
        if !self.append_keeping_ends(time, start) {
            self.place_keeping_ends(time, start, span);
        }
    }

    /// [`TimeSet::insert_keeping_ends`] anywhere in the set.
    fn place_keeping_ends(&mut self, time: Millis, start: Millis, span: Millis) {
        let from = self.times.partition_point(|&t| t < start);
        let to = self.times.partition_point(|&t| t < start.saturating_add(span));
        if from < to && (self.times[from]..=self.times[to - 1]).contains(&time) {
            return;
        }
        let at = if from < to && time < self.times[from] { from } else { to };
        self.times.insert(at, time);
        self.note(time, false);
        // The span's times are now `from..=to`; all but its ends go (more than one
        // only after restoring a set that kept every time).
        for _ in from + 1..to {
            let gone = self.times.remove(from + 1).expect("inside the span");
            self.note(gone, true);
        }
    }

    /// [`TimeSet::insert_keeping_ends`] for a time after every other, whose span
    /// (from `start`) holds at most two of them: most times. Whether it was done.
    fn append_keeping_ends(&mut self, time: Millis, start: Millis) -> bool {
        let n = self.times.len();
        let in_span = |i: usize| i < n && self.times[n - 1 - i] >= start;
        match self.times.back() {
            Some(&last) if last >= time => false,
            // The span's first and last: the time takes the last's place.
            Some(&last) if in_span(1) && !in_span(2) => {
                self.times[n - 1] = time;
                self.note(time, false);
                self.note(last, true);
                true
            }
            // A span of none or one: the time is its new last.
            _ if !in_span(1) => {
                self.times.push_back(time);
                self.note(time, false);
                true
            }
            _ => false,
        }
    }

    pub fn first(&self) -> Option<Millis> {
        self.times.front().copied()
    }

    pub fn pop_first(&mut self) -> Option<Millis> {
        let time = self.times.pop_front()?;
        self.note(time, true);
        Some(time)
    }

    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(BTreeMap::new);
    }

    fn note(&mut self, time: Millis, existed: bool) {
        if let Some(changed) = &mut self.changed {
            changed.entry(time).or_insert(existed);
        }
    }

    fn contains(&self, time: Millis) -> bool {
        self.times.binary_search(&time).is_ok()
    }

    /// Every time changed since the last drain, in order, as entries of `namespace`.
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        let Some(changed) = self.changed.take() else { return };
        for (time, existed) in changed {
            let present = self.contains(time);
            if existed || present {
                out.push(StateWrite { key: encode_key(namespace, &time), value: present.then(|| encode_value(&())) });
            }
        }
        self.changed = Some(BTreeMap::new());
    }

    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        let time: Millis = decode_key(rest)?;
        match value {
            // Not a change: the changelog holds it already. Noted as new, a restored
            // time released before the next drain would get no tombstone, and every
            // later restore would bring it back.
            Some(bytes) => {
                decode_value::<()>(bytes)?;
                self.place(time);
            }
            None => {
                if let Ok(at) = self.times.binary_search(&time) {
                    self.times.remove(at);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::split_key;
    use crate::state::OrderedState;
    use crate::test_log::{apply, Steps};

    #[test]
    fn holds_and_writes_what_an_ordered_state_of_times_does() {
        for seed in 1..=40u64 {
            let mut steps = Steps::seeded(seed);
            let (mut set, mut tree) = (TimeSet::default(), OrderedState::<Millis, ()>::default());
            let (mut set_log, mut tree_log) = (BTreeMap::new(), BTreeMap::new());
            set.track_changes();
            tree.track_changes();
            let mut clock = 0;
            for _ in 0..2_000 {
                match steps.next(10) {
                    // Mostly forward, sometimes back a little (out of order), often the same time.
                    0..=5 => {
                        clock += steps.next(3) as Millis;
                        let time = clock - steps.next(4) as Millis * (steps.next(3) as Millis);
                        set.insert(time);
                        tree.insert(time, ());
                    }
                    6 | 7 => assert_eq!(set.pop_first(), tree.pop_first().map(|(t, _)| t)),
                    step => {
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        set.drain_changes(1, &mut a);
                        tree.drain_changes(1, &mut b);
                        apply(&mut set_log, a);
                        apply(&mut tree_log, b);
                        assert_eq!(set_log, tree_log, "seed {seed}: the same changelog");
                        if step == 9 && steps.next(4) == 0 {
                            // A takeover: both read back from their logs by fresh
                            // states that track changes from the start, as a task's.
                            (set, tree) = (TimeSet::default(), OrderedState::default());
                            set.track_changes();
                            tree.track_changes();
                            for ((key, value), (tree_key, tree_value)) in set_log.iter().zip(&tree_log) {
                                set.restore_entry(&key[1..], Some(value)).unwrap();
                                tree.restore_entry(&tree_key[1..], Some(tree_value)).unwrap();
                            }
                        }
                    }
                }
                assert_eq!(set.first(), tree.first_key_value().map(|(&t, _)| t));
                assert_eq!(set.len(), tree.len());
            }
            let mut writes = Vec::new();
            set.drain_changes(1, &mut writes);
            apply(&mut set_log, writes);
            // Read back in reverse: every entry arrives out of order.
            let mut restored = TimeSet::default();
            for (key, value) in set_log.iter().rev() {
                let (ns, rest) = split_key(key).unwrap();
                assert_eq!(ns, 1);
                restored.restore_entry(rest, Some(value)).unwrap();
            }
            assert_eq!(restored.times, set.times, "seed {seed}: a restore gives the set back");
        }
    }

    #[test]
    fn keeps_the_ends_of_each_span_and_writes_what_it_drops() {
        let mut set = TimeSet::default();
        set.track_changes();
        for time in [12, 15, 11, 13, 19, 3, 20, 25, 10] {
            set.insert_keeping_ends(time, 10);
        }
        assert_eq!(Vec::from(set.times.clone()), vec![3, 10, 19, 20, 25]);
        let mut log = BTreeMap::new();
        let mut writes = Vec::new();
        set.drain_changes(1, &mut writes);
        apply(&mut log, writes);
        // A new end replaces one written at the last drain: its tombstone is written.
        set.insert_keeping_ends(9, 10);
        set.insert_keeping_ends(29, 10);
        let mut writes = Vec::new();
        set.drain_changes(1, &mut writes);
        let tombstones: Vec<Millis> =
            writes.iter().filter(|w| w.value.is_none()).map(|w| decode_key(&w.key[1..]).unwrap()).collect();
        assert_eq!(tombstones, vec![25]);
        apply(&mut log, writes);
        let mut restored = TimeSet::default();
        for (key, value) in &log {
            restored.restore_entry(&key[1..], Some(value)).unwrap();
        }
        assert_eq!(restored.times, set.times);
        // A set restored from one that kept every time drops a span's inner times at
        // its next insert there.
        let mut every = TimeSet::default();
        for time in [21, 22, 23, 24] {
            every.insert(time);
        }
        every.insert_keeping_ends(25, 10);
        assert_eq!(Vec::from(every.times), vec![21, 25]);
    }

    /// Times mostly in order, sometimes back, often in the same span: appending where
    /// it can keeps and writes what placing every time by search does.
    #[test]
    fn appending_keeps_and_writes_what_placing_by_search_does() {
        for seed in 1..=40u64 {
            let mut steps = Steps::seeded(seed);
            let (mut set, mut placed) = (TimeSet::default(), TimeSet::default());
            set.track_changes();
            placed.track_changes();
            let mut clock = 0;
            for _ in 0..2_000 {
                clock += steps.next(4) as Millis;
                let time = clock - steps.next(3) as Millis * steps.next(8) as Millis;
                set.insert_keeping_ends(time, 10);
                placed.place_keeping_ends(time, time - time.rem_euclid(10), 10);
                if steps.next(5) == 0 {
                    assert_eq!(set.pop_first(), placed.pop_first());
                }
                assert_eq!(set.times, placed.times, "seed {seed}");
            }
            let (mut writes, mut placed_writes) = (Vec::new(), Vec::new());
            set.drain_changes(1, &mut writes);
            placed.drain_changes(1, &mut placed_writes);
            assert_eq!(writes, placed_writes, "seed {seed}");
        }
    }

    #[test]
    fn a_tombstone_removes_its_time_on_restore() {
        let mut set = TimeSet::default();
        for time in [5, 3, 9] {
            set.insert(time);
        }
        set.restore_entry(&encode_key(1, &3i64)[1..], None).unwrap();
        assert_eq!(Vec::from(set.times), vec![5, 9]);
    }
}
