//! Releases records in event-time order as the watermark passes them, so a rule that
//! depends on the order of a key's records (a running mean, a gap between events)
//! gives the same answer whatever order the partitions interleaved in.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::changelog::{decode_key, decode_value, encode_key, encode_value, StateError, StateWrite};
use crate::Millis;

/// A record's place in the release order: event time, tie-break, arrival.
type Place<K> = (Millis, K, u64);

/// The most records in one changelog entry (a chunk), which keeps an entry well
/// under the changelog topic's `max.message.bytes`.
const CHUNK_RECORDS: u64 = 4096;

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
    /// What the changelog holds of the buffer, and whether one keeps it.
    log: ChunkLog,
    tracking: bool,
    /// Restored chunks, and records of the changelog format before chunks, until
    /// the restore is finished (a tombstone may remove one).
    restoring: BTreeMap<u64, Vec<(Place<K>, T)>>,
    restoring_single: BTreeMap<Place<K>, (Vec<u8>, T)>,
}

/// The buffer's changelog: its records in chunks, one entry for the records that
/// came between two drains (split every `CHUNK_RECORDS`), keyed by the arrival
/// number of its first; a chunk is written again without the records released
/// since, and deleted once it has none. The records a stage holds for the
/// watermark mostly wait across one commit, and an entry each went into the
/// changelog at one commit and out at the next: for payment-anomalies, about one
/// changelog record per payment, most of what the broker wrote for it.
#[derive(Debug, Clone, Default)]
struct ChunkLog {
    /// The first arrival number of each chunk the changelog holds: a chunk holds
    /// the records arrived from there up to the next chunk.
    written: BTreeSet<u64>,
    /// Chunks with records released since the last drain.
    touched: BTreeSet<u64>,
    /// Records that arrived after this one are in no chunk yet.
    chunked_through: u64,
    /// Keys of single-record entries of the format before chunks, restored: they
    /// are deleted at the next drain, their records chunked anew.
    singles: Vec<Vec<u8>>,
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
            log: ChunkLog::default(),
            tracking: false,
            restoring: BTreeMap::new(),
            restoring_single: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, T: Clone> EventTimeBuffer<K, T> {
    /// Buffers `item`; records with equal time are released in `tie_break` order.
    pub fn push(&mut self, event_ts: Millis, tie_break: K, item: T) {
        self.arrivals += 1;
        self.place((event_ts, tie_break, self.arrivals), item);
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
        let log = &mut self.log;
        if self.tracking && place.2 <= log.chunked_through {
            if let Some(&chunk) = log.written.range(..=place.2).next_back() {
                log.touched.insert(chunk);
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
        self.tracking = true;
    }
}

impl<K, T> EventTimeBuffer<K, T>
where
    K: Ord + Clone + Serialize + DeserializeOwned,
    T: Clone + Serialize + DeserializeOwned,
{
    /// The chunks written, rewritten or deleted since the last drain, as entries
    /// of `namespace` (see `ChunkLog`).
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        if !self.tracking {
            return;
        }
        let log = &mut self.log;
        out.extend(log.singles.drain(..).map(|key| StateWrite { key, value: None }));
        let fresh = log.chunked_through;
        if log.touched.is_empty() && self.arrivals == fresh {
            return;
        }
        let mut chunks: BTreeMap<u64, Vec<(&Place<K>, &T)>> = BTreeMap::new();
        let held = self.run.iter().map(|(p, t)| (p, t)).chain(self.behind.iter().map(|Reverse(Entry(p, t))| (p, t)));
        for (place, item) in held {
            let arrival = place.2;
            let chunk = if arrival > fresh {
                fresh + 1 + (arrival - fresh - 1) / CHUNK_RECORDS * CHUNK_RECORDS
            } else {
                match log.written.range(..=arrival).next_back() {
                    Some(&chunk) if log.touched.contains(&chunk) => chunk,
                    _ => continue,
                }
            };
            chunks.entry(chunk).or_default().push((place, item));
        }
        for chunk in std::mem::take(&mut log.touched) {
            if !chunks.contains_key(&chunk) {
                log.written.remove(&chunk);
                out.push(StateWrite { key: encode_key(namespace, &chunk), value: None });
            }
        }
        for (chunk, mut records) in chunks {
            records.sort_unstable_by(|a, b| a.0.cmp(b.0));
            log.written.insert(chunk);
            out.push(StateWrite { key: encode_key(namespace, &chunk), value: Some(encode_value(&records)) });
        }
        log.chunked_through = self.arrivals;
    }

    /// A chunk as the changelog holds it (`rest`: its key after the namespace).
    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        let chunk: u64 = decode_key(rest)?;
        match value {
            Some(bytes) => self.restoring.insert(chunk, decode_value(bytes)?),
            None => self.restoring.remove(&chunk),
        };
        Ok(())
    }

    /// A record of the changelog format before chunks, one entry a record in
    /// `namespace`: restored, then deleted at the next drain and chunked anew.
    pub fn restore_single(&mut self, namespace: u8, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        let place: Place<K> = decode_key(rest)?;
        match value {
            Some(bytes) => {
                let key = [&[namespace], rest].concat();
                self.restoring_single.insert(place, (key, decode_value(bytes)?))
            }
            None => self.restoring_single.remove(&place),
        };
        Ok(())
    }

    /// The restored records join the buffer; arrival numbers go on after the
    /// highest of theirs. Records of the format before chunks come after those,
    /// in their order, as if they had just arrived.
    pub fn finish_restore(&mut self) {
        for (chunk, records) in std::mem::take(&mut self.restoring) {
            self.log.written.insert(chunk);
            for (place, item) in records {
                self.arrivals = self.arrivals.max(place.2);
                self.place(place, item);
            }
        }
        self.log.chunked_through = self.arrivals;
        for ((ts, tie_break, _), (key, item)) in std::mem::take(&mut self.restoring_single) {
            self.log.singles.push(key);
            self.arrivals += 1;
            self.place((ts, tie_break, self.arrivals), item);
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

    /// Releases and takeovers as the single ordered state gave them, over input
    /// that is mostly in order, sometimes back a little, often tied in time: what
    /// the chunks restore is what the state's one entry a record restores.
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
            let mut writes = Vec::new();
            buffer.drain_changes(3, &mut writes);
            apply(&mut log, writes);
            assert!(log.is_empty(), "seed {seed}: every chunk deleted once its records are released");
        }
    }

    /// A record waiting across a commit is written once, in its drain's chunk, and
    /// the chunk goes when its last record does: two entries for a commit's records
    /// where there were two a record.
    #[test]
    fn records_go_to_the_changelog_a_chunk_a_drain() {
        let mut b = EventTimeBuffer::default();
        b.track_changes();
        for i in 0..100 {
            b.push(i, i, i as u32);
        }
        let mut writes = Vec::new();
        b.drain_changes(4, &mut writes);
        assert_eq!(writes.len(), 1, "one chunk for the drain's 100 records");
        assert_eq!(writes[0].key, encode_key(4, &1u64));
        let chunk: Vec<(Place<i64>, u32)> = decode_value(writes[0].value.as_deref().unwrap()).unwrap();
        assert_eq!(chunk.len(), 100);

        // Half released: the chunk again with the other half; then the rest.
        while b.pop_before(50).is_some() {}
        writes.clear();
        b.drain_changes(4, &mut writes);
        let chunk: Vec<(Place<i64>, u32)> = decode_value(writes[0].value.as_deref().unwrap()).unwrap();
        assert_eq!((writes.len(), chunk.len(), chunk[0].1), (1, 50, 50));
        while b.pop_before(Millis::MAX).is_some() {}
        writes.clear();
        b.drain_changes(4, &mut writes);
        assert_eq!(writes, vec![StateWrite { key: encode_key(4, &1u64), value: None }]);

        // More than a chunk holds in one drain: split.
        for i in 0..(CHUNK_RECORDS as i64 + 1) {
            b.push(i, i, 0);
        }
        writes.clear();
        b.drain_changes(4, &mut writes);
        assert_eq!(
            writes.iter().map(|w| w.key.clone()).collect::<Vec<_>>(),
            vec![encode_key(4, &101u64), encode_key(4, &(101 + CHUNK_RECORDS))]
        );
    }

    /// A changelog written one entry a record (before chunks) restores, and its
    /// entries are replaced by a chunk at the next drain.
    #[test]
    fn single_record_entries_of_the_format_before_restore_and_become_a_chunk() {
        let mut old: OrderedState<Place<String>, u32> = OrderedState::default();
        old.track_changes();
        old.insert((10, "a".into(), 1), 1);
        old.insert((20, "b".into(), 2), 2);
        let mut singles = Vec::new();
        old.drain_changes(3, &mut singles);

        let mut b = EventTimeBuffer::<String, u32>::default();
        b.track_changes();
        for w in &singles {
            let (ns, rest) = split_key(&w.key).unwrap();
            b.restore_single(ns, rest, w.value.as_deref()).unwrap();
        }
        b.finish_restore();
        let mut writes = Vec::new();
        b.drain_changes(4, &mut writes);
        let deleted: Vec<_> = writes.iter().filter(|w| w.value.is_none()).map(|w| w.key.clone()).collect();
        assert_eq!(deleted, singles.iter().map(|w| w.key.clone()).collect::<Vec<_>>());
        assert_eq!(writes.len(), 3, "the two singles deleted, one chunk written");

        let mut restored = EventTimeBuffer::<String, u32>::default();
        let (_, rest) = split_key(&writes[2].key).unwrap();
        restored.restore_entry(rest, writes[2].value.as_deref()).unwrap();
        restored.finish_restore();
        assert_eq!(restored.pop_before(Millis::MAX), Some((10, 1)));
        assert_eq!(restored.pop_before(Millis::MAX), Some((20, 2)));
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
        let chunk: Vec<(Place<String>, u32)> = decode_value(writes.last().unwrap().value.as_deref().unwrap()).unwrap();
        assert_eq!(chunk, vec![((20, "b".to_string(), 2), 2)], "a released record leaves its chunk");

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
