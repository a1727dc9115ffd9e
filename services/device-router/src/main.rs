//! device-router: judges `device-events` against the watermark → on-time events to
//! `device-events-ontime`, late ones to the late side topic `device-events-late`.

use std::process::ExitCode;

fn main() -> ExitCode {
    vigil_kafka::cli::main_for("device-router")
}
