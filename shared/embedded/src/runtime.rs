//! The embedded runtime: a pipeline's stages in one process, through in-memory
//! partitioned topics keyed and partitioned as the Kafka topics are (Kafka's murmur2
//! partitioner over `runtime.partitions` partitions): one task per partition for a
//! keyed stage, one for a global one. It is itself a pure state machine, input
//! records in and output records out, and deterministic.
//!
//! A record a stage writes goes at once to the outputs (if its topic has a tag) and
//! to every stage that reads its topic, to the task of its key's partition, depth
//! first: the outputs come in the order one thread produces them.
//!
//! Watermarks: every source input partition has its own ([`SourceClock`], in each
//! stage that reads it); a task goes by the minimum over its input partitions; a
//! topic a stage carries its watermark on goes by the minimum over the stages that
//! write it, and every reader of that topic goes by it.
//!
//! The stages are held as the pipeline lists them, each with its own types
//! ([`Chain`]), and a record goes down the list to the stages that read its topic.
//! A stage's topology is a constant and a topic a `static`, so the compiler decides
//! at each write which stages read it: no lookup, no virtual call, and the whole
//! path from the writer to its readers in view.
//!
//! [`SourceClock`]: vigil_stream::source_clock::SourceClock

use std::sync::Arc;

use vigil_model::output::InvalidLine;
use vigil_model::topology::{Topic, Topology, DEAD_LETTERS, DEVICE_EVENTS, ORDERS, PAYMENTS};
use vigil_model::{Config, InputRecord, Millis, Printed, Record};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::{Ledger, Pipeline, Stage};

use crate::tasks::StageTasks;

/// A pipeline the embedded runtime can hold: every list of stages is one.
pub trait Embedded: Pipeline {
    type Tasks: Chain;
    /// The tasks of every stage, the first numbered `first`.
    fn tasks(&self, config: &Config, first: usize) -> Self::Tasks;
}

impl Embedded for () {
    type Tasks = ();
    fn tasks(&self, _: &Config, _: usize) {}
}

impl<S: Stage + Clone + Default, Rest: Embedded> Embedded for (S, Rest) {
    type Tasks = (StageTasks<S>, Rest::Tasks);

    fn tasks(&self, config: &Config, first: usize) -> Self::Tasks {
        (StageTasks::new(self.0.clone(), first, config), self.1.tasks(config, first + 1))
    }
}

/// The stages' tasks, listed as the pipeline lists its stages: each stage reaches the
/// ones after it (those downstream) through the rest of the list.
pub trait Chain {
    /// A record written to `topic` under `key`: to every stage of the list that reads
    /// the topic, in the list's order.
    fn deliver<T: Record>(&mut self, topic: &'static Topic, key: &str, record: T, routes: &mut Routes);
    /// Whether a stage of the list reads `topic`.
    fn reads(&self, topic: &'static Topic) -> bool;
    /// The watermark of input `input` of stage `stage` moved.
    fn on_watermark(&mut self, stage: usize, input: usize, watermark: Millis, routes: &mut Routes);
    /// The source inputs ended.
    fn finish(&mut self, routes: &mut Routes);
    /// Adds the ledgers of the stages that read a source input.
    fn add_ledgers(&self, ledger: &mut Ledger);
}

impl Chain for () {
    #[inline(always)]
    fn deliver<T: Record>(&mut self, _: &'static Topic, _: &str, _: T, _: &mut Routes) {}

    #[inline(always)]
    fn reads(&self, _: &'static Topic) -> bool {
        false
    }

    fn on_watermark(&mut self, stage: usize, _: usize, _: Millis, _: &mut Routes) {
        unreachable!("stage {stage} is not in the pipeline")
    }

    fn finish(&mut self, _: &mut Routes) {}

    fn add_ledgers(&self, _: &mut Ledger) {}
}

impl<S: Stage, Rest: Chain> Chain for (StageTasks<S>, Rest) {
    #[inline(always)]
    fn deliver<T: Record>(&mut self, topic: &'static Topic, key: &str, record: T, routes: &mut Routes) {
        let Some(input) = self.0.input_of(topic) else {
            return self.1.deliver(topic, key, record, routes);
        };
        // The last reader takes the record itself, the others a copy.
        let later = self.1.reads(topic).then(|| record.clone());
        let watermark = self.0.on_record(input, key, record, &mut self.1, routes);
        routes.pass_on(self.0.index(), watermark, &mut self.1);
        if let Some(record) = later {
            self.1.deliver(topic, key, record, routes);
        }
    }

    #[inline(always)]
    fn reads(&self, topic: &'static Topic) -> bool {
        self.0.input_of(topic).is_some() || self.1.reads(topic)
    }

    fn on_watermark(&mut self, stage: usize, input: usize, watermark: Millis, routes: &mut Routes) {
        if stage != self.0.index() {
            return self.1.on_watermark(stage, input, watermark, routes);
        }
        let forwarded = self.0.on_watermark(input, watermark, &mut self.1, routes);
        routes.pass_on(stage, forwarded, &mut self.1);
    }

    fn finish(&mut self, routes: &mut Routes) {
        let forwarded = self.0.finish(&mut self.1, routes);
        routes.pass_on(self.0.index(), forwarded, &mut self.1);
        self.1.finish(routes);
    }

    fn add_ledgers(&self, ledger: &mut Ledger) {
        if self.0.reads_source() {
            ledger.add(&self.0.ledger());
        }
        self.1.add_ledgers(ledger);
    }
}

pub struct EmbeddedRuntime<P: Embedded> {
    tasks: P::Tasks,
    routes: Routes,
}

/// Where watermarks go between the stages (records find their readers through the
/// [`Chain`]), and what goes to the outputs.
pub struct Routes {
    /// The topics that carry watermarks between stages.
    watermarked: Vec<Watermarked>,
    /// Per stage: its output watermark as last passed on, and the watermarked
    /// topics it writes (indexes into `watermarked`).
    sent: Vec<Millis>,
    carries: Vec<Vec<usize>>,
    emitted: Vec<(&'static Topic, Arc<dyn Printed>)>,
    dead_letters: u64,
}

/// An input of a stage.
#[derive(Debug, Clone, Copy)]
struct Reader {
    stage: usize,
    input: usize,
}

/// A topic's watermark: the minimum over the stages that write it.
struct Watermarked {
    writers: Vec<usize>,
    readers: Vec<Reader>,
    watermark: Millis,
}

impl<P: Embedded> EmbeddedRuntime<P> {
    /// The pipeline's stages with their tasks, topics wired as the topology says.
    pub fn new(pipeline: &P, config: &Config) -> Result<Self, String> {
        let topology = pipeline.topology();
        topology.check()?;
        Ok(EmbeddedRuntime { tasks: pipeline.tasks(config, 0), routes: Routes::new(&topology) })
    }

    /// One valid input record, in arrival order.
    pub fn process(&mut self, record: InputRecord) {
        match record {
            InputRecord::Order(o) => self.write_source(&ORDERS, o),
            InputRecord::Payment(p) => self.write_source(&PAYMENTS, p),
            InputRecord::Device(d) => self.write_source(&DEVICE_EVENTS, d),
        }
    }

    /// An input line that is not a valid record.
    pub fn dead_letter(&mut self, line: InvalidLine) {
        self.routes.dead_letters += 1;
        self.routes.emitted.push((&DEAD_LETTERS, Arc::new(line)));
    }

    /// The input has ended: every watermark goes to the end of time, all fires.
    pub fn finish(&mut self) {
        self.tasks.finish(&mut self.routes);
    }

    /// Hands what was emitted since the last call to `emit`, in emission order.
    pub fn emit_outputs<E>(
        &mut self,
        emit: &mut impl FnMut(&'static Topic, Arc<dyn Printed>) -> Result<(), E>,
    ) -> Result<(), E> {
        // Most records emit nothing: not even a drain to set up and tear down.
        if self.routes.emitted.is_empty() {
            return Ok(());
        }
        self.routes.emitted.drain(..).try_for_each(|(topic, record)| emit(topic, record))
    }

    /// Every input record, by what became of it: the stages that read the inputs
    /// account for the records, and the lines that were none are dead letters.
    pub fn ledger(&self) -> Ledger {
        let dead = self.routes.dead_letters;
        let mut ledger = Ledger { read: dead, dead_letters: dead, ..Ledger::default() };
        self.tasks.add_ledgers(&mut ledger);
        ledger
    }

    #[inline(always)]
    fn write_source<T: Record>(&mut self, topic: &'static Topic, record: T) {
        self.tasks.deliver(topic, "", record, &mut self.routes);
    }
}

impl Routes {
    fn new(topology: &Topology) -> Self {
        let mut watermarked: Vec<(&'static Topic, Watermarked)> = Vec::new();
        let mut carries = vec![Vec::new(); topology.stages.len()];
        for (s, stage) in topology.stages.iter().enumerate() {
            for &topic in stage.watermarked {
                let w = match watermarked.iter().position(|(t, _)| t.is(topic)) {
                    Some(w) => w,
                    None => {
                        let readers = readers(topology, topic);
                        watermarked
                            .push((topic, Watermarked { writers: Vec::new(), readers, watermark: NO_WATERMARK }));
                        watermarked.len() - 1
                    }
                };
                watermarked[w].1.writers.push(s);
                carries[s].push(w);
            }
        }
        Routes {
            watermarked: watermarked.into_iter().map(|(_, w)| w).collect(),
            sent: vec![NO_WATERMARK; topology.stages.len()],
            carries,
            emitted: Vec::new(),
            dead_letters: 0,
        }
    }

    /// A record a stage wrote to `topic` under `key`: to the outputs if the topic has
    /// a tag, and to every reader, all of which are `downstream`.
    #[inline(always)]
    pub(crate) fn write<T: Record, D: Chain>(
        &mut self,
        topic: &'static Topic,
        key: &str,
        record: T,
        downstream: &mut D,
    ) {
        if topic.tag.is_some() {
            if !downstream.reads(topic) {
                self.emitted.push((topic, record.into_printed()));
                return;
            }
            self.emitted.push((topic, record.clone().into_printed()));
        }
        downstream.deliver(topic, key, record, self);
    }

    /// Passes stage `s`'s output watermark on to the readers of the topics it
    /// carries it on (all downstream), if it moved.
    #[inline]
    fn pass_on<D: Chain>(&mut self, s: usize, watermark: Millis, downstream: &mut D) {
        // Most calls: it did not move.
        if watermark > self.sent[s] {
            self.pass_on_moved(s, watermark, downstream);
        }
    }

    fn pass_on_moved<D: Chain>(&mut self, s: usize, watermark: Millis, downstream: &mut D) {
        self.sent[s] = watermark;
        for c in 0..self.carries[s].len() {
            let w = self.carries[s][c];
            let topic = &self.watermarked[w];
            let watermark = topic.writers.iter().map(|&writer| self.sent[writer]).min().unwrap_or(NO_WATERMARK);
            if watermark <= topic.watermark {
                continue;
            }
            self.watermarked[w].watermark = watermark;
            for r in 0..self.watermarked[w].readers.len() {
                let Reader { stage, input } = self.watermarked[w].readers[r];
                downstream.on_watermark(stage, input, watermark, self);
            }
        }
    }
}

/// The stages that read `topic`, each with the index of that input.
fn readers(topology: &Topology, topic: &Topic) -> Vec<Reader> {
    let mut readers = Vec::new();
    for (stage, s) in topology.stages.iter().enumerate() {
        for (input, (t, _)) in s.inputs.iter().enumerate() {
            if t.is(topic) {
                readers.push(Reader { stage, input });
            }
        }
    }
    readers
}
