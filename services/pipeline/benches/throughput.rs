//! Embedded throughput on a generated dataset (not a test: it asserts nothing about
//! speed). `cargo bench -p vigil-pipeline` writes the planted dataset with
//! `VIGIL_BENCH_SCALE` thousand events of normal traffic (default 1 100, just over
//! 1 000 000 input events) in the seed's mix (`VIGIL_BENCH_MIX`, default `equal`: the
//! three streams at one rate; `half-devices` is the mix of figures before 2026-12-07)
//! to `target/vigil-bench/`, then runs the whole pipeline on
//! it, on one thread, a few times: reading and parsing the files, all six stages, and
//! the outputs either discarded unformatted (`--quiet`) or formatted as tagged lines.
//! It prints events per second and the process's peak resident memory.

use std::io;
use std::path::PathBuf;

use vigil_datagen::Dataset;
use vigil_embedded::sink::OutputWriter;
use vigil_ingest::{MergedInput, Mix};
use vigil_model::Config;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RUNS: usize = 3;

fn main() -> io::Result<()> {
    let scale: u64 = std::env::var("VIGIL_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1_100);
    let mix_name = std::env::var("VIGIL_BENCH_MIX").unwrap_or_else(|_| "equal".into());
    let mix: Mix = mix_name.parse().map_err(io::Error::other)?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vigil-bench-scale-{scale}-{mix_name}"));
    if !dir.join("devices.ndjson").exists() {
        eprintln!("writing the dataset (scale {scale}, mix {mix_name}) to {}", dir.display());
        Dataset::write_planted(&dir, scale, 7, mix)?;
    }
    let config = Config::default();
    println!("embedded pipeline, {} partitions, dataset {}", config.runtime.partitions, dir.display());
    for (mode, formatted) in
        [("outputs counted, not formatted (--quiet)", false), ("outputs formatted as tagged lines", true)]
    {
        let mut rates = Vec::new();
        let mut read = 0;
        let mut emitted = 0;
        for _ in 0..RUNS {
            reset_peak_memory();
            let sink: Option<Box<dyn io::Write + Send>> = if formatted { Some(Box::new(io::sink())) } else { None };
            let mut writer = OutputWriter::new(&SeedPipeline::default().topology().topics(), sink, None)?;
            let input = MergedInput::from_dir(&dir)?;
            let write = |topic, record: std::sync::Arc<dyn vigil_model::Printed>| writer.write(topic, &*record);
            let stats = vigil_embedded::run(&SeedPipeline::default(), &config, input, write, |_, _| {})?;
            assert!(stats.ledger.balanced(), "{}", stats.ledger);
            rates.push(stats.events_per_second());
            read = stats.ledger.read;
            emitted = writer.counts().iter().map(|(_, n)| n).sum::<u64>();
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "{mode}: {read} input events, {emitted} outputs; events/s median {:.0} (min {:.0}, max {:.0}) over {RUNS} runs; peak RSS {}",
            rates[RUNS / 2],
            rates[0],
            rates[RUNS - 1],
            peak_memory().map_or("unknown".into(), |kb| format!("{:.1} MiB", kb as f64 / 1024.0)),
        );
    }
    Ok(())
}

/// Linux resets the peak resident set size (VmHWM) when 5 is written to clear_refs.
fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_memory() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
