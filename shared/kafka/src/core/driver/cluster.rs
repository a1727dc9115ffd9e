//! Several members of a stage over logs of its input partitions.

use std::collections::{BTreeMap, BTreeSet};

use vigil_stream::stage::In;
use vigil_stream::Stage;

use super::{all_slots, Broker, Member, PARTITIONS};
use crate::core::{Emitted, Handling, Incoming, Marker, Slot, Stamp};

/// A stage's members over a simulated cluster: a log per partition of the source and
/// repartition topics, each member reading its partitions in batches as a consumer
/// fetches them (pausing, rewinding and resuming as its core says), and committing
/// after each batch, which makes its rerouted records and repartition markers
/// readable.
pub struct Cluster<S: Stage> {
    pub members: Vec<Member<S>>,
    pub logs: BTreeMap<Slot, Vec<Incoming<In<S>>>>,
    pub next: BTreeMap<Slot, usize>,
    pub paused: BTreeSet<Slot>,
    pub broker: Broker,
    /// Members that do nothing in a round (frozen, or gone with their partitions not
    /// yet given to another).
    pub stalled: BTreeSet<usize>,
}

impl<S: Stage> Cluster<S>
where
    In<S>: Clone,
{
    /// `members` members, each given every `members`-th task.
    pub fn new(stage: impl Fn() -> S, members: i32, source: BTreeMap<Slot, Vec<Incoming<In<S>>>>) -> Self {
        let broker = Broker::default();
        let members = (0..members)
            .map(|m| {
                let mut member = Member::new(stage());
                let slots: Vec<Slot> =
                    all_slots(member.core.inputs().len()).into_iter().filter(|(_, p)| p % members == m).collect();
                member.assign(&broker, &slots);
                member
            })
            .collect();
        Cluster {
            members,
            logs: source,
            next: BTreeMap::new(),
            paused: Default::default(),
            broker,
            stalled: Default::default(),
        }
    }

    /// Every source partition judged idle before any input came, and what the tasks
    /// then said read by every member: a stage started a while before its input. Its
    /// idle tasks' last repeat is written just before the input comes, and read after.
    pub fn paused_before_input(mut self) -> Self {
        let input = std::mem::take(&mut self.logs);
        self.mark_idle(|input, inputs| input < inputs / 2);
        self.settle(1);
        for m in 0..self.members.len() {
            self.commit(m, true);
        }
        self.logs.extend(input);
        self
    }

    /// As [`Cluster::paused_before_input`], but the input comes before the idle tasks
    /// said anything on the repartition topics (a member busy when its partitions
    /// went idle commits later): their readers, hearing nothing there either, took
    /// them for idle too.
    pub fn silent_before_input(mut self) -> Self {
        self.mark_idle(|_, _| true);
        self
    }

    /// Every member judges idle its partitions of the inputs `which` picks (by index,
    /// of how many), source inputs first.
    pub fn mark_idle(&mut self, which: impl Fn(usize, usize) -> bool) {
        for m in &mut self.members {
            let inputs = m.core.inputs().len();
            let tasks: Vec<i32> = m.core.tasks().collect();
            let slots = all_slots(inputs).into_iter().filter(|&(i, p)| which(i, inputs) && tasks.contains(&p));
            for slot in slots.collect::<Vec<_>>() {
                m.core.mark_idle(slot);
            }
        }
    }

    /// Runs until nothing moves; what every member delivered.
    pub fn run(mut self, batch: usize) -> Vec<Emitted> {
        self.settle(batch);
        self.members.into_iter().flat_map(|m| m.delivered).collect()
    }

    /// Every member reads `batch` messages of each of its partitions in turn, and
    /// commits, until nothing moves; then, as the shell's timer does, a commit at
    /// which idle tasks repeat that they are idle, read by all; and on, until a whole
    /// turn of that reads no record.
    pub fn settle(&mut self, batch: usize) {
        loop {
            let mut records = 0;
            while let Some(read) = self.round(batch, false) {
                records += read;
            }
            records += self.round(batch, true).unwrap_or(0);
            while let Some(read) = self.round(batch, false) {
                records += read;
            }
            if records == 0 {
                break;
            }
        }
    }

    /// One turn of every member, committing with `repeat_idle`: `None` if nothing
    /// moved, else how many records were read (not held).
    pub fn round(&mut self, batch: usize, repeat_idle: bool) -> Option<usize> {
        self.round_failing(batch, repeat_idle, None)
    }

    /// As [`Cluster::round`], but the commit of member `failing.0` fails: it aborts,
    /// restores its tasks from their changelog and reads again from its last commit;
    /// if `failing.1`, its commit went through on the broker all the same (a commit
    /// that timed out).
    pub fn round_failing(&mut self, batch: usize, repeat_idle: bool, failing: Option<(usize, bool)>) -> Option<usize> {
        let (mut progress, mut records) = (false, 0);
        let running: Vec<usize> = (0..self.members.len()).filter(|m| !self.stalled.contains(m)).collect();
        for m in running {
            let mut rerouted = Vec::new();
            let slots = all_slots(self.members[m].core.inputs().len());
            let mine = slots.into_iter().filter(|&(_, p)| self.members[m].core.tasks().any(|t| t == p));
            for slot in mine.collect::<Vec<_>>() {
                for _ in 0..batch {
                    let at = *self.next.entry(slot).or_default();
                    let Some(entry) = self.logs.get(&slot).and_then(|l| l.get(at)).map(clone_incoming) else {
                        break;
                    };
                    if self.paused.contains(&slot) {
                        break;
                    }
                    progress = true;
                    self.next.insert(slot, at + 1);
                    let incoming = clone_incoming(&entry);
                    let member = &mut self.members[m];
                    let handling = member.core.on_input(slot, at as i64, incoming).unwrap();
                    let is_record = matches!(entry, Incoming::Record { .. });
                    records += usize::from(is_record && !matches!(handling, Handling::Held { .. }));
                    match handling {
                        Handling::Reroute { input, partition, origin, .. } => {
                            rerouted.push(((input, partition), forwarded(entry, origin)))
                        }
                        Handling::Held { seek: Some(from) } => {
                            self.paused.insert(slot);
                            self.next.insert(slot, from as usize);
                        }
                        _ => {}
                    }
                    member.pending.extend(member.core.take_outputs().expect("every output encodes as JSON"));
                }
            }
            // As the shell does: a task asked a generation answers it once its
            // source partitions are read to their end.
            for (task, slots) in self.members[m].core.to_verify() {
                let end = |slot| self.logs.get(&slot).map_or(0, Vec::len);
                if slots.iter().all(|&slot| self.next.get(&slot).copied().unwrap_or(0) >= end(slot)) {
                    self.members[m].core.verified(task);
                    progress = true;
                }
            }
            let flow = self.members[m].core.flow();
            self.paused.extend(flow.pause);
            for (slot, from) in flow.rewind {
                self.next.insert(slot, from as usize);
            }
            for slot in flow.resume {
                progress |= self.paused.remove(&slot);
            }
            if let Some((_, went_through)) = failing.filter(|&(f, _)| f == m) {
                if went_through {
                    for (slot, entry) in rerouted {
                        self.logs.entry(slot).or_default().push(entry);
                    }
                    let markers = self.members[m].commit_unbeknownst(&mut self.broker);
                    self.write_markers(&markers);
                }
                for (slot, from) in self.members[m].abort(&self.broker) {
                    self.next.insert(slot, from.unwrap_or(0) as usize);
                }
                self.commit(m, false);
                progress = true;
                continue;
            }
            for (slot, entry) in rerouted {
                self.logs.entry(slot).or_default().push(entry);
            }
            progress |= self.commit(m, repeat_idle);
        }
        progress.then_some(records)
    }
}

impl<S: Stage> Cluster<S> {
    /// Member `m` is replaced by `member`, which takes its tasks from what the broker
    /// holds (their changelog, the committed offsets), as after a kill or a
    /// rebalance: what `m` did since its last commit is lost, and its partitions are
    /// read again from their committed offsets.
    pub fn replace(&mut self, m: usize, mut member: Member<S>) {
        let old = &self.members[m];
        let slots: Vec<Slot> =
            all_slots(old.core.inputs().len()).into_iter().filter(|&(_, p)| old.core.tasks().any(|t| t == p)).collect();
        member.assign(&self.broker, &slots);
        for &slot in &slots {
            let from = self.broker.offsets.get(&slot).copied().unwrap_or(0);
            self.next.insert(slot, from as usize);
            self.paused.remove(&slot);
        }
        member.delivered = std::mem::take(&mut self.members[m].delivered);
        self.members[m] = member;
        // As the shell may: a commit before the first record is read again.
        self.commit(m, false);
    }

    /// Member `m` commits, with `repeat_idle` as in [`Cluster::round`]; its markers go
    /// to every partition of the repartition topics. Whether it wrote any.
    pub fn commit(&mut self, m: usize, repeat_idle: bool) -> bool {
        let markers = self.members[m].commit_repeating(&mut self.broker, repeat_idle);
        self.write_markers(&markers);
        !markers.is_empty()
    }

    /// Markers for the repartition topics, each to every partition.
    fn write_markers(&mut self, markers: &[(usize, Marker)]) {
        for (r, marker) in markers {
            for p in 0..PARTITIONS as i32 {
                self.logs.entry((*r, p)).or_default().push(Incoming::Marker(*marker));
            }
        }
    }
}

/// A source record as the shell forwards it: with its origin.
fn forwarded<I>(entry: Incoming<I>, origin: Stamp) -> Incoming<I> {
    match entry {
        Incoming::Record { record, event_ts, .. } => Incoming::Record { record, event_ts, stamp: Some(origin) },
        other => other,
    }
}

fn clone_incoming<I: Clone>(incoming: &Incoming<I>) -> Incoming<I> {
    match incoming {
        Incoming::Record { record, event_ts, stamp } => {
            Incoming::Record { record: record.clone(), event_ts: *event_ts, stamp: *stamp }
        }
        Incoming::Marker(m) => Incoming::Marker(*m),
        Incoming::Undecodable => Incoming::Undecodable,
    }
}
