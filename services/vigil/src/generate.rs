//! `vigil generate`: Vigil's input records.
//!
//! - `--out DIR [--scale N] [--seed S]`: a dataset folder (orders.ndjson,
//!   payments.ndjson, devices.ndjson) with the planted scenarios and N × 1 000 events
//!   of normal traffic;
//! - `--stream orders|payments|devices [--rate R] [--seed S]`: one stream of normal
//!   traffic as NDJSON on stdout, R records a second (0: as fast as possible), as the
//!   seed's `generate_stream.py` does. Orders and payments streamed with one seed
//!   agree: payment i pays order i;
//! - `--kafka [--input DIR | --scale N] [--rate R]`: a dataset (a folder, or the
//!   built-in planted one) produced to the input topics as Avro (or plain JSON with
//!   `--encoding json`, compressed with `--compression`), the three streams
//!   interleaved by event time, then an end-of-input marker on every partition
//!   (unless `--no-finish`) so every window fires;
//! - `--kafka --live [--rate R]`: normal traffic to the input topics without end,
//!   each record stamped with the wall clock as it is sent, as live producers do.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use vigil_datagen::traffic::{Mix, Traffic};
use vigil_datagen::{Dataset, PLANTED_START_MS};
use vigil_ingest::{Line, MergedInput, StreamReader};
use vigil_kafka::metrics::now_ms;
use vigil_kafka::names::Names;
use vigil_kafka::produce::{Encoding, InputProducer, Keying};
use vigil_model::{Config, InputRecord, Millis, Source};
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write a dataset folder here.
    #[arg(long, value_name = "DIR", conflicts_with = "stream")]
    out: Option<PathBuf>,
    /// Normal traffic in the dataset, in thousands of events, after the planted scenarios.
    #[arg(long, default_value_t = 1, value_name = "N")]
    scale: u64,
    /// How the traffic divides among the streams: half-devices (half device events,
    /// a quarter each orders and payments) or equal (a third each, as the seed's
    /// streaming generator runs them).
    #[arg(long, default_value = "half-devices", value_name = "MIX")]
    mix: Mix,
    /// With --out: instead of the planted dataset, N orders from N distinct customers,
    /// each paid once (state at scale: N customers in the amount rule).
    #[arg(long, value_name = "N", requires = "out")]
    distinct_customers: Option<u64>,
    /// Stream one kind of record to stdout.
    #[arg(long, value_enum)]
    stream: Option<StreamKind>,
    /// Records per second (default: 20 with --stream and --live; as fast as possible with --kafka; 0 is as fast as possible).
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
    /// Produce to Kafka's input topics instead of writing a folder.
    #[arg(long, conflicts_with_all = ["out", "stream"])]
    kafka: bool,
    /// With --kafka: replay this dataset folder instead of the built-in planted dataset.
    #[arg(long, value_name = "DIR", requires = "kafka", conflicts_with = "live")]
    input: Option<PathBuf>,
    /// With --kafka: normal traffic without end, stamped with the wall clock.
    #[arg(long, requires = "kafka")]
    live: bool,
    /// With --kafka: leave the input open (no end-of-input markers).
    #[arg(long, requires = "kafka")]
    no_finish: bool,
    /// With --kafka: how records are keyed (`none` and `other` send most records to
    /// another partition than their join key's; the stages re-key them).
    #[arg(long, value_enum, default_value_t = Keying::Join, requires = "kafka")]
    keys: Keying,
    /// With --kafka: how values are written (`json`: plain JSON objects, as the seed's
    /// generator writes them; the stages read either, record by record).
    #[arg(long, value_enum, default_value_t = Encoding::Avro, requires = "kafka")]
    encoding: Encoding,
    /// With --kafka: the codec of the record batches (none, gzip, snappy, lz4, zstd).
    #[arg(long, default_value = "none", requires = "kafka")]
    compression: String,
    /// With --kafka: produce nothing if the input topics already hold records (a demo
    /// that runs at every start must not replay its dataset into the past).
    #[arg(long, requires = "kafka")]
    if_empty: bool,
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

pub fn run(args: Args) -> Result<()> {
    let file = std::env::var_os("VIGIL_CONFIG").map(std::path::PathBuf::from);
    vigil_kafka::connection::load(file.as_deref())?;
    let config = Config::load(file.as_deref(), std::env::vars())?;
    match (&args.out, args.stream) {
        (Some(dir), _) => {
            let written = match args.distinct_customers {
                Some(n) => Dataset::write_distinct_customers(dir, n, args.seed),
                None => Dataset::write_planted(dir, args.scale, args.seed, args.mix),
            };
            let [orders, payments, devices] =
                written.with_context(|| format!("cannot write the dataset to {}", dir.display()))?;
            eprintln!(
                "vigil generate: wrote {orders} orders, {payments} payments, {devices} device events to {}",
                dir.display()
            );
            Ok(())
        }
        (None, Some(kind)) => match stream(kind, &args) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            other => other.context("cannot write to stdout"),
        },
        (None, None) if args.kafka => produce(&args, Names::new(&config.topics, &SeedPipeline::default().topology())),
        (None, None) => bail!(
            "say what to generate: --out DIR for a dataset folder, --kafka for the input topics, \
             or --stream orders|payments|devices"
        ),
    }
}

/// A dataset (or live traffic) to the input topics, as `names` names them.
fn produce(args: &Args, names: Names) -> Result<()> {
    let producer = InputProducer::new(&args.bootstrap_servers, &args.schema_registry_url, args.partitions)?
        .named(names)
        .keyed(args.keys)
        .encoded(args.encoding)
        .compressed(&args.compression)?;
    if args.if_empty {
        let held = producer.records_in_inputs()?;
        if held > 0 {
            eprintln!(
                "vigil generate: the input topics already hold {held} records; producing nothing \
                 (without --if-empty the dataset is produced again)"
            );
            return Ok(());
        }
    }
    let (input, what) = match &args.input {
        Some(dir) => (MergedInput::from_dir(dir)?, format!("dataset {}", dir.display())),
        None if args.live => (live_traffic(args.seed), "live traffic".to_string()),
        None => (
            MergedInput::planted_mixed(args.scale, args.seed, args.mix),
            format!("planted dataset, scale {}", args.scale),
        ),
    };
    let rate = args.rate.unwrap_or(if args.live { 20.0 } else { 0.0 });
    eprintln!("vigil generate: producing the {what} to {}", args.bootstrap_servers);
    let mut pace = Pace::new(rate, true);
    for line in input {
        match line? {
            Line::Record(mut record) => {
                if args.live {
                    restamp(&mut record, now_ms());
                }
                producer.send_record(&record)?
            }
            // Bad lines go as they are, so the services' dead-letter path sees them.
            Line::Dead(d) => {
                let source = Source::from_name(&d.source).expect("a dead letter names its stream");
                producer.send_line(source, &d.line)?
            }
        }
        pace.sent();
    }
    if !args.no_finish {
        producer.finish()?;
    }
    producer.flush()?;
    eprintln!("vigil generate: produced {} records in {:.1} s", pace.count, pace.started.elapsed().as_secs_f64());
    Ok(())
}

/// Normal traffic without end, in event-time order (the live mode restamps it).
fn live_traffic(seed: u64) -> MergedInput {
    let traffic = Traffic::new(seed, PLANTED_START_MS, 1_000_000);
    MergedInput::new(vec![
        StreamReader::from_lines(Source::Orders, (0..).filter_map(move |i| traffic.order(i)).map(|o| to_json(&o))),
        StreamReader::from_lines(Source::Payments, (0..).filter_map(move |i| traffic.payment(i)).map(|p| to_json(&p))),
        StreamReader::from_lines(Source::Devices, (0..).map(move |k| to_json(&traffic.device(k)))),
    ])
}

fn to_json<T: serde::Serialize>(record: &T) -> String {
    serde_json::to_string(record).expect("records serialize")
}

fn restamp(record: &mut InputRecord, now: Millis) {
    match record {
        InputRecord::Order(o) => o.order_ts = now,
        InputRecord::Payment(p) => p.payment_ts = now,
        InputRecord::Device(d) => d.event_ts = now,
    }
}

/// How far ahead of its rate the generator runs before it sleeps.
const PACE_GRAIN: Duration = Duration::from_millis(1);

/// Holds a producer to a rate (paced against the start, so one slow send does not slow
/// the average) and reports progress every few seconds.
///
/// It sleeps only once it is a millisecond ahead: a sleep after each record spends
/// the generator's CPU in wake-ups, on the cores the broker and the services share. The records of
/// a millisecond go together; each is stamped when it is sent.
struct Pace {
    rate: f64,
    started: Instant,
    count: u64,
    /// When progress was last reported; `None` reports nothing.
    reported: Option<Instant>,
}

impl Pace {
    fn new(rate: f64, report: bool) -> Self {
        Pace { rate, started: Instant::now(), count: 0, reported: report.then(Instant::now) }
    }

    fn sent(&mut self) {
        self.count += 1;
        if self.rate > 0.0 {
            let due = Duration::from_secs_f64(self.count as f64 / self.rate);
            if let Some(wait) = due.checked_sub(self.started.elapsed()).filter(|&wait| wait >= PACE_GRAIN) {
                std::thread::sleep(wait);
            }
        }
        if let Some(reported) = self.reported.filter(|r| r.elapsed() >= Duration::from_secs(10)) {
            self.reported = Some(reported + Duration::from_secs(10));
            let secs = self.started.elapsed().as_secs_f64();
            eprintln!("vigil generate: {} records so far ({:.0}/s)", self.count, self.count as f64 / secs);
        }
    }
}

fn stream(kind: StreamKind, args: &Args) -> io::Result<()> {
    let traffic = Traffic::new(args.seed, args.start_ms, 0);
    let mut out = BufWriter::new(io::stdout().lock());
    let mut pace = Pace::new(args.rate.unwrap_or(20.0), false);
    for i in 0.. {
        if args.count.is_some_and(|c| pace.count >= c) {
            break;
        }
        let line = match kind {
            StreamKind::Orders => traffic.order(i).map(|o| serde_json::to_string(&o)),
            StreamKind::Payments => traffic.payment(i).map(|p| serde_json::to_string(&p)),
            StreamKind::Devices => Some(serde_json::to_string(&traffic.device(i))),
        };
        let Some(line) = line else { continue };
        writeln!(out, "{}", line.map_err(io::Error::other)?)?;
        if pace.rate > 0.0 {
            out.flush()?;
        }
        pace.sent();
    }
    out.flush()
}
