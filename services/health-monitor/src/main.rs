//! health-monitor: the pipeline watching itself, from `device-events-ontime` and the
//! late side topic `device-events-late` (all partitions) → `health-alerts`, keyed by
//! reason.

use std::process::ExitCode;

fn main() -> ExitCode {
    vigil_kafka::cli::main_for("health-monitor")
}
