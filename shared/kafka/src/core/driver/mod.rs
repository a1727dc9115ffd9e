//! A test driver for the task core, as Kafka Streams' TopologyTestDriver drives a
//! topology: records, markers, commits, aborts and rebalances in; outputs, markers,
//! changelog writes and offsets out, all in process. A [`Broker`] stands in for what
//! the cluster keeps between a stage's members (the compacted changelog, the
//! committed offsets); a [`Member`] is one member's core with what it produced and
//! delivered; a [`Cluster`] runs several members over logs of the input partitions,
//! as consumers fetch them. Outputs are encoded as the seed's JSON ([`JsonEncoder`]),
//! so a test reads what a user would.

mod cluster;

use std::collections::{BTreeMap, BTreeSet};

use vigil_model::topology::Topic;
use vigil_model::{Config, Printed, Record};
use vigil_stream::stage::In;
use vigil_stream::Stage;

use super::{entry_of, CommitBatch, Correction, Emitted, Encode, Handling, Incoming, Marker, Slot, TaskCore};
pub use cluster::Cluster;

/// The partitions of every input in the driver, as in the seed's default.
pub const PARTITIONS: u32 = 4;

/// Outputs as the seed's JSON lines (what `vigil-pipeline` prints after the tag).
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonEncoder;

impl Encode for JsonEncoder {
    type Error = std::convert::Infallible;

    fn encode<T: Record>(&self, _: &'static Topic, record: &T) -> Result<Vec<u8>, Self::Error> {
        let mut json = Vec::new();
        record.write_json(&mut json);
        Ok(json)
    }
}

/// An output as a line a test can compare: its topic, key and JSON.
pub fn line(e: &Emitted) -> String {
    format!("{} {} {}", e.topic.name, e.key, String::from_utf8_lossy(&e.value))
}

/// Outputs as lines, sorted: the same set whatever the order.
pub fn sorted(outputs: &[Emitted]) -> Vec<String> {
    let mut lines: Vec<String> = outputs.iter().map(line).collect();
    lines.sort();
    lines
}

/// The outputs written to `topic`, decoded from their JSON.
pub fn records_on<T: serde::de::DeserializeOwned>(outputs: &[Emitted], topic: &Topic) -> Vec<T> {
    outputs
        .iter()
        .filter(|e| e.topic.is(topic))
        .map(|e| serde_json::from_slice(&e.value).expect("an output of the driver is its record's JSON"))
        .collect()
}

/// What a Kafka cluster keeps for a stage between its members' lives.
#[derive(Default)]
pub struct Broker {
    /// The changelog as compaction leaves it: (partition, key) → value.
    pub changelog: BTreeMap<(i32, Vec<u8>), Vec<u8>>,
    pub offsets: BTreeMap<Slot, i64>,
    /// The next offset of each partition of the stage's repartition topics.
    pub repartition_ends: BTreeMap<Slot, i64>,
}

/// One member of a stage: its core, and its outputs (delivered once committed).
pub struct Member<S: Stage> {
    pub core: TaskCore<S, JsonEncoder>,
    pub pending: Vec<Emitted>,
    pub delivered: Vec<Emitted>,
    pub markers: Vec<Marker>,
    /// What restores found committed with the state that the member did not know.
    pub corrections: Vec<Correction>,
}

impl<S: Stage> Member<S> {
    pub fn new(stage: S) -> Self {
        Member {
            core: TaskCore::new(stage, Config::default(), JsonEncoder),
            pending: Vec::new(),
            delivered: Vec::new(),
            markers: Vec::new(),
            corrections: Vec::new(),
        }
    }

    pub fn assign(&mut self, broker: &Broker, slots: &[Slot]) {
        let committed: Vec<(Slot, Option<i64>)> = slots.iter().map(|s| (*s, broker.offsets.get(s).copied())).collect();
        let tasks = self.core.assign(slots, &committed);
        self.restore(broker, &tasks);
    }

    pub fn restore(&mut self, broker: &Broker, tasks: &[i32]) {
        for &task in tasks {
            self.core.begin_restore(task);
        }
        let partitions = self.core.partitions();
        let restored: Vec<_> = self
            .core
            .restoring(tasks)
            .into_iter()
            .map(|mut restore| {
                let task = restore.task();
                for ((p, key), value) in &broker.changelog {
                    if let (true, Some(entry)) = (*p == task % partitions, entry_of(task, key)) {
                        restore.entry(entry, Some(value)).unwrap();
                    }
                }
                restore.finish()
            })
            .collect();
        for task in restored {
            self.corrections.extend(self.core.finish_restore(task));
        }
    }

    pub fn feed(&mut self, slot: Slot, offset: i64, incoming: Incoming<In<S>>) -> Handling {
        let handling = self.core.on_input(slot, offset, incoming).unwrap();
        assert!(!matches!(handling, Handling::Held { .. }), "{slot:?} is held back");
        self.pending.extend(self.core.take_outputs().expect("every output encodes as JSON"));
        handling
    }

    /// The stage's repartition topics' partitions this member reads.
    pub fn repartition_slots(&self) -> Vec<Slot> {
        let tasks: Vec<i32> = self.core.tasks().collect();
        let inputs = self.core.inputs();
        (0..inputs.len())
            .filter(|&i| inputs[i].is_repartition())
            .flat_map(|i| tasks.iter().map(move |&p| (i, p)))
            .collect()
    }

    /// Every writer of the repartition partitions says it forwards nothing, at their
    /// first offsets (as the markers of every task's first commit would).
    pub fn hear_idle_writers(&mut self) {
        let idle = |writer| Incoming::Marker(Marker::of(writer, 0, true));
        for slot in self.repartition_slots() {
            for writer in 0..PARTITIONS {
                self.feed(slot, writer as i64, idle(writer));
            }
        }
    }

    /// As the shell does for a task whose source resumed: the member commits and
    /// reads the markers it wrote to the repartition topics (the ask, then the
    /// answers), every task asked answering (its source read to its end).
    pub fn hear_answers(&mut self) {
        for _ in 0..2 {
            for (task, _) in self.core.to_verify() {
                self.core.verified(task);
            }
            let markers = self.commit_repeating(&mut Broker::default(), false);
            for slot in self.repartition_slots() {
                for (_, marker) in markers.iter().filter(|(r, _)| *r == slot.0) {
                    let offset = self.core.position(slot).unwrap_or(0);
                    self.feed(slot, offset, Incoming::Marker(*marker));
                }
            }
        }
    }

    /// Commits, and returns the markers it wrote to the repartition topics (in a
    /// stage of several, each task's once for each).
    pub fn commit(&mut self, broker: &mut Broker) -> Vec<Marker> {
        self.commit_repeating(broker, false).into_iter().map(|(_, marker)| marker).collect()
    }

    /// A commit; with `repeat_idle`, one at which the shell asks every idle task to
    /// say again that it is idle.
    pub fn commit_repeating(&mut self, broker: &mut Broker, repeat_idle: bool) -> Vec<(usize, Marker)> {
        let batch = self.write_transaction(broker, repeat_idle);
        self.markers.extend(batch.markers);
        self.core.committed();
        batch.repartition_markers
    }

    /// A commit that completed on the broker while the member was told it failed (a
    /// commit that timed out, say): its outputs are out, the member does not know.
    /// The markers it wrote to the repartition topics.
    pub fn commit_unbeknownst(&mut self, broker: &mut Broker) -> Vec<(usize, Marker)> {
        self.write_transaction(broker, false).repartition_markers
    }

    /// What a committed transaction leaves on the broker and delivers.
    fn write_transaction(&mut self, broker: &mut Broker, repeat_idle: bool) -> CommitBatch {
        let repeat: Option<BTreeSet<i32>> =
            repeat_idle.then(|| self.core.idle_tasks().into_iter().map(|(task, _)| task).collect());
        let mut batch = self.core.prepare_commit(repeat.as_ref());
        for w in batch.changelog.drain(..) {
            match w.value {
                Some(v) => broker.changelog.insert((w.partition, w.key), v),
                None => broker.changelog.remove(&(w.partition, w.key)),
            };
        }
        broker.offsets.extend(batch.offsets.iter().copied());
        self.delivered.append(&mut self.pending);
        batch
    }

    /// The transaction is aborted: what was produced is never seen; the tasks come
    /// back from the changelog; the positions to read from again.
    pub fn abort(&mut self, broker: &Broker) -> Vec<(Slot, Option<i64>)> {
        self.pending.clear();
        let rewind = self.core.abort();
        self.restore(broker, &rewind.tasks);
        rewind.slots.into_iter().map(|slot| (slot, self.core.committed_offset(slot))).collect()
    }
}

/// Every member commits, and reads the markers every member wrote to the stage's
/// repartition topics (as they would come over Kafka), until nothing moves.
pub fn commit_all<S: Stage>(members: &mut [&mut Member<S>], broker: &mut Broker) {
    for _ in 0..3 {
        let markers: Vec<(usize, Marker)> =
            members.iter_mut().flat_map(|m| m.commit_repeating(broker, false)).collect();
        for m in members.iter_mut() {
            for slot in m.repartition_slots() {
                for (_, marker) in markers.iter().filter(|(r, _)| *r == slot.0) {
                    let end = broker.repartition_ends.entry(slot).or_insert(0);
                    *end += 1;
                    m.feed(slot, *end - 1, Incoming::Marker(*marker));
                }
            }
        }
    }
}

/// Every partition of a stage's inputs, its repartition topics included.
pub fn all_slots(inputs: usize) -> Vec<Slot> {
    (0..inputs).flat_map(|i| (0..PARTITIONS as i32).map(move |p| (i, p))).collect()
}

/// Ends every source partition (the generator's end-of-input marker) and commits.
pub fn finish<S: Stage>(members: &mut [&mut Member<S>], broker: &mut Broker) {
    let end = Marker::END;
    for m in members.iter_mut() {
        let sources: Vec<Slot> = all_slots(m.core.inputs().len())
            .into_iter()
            .filter(|&(i, p)| m.core.inputs()[i].is_source() && m.core.tasks().any(|t| t == p))
            .collect();
        for slot in sources {
            let offset = broker.offsets.get(&slot).copied().unwrap_or(0).max(m.core.position(slot).unwrap_or(0));
            m.feed(slot, offset, Incoming::Marker(end));
        }
    }
    commit_all(members, broker);
}
