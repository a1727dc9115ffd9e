//! The seed's records, with its exact field names, and Vigil's configuration.
//!
//! Everything here is plain data: no I/O beyond reading a configuration file.

pub mod config;
pub mod input;
pub mod output;
pub mod time;

pub use config::Config;
pub use input::{DeviceEvent, EventType, InputRecord, InvalidRecord, Order, Payment, Source};
pub use time::Millis;
