//! Input: every message of an assigned partition, in offset order — a record to
//! process, reroute or hold back, a watermark marker, or bytes that are no record.

use vigil_model::Millis;
use vigil_stream::stage::In;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Stage;

use super::keying::Placement;
use super::markers::Marker;
use super::{CoreError, Emitted, Encode, Encoding, Handling, Incoming, Slot, TaskCore};
use crate::inputs::InputKind;

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// One message of an input partition, at `offset`.
    ///
    /// A task reads no record of its source partitions while a writer of its
    /// repartition partitions holds them at "no watermark": until then it cannot tell
    /// whether records of its keys are on their way there, and its watermark would run
    /// ahead of them. Every task is such a writer, and says nothing there until it
    /// knows how its own source input is keyed: it looks ahead (holding what it looks
    /// at) until a record is off its key's partition (it forwards), eight in a row are
    /// in place (it does not), or the partition ends or goes idle. So correctly keyed
    /// input is judged exactly as the embedded runtime judges it, and misplaced input
    /// against the watermarks of the tasks forwarding it.
    pub fn on_input(&mut self, slot: Slot, offset: i64, incoming: Incoming<In<S>>) -> Result<Handling, CoreError> {
        let (input, partition) = slot;
        let id = self.parallelism.task_of(partition);
        if !self.tasks.contains_key(&id) {
            return Err(CoreError::NotAssigned { input, partition });
        }
        if self.resumes(slot, &incoming) {
            self.resume(id, slot);
        }
        if self.inputs[input].is_source() && matches!(incoming, Incoming::Record { .. }) {
            self.reconsider(id);
        }
        if self.inputs[input].is_source() && (self.held.contains_key(&slot) || self.waiting(id)) {
            return Ok(self.hold(id, slot, offset, &incoming));
        }
        self.positions.insert(slot, offset + 1);
        self.dirty = true;
        let mut handling = Handling::Processed;
        match incoming {
            Incoming::Marker(marker) => self.on_marker(slot, marker),
            Incoming::Undecodable => {
                let ledger = &mut self.tasks.get_mut(&id).expect("checked above").task.ledger;
                ledger.read += 1;
                ledger.dead_letters += 1;
                ledger.written += 1;
            }
            Incoming::Record { record, event_ts } => {
                if let Some(clock) = &mut self.clocks[input] {
                    clock.observe(partition as usize, event_ts);
                }
                match self.misplaced(slot, &record) {
                    Some(reroute) => {
                        self.learn_placement(id, Placement::Off(event_ts));
                        self.tasks.get_mut(&id).expect("checked above").task.ledger.rerouted += 1;
                        handling = reroute;
                    }
                    None => {
                        if self.inputs[input].is_source() {
                            self.learn_placement(id, Placement::InPlace);
                        }
                        self.process(id, record)
                    }
                }
            }
        }
        self.advance_watermark(id);
        Ok(handling)
    }

    /// A source message its task may not read yet: looked at once (towards the task's
    /// decision), then held.
    fn hold(&mut self, id: i32, slot: Slot, offset: i64, incoming: &Incoming<In<S>>) -> Handling {
        let from = *self.held.entry(slot).or_insert(offset);
        let looked = self.looked.entry(slot).or_insert(offset);
        if offset >= *looked {
            *looked = offset + 1;
            let placement = match incoming {
                Incoming::Record { record, event_ts } => match self.misplaced(slot, record) {
                    Some(_) => Placement::Off(*event_ts),
                    None => Placement::InPlace,
                },
                Incoming::Marker(m) if m.task.is_none() => Placement::Ended,
                _ => return self.held_or_rewound(id, slot, from),
            };
            self.learn_placement(id, placement);
        }
        self.held_or_rewound(id, slot, from)
    }

    /// Held while its task is undecided (looking ahead), then paused and rewound.
    fn held_or_rewound(&mut self, id: i32, slot: Slot, from: i64) -> Handling {
        if !self.tasks[&id].decided {
            return Handling::Held { seek: None };
        }
        self.paused.insert(slot);
        Handling::Held { seek: Some(from) }
    }

    /// A source record on another partition than its key's goes through the stage's
    /// repartition topic to the task that owns its key, as Kafka Streams re-keys.
    fn misplaced(&self, (input, partition): Slot, record: &In<S>) -> Option<Handling> {
        if !self.inputs[input].is_source() {
            return None;
        }
        let key = self.stage.partition_key(record);
        let home = self.partitioner.partition(key.as_bytes()) as i32;
        if home == partition {
            return None;
        }
        let via = self.inputs.iter().position(|i| i.kind == InputKind::Repartition { source: input })?;
        Some(Handling::Reroute { input: via, partition: home, key: key.to_string() })
    }

    fn process(&mut self, id: i32, record: In<S>) {
        self.tasks.get_mut(&id).expect("a listed task").task.record(record, &mut self.scratch);
        // A record is late if the operator sent it to a late side output.
        let late = self.collect(id);
        self.tasks.get_mut(&id).expect("a listed task").task.ledger.processed(late);
    }

    fn on_marker(&mut self, (input, p): Slot, marker: Marker) {
        match (&mut self.clocks[input], &mut self.upstream[input], marker.task) {
            (Some(clock), _, None) if marker.watermark == Millis::MAX => clock.finish_partition(p as usize),
            (_, Some(u), Some(writer)) => {
                u.update(p as usize, marker);
                if self.inputs[input].is_repartition() {
                    // Only an undecided writer says "no watermark" without being idle.
                    if marker.watermark == NO_WATERMARK && !marker.idle {
                        u.undecided(p as usize, writer);
                    }
                    if let Some(task) = self.tasks.get_mut(&self.parallelism.task_of(p)) {
                        task.asked = task.asked.max(marker.generation);
                    }
                }
            }
            _ => tracing::warn!(partition = p, ?marker, "ignoring a watermark marker this input does not expect"),
        }
    }

    /// Encodes what task `task`'s operator emitted; whether any went to a late side
    /// output.
    pub(super) fn collect(&mut self, task: i32) -> bool {
        let mut late = false;
        let written = self.scratch.len() as u64;
        for output in self.scratch.drain(..) {
            match self.stage.write(output, Encoding(&self.encoder)) {
                Ok(emitted) => {
                    late |= emitted.topic.late;
                    self.outputs.push(emitted);
                }
                Err(e) => {
                    self.failed.get_or_insert(e);
                }
            }
        }
        self.tasks.get_mut(&task).expect("a listed task").task.ledger.written += written;
        late
    }

    /// What the operators emitted since the last call, in order; or the first output
    /// that could not be encoded (the member then starts over from its changelog).
    pub fn take_outputs(&mut self) -> Result<std::vec::Drain<'_, Emitted>, E::Error> {
        if let Some(e) = self.failed.take() {
            self.outputs.clear();
            return Err(e);
        }
        Ok(self.outputs.drain(..))
    }
}
