//! A dataset: the three input streams as NDJSON lines, in arrival order, and the
//! folder they are written to and read from.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;
use vigil_model::Source;

use crate::planted::{self, PLANTED_SPAN_MS};
use crate::traffic::Traffic;
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
        let mut d = Dataset {
            orders: lines(planted::orders()).chain(strings(planted::BAD_ORDER_LINES)).collect(),
            payments: lines(planted::payments()).chain(strings(planted::BAD_PAYMENT_LINES)).collect(),
            devices: lines(planted::devices()).chain(strings(planted::BAD_DEVICE_LINES)).collect(),
        };
        let traffic = Traffic::new(seed, PLANTED_START_MS + PLANTED_SPAN_MS, FIRST_TRAFFIC_ID);
        let events = scale * 1000;
        for i in 0..Traffic::pairs_for(events) {
            d.orders.extend(traffic.order(i).map(|o| json(&o)));
            d.payments.extend(traffic.payment(i).map(|p| json(&p)));
        }
        d.devices.extend((0..Traffic::devices_for(events)).map(|k| json(&traffic.device(k))));
        d
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

    /// Writes `orders.ndjson`, `payments.ndjson` and `devices.ndjson` into `dir`.
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for source in Source::ALL {
            let mut w = BufWriter::new(std::fs::File::create(dir.join(source.file_name()))?);
            for line in self.lines(source) {
                writeln!(w, "{line}")?;
            }
            w.flush()?;
        }
        Ok(())
    }
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
    fn a_written_folder_holds_every_line() {
        let dir = std::env::temp_dir().join(format!("vigil-dataset-{}", std::process::id()));
        let d = Dataset::planted(1, 7);
        d.write_to(&dir).unwrap();
        for source in Source::ALL {
            let text = std::fs::read_to_string(dir.join(source.file_name())).unwrap();
            assert_eq!(text.lines().count(), d.lines(source).len());
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
