//! Releases records in event-time order as the watermark passes them, so a rule that
//! depends on the order of a key's records (a running mean, a gap between events)
//! gives the same answer whatever order the partitions interleaved in.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::changelog::{decode_key, decode_value, encode_key, encode_value, StateError, StateWrite};
use crate::Millis;

/// A record's place in the release order: event time, tie-break, arrival.
type Place<K> = (Millis, K, u64);

/// Records waiting for the watermark, released by (event time, tie-break, arrival).
///
/// Records mostly come in event-time order, so those that sort after every record
/// waiting in `run` are appended to it, and only the others go to a heap: a record
/// costs a comparison and a push instead of a descent of an ordered tree (callgrind:
/// about 400 instructions a payment in a `BTreeMap`). Release takes the smaller of
/// the two heads, so the order is the same as one sorted collection's.
#[derive(Debug, Clone)]
pub struct EventTimeBuffer<K: Ord, T> {
    /// In release order.
    run: VecDeque<(Place<K>, T)>,
    /// The records that came after a later one.
    behind: BinaryHeap<Reverse<Entry<K, T>>>,
    arrivals: u64,
    /// The entries written or gone since the last drain, when a changelog keeps
    /// them: a record's value when it came, `None` when it left.
    changed: Option<BTreeMap<Place<K>, Option<T>>>,
    /// Restored entries, until the restore is finished (a tombstone may remove one).
    restoring: BTreeMap<Place<K>, T>,
}

/// A heap entry, ordered by its place alone.
#[derive(Debug, Clone)]
struct Entry<K, T>(Place<K>, T);

impl<K: Ord, T> PartialEq for Entry<K, T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K: Ord, T> Eq for Entry<K, T> {}

impl<K: Ord, T> PartialOrd for Entry<K, T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord, T> Ord for Entry<K, T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl<K: Ord, T> Default for EventTimeBuffer<K, T> {
    fn default() -> Self {
        EventTimeBuffer {
            run: VecDeque::new(),
            behind: BinaryHeap::new(),
            arrivals: 0,
            changed: None,
            restoring: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, T: Clone> EventTimeBuffer<K, T> {
    /// Buffers `item`; records with equal time are released in `tie_break` order.
    pub fn push(&mut self, event_ts: Millis, tie_break: K, item: T) {
        self.arrivals += 1;
        let place = (event_ts, tie_break, self.arrivals);
        if let Some(changed) = &mut self.changed {
            changed.insert(place.clone(), Some(item.clone()));
        }
        self.place(place, item);
    }

    fn place(&mut self, place: Place<K>, item: T) {
        match self.run.back() {
            Some((last, _)) if *last > place => self.behind.push(Reverse(Entry(place, item))),
            _ => self.run.push_back((place, item)),
        }
    }

    /// The earliest buffered record with an event time before `watermark`.
    pub fn pop_before(&mut self, watermark: Millis) -> Option<(Millis, T)> {
        let from_run = match (self.run.front(), self.behind.peek()) {
            (Some((first, _)), Some(Reverse(Entry(other, _)))) => first < other,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let ts = if from_run { self.run.front().map(|(p, _)| p.0) } else { self.behind.peek().map(|e| e.0 .0 .0) };
        if ts? >= watermark {
            return None;
        }
        let (place, item) = if from_run {
            self.run.pop_front()?
        } else {
            let Reverse(Entry(place, item)) = self.behind.pop()?;
            (place, item)
        };
        if let Some(changed) = &mut self.changed {
            // Come and gone since the last drain: the changelog never had it.
            if changed.remove(&place).is_none() {
                changed.insert(place.clone(), None);
            }
        }
        Some((place.0, item))
    }

    pub fn len(&self) -> usize {
        self.run.len() + self.behind.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(BTreeMap::new);
    }
}

impl<K, T> EventTimeBuffer<K, T>
where
    K: Ord + Clone + Serialize + DeserializeOwned,
    T: Clone + Serialize + DeserializeOwned,
{
    /// Every record buffered or released since the last drain, as entries of
    /// `namespace`, in the order of their places.
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        let Some(changed) = &mut self.changed else { return };
        for (place, item) in std::mem::take(changed) {
            out.push(StateWrite { key: encode_key(namespace, &place), value: item.as_ref().map(encode_value) });
        }
    }

    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        let place: Place<K> = decode_key(rest)?;
        match value {
            Some(bytes) => self.restoring.insert(place, decode_value(bytes)?),
            None => self.restoring.remove(&place),
        };
        Ok(())
    }

    /// The restored records join the buffer; arrival numbers go on after the
    /// highest of theirs.
    pub fn finish_restore(&mut self) {
        for (place, item) in std::mem::take(&mut self.restoring) {
            self.arrivals = self.arrivals.max(place.2);
            self.place(place, item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::split_key;
    use crate::state::OrderedState;
    use crate::test_log::{apply, take_alike, Steps};

    #[test]
    fn releases_in_time_then_tie_break_order_once_the_watermark_passes() {
        let mut b = EventTimeBuffer::default();
        b.push(30, "p3", 'c');
        b.push(10, "p2", 'b');
        b.push(10, "p1", 'a');
        assert_eq!(b.pop_before(10), None);
        assert_eq!(b.pop_before(11), Some((10, 'a')));
        assert_eq!(b.pop_before(11), Some((10, 'b')));
        assert_eq!(b.pop_before(11), None);
        assert_eq!(b.pop_before(Millis::MAX), Some((30, 'c')));
        assert!(b.is_empty());
    }

    /// The buffer as it was before it kept an in-order run: one ordered state.
    #[derive(Default)]
    struct Model {
        items: OrderedState<Place<String>, u32>,
        arrivals: u64,
    }

    impl Model {
        fn push(&mut self, ts: Millis, tie: String, item: u32) {
            self.arrivals += 1;
            self.items.insert((ts, tie, self.arrivals), item);
        }

        fn pop_before(&mut self, watermark: Millis) -> Option<(Millis, u32)> {
            let ((ts, _, _), _) = self.items.first_key_value()?;
            if *ts >= watermark {
                return None;
            }
            self.items.pop_first().map(|((ts, _, _), item)| (ts, item))
        }
    }

    /// Releases, changelog and takeovers as the single ordered state gave them, over
    /// input that is mostly in order, sometimes back a little, often tied in time.
    #[test]
    fn releases_and_writes_what_one_ordered_state_does() {
        for seed in 1..=40u64 {
            let mut steps = Steps::seeded(seed);
            let (mut buffer, mut model) = (EventTimeBuffer::default(), Model::default());
            let (mut log, mut model_log) = (BTreeMap::new(), BTreeMap::new());
            buffer.track_changes();
            model.items.track_changes();
            let (mut clock, mut watermark) = (0, 0);
            for item in 0..2_000u32 {
                match steps.next(10) {
                    0..=5 => {
                        clock += steps.next(3) as Millis;
                        let ts = clock - steps.next(4) as Millis * (steps.next(3) as Millis);
                        let tie = format!("p{}", steps.next(5));
                        buffer.push(ts, tie.clone(), item);
                        model.push(ts, tie, item);
                    }
                    6 | 7 => {
                        watermark = watermark.max(clock - steps.next(6) as Millis);
                        let (buffer, model) = (&mut buffer, &mut model);
                        take_alike(
                            || buffer.pop_before(watermark),
                            || model.pop_before(watermark),
                            &format!("seed {seed}"),
                        );
                    }
                    step => {
                        let (mut writes, mut model_writes) = (Vec::new(), Vec::new());
                        buffer.drain_changes(3, &mut writes);
                        model.items.drain_changes(3, &mut model_writes);
                        assert_eq!(writes, model_writes, "seed {seed}: the same changelog entries");
                        apply(&mut log, writes);
                        apply(&mut model_log, model_writes);
                        if step == 9 && steps.next(3) == 0 {
                            // A takeover: the buffer read back from its log in reverse,
                            // so every entry arrives out of order.
                            buffer = EventTimeBuffer::default();
                            buffer.track_changes();
                            for (key, value) in log.iter().rev() {
                                let (ns, rest) = split_key(key).unwrap();
                                assert_eq!(ns, 3);
                                buffer.restore_entry(rest, Some(value)).unwrap();
                            }
                            buffer.finish_restore();
                            model = Model::default();
                            model.items.track_changes();
                            for (key, value) in &model_log {
                                model.items.restore_entry(&key[1..], Some(value)).unwrap();
                            }
                            model.arrivals = model.items.keys().map(|(_, _, n)| *n).max().unwrap_or(0);
                        }
                    }
                }
                assert_eq!(buffer.len(), model.items.len(), "seed {seed}");
            }
            take_alike(|| buffer.pop_before(Millis::MAX), || model.pop_before(Millis::MAX), &format!("seed {seed}"));
        }
    }

    #[test]
    fn a_restored_tombstone_removes_its_record_and_arrivals_go_on_after_the_restored() {
        let mut first = EventTimeBuffer::default();
        first.track_changes();
        first.push(10, "a".to_string(), 1u32);
        first.push(20, "b".to_string(), 2);
        let mut writes = Vec::new();
        first.drain_changes(3, &mut writes);
        assert_eq!(first.pop_before(15), Some((10, 1)));
        first.drain_changes(3, &mut writes);
        assert_eq!(writes.last().map(|w| w.value.is_none()), Some(true), "a released record is a tombstone");

        let mut restored = EventTimeBuffer::default();
        for w in &writes {
            let (_, rest) = split_key(&w.key).unwrap();
            restored.restore_entry(rest, w.value.as_deref()).unwrap();
        }
        restored.finish_restore();
        // Same time and tie-break as the restored record: it goes after it.
        restored.push(20, "b".to_string(), 3);
        assert_eq!(restored.pop_before(Millis::MAX), Some((20, 2)));
        assert_eq!(restored.pop_before(Millis::MAX), Some((20, 3)));
        assert!(restored.is_empty());
    }
}
