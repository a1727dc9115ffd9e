//! A test driver for one operator, in the spirit of Kafka Streams' TopologyTestDriver:
//! pipe records and watermarks in, read what came out. No runtime, no sleeps.

use crate::{Millis, Operator};

pub struct Harness<O: Operator> {
    pub operator: O,
}

impl<O: Operator> Harness<O> {
    pub fn new(operator: O) -> Self {
        Harness { operator }
    }

    /// Feeds one record; returns what it emitted at once.
    pub fn record(&mut self, record: O::In) -> Vec<O::Out> {
        let mut out = Vec::new();
        self.operator.on_record(record, &mut out);
        out
    }

    /// Advances the input watermark; returns what fired.
    pub fn watermark(&mut self, watermark: Millis) -> Vec<O::Out> {
        let mut out = Vec::new();
        self.operator.on_watermark(watermark, &mut out);
        out
    }

    /// Ends the input: the watermark goes to the end of time and everything fires.
    pub fn finish(&mut self) -> Vec<O::Out> {
        self.watermark(Millis::MAX)
    }
}
