//! The seed's records, with its exact field names, Vigil's configuration, and the
//! pipeline's topology.
//!
//! Everything here is plain data: no I/O beyond reading a configuration file.

pub mod config;
mod flat_json;
pub mod input;
pub mod output;
mod plain_text;
pub mod py_json;
pub mod record;
pub mod time;
pub mod topology;

pub use config::Config;
pub use input::{DeviceEvent, EventType, InputRecord, InvalidRecord, Order, Payment, Source, Text};
pub use record::{Printed, Record};
pub use time::Millis;
