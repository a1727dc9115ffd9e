//! `vigil-pipeline`: the whole pipeline in one process. With no arguments it runs the
//! built-in planted dataset and prints the seed's tagged lines; `--input DIR` reads a
//! dataset folder instead.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use vigil_embedded::sink::{OutputWriter, WriteBehind};
use vigil_embedded::RunStats;
use vigil_ingest::{MergedInput, Mix};
use vigil_model::Config;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

// The pipeline allocates a few small strings per record; mimalloc's thread-local
// free lists make that markedly cheaper than glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Vigil's embedded pipeline: orders ⋈ payments, windowed metrics, anomalies,
/// late-event handling and health alerts, in one process.
#[derive(Debug, Parser)]
#[command(name = "vigil-pipeline", version)]
struct Args {
    /// Dataset folder with orders.ndjson, payments.ndjson and devices.ndjson
    /// (default: the built-in planted dataset).
    #[arg(long, value_name = "DIR")]
    input: Option<PathBuf>,
    /// Also write one NDJSON file per output topic (`<topic>.ndjson`) into this folder.
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// TOML configuration file (every key: docs/configuration.md); VIGIL_<SECTION>_<KEY> variables
    /// override it.
    #[arg(long, value_name = "FILE", env = "VIGIL_CONFIG")]
    config: Option<PathBuf>,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
    /// Normal traffic added to the built-in dataset, in thousands of events.
    #[arg(long, default_value_t = 1, value_name = "N")]
    scale: u64,
    /// Seed of the built-in dataset's normal traffic.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// How the built-in dataset's traffic divides among the streams: half-devices or
    /// equal (the seed's: a third each).
    #[arg(long, default_value = "half-devices", value_name = "MIX")]
    mix: Mix,
    /// Print no tagged lines, only the summary.
    #[arg(long, short)]
    quiet: bool,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vigil-pipeline: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode> {
    let config = Config::load(args.config.as_deref(), std::env::vars())?;
    if args.print_config {
        print!("{}", config.to_toml());
        return Ok(ExitCode::SUCCESS);
    }
    let (input, what) = match &args.input {
        Some(dir) => (MergedInput::from_dir(dir)?, format!("dataset {}", dir.display())),
        None => (
            MergedInput::planted_mixed(args.scale, args.seed, args.mix),
            format!("built-in planted dataset (scale {}, seed {})", args.scale, args.seed),
        ),
    };
    let tagged: Option<Box<dyn Write + Send>> = if args.quiet { None } else { Some(Box::new(io::stdout())) };
    let topics = SeedPipeline::default().topology().topics();
    let mut writer = WriteBehind::spawn(OutputWriter::new(&topics, tagged, args.output.as_deref())?)?;
    let show_progress = io::stderr().is_terminal() || args.quiet;
    let mut last_report = Duration::ZERO;
    let started = Instant::now();
    let result = vigil_embedded::run(
        &SeedPipeline::default(),
        &config,
        input,
        |topic, record| writer.write(topic, record),
        |n, elapsed| {
            if show_progress && elapsed >= last_report + Duration::from_secs(2) {
                last_report = elapsed;
                eprintln!("vigil: … {n} records, {:.0}/s", n as f64 / elapsed.as_secs_f64());
            }
        },
    );
    let written = result.and_then(|stats| Ok((stats, writer.finish()?)));
    let (stats, writer) = match written {
        // A reader that went away (`| head`) is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other.context("pipeline run failed")?,
    };
    // Until the last line is out, not only processed.
    let stats = RunStats { elapsed: started.elapsed(), ..stats };

    eprintln!(
        "vigil: {what}: {} input records in {:.3} s ({:.0} events/s, {} partitions)",
        stats.ledger.read,
        stats.elapsed.as_secs_f64(),
        stats.events_per_second(),
        config.runtime.partitions
    );
    let counts: Vec<String> = writer.counts().iter().map(|(tag, n)| format!("{tag} {n}")).collect();
    eprintln!("vigil: out: {}", counts.join(", "));
    let by_source: Vec<String> = stats.read_by_source.iter().map(|(s, n)| format!("{} {n}", s.name())).collect();
    eprintln!("vigil: read: {}", by_source.join(", "));
    eprintln!("vigil: ledger: {}", stats.ledger);
    if let Some(dir) = &args.output {
        eprintln!("vigil: one NDJSON file per output topic in {}", dir.display());
    }
    if !stats.ledger.balanced() {
        bail!("the input ledger does not balance: a record was lost; please report this with the input");
    }
    Ok(ExitCode::SUCCESS)
}
