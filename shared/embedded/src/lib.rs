//! A pipeline in one process: the embedded runtime driving the stages' definitions
//! over a dataset's merged input, and the writers of its outputs. `vigil-pipeline`
//! is the command line around [`run`].

pub mod runtime;
pub mod sink;
mod tasks;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vigil_ingest::{Line, MergedInput};
use vigil_model::topology::{Topic, DEAD_LETTERS};
use vigil_model::{Config, InputRecord, Printed, Source};
use vigil_stream::Ledger;

pub use crate::runtime::{Embedded, EmbeddedRuntime};

/// What a run did, for the summary.
#[derive(Debug, Clone)]
pub struct RunStats {
    /// Every input record by what became of it.
    pub ledger: Ledger,
    /// Lines read of each input stream, dead letters included.
    pub read_by_source: [(Source, u64); 3],
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
pub fn result_lines<P: Embedded>(pipeline: &P, config: &Config, input: MergedInput) -> io::Result<Vec<String>> {
    let mut lines = Vec::new();
    let keep = |topic: &'static Topic, record: Arc<dyn Printed>| {
        if let (Some(tag), false) = (topic.tag, topic.is(&DEAD_LETTERS)) {
            lines.push(record.tagged_line(tag));
        }
        Ok(())
    };
    run(pipeline, config, input, keep, |_, _| {})?;
    Ok(lines)
}

/// Runs the pipeline over `input` to its end, handing every output to `emit` in
/// emission order. `progress` is called now and then with the records read so far.
pub fn run<P: Embedded>(
    pipeline: &P,
    config: &Config,
    input: MergedInput,
    mut emit: impl FnMut(&'static Topic, Arc<dyn Printed>) -> io::Result<()>,
    mut progress: impl FnMut(u64, Duration),
) -> io::Result<RunStats> {
    const PROGRESS_EVERY: u64 = 1 << 18;
    let started = Instant::now();
    let mut runtime = EmbeddedRuntime::new(pipeline, config).map_err(io::Error::other)?;
    let mut read_by_source = Source::ALL.map(|s| (s, 0));
    for (n, line) in input.enumerate() {
        let source = match line? {
            Line::Record(r) => {
                let source = source_of(&r);
                runtime.process(r);
                Some(source)
            }
            Line::Dead(d) => {
                let source = Source::from_name(&d.source);
                runtime.dead_letter(d);
                source
            }
        };
        if let Some(s) = source {
            read_by_source[s as usize].1 += 1;
        }
        runtime.emit_outputs(&mut emit)?;
        if (n as u64 + 1).is_multiple_of(PROGRESS_EVERY) {
            progress(n as u64 + 1, started.elapsed());
        }
    }
    runtime.finish();
    runtime.emit_outputs(&mut emit)?;
    Ok(RunStats { ledger: runtime.ledger(), read_by_source, elapsed: started.elapsed() })
}

fn source_of(record: &InputRecord) -> Source {
    match record {
        InputRecord::Order(_) => Source::Orders,
        InputRecord::Payment(_) => Source::Payments,
        InputRecord::Device(_) => Source::Devices,
    }
}
