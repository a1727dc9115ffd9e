//! Input: every message of an assigned partition, in offset order — a record to
//! process, reroute or hold back, a watermark marker, or bytes that are no record.

use vigil_model::Millis;
use vigil_stream::stage::In;
use vigil_stream::watermark::{BoundedOutOfOrderness, END_OF_TIME, NO_WATERMARK};
use vigil_stream::Stage;

use super::keying::Placement;
use super::markers::Marker;
use super::merge::{Bound, Held, Merge, Stamp};
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
    /// in place (it does not), or the partition ends or goes idle. Records of a key
    /// partition that come from several partitions go through its merge, in the order
    /// produced (see `merge`): input is judged as if it were keyed, however it is.
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
            Incoming::Marker(marker) => {
                if marker.task.is_none() && self.inputs[input].is_source() {
                    self.read_to.insert(slot, Stamp::END);
                }
                self.on_marker(slot, marker)
            }
            Incoming::Undecodable if self.seen_to.get(&slot).is_some_and(|&to| offset < to) => {
                // A dead letter before a restart.
                handling = Handling::Seen;
            }
            Incoming::Undecodable => {
                let ledger = &mut self.tasks.get_mut(&id).expect("checked above").task.ledger;
                ledger.read += 1;
                ledger.dead_letters += 1;
                ledger.written += 1;
            }
            Incoming::Record { record, event_ts, stamp } => {
                if let Some(clock) = &mut self.clocks[input] {
                    clock.observe(partition as usize, event_ts);
                }
                if self.inputs[input].is_source() {
                    let stamp = Stamp { partition, offset, ..stamp.unwrap_or_default() };
                    self.read_to.insert(slot, stamp);
                    let seen = self.seen_to.get(&slot).is_some_and(|&to| offset < to);
                    match self.misplaced(slot, &record, stamp) {
                        // Forwarded before a restart: its reader has it.
                        Some(_) if seen => handling = Handling::Seen,
                        Some(reroute) => {
                            self.learn_placement(id, Placement::Off(event_ts));
                            self.tasks.get_mut(&id).expect("checked above").task.ledger.rerouted += 1;
                            handling = reroute;
                        }
                        None => {
                            self.learn_placement(id, Placement::InPlace);
                            handling = self.in_place(id, slot, record, event_ts, stamp);
                        }
                    }
                } else if let (Some(origin), Some(merge)) = (stamp, self.merge_of(slot)) {
                    // Its turn comes in `advance_watermark`.
                    merge.push(origin.partition as usize, Held { stamp: origin, offset, record, event_ts });
                } else {
                    self.process_keyed(id, slot, record, event_ts)
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
                Incoming::Record { record, event_ts, .. } => match self.home(slot, record) {
                    Some(home) if home != slot.1 => Placement::Off(*event_ts),
                    _ => Placement::InPlace,
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
    fn misplaced(&self, (input, partition): Slot, record: &In<S>, origin: Stamp) -> Option<Handling> {
        if !self.inputs[input].is_source() {
            return None;
        }
        let key = self.stage.partition_key(record);
        let home = self.partitioner.partition(key.as_bytes()) as i32;
        if home == partition {
            return None;
        }
        let via = self.repartition_of(input)?;
        Some(Handling::Reroute { input: via, partition: home, key: key.to_string(), origin })
    }

    /// A source record in place: processed at once while no other writer forwards
    /// records of its key partition (keyed input), else into the merge with theirs.
    fn in_place(&mut self, id: i32, slot: Slot, record: In<S>, event_ts: Millis, stamp: Stamp) -> Handling {
        let (input, p) = slot;
        let Some(r) = self.repartition_of(input) else {
            self.process_keyed(id, slot, record, event_ts);
            return Handling::Processed;
        };
        let writers = self.partitions as usize;
        let forwarded = self.upstream[r]
            .as_ref()
            .is_some_and(|u| (0..writers).any(|w| w != p as usize && u.bound(p as usize, w) != Bound::LeftOut));
        // Read again after a restart, records held then may come on the repartition
        // partition after this one: it waits in the merge with them.
        let replaying = self.replaying_merge((r, p));
        let merge = self.merges.get_or_insert_with((r, p), || Merge::new(writers));
        if merge.released(p as usize) >= stamp.offset {
            // Processed before a restart (read again from a record then held).
            return Handling::Seen;
        }
        if !forwarded && !replaying && merge.is_empty() {
            merge.released_at_once(p as usize, stamp);
            self.process_keyed(id, slot, record, event_ts);
        } else {
            merge.push(p as usize, Held { stamp, offset: stamp.offset, record, event_ts });
        }
        Handling::Processed
    }

    /// The partition of a source record's key (`None` on other inputs).
    fn home(&self, (input, _): Slot, record: &In<S>) -> Option<i32> {
        self.inputs[input]
            .is_source()
            .then(|| self.partitioner.partition(self.stage.partition_key(record).as_bytes()) as i32)
    }

    /// The repartition input that carries source input `input`'s records.
    pub(super) fn repartition_of(&self, input: usize) -> Option<usize> {
        self.repartitions[input]
    }

    /// The merge of a repartition partition (made at its first record).
    fn merge_of(&mut self, slot: Slot) -> Option<&mut Merge<In<S>>> {
        if !self.inputs[slot.0].is_repartition() {
            return None;
        }
        let writers = self.partitions as usize;
        Some(self.merges.get_or_insert_with(slot, || Merge::new(writers)))
    }

    /// A record of task `id`'s key partition, processed: counted in the key
    /// partition's clock (kept with the repartition partition that carries it).
    fn process_keyed(&mut self, id: i32, (input, p): Slot, record: In<S>, event_ts: Millis) {
        let carrier = match self.inputs[input].kind {
            InputKind::Source { .. } => self.repartition_of(input).map(|r| (r, p)),
            InputKind::Repartition { .. } => Some((input, p)),
            InputKind::Upstream => None,
        };
        if let Some(carrier) = carrier {
            let bound = self.key_clock_bound(carrier.0);
            self.key_clocks.get_or_insert_with(carrier, || BoundedOutOfOrderness::new(bound)).observe(event_ts);
        }
        self.process(id, record)
    }

    /// Whether a partition is read again after a restart, below where it had been
    /// read: records its merge held then are still to come.
    pub(super) fn replaying(&self, slot: Slot) -> bool {
        self.seen_to.get(&slot).is_some_and(|&to| self.positions.get(&slot).is_none_or(|&at| at < to))
    }

    /// Whether the merge of repartition partition `(r, k)` waits for records it held
    /// before a restart, on either partition that feeds it: until they are read
    /// again, what its writers said covers records it does not have.
    pub(super) fn replaying_merge(&self, (r, p): Slot) -> bool {
        let InputKind::Repartition { source } = self.inputs[r].kind else { return false };
        !self.seen_to.is_empty() && (self.replaying((r, p)) || self.replaying((source, p)))
    }

    /// What task k's own source partition lets the merge of repartition partition
    /// `(r, k)` assume: how far it has read, unless it is idle or ended.
    pub(super) fn own_bound(&self, (r, p): Slot) -> Bound {
        let InputKind::Repartition { source } = self.inputs[r].kind else { return Bound::LeftOut };
        let active = self.clocks[source].as_ref().and_then(|c| c.partition_watermark(p as usize));
        match active {
            Some(w) if w != END_OF_TIME => Bound::ReadTo(self.read_to.get((source, p)).copied()),
            _ => Bound::LeftOut,
        }
    }

    /// The out-of-orderness bound of the source input repartition input `r` carries.
    pub(super) fn key_clock_bound(&self, r: usize) -> Millis {
        match self.inputs[r].kind {
            InputKind::Repartition { source } => match self.inputs[source].kind {
                InputKind::Source { bound_ms } => bound_ms,
                _ => 0,
            },
            _ => 0,
        }
    }

    /// Releases the records task `id`'s merges hold whose turn has come, each
    /// processed against the watermark of the records released before it.
    pub(super) fn release(&mut self, id: i32) {
        // Only repartition partitions have a merge.
        for slot in self.slots_of(id) {
            while self.merges.get(slot).is_some_and(|m| !m.is_empty()) && !self.replaying_merge(slot) {
                let own = self.own_bound(slot);
                let (Some(merge), Some(u)) = (self.merges.get_mut(slot), &self.upstream[slot.0]) else { break };
                let p = slot.1 as usize;
                let bound = |w: usize| if w == p { own } else { u.bound(p, w) };
                let Some((held, behind)) = merge.release(bound) else { break };
                self.out_of_order += u64::from(behind);
                self.process_keyed(id, slot, held.record, held.event_ts);
                self.move_watermark(id);
            }
        }
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
