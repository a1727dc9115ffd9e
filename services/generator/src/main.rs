//! `vigil-generator`: Vigil's input records.
//!
//! - `--out DIR [--scale N] [--seed S]`: a dataset folder (orders.ndjson,
//!   payments.ndjson, devices.ndjson) with the planted scenarios and N × 1 000 events
//!   of normal traffic;
//! - `--stream orders|payments|devices [--rate R] [--seed S]`: one stream of normal
//!   traffic as NDJSON on stdout, R records a second (0: as fast as possible), as the
//!   seed's `generate_stream.py` does. Orders and payments streamed with one seed
//!   agree: payment i pays order i;
//! - `--kafka [--scale N] [--rate R]`: the dataset produced to the input topics as
//!   Avro, the three streams interleaved by event time, then an end-of-input marker on
//!   every partition (unless `--no-finish`) so every window fires.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use vigil_datagen::dataset::planted_lines;
use vigil_datagen::traffic::Traffic;
use vigil_datagen::{Dataset, PLANTED_START_MS};
use vigil_kafka::produce::InputProducer;
use vigil_model::input::parse_line;
use vigil_model::{Millis, Source};

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
    /// Records per second (default: 20 with --stream; as fast as possible with --kafka; 0 is as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    /// Stop after this many records when streaming (default: never).
    #[arg(long)]
    count: Option<u64>,
    /// Event time of the first streamed record, epoch ms.
    #[arg(long, default_value_t = PLANTED_START_MS)]
    start_ms: Millis,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Produce the dataset to Kafka instead of writing a folder.
    #[arg(long, conflicts_with_all = ["out", "stream"])]
    kafka: bool,
    /// With --kafka: leave the input open (no end-of-input markers).
    #[arg(long, requires = "kafka")]
    no_finish: bool,
    #[arg(long, env = "VIGIL_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092")]
    bootstrap_servers: String,
    #[arg(long, env = "VIGIL_SCHEMA_REGISTRY_URL", default_value = "http://127.0.0.1:8081")]
    schema_registry_url: String,
    /// Partitions of the input topics (as runtime.partitions).
    #[arg(long, env = "VIGIL_RUNTIME_PARTITIONS", default_value_t = 4)]
    partitions: u32,
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
        (None, None) if args.kafka => produce(&args),
        (None, None) => bail!(
            "say what to generate: --out DIR for a dataset folder, --kafka for the input topics, \
             or --stream orders|payments|devices"
        ),
    }
}

/// The dataset to the input topics, its three streams merged by event time.
fn produce(args: &Args) -> Result<()> {
    let producer = InputProducer::new(&args.bootstrap_servers, &args.schema_registry_url, args.partitions)?;
    let mut streams: Vec<_> =
        Source::ALL.iter().map(|&s| (s, planted_lines(s, args.scale, args.seed).peekable())).collect();
    let started = Instant::now();
    let mut sent = 0u64;
    loop {
        // Lines that are not records (no event time) go as soon as they are next.
        let next = streams
            .iter_mut()
            .enumerate()
            .filter_map(|(i, (source, lines))| {
                let line = lines.peek()?;
                let ts = parse_line(*source, line).map_or(Millis::MIN, |r| r.event_ts());
                Some((ts, i))
            })
            .min();
        let Some((_, i)) = next else { break };
        let (source, lines) = &mut streams[i];
        let line = lines.next().expect("peeked above");
        producer.send_line(*source, &line)?;
        sent += 1;
        let rate = args.rate.unwrap_or(0.0);
        if rate > 0.0 {
            let due = Duration::from_secs_f64(sent as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    if !args.no_finish {
        producer.finish()?;
    }
    producer.flush()?;
    eprintln!("vigil-generator: produced {sent} records in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
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
        let rate = args.rate.unwrap_or(20.0);
        if rate > 0.0 {
            // Paced against the start, so a slow write does not slow the average rate.
            out.flush()?;
            let due = Duration::from_secs_f64(written as f64 / rate);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    out.flush()
}
