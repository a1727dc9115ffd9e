//! payment-metrics: the tumbling payment window over every partition of
//! `enriched-payments` → `payment-metrics`, keyed by window start.

use std::process::ExitCode;

fn main() -> ExitCode {
    vigil_kafka::cli::main_for("payment-metrics")
}
