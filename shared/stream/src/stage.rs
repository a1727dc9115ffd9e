//! A stage, declared once for every runtime: its place in the topology, its operator,
//! how the operator's input is read from each input topic (with the key it must be
//! partitioned by and its event time), and where each output goes (its topic and
//! key). The embedded runtime and the Kafka runtime drive the same definitions; a
//! runtime supplies only how a record is read ([`ReadRecord`]: taken from the stage
//! that wrote it, or decoded from Avro) and how one is written ([`WriteRecord`]:
//! handed to the stages that read its topic, or encoded for Kafka).
//!
//! A new stage is an operator and a definition, added to a [`Pipeline`].

use serde::de::DeserializeOwned;
use vigil_model::topology::{StageTopology, Topic, Topology};
use vigil_model::{Config, Millis, Record, Text};

use crate::changelog::Stateful;
use crate::Operator;

/// The operator's input and output types of a stage.
pub type In<S> = <<S as Stage>::Op as Operator>::In;
pub type Out<S> = <<S as Stage>::Op as Operator>::Out;

/// A stage's definition.
pub trait Stage: Send + Sync + 'static {
    /// Sent to a thread of its own while it restores.
    type Op: Operator + Stateful + Send;

    /// What it reads and writes.
    fn topology(&self) -> StageTopology;

    fn operator(&self, config: &Config) -> Self::Op;

    /// The operator's input from a record of input `input` (its index in the
    /// topology's inputs), read as that topic's record type.
    fn read<R: ReadRecord>(&self, input: usize, record: R) -> Result<In<Self>, R::Error>;

    /// The key an input record must be partitioned by for this stage: a record of a
    /// source input on another partition is re-keyed to the partition of this key.
    fn partition_key<'a>(&self, record: &'a In<Self>) -> &'a str;

    /// An input record's event time (what a source input's watermark trails).
    fn event_time(&self, record: &In<Self>) -> Millis;

    /// Writes an output to its topic under its key.
    fn write<W: WriteRecord>(&self, output: Out<Self>, to: W) -> W::Written;

    /// A state query, as Kafka Streams' interactive queries: what `op` (the task of
    /// the partition `key` is partitioned to) holds for `key` under `what`
    /// (`customers`, say). `None`: the stage answers no such query.
    fn query(&self, _op: &Self::Op, _what: &str, _key: &str) -> Option<StageAnswer> {
        None
    }
}

/// What a state query found.
#[derive(Debug, Clone, PartialEq)]
pub enum StageAnswer {
    Found(serde_json::Value),
    /// The task holds nothing for the key.
    Unknown,
}

/// How a runtime gives a stage the record it read.
pub trait ReadRecord {
    type Error;
    fn read<T: Record + DeserializeOwned>(self) -> Result<T, Self::Error>;
}

/// How a runtime takes a record a stage wrote.
pub trait WriteRecord {
    type Written;
    fn write<T: Record>(self, topic: &'static Topic, key: Text, record: T) -> Self::Written;
}

/// What a runtime does with each stage of a pipeline (it sees each one's own types).
pub trait StageVisitor {
    fn visit<S: Stage + Clone>(&mut self, stage: &S);
}

/// A pipeline: its stages, upstream first, as a list `(first, (second, (…, ())))`
/// (written `pipeline![First, Second, …]`), so that a runtime can hold every stage
/// with its own types and call it without a virtual call.
pub trait Pipeline: Clone + Default + Send + Sync + 'static {
    fn visit_stages<V: StageVisitor>(&self, visitor: &mut V);

    /// Every stage's place in the topology, upstream first.
    fn topology(&self) -> Topology {
        struct Collect(Vec<StageTopology>);
        impl StageVisitor for Collect {
            fn visit<S: Stage + Clone>(&mut self, stage: &S) {
                self.0.push(stage.topology());
            }
        }
        let mut collect = Collect(Vec::new());
        self.visit_stages(&mut collect);
        Topology { stages: collect.0 }
    }
}

impl Pipeline for () {
    fn visit_stages<V: StageVisitor>(&self, _: &mut V) {}
}

impl<S: Stage + Clone + Default, Rest: Pipeline> Pipeline for (S, Rest) {
    fn visit_stages<V: StageVisitor>(&self, visitor: &mut V) {
        visitor.visit(&self.0);
        self.1.visit_stages(visitor);
    }
}

/// A pipeline of unit-struct stages, upstream first: as a type, `pipeline![A, B]` is
/// `(A, (B, ()))`; as a value, the same list of the stages.
#[macro_export]
macro_rules! pipeline {
    () => { () };
    ($first:ident $(, $rest:ident)* $(,)?) => { ($first, $crate::pipeline!($($rest),*)) };
}
