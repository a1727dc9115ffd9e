//! device-analytics: sliding per-site metrics, fault spikes, reboot loops and
//! firmware failures from `device-events-ontime` → `device-metrics`,
//! `device-anomalies`.

use std::process::ExitCode;

fn main() -> ExitCode {
    vigil_kafka::cli::main_for("device-analytics")
}
