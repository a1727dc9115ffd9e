//! What every runtime needs of a record on a topic: that it serializes (to Avro on
//! Kafka, to the seed's JSON in a tagged line), copies cheaply to each stage that
//! reads it, and says whether it keeps the rules its type cannot express.

use std::any::Any;
use std::sync::Arc;

use serde::Serialize;

use crate::input::{DeviceEvent, InputRecord, InvalidRecord, Order, Payment};
use crate::output::{
    DeviceAnomaly, DeviceMetrics, EnrichedPayment, HealthAlert, InvalidLine, LateDeviceEvent, LatePayment,
    PaymentAnomaly, WindowMetrics,
};
use crate::py_json;

/// A record of a topic.
pub trait Record: Serialize + Clone + Send + Sync + 'static {
    /// The rules a record read from a topic must meet beyond its type (an id not
    /// blank, an amount not negative): one that breaks them is a dead letter.
    fn check(&self) -> Result<(), InvalidRecord> {
        Ok(())
    }

    /// The record as a printed line's content, shared with whoever prints it (a
    /// record already shared is not copied).
    fn into_printed(self) -> Arc<dyn Printed> {
        Arc::new(self)
    }
}

/// A record as the seed's job prints it: one JSON object in `json.dumps`' form
/// (see [`crate::py_json`]).
pub trait Printed: Send + Sync {
    fn write_json(&self, out: &mut Vec<u8>);

    /// The record itself, for a reader that knows its type (a test, say).
    fn as_any(&self) -> &dyn Any;

    /// The line the embedded runner prints: `TAG> {json}`.
    fn tagged_line(&self, tag: &str) -> String {
        let mut line = format!("{tag}> ").into_bytes();
        self.write_json(&mut line);
        String::from_utf8(line).expect("py_json writes ASCII")
    }
}

impl<T: Serialize + Send + Sync + 'static> Printed for T {
    fn write_json(&self, out: &mut Vec<u8>) {
        self.serialize(py_json::Writer { out }).expect("records are flat structs of numbers, strings and options")
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Record for Order {
    fn check(&self) -> Result<(), InvalidRecord> {
        InputRecord::check_order(self)
    }
}

impl Record for Payment {
    fn check(&self) -> Result<(), InvalidRecord> {
        InputRecord::check_payment(self)
    }
}

impl Record for DeviceEvent {
    fn check(&self) -> Result<(), InvalidRecord> {
        InputRecord::check_device_event(self)
    }
}

/// Enriched payments travel shared: the stages that read one and the line that
/// prints it hold the same allocation.
impl Record for Arc<EnrichedPayment> {
    fn into_printed(self) -> Arc<dyn Printed> {
        self
    }
}

impl Record for WindowMetrics {}
impl Record for DeviceMetrics {}
impl Record for PaymentAnomaly {}
impl Record for DeviceAnomaly {}
impl Record for LateDeviceEvent {}
impl Record for LatePayment {}
impl Record for HealthAlert {}
impl Record for InvalidLine {}
