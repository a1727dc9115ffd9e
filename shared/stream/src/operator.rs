//! The one interface every stage implements.

use crate::Millis;

/// A pure, deterministic stream operator: records and watermarks in, records out.
///
/// The runtime decides what the input watermark is (the minimum over the operator's
/// input partitions) and calls [`Operator::on_watermark`] when it advances; the
/// operator fires the timers and windows that are due. An operator may hold its
/// output watermark back while it still owes records older than its input watermark.
pub trait Operator {
    type In;
    type Out;

    fn on_record(&mut self, record: Self::In, out: &mut Vec<Self::Out>);

    /// The input watermark advanced to `watermark`: no record with an event time
    /// below it is expected any more (those that still come are late).
    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<Self::Out>);

    /// The watermark to forward downstream.
    fn output_watermark(&self) -> Millis;
}
