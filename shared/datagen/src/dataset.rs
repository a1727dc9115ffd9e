//! A dataset: the three input streams as NDJSON lines, in arrival order, and the
//! folder they are written to and read from.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;
use vigil_model::Source;

use crate::planted::{self, PLANTED_SPAN_MS};
use crate::traffic::{Mix, Traffic};
use crate::PLANTED_START_MS;

/// Normal-traffic ids start here, clear of the planted ones.
const FIRST_TRAFFIC_ID: u64 = 100_000;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dataset {
    pub orders: Vec<String>,
    pub payments: Vec<String>,
    pub devices: Vec<String>,
}

impl Dataset {
    /// The planted scenarios, then `scale` × 1 000 events of normal traffic.
    pub fn planted(scale: u64, seed: u64) -> Dataset {
        Dataset {
            orders: planted_lines(Source::Orders, scale, seed).collect(),
            payments: planted_lines(Source::Payments, scale, seed).collect(),
            devices: planted_lines(Source::Devices, scale, seed).collect(),
        }
    }

    /// Writes the planted dataset straight to a folder, one line at a time, so a
    /// dataset of any size needs no memory to speak of. Returns the lines written per
    /// stream, in [`Source::ALL`] order.
    pub fn write_planted(dir: &Path, scale: u64, seed: u64, mix: Mix) -> io::Result<[u64; 3]> {
        std::fs::create_dir_all(dir)?;
        let mut written = [0; 3];
        for (n, source) in written.iter_mut().zip(Source::ALL) {
            *n = write_lines(&dir.join(source.file_name()), planted_lines_mixed(source, scale, seed, mix))?;
        }
        Ok(written)
    }

    pub fn lines(&self, source: Source) -> &[String] {
        match source {
            Source::Orders => &self.orders,
            Source::Payments => &self.payments,
            Source::Devices => &self.devices,
        }
    }

    pub fn len(&self) -> usize {
        self.orders.len() + self.payments.len() + self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the distinct-customers dataset (`crate::distinct`) straight to a folder.
    pub fn write_distinct_customers(dir: &Path, customers: u64, seed: u64) -> io::Result<[u64; 3]> {
        std::fs::create_dir_all(dir)?;
        let mut written = [0; 3];
        for (n, source) in written.iter_mut().zip(Source::ALL) {
            let lines = crate::distinct::distinct_customer_lines(source, customers, seed);
            *n = write_lines(&dir.join(source.file_name()), lines)?;
        }
        Ok(written)
    }

    /// Writes `orders.ndjson`, `payments.ndjson` and `devices.ndjson` into `dir`.
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for source in Source::ALL {
            write_lines(&dir.join(source.file_name()), self.lines(source).iter())?;
        }
        Ok(())
    }
}

/// One stream of the planted dataset, line by line: its planted records, its bad
/// lines, then normal traffic.
pub fn planted_lines(source: Source, scale: u64, seed: u64) -> Box<dyn Iterator<Item = String>> {
    planted_lines_mixed(source, scale, seed, Mix::default())
}

/// The same, its traffic in the proportions of `mix`.
pub fn planted_lines_mixed(source: Source, scale: u64, seed: u64, mix: Mix) -> Box<dyn Iterator<Item = String>> {
    let traffic = Traffic::new(seed, PLANTED_START_MS + PLANTED_SPAN_MS, FIRST_TRAFFIC_ID).with_mix(mix);
    let events = scale * 1000;
    let pairs = 0..mix.pairs_for(events);
    match source {
        Source::Orders => Box::new(
            lines(planted::orders())
                .chain(strings(planted::BAD_ORDER_LINES))
                .chain(pairs.filter_map(move |i| traffic.order(i)).map(|o| json(&o))),
        ),
        Source::Payments => Box::new(
            lines(planted::payments())
                .chain(strings(planted::BAD_PAYMENT_LINES))
                .chain(pairs.filter_map(move |i| traffic.payment(i)).map(|p| json(&p))),
        ),
        Source::Devices => Box::new(
            lines(planted::devices())
                .chain(strings(planted::BAD_DEVICE_LINES))
                .chain((0..mix.devices_for(events)).map(move |k| json(&traffic.device(k)))),
        ),
    }
}

fn write_lines<S: AsRef<str>>(path: &Path, lines: impl Iterator<Item = S>) -> io::Result<u64> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    let mut n = 0;
    for line in lines {
        writeln!(w, "{}", line.as_ref())?;
        n += 1;
    }
    w.flush()?;
    Ok(n)
}

fn json<T: Serialize>(record: &T) -> String {
    serde_json::to_string(record).expect("records serialize")
}

fn lines<T: Serialize>(records: Vec<T>) -> impl Iterator<Item = String> {
    records.into_iter().map(|r| json(&r))
}

fn strings(lines: &'static [&'static str]) -> impl Iterator<Item = String> {
    lines.iter().map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_adds_a_thousand_events_per_unit_after_the_planted_section() {
        let base = Dataset::planted(0, 7);
        let scaled = Dataset::planted(3, 7);
        let added = scaled.len() - base.len();
        assert!((2_950..=3_000).contains(&added), "{added}");
        assert_eq!(scaled.orders[..base.orders.len()], base.orders[..]);
        assert_eq!(Dataset::planted(3, 7), scaled, "deterministic");
    }

    #[test]
    fn a_written_folder_holds_every_line_whichever_way_it_was_written() {
        let dir = std::env::temp_dir().join(format!("vigil-dataset-{}", std::process::id()));
        let streamed = dir.join("streamed");
        let d = Dataset::planted(1, 7);
        d.write_to(&dir).unwrap();
        Dataset::write_planted(&streamed, 1, 7, Mix::default()).unwrap();
        for source in Source::ALL {
            let text = std::fs::read_to_string(dir.join(source.file_name())).unwrap();
            assert_eq!(text.lines().collect::<Vec<_>>(), d.lines(source));
            assert_eq!(std::fs::read_to_string(streamed.join(source.file_name())).unwrap(), text);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
