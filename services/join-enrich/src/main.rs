//! join-enrich: orders ⋈ payments by order_id → `enriched-payments`, keyed by customer.

use std::process::ExitCode;

fn main() -> ExitCode {
    vigil_kafka::cli::main_for("join-enrich")
}
