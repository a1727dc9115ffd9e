//! Idleness, taken and given back: a source or repartition partition with nothing to
//! read stops holding its task's watermark; input that resumes makes the task's idle
//! inputs hold it again, and asks its repartition writers a new generation, which
//! they answer once their markers (or the broker) bound what they forward.

use vigil_stream::stage::In;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Stage;

use super::markers::Marker;
use super::{Encode, Incoming, Slot, TaskCore};
use crate::inputs::{Input, InputKind};

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// Whether a message says input resumed on a partition its task left out as
    /// idle: a record there, its end (a producer ending its input after a pause: the
    /// records it produced before that may still be on their way through the
    /// repartition topics, and the end must not carry the task past them), or an
    /// idle writer saying it is not.
    pub(super) fn resumes(&self, (input, p): Slot, incoming: &Incoming<In<S>>) -> bool {
        let p = p as usize;
        match (incoming, &self.clocks[input], &self.upstream[input]) {
            (Incoming::Record { .. } | Incoming::Marker(Marker { task: None, .. }), Some(clock), _) => {
                clock.partition_watermark(p).is_none()
            }
            (Incoming::Record { .. }, _, Some(u)) => u.watermark(p).is_none(),
            (Incoming::Marker(Marker { task: Some(writer), idle: false, .. }), _, Some(u)) => u.is_idle(p, *writer),
            _ => false,
        }
    }

    /// Input of task `id` resumed on `from`: every input it leaves out as idle holds
    /// it again until that input says it is idle once more (an idle source partition
    /// wakes, [`TaskCore::take_woken`]; an upstream partition's idle writers hold it
    /// until they repeat it, [`TaskCore::prepare_commit`]), or the first input to
    /// resume would carry the watermark past the records of the rest. A repartition
    /// partition is held only by what happens on it, and a resumed source or
    /// repartition partition asks the task's repartition writers a new generation
    /// (`ask`). docs/kafka.md, "Idleness taken back", says why each.
    pub(super) fn resume(&mut self, id: i32, from: Slot) {
        if !matches!(self.inputs[from.0].kind, InputKind::Upstream) && self.inputs.iter().any(Input::is_repartition) {
            self.ask(id);
        }
        let slots: Vec<Slot> = self.slots_of(id).collect();
        for (i, p) in slots {
            let held = match (&mut self.clocks[i], &mut self.upstream[i]) {
                (Some(clock), _) if clock.partition_watermark(p as usize).is_none() => {
                    clock.mark_idle(p as usize, false);
                    self.woken.push((i, p));
                    true
                }
                (_, Some(u)) if !self.inputs[i].is_repartition() || (i, p) == from => u.hold_idle(p as usize),
                _ => false,
            };
            self.dirty |= held;
        }
    }

    /// Task `id`'s source input resumed. Its writers on the repartition topics may
    /// have had input come too, not read yet: it asks them a new generation, and
    /// holds its source records until each has answered it (see `markers`), so
    /// none forwards records older than the watermark it then goes by.
    fn ask(&mut self, id: i32) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        task.asked += 1;
        let generation = task.asked;
        let slots: Vec<Slot> = self.slots_of(id).filter(|&(i, _)| self.inputs[i].is_repartition()).collect();
        for (i, p) in slots {
            if let Some(u) = &mut self.upstream[i] {
                u.ask(p as usize, generation);
            }
        }
        self.dirty = true;
    }

    /// The source partitions task `id` cannot confirm are read to their end without
    /// the broker: every one, while it says it forwards nothing without having
    /// decided that on records; else the idle ones, where nothing bounds what may
    /// still come.
    fn unconfirmed_sources(&self, id: i32) -> impl Iterator<Item = Slot> + '_ {
        let task = &self.tasks[&id];
        let all = task.decided && !task.decided_on_records;
        self.slots_of(id).filter(move |&(i, p)| {
            self.clocks[i].as_ref().is_some_and(|c| all || c.partition_watermark(p as usize).is_none())
        })
    }

    /// The generation task `id` answers now: the latest asked, if it can vouch for
    /// all its source partitions (its markers then bound what it forwards); else the
    /// latest the broker has confirmed ([`TaskCore::verified`]).
    pub(super) fn answer(&self, id: i32) -> u64 {
        let task = &self.tasks[&id];
        if self.unconfirmed_sources(id).next().is_some() {
            task.answered
        } else {
            task.asked
        }
    }

    /// Tasks asked a generation they cannot answer without the broker, with the
    /// source partitions it must say are read to their end: the shell calls
    /// [`TaskCore::verified`] for each once it does.
    pub fn to_verify(&self) -> Vec<(i32, Vec<Slot>)> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.asked > t.answered)
            .map(|(&id, _)| (id, self.unconfirmed_sources(id).collect::<Vec<Slot>>()))
            .filter(|(_, slots)| !slots.is_empty())
            .collect()
    }

    /// The broker says task `id`'s partitions listed by [`TaskCore::to_verify`] are
    /// read to their end, since it read the generation it was last asked: it
    /// answers that.
    pub fn verified(&mut self, id: i32) {
        let task = self.tasks.get_mut(&id).expect("a listed task");
        if task.answered < task.asked {
            task.answered = task.asked;
            self.dirty = true;
        }
    }

    /// Whether a task has an answer to a generation not yet said: its readers hold
    /// their input until they hear it, so it is worth a commit at once.
    pub fn answer_unsent(&self) -> bool {
        self.tasks.iter().any(|(&id, t)| self.answer(id) > t.sent_answered)
    }

    /// The idle source partitions woken since the last call (see [`TaskCore::resume`]).
    pub fn take_woken(&mut self) -> std::vec::Drain<'_, Slot> {
        self.woken.drain(..)
    }

    /// Whether a writer of a task's repartition partitions holds them at "no
    /// watermark" (see [`TaskCore::on_input`]).
    pub(super) fn waiting(&self, id: i32) -> bool {
        self.slots_of(id).any(|(i, p)| {
            self.inputs[i].is_repartition()
                && self.upstream[i]
                    .as_ref()
                    .is_some_and(|u| u.watermark(p as usize) == Some(NO_WATERMARK) || u.unanswered(p as usize))
        })
    }

    /// A source or repartition partition with nothing to read for a while (the
    /// shell's judgement). A source partition is left out of its task's watermark
    /// until its next record, and its task, if undecided, takes what it read for how
    /// its input is keyed. On a repartition partition, writers still at "no
    /// watermark" are taken for idle (gone, or their markers gone with the topic's
    /// retention).
    pub fn mark_idle(&mut self, (input, p): Slot) -> bool {
        let changed = match (&mut self.clocks[input], &mut self.upstream[input]) {
            (Some(clock), _) => {
                if let Some(task) = self.tasks.get_mut(&self.parallelism.task_of(p)) {
                    self.dirty |= !std::mem::replace(&mut task.decided, true);
                }
                clock.mark_idle(p as usize, true)
            }
            (_, Some(u)) if self.inputs[input].is_repartition() => u.stalled_are_idle(p as usize),
            _ => false,
        };
        if changed {
            self.advance_watermarks();
        }
        changed
    }

    /// The tasks idle downstream, with their input partitions: those the shell may
    /// ask to repeat it ([`TaskCore::prepare_commit`]).
    pub fn idle_tasks(&self) -> Vec<(i32, Vec<Slot>)> {
        self.tasks.iter().filter(|(_, task)| task.idle).map(|(&id, _)| (id, self.slots_of(id).collect())).collect()
    }
}
