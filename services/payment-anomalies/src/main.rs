//! payment-anomalies: the amount and velocity rules per customer, on the partitions
//! of `enriched-payments` → `payment-anomalies`, keyed by customer.

use std::process::ExitCode;

fn main() -> ExitCode {
    vigil_kafka::cli::main_for("payment-anomalies")
}
