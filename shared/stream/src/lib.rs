//! The streaming core every Vigil runtime shares. Nothing here does I/O: an operator
//! is a plain struct fed records and watermarks; the embedded runtime and the Kafka
//! runtime are two shells around the same operators.

pub mod changelog;
pub mod event_sort;
pub mod harness;
pub mod operator;
pub mod panes;
pub mod partition;
pub mod retention;
mod slots;
pub mod source_clock;
pub mod stage;
pub mod state;
mod table;
pub mod task;
#[cfg(test)]
mod test_log;
pub mod time_set;
pub mod timers;
pub mod watermark;
pub mod window;

pub use operator::Operator;
pub use stage::{Pipeline, ReadRecord, Stage, StageAnswer, StageVisitor, WriteRecord};
pub use task::{Ledger, Task};
pub use vigil_model::Millis;
