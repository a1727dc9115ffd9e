//! One task: an operator instance over one input partition (or over all of them, in
//! a global stage), the input watermark it was last given, and its ledger. Both
//! runtimes run their operators as tasks.

use serde::{Deserialize, Serialize};

use crate::watermark::NO_WATERMARK;
use crate::{Millis, Operator};

pub struct Task<O> {
    pub operator: O,
    watermark: Millis,
    pub ledger: Ledger,
}

impl<O: Operator> Task<O> {
    pub fn new(operator: O) -> Self {
        Task { operator, watermark: NO_WATERMARK, ledger: Ledger::default() }
    }

    /// The input watermark it was last given.
    pub fn watermark(&self) -> Millis {
        self.watermark
    }

    /// Takes back a watermark it had given before (a restore).
    pub fn restore_watermark(&mut self, watermark: Millis) {
        self.watermark = watermark;
    }

    /// One input record.
    pub fn record(&mut self, record: O::In, out: &mut Vec<O::Out>) {
        self.ledger.read += 1;
        self.operator.on_record(record, out);
    }

    /// Gives the operator `watermark` if it is ahead of the last; whether it was.
    pub fn advance(&mut self, watermark: Millis, out: &mut Vec<O::Out>) -> bool {
        if watermark <= self.watermark {
            return false;
        }
        self.watermark = watermark;
        self.operator.on_watermark(watermark, out);
        true
    }
}

/// Every input record a task has read, by what became of it. A runtime with a
/// changelog keeps it in the task's state, so the counts are committed with the
/// records and survive a failover.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Input records read (watermark markers are not records).
    pub read: u64,
    /// Processed on time.
    pub on_time: u64,
    /// Sent to a late side output.
    pub late: u64,
    pub dead_letters: u64,
    /// Source records not on the partition of their key, sent through the stage's
    /// repartition topic (read again there, and counted then).
    #[serde(default)]
    pub rerouted: u64,
    /// Records this task produced (outputs and late side outputs, not markers).
    pub written: u64,
}

impl Ledger {
    /// A record read was processed: on time, or sent to a late side output.
    pub fn processed(&mut self, late: bool) {
        if late {
            self.late += 1;
        } else {
            self.on_time += 1;
        }
    }

    /// read = on time + late + dead letters.
    pub fn balanced(&self) -> bool {
        self.read == self.on_time + self.late + self.dead_letters
    }

    pub fn add(&mut self, other: &Ledger) {
        self.read += other.read;
        self.on_time += other.on_time;
        self.late += other.late;
        self.dead_letters += other.dead_letters;
        self.rerouted += other.rerouted;
        self.written += other.written;
    }
}

impl std::fmt::Display for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "read {} = on time {} + late {} + dead letters {}: {}",
            self.read,
            self.on_time,
            self.late,
            self.dead_letters,
            if self.balanced() { "balanced" } else { "DOES NOT BALANCE" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo(Vec<Millis>);

    impl Operator for Echo {
        type In = Millis;
        type Out = Millis;
        fn on_record(&mut self, record: Millis, out: &mut Vec<Millis>) {
            out.push(record);
        }
        fn on_watermark(&mut self, watermark: Millis, _: &mut Vec<Millis>) {
            self.0.push(watermark);
        }
        fn output_watermark(&self) -> Millis {
            self.0.last().copied().unwrap_or(NO_WATERMARK)
        }
    }

    #[test]
    fn a_task_gives_its_operator_only_watermarks_that_move_forward() {
        let mut task = Task::new(Echo(Vec::new()));
        let mut out = Vec::new();
        assert!(task.advance(10, &mut out));
        assert!(!task.advance(10, &mut out));
        assert!(!task.advance(5, &mut out));
        assert!(task.advance(11, &mut out));
        assert_eq!(task.operator.0, [10, 11]);
        task.record(3, &mut out);
        assert_eq!((out, task.ledger.read), (vec![3], 1));
    }

    #[test]
    fn a_ledger_balances_when_every_record_read_is_accounted_for() {
        let mut ledger = Ledger { read: 3, dead_letters: 1, ..Ledger::default() };
        ledger.processed(false);
        assert!(!ledger.balanced());
        ledger.processed(true);
        assert!(ledger.balanced());
        assert_eq!(ledger.to_string(), "read 3 = on time 1 + late 1 + dead letters 1: balanced");
    }
}
