//! `vigil-generator`: Vigil's input records.
//!
//! - `--out DIR [--scale N] [--seed S]`: a dataset folder (orders.ndjson,
//!   payments.ndjson, devices.ndjson) with the planted scenarios and N × 1 000 events
//!   of normal traffic;
//! - `--stream orders|payments|devices [--rate R] [--seed S]`: one stream of normal
//!   traffic as NDJSON on stdout, R records a second (0: as fast as possible), as the
//!   seed's `generate_stream.py` does. Orders and payments streamed with one seed
//!   agree: payment i pays order i.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use vigil_datagen::traffic::Traffic;
use vigil_datagen::{Dataset, PLANTED_START_MS};
use vigil_model::Millis;

#[derive(Debug, Parser)]
#[command(name = "vigil-generator", version, about = "Writes Vigil datasets and streams generator records as NDJSON")]
struct Args {
    /// Write a dataset folder here.
    #[arg(long, value_name = "DIR", conflicts_with = "stream")]
    out: Option<PathBuf>,
    /// Normal traffic in the dataset, in thousands of events, after the planted scenarios.
    #[arg(long, default_value_t = 1, value_name = "N")]
    scale: u64,
    /// Stream one kind of record to stdout.
    #[arg(long, value_enum)]
    stream: Option<StreamKind>,
    /// Records per second when streaming; 0 streams as fast as the reader takes them.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Stop after this many records when streaming (default: never).
    #[arg(long)]
    count: Option<u64>,
    /// Event time of the first streamed record, epoch ms.
    #[arg(long, default_value_t = PLANTED_START_MS)]
    start_ms: Millis,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum StreamKind {
    Orders,
    Payments,
    Devices,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil-generator: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<()> {
    match (&args.out, args.stream) {
        (Some(dir), _) => {
            let [orders, payments, devices] = Dataset::write_planted(dir, args.scale, args.seed)
                .with_context(|| format!("cannot write the dataset to {}", dir.display()))?;
            eprintln!(
                "vigil-generator: wrote {orders} orders, {payments} payments, {devices} device events to {}",
                dir.display()
            );
            Ok(())
        }
        (None, Some(kind)) => match stream(kind, &args) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            other => other.context("cannot write to stdout"),
        },
        (None, None) => {
            bail!("say what to generate: --out DIR for a dataset folder, or --stream orders|payments|devices")
        }
    }
}

fn stream(kind: StreamKind, args: &Args) -> io::Result<()> {
    let traffic = Traffic::new(args.seed, args.start_ms, 0);
    let mut out = BufWriter::new(io::stdout().lock());
    let started = Instant::now();
    let mut written = 0u64;
    for i in 0.. {
        if args.count.is_some_and(|c| written >= c) {
            break;
        }
        let line = match kind {
            StreamKind::Orders => traffic.order(i).map(|o| serde_json::to_string(&o)),
            StreamKind::Payments => traffic.payment(i).map(|p| serde_json::to_string(&p)),
            StreamKind::Devices => Some(serde_json::to_string(&traffic.device(i))),
        };
        let Some(line) = line else { continue };
        writeln!(out, "{}", line.map_err(io::Error::other)?)?;
        written += 1;
        if args.rate > 0.0 {
            // Paced against the start, so a slow write does not slow the average rate.
            out.flush()?;
            let due = Duration::from_secs_f64(written as f64 / args.rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    out.flush()
}
