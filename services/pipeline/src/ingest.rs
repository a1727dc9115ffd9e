//! Reading input: the three streams of a dataset folder (or the built-in planted
//! dataset), each line parsed and validated, and the streams merged into one
//! arrival order.
//!
//! Merge order: each stream is read in its own order (its file is its arrival order),
//! and the three are interleaved by the event time of their next record, as a
//! consumer reading three topics side by side would. A record late in its own stream
//! stays late: it is taken as soon as it is next in its stream.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use vigil_datagen::dataset::planted_lines;
use vigil_datagen::Dataset;
use vigil_model::input::parse_line;
use vigil_model::output::{DeadLetter, RecordType};
use vigil_model::{InputRecord, Source};

/// One input line: a valid record, or a dead letter saying why not.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Record(InputRecord),
    Dead(DeadLetter),
}

type RawLines = Box<dyn Iterator<Item = io::Result<Vec<u8>>>>;

pub struct StreamReader {
    source: Source,
    lines: RawLines,
    line_number: u64,
}

impl StreamReader {
    pub fn from_file(source: Source, path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let lines = BufReader::with_capacity(1 << 16, file).split(b'\n');
        Ok(StreamReader { source, lines: Box::new(lines), line_number: 0 })
    }

    pub fn from_lines(source: Source, lines: impl IntoIterator<Item = String> + 'static) -> Self {
        StreamReader { source, lines: Box::new(lines.into_iter().map(|l| Ok(l.into_bytes()))), line_number: 0 }
    }

    /// The next non-blank line, parsed.
    fn next_line(&mut self) -> Option<io::Result<Line>> {
        loop {
            let raw = match self.lines.next()? {
                Ok(raw) => raw,
                Err(e) => return Some(Err(e)),
            };
            self.line_number += 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(&raw);
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let dead = |reason: String, line: String| DeadLetter {
                record_type: RecordType::DeadLetter,
                source: self.source.name().to_string(),
                line_number: self.line_number,
                reason,
                line,
            };
            return Some(Ok(match std::str::from_utf8(raw) {
                Err(e) => {
                    Line::Dead(dead(format!("line is not valid UTF-8: {e}"), String::from_utf8_lossy(raw).into()))
                }
                Ok(text) => match parse_line(self.source, text) {
                    Ok(record) => Line::Record(record),
                    Err(reason) => Line::Dead(dead(reason.0, text.to_string())),
                },
            }));
        }
    }
}

/// The three streams interleaved by the event time of their next record.
pub struct MergedInput {
    readers: Vec<StreamReader>,
    heads: Vec<Option<Line>>,
}

impl MergedInput {
    pub fn new(readers: Vec<StreamReader>) -> Self {
        let heads = readers.iter().map(|_| None).collect();
        MergedInput { readers, heads }
    }

    /// A dataset folder; a missing stream file is an empty stream, but at least one
    /// of the three must be there.
    pub fn from_dir(dir: &Path) -> io::Result<Self> {
        let mut readers = Vec::new();
        for source in Source::ALL {
            let path = dir.join(source.file_name());
            match StreamReader::from_file(source, &path) {
                Ok(r) => readers.push(r),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display()))),
            }
        }
        if readers.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} holds none of orders.ndjson, payments.ndjson, devices.ndjson; \
                     write a dataset folder with `vigil-generator --out DIR`",
                    dir.display()
                ),
            ));
        }
        Ok(MergedInput::new(readers))
    }

    /// The built-in planted dataset, generated line by line as it is read.
    pub fn planted(scale: u64, seed: u64) -> Self {
        MergedInput::new(
            Source::ALL.iter().map(|&s| StreamReader::from_lines(s, planted_lines(s, scale, seed))).collect(),
        )
    }

    pub fn from_dataset(dataset: Dataset) -> Self {
        let Dataset { orders, payments, devices } = dataset;
        MergedInput::new(vec![
            StreamReader::from_lines(Source::Orders, orders),
            StreamReader::from_lines(Source::Payments, payments),
            StreamReader::from_lines(Source::Devices, devices),
        ])
    }
}

impl Iterator for MergedInput {
    type Item = io::Result<Line>;

    fn next(&mut self) -> Option<Self::Item> {
        for (head, reader) in self.heads.iter_mut().zip(&mut self.readers) {
            if head.is_none() {
                match reader.next_line() {
                    Some(Ok(line)) => *head = Some(line),
                    Some(Err(e)) => return Some(Err(e)),
                    None => {}
                }
            }
        }
        // A dead letter has no event time: it goes out as soon as it is next.
        let pick = self.heads.iter().position(|h| matches!(h, Some(Line::Dead(_)))).or_else(|| {
            self.heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| match h {
                    Some(Line::Record(r)) => Some((r.event_ts(), i)),
                    _ => None,
                })
                .min()
                .map(|(_, i)| i)
        })?;
        self.heads[pick].take().map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: &str, ts: i64) -> String {
        format!(r#"{{"order_id":"{id}","customer_id":"c","order_amount":1.0,"order_ts":{ts},"country":"US"}}"#)
    }

    fn device(ts: i64) -> String {
        format!(r#"{{"device_id":"d","site_id":"s","event_type":"heartbeat","status":"ok","event_ts":{ts}}}"#)
    }

    fn merged(orders: Vec<String>, devices: Vec<String>) -> Vec<Line> {
        MergedInput::new(vec![
            StreamReader::from_lines(Source::Orders, orders),
            StreamReader::from_lines(Source::Devices, devices),
        ])
        .map(Result::unwrap)
        .collect()
    }

    fn times(lines: &[Line]) -> Vec<i64> {
        lines
            .iter()
            .map(|l| match l {
                Line::Record(r) => r.event_ts(),
                Line::Dead(d) => -(d.line_number as i64),
            })
            .collect()
    }

    #[test]
    fn streams_interleave_by_event_time_and_each_keeps_its_own_order() {
        let lines = merged(vec![order("a", 10), order("b", 30)], vec![device(20), device(40), device(5), device(50)]);
        assert_eq!(times(&lines), vec![10, 20, 30, 40, 5, 50]);
    }

    #[test]
    fn bad_lines_become_dead_letters_with_their_line_number_and_blank_lines_are_skipped() {
        let lines = merged(vec![order("a", 10), String::new(), "{oops".into(), order("b", 30)], vec![]);
        assert_eq!(times(&lines), vec![10, -3, 30]);
        match &lines[1] {
            Line::Dead(d) => {
                assert_eq!((d.source.as_str(), d.line.as_str()), ("orders", "{oops"));
                assert!(d.reason.contains("not a valid orders record"), "{}", d.reason);
            }
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }

    #[test]
    fn a_folder_without_any_stream_file_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("vigil-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = MergedInput::from_dir(&dir).err().unwrap().to_string();
        assert!(err.contains("vigil-generator --out"), "{err}");
    }
}
