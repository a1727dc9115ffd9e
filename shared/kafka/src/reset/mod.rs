//! Reprocessing on purpose, as Kafka Streams' `kafka-streams-application-reset`.
//!
//! A stage's progress lives in two places: the input offsets its consumer group
//! committed, and its internal topics: its state (windows, join buffers, watermarks)
//! in its compacted changelog, and the source records it re-keyed in its repartition
//! topics. Both outlive the stage's processes, which is what makes restarts
//! exactly-once — and what makes a second run continue where the first one ended:
//! after an end-of-input marker every watermark sits at the end of time, so whatever
//! comes next is late. A reset forgets both (the internal topics are deleted and
//! created again empty, as Kafka Streams does), so the stage's next start processes
//! its inputs again from the beginning with empty state.
//!
//! Where a reset stage starts each input:
//! - a topic users write (orders, payments, device-events): the beginning;
//! - a topic other stages write: the beginning too, unless every stage writing it is
//!   reset as well: they write it again, so the stage skips to its end (what it holds
//!   is the old run's output, ending in the old run's watermark markers);
//! - everything at its end with `to_latest`: forget the past, process only what is
//!   produced from now on (a new dataset after one that ended).
//!
//! Input and output topics are never touched: records already written stay, and a
//! replay appends its records after them.
//!
//! [`plan()`] decides, without I/O, what to check and what to do, and warns about what
//! it cannot make clean; [`Plan::actions`] lists the changes; [`Admin`] checks that no
//! stage runs ([`Running`] if one does) and makes the changes against a broker.

mod action;
mod admin;
mod plan;
mod running;
#[cfg(test)]
mod seed;
mod warnings;

pub use action::{Action, GroupRole};
pub use admin::{Admin, Recreate};
pub use plan::{plan, select, InputStart, Options, Plan, PlanError, StagePlan, Start, DEFAULT_GROUP};
pub use running::{Busy, Running};

/// `verb` agreeing with `n` subjects: "writes" for one, "write" for more.
fn verb_for(verb: &str, n: usize) -> String {
    if n == 1 {
        format!("{verb}s")
    } else {
        verb.to_string()
    }
}
