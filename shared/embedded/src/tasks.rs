//! One stage's tasks in the embedded runtime: a task per partition (one in a global
//! stage), the source clocks of its source inputs, and the watermarks of its
//! upstream ones.

use std::any::TypeId;
use std::mem::ManuallyDrop;

use vigil_model::topology::{EventTime, Topic};
use vigil_model::{Config, Millis, Record, Text};
use vigil_stream::partition::Partitioner;
use vigil_stream::source_clock::{Idleness, Moved, SourceClock};
use vigil_stream::stage::Out;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::{Ledger, Operator, ReadRecord, Stage, Task, WriteRecord};

use crate::runtime::{Chain, Routes};

pub struct StageTasks<S: Stage> {
    /// Its definition; its topology is a constant, read where it is needed so the
    /// compiler sees it.
    stage: S,
    /// Its place in the runtime's list.
    index: usize,
    partitioner: Partitioner,
    tasks: Vec<Task<S::Op>>,
    /// Each task's output watermark as of its last call, and their minimum.
    forwarded: Vec<Millis>,
    forwarded_min: Millis,
    /// Per input, how far its event time is.
    inputs: Vec<InputTime>,
    /// What the operator emitted, kept between calls for its capacity.
    out: Vec<Out<S>>,
}

impl<S: Stage> StageTasks<S> {
    pub(crate) fn new(stage: S, index: usize, config: &Config) -> Self {
        let topology = stage.topology();
        let partitions = config.runtime.partitions;
        let idle = Idleness::EventTime { timeout: config.runtime.idle_timeout_ms as Millis };
        let inputs = topology
            .inputs
            .iter()
            .map(|(_, time)| match time {
                EventTime::Source(bound) => InputTime::Source(SourceClock::new(partitions, bound.ms(config), idle)),
                EventTime::Upstream => InputTime::Upstream(NO_WATERMARK),
            })
            .collect();
        let tasks = if topology.global { 1 } else { partitions };
        StageTasks {
            tasks: (0..tasks).map(|_| Task::new(stage.operator(config))).collect(),
            forwarded: vec![NO_WATERMARK; tasks as usize],
            forwarded_min: NO_WATERMARK,
            stage,
            index,
            partitioner: Partitioner::new(partitions),
            inputs,
            out: Vec::new(),
        }
    }

    /// Its place in the pipeline.
    #[inline(always)]
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Which of its inputs `topic` is, if it reads it. The topology is a constant
    /// and the topic a `static`: where both are known, this is too.
    #[inline(always)]
    pub(crate) fn input_of(&self, topic: &'static Topic) -> Option<usize> {
        self.stage.topology().inputs.iter().position(|(t, _)| t.is(topic))
    }

    fn task_of(&self, partition: u32) -> usize {
        if self.stage.topology().global {
            0
        } else {
            partition as usize
        }
    }

    /// Gives every task the watermark of its input partitions, if it moved.
    fn advance<D: Chain>(&mut self, downstream: &mut D, routes: &mut Routes) {
        for t in 0..self.tasks.len() {
            self.advance_task(t, downstream, routes);
        }
    }

    #[inline(always)]
    fn advance_task<D: Chain>(&mut self, t: usize, downstream: &mut D, routes: &mut Routes) {
        let watermark = self.input_watermark(t);
        if self.tasks[t].advance(watermark, &mut self.out) {
            self.write_out(t, false, downstream, routes);
        }
    }

    /// The lowest watermark its tasks forward, task `t`'s brought up to date (a
    /// stage that carries no watermark downstream says nothing).
    #[inline]
    fn output_watermark(&mut self, t: usize) -> Millis {
        if self.stage.topology().watermarked.is_empty() {
            return NO_WATERMARK;
        }
        // Most records move no watermark, and so not the minimum.
        let watermark = self.tasks[t].operator.output_watermark();
        if watermark != self.forwarded[t] {
            self.forwarded[t] = watermark;
            self.forwarded_min = self.forwarded.iter().copied().min().unwrap_or(NO_WATERMARK);
        }
        self.forwarded_min
    }

    /// The same, every task's brought up to date.
    fn output_watermark_all(&mut self) -> Millis {
        if self.stage.topology().watermarked.is_empty() {
            return NO_WATERMARK;
        }
        for (forwarded, task) in self.forwarded.iter_mut().zip(&self.tasks) {
            *forwarded = task.operator.output_watermark();
        }
        self.forwarded_min = self.forwarded.iter().copied().min().unwrap_or(NO_WATERMARK);
        self.forwarded_min
    }

    /// The minimum over task `t`'s input partitions.
    #[inline(always)]
    fn input_watermark(&self, t: usize) -> Millis {
        let mut watermark = Millis::MAX;
        for input in &self.inputs {
            watermark = watermark.min(match input {
                InputTime::Source(clock) if self.stage.topology().global => {
                    clock.watermarks().min().unwrap_or(NO_WATERMARK)
                }
                InputTime::Source(clock) => clock.watermark(t),
                InputTime::Upstream(upstream) => *upstream,
            });
        }
        watermark
    }

    /// Writes what task `t` emitted; `of_record`: it came of one input record, which
    /// the task's ledger counts on time or late by where its outputs went.
    #[inline(always)]
    fn write_out<D: Chain>(&mut self, t: usize, of_record: bool, downstream: &mut D, routes: &mut Routes) {
        // Most calls find nothing to write.
        if self.out.is_empty() {
            if of_record {
                self.tasks[t].ledger.processed(false);
            }
            return;
        }
        self.write_outputs(t, of_record, downstream, routes);
    }

    fn write_outputs<D: Chain>(&mut self, t: usize, of_record: bool, downstream: &mut D, routes: &mut Routes) {
        let mut late = false;
        let written = self.out.len() as u64;
        for output in self.out.drain(..) {
            let to = Writer { downstream: &mut *downstream, routes: &mut *routes, stage: &self.stage, late: &mut late };
            self.stage.write(output, to);
        }
        let ledger = &mut self.tasks[t].ledger;
        ledger.written += written;
        if of_record {
            ledger.processed(late);
        }
    }
}

impl<S: Stage> StageTasks<S> {
    /// A record of input `input`, written under `key` (a source input's records are
    /// placed by the stage's own partition key). This and the calls below return
    /// the stage's output watermark: the lowest its tasks forward.
    pub(crate) fn on_record<T: Record, D: Chain>(
        &mut self,
        input: usize,
        key: &str,
        record: T,
        downstream: &mut D,
        routes: &mut Routes,
    ) -> Millis {
        let Ok(record) = self.stage.read(input, Given(record));
        let source = matches!(self.stage.topology().inputs[input].1, EventTime::Source(_));
        let partition = match (source, self.stage.topology().global) {
            (true, _) => self.partitioner.partition(self.stage.partition_key(&record).as_bytes()),
            (false, true) => 0,
            (false, false) => self.partitioner.partition(key.as_bytes()),
        };
        let event_ts = source.then(|| self.stage.event_time(&record));
        let t = self.task_of(partition);
        self.tasks[t].record(record, &mut self.out);
        self.write_out(t, true, downstream, routes);
        // Judged against the watermark from before it, then counted in it.
        if let (InputTime::Source(clock), Some(ts)) = (&mut self.inputs[input], event_ts) {
            match clock.observe(partition as usize, ts) {
                Moved::Own if !self.stage.topology().global => self.advance_task(t, downstream, routes),
                _ => {
                    self.advance(downstream, routes);
                    return self.output_watermark_all();
                }
            }
        }
        self.output_watermark(t)
    }

    /// The watermark of upstream input `input` moved.
    pub(crate) fn on_watermark<D: Chain>(
        &mut self,
        input: usize,
        watermark: Millis,
        downstream: &mut D,
        routes: &mut Routes,
    ) -> Millis {
        self.inputs[input] = InputTime::Upstream(watermark);
        self.advance(downstream, routes);
        self.output_watermark_all()
    }

    /// The source inputs ended.
    pub(crate) fn finish<D: Chain>(&mut self, downstream: &mut D, routes: &mut Routes) -> Millis {
        for input in &mut self.inputs {
            if let InputTime::Source(clock) = input {
                clock.finish();
            }
        }
        self.advance(downstream, routes);
        self.output_watermark_all()
    }

    pub(crate) fn ledger(&self) -> Ledger {
        let mut ledger = Ledger::default();
        self.tasks.iter().for_each(|t| ledger.add(&t.ledger));
        ledger
    }

    pub(crate) fn reads_source(&self) -> bool {
        self.inputs.iter().any(|i| matches!(i, InputTime::Source(_)))
    }
}

/// How far an input's event time is: a source input's per partition, an upstream
/// input's as the topic's writers said.
enum InputTime {
    Source(SourceClock),
    Upstream(Millis),
}

/// Where a stage's outputs go: to the stages downstream that read them.
struct Writer<'a, S, D> {
    downstream: &'a mut D,
    routes: &'a mut Routes,
    stage: &'a S,
    /// Set when an output goes to a late side output.
    late: &'a mut bool,
}

impl<S: Stage, D: Chain> WriteRecord for Writer<'_, S, D> {
    type Written = ();

    #[inline(always)]
    fn write<T: Record>(self, topic: &'static Topic, key: Text, record: T) {
        // Known where the stage's write is inlined, as the topology is a constant.
        if !self.stage.topology().outputs.iter().any(|t| t.is(topic)) {
            panic!("a stage wrote to `{}`, which its topology does not list among its outputs", topic.name);
        }
        *self.late |= topic.late;
        self.routes.write(topic, &key, record, self.downstream);
    }
}

/// How a stage reads the record handed to it: the value its writer wrote (the
/// compiler sees both types, and the check costs nothing where they agree).
struct Given<T>(T);

impl<T: Record> ReadRecord for Given<T> {
    type Error = std::convert::Infallible;

    #[inline]
    fn read<U: Record + serde::de::DeserializeOwned>(self) -> Result<U, Self::Error> {
        if TypeId::of::<T>() != TypeId::of::<U>() {
            panic!(
                "a stage reads a topic as `{}`, but its writer wrote `{}`",
                std::any::type_name::<U>(),
                std::any::type_name::<T>()
            );
        }
        let record = ManuallyDrop::new(self.0);
        // SAFETY: `T` and `U` are one type (their `TypeId`s are equal), so this reads
        // a `U` that is valid and owned once: `record` is never dropped.
        Ok(unsafe { std::ptr::read(&*record as *const T as *const U) })
    }
}
