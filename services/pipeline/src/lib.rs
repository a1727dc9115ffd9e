//! The whole Vigil pipeline in one process: the embedded runtime, its input readers
//! and output writers. `main.rs` is the command line around [`run`].

pub mod ingest;
pub mod ledger;
pub mod runtime;
pub mod sink;

use std::io;
use std::time::{Duration, Instant};

use vigil_model::output::Output;
use vigil_model::Config;

use crate::ingest::{Line, MergedInput};
use crate::ledger::Ledger;
use crate::runtime::EmbeddedRuntime;

/// What a run did, for the summary.
#[derive(Debug, Clone)]
pub struct RunStats {
    pub ledger: Ledger,
    pub elapsed: Duration,
}

impl RunStats {
    pub fn events_per_second(&self) -> f64 {
        self.ledger.read as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The tagged lines of a run's results, in emission order. Dead letters are left out:
/// they are input lines here and topic records in a Kafka deployment, so only the
/// results compare across runtimes.
pub fn result_lines(config: &Config, input: MergedInput) -> io::Result<Vec<String>> {
    let mut lines = Vec::new();
    run(
        config,
        input,
        |o| {
            if !matches!(o, Output::DeadLetter(_)) {
                lines.push(o.tagged_line());
            }
            Ok(())
        },
        |_, _| {},
    )?;
    Ok(lines)
}

/// Runs the pipeline over `input` to its end, handing every output to `emit` in
/// emission order. `progress` is called now and then with the records read so far.
pub fn run(
    config: &Config,
    input: MergedInput,
    mut emit: impl FnMut(Output) -> io::Result<()>,
    mut progress: impl FnMut(u64, Duration),
) -> io::Result<RunStats> {
    const PROGRESS_EVERY: u64 = 1 << 18;
    let started = Instant::now();
    let mut runtime = EmbeddedRuntime::new(config);
    for (n, line) in input.enumerate() {
        match line? {
            Line::Record(r) => runtime.process(r),
            Line::Dead(d) => runtime.dead_letter(d),
        }
        runtime.emit_outputs(&mut emit)?;
        if (n as u64 + 1).is_multiple_of(PROGRESS_EVERY) {
            progress(n as u64 + 1, started.elapsed());
        }
    }
    runtime.finish();
    runtime.emit_outputs(&mut emit)?;
    Ok(RunStats { ledger: runtime.ledger().clone(), elapsed: started.elapsed() })
}
