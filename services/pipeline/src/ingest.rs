//! Reading input: the three streams of a dataset folder (or the built-in planted
//! dataset), each line parsed and validated, and the streams merged into one
//! arrival order.
//!
//! Merge order: each stream is read in its own order (its file is its arrival order),
//! and the three are interleaved by the event time of their next record, as a
//! consumer reading three topics side by side would. A record late in its own stream
//! stays late: it is taken as soon as it is next in its stream.
//!
//! A dataset folder's files are read and parsed ahead, each on a thread of its own
//! (`ReadAhead`): parsing is about a third of the pipeline's work, and with a second
//! core it no longer holds up the thread that processes. The order is the same.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;

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

/// The longest line taken as a record. A longer one is a dead letter (its first KiB
/// kept) and is skipped without being held in memory: one runaway line (a file with no
/// newlines, say) cannot take all memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;
const DEAD_LINE_PREFIX: usize = 1 << 10;

/// What a line source put in the line buffer: a whole line, or the start of one
/// longer than [`MAX_LINE_BYTES`].
enum RawLine {
    Whole,
    TooLong { bytes: u64 },
}

/// Lines read into one buffer, reused line after line: reading a line allocates
/// nothing once the buffer has grown to the longest line.
trait LineSource {
    fn next_into(&mut self, line: &mut Vec<u8>) -> Option<io::Result<RawLine>>;
}

/// Lines of a reader, none held beyond [`MAX_LINE_BYTES`].
struct BoundedLines<R>(R);

impl<R: BufRead> LineSource for BoundedLines<R> {
    fn next_into(&mut self, line: &mut Vec<u8>) -> Option<io::Result<RawLine>> {
        line.clear();
        let mut bytes = 0u64;
        let mut seen_any = false;
        loop {
            let buf = match self.0.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(e)),
            };
            if buf.is_empty() {
                if !seen_any {
                    return None;
                }
                break;
            }
            seen_any = true;
            let newline = memchr::memchr(b'\n', buf);
            let chunk = &buf[..newline.unwrap_or(buf.len())];
            let room = (MAX_LINE_BYTES + 1).saturating_sub(line.len());
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            bytes += chunk.len() as u64;
            let used = chunk.len() + usize::from(newline.is_some());
            self.0.consume(used);
            if newline.is_some() {
                break;
            }
        }
        Some(Ok(if line.len() > MAX_LINE_BYTES {
            line.truncate(DEAD_LINE_PREFIX);
            RawLine::TooLong { bytes }
        } else {
            RawLine::Whole
        }))
    }
}

/// Lines already in memory (the built-in planted dataset).
struct StringLines<I>(I);

impl<I: Iterator<Item = String>> LineSource for StringLines<I> {
    fn next_into(&mut self, line: &mut Vec<u8>) -> Option<io::Result<RawLine>> {
        let next = self.0.next()?;
        line.clear();
        line.extend_from_slice(next.as_bytes());
        Some(Ok(RawLine::Whole))
    }
}

pub struct StreamReader {
    source: Source,
    lines: Box<dyn LineSource>,
    line: Vec<u8>,
    line_number: u64,
}

impl StreamReader {
    /// NDJSON lines of a reader (a file's content, say).
    pub fn from_reader(source: Source, reader: impl BufRead + 'static) -> Self {
        Self::of(source, Box::new(BoundedLines(reader)))
    }

    pub fn from_lines(source: Source, lines: impl IntoIterator<Item = String> + 'static) -> Self {
        Self::of(source, Box::new(StringLines(lines.into_iter())))
    }

    fn of(source: Source, lines: Box<dyn LineSource>) -> Self {
        StreamReader { source, lines, line: Vec::new(), line_number: 0 }
    }

    /// The next non-blank line, parsed.
    pub fn next_line(&mut self) -> Option<io::Result<Line>> {
        loop {
            let raw = match self.lines.next_into(&mut self.line)? {
                Ok(raw) => raw,
                Err(e) => return Some(Err(e)),
            };
            self.line_number += 1;
            let dead = |reason: String, line: String| DeadLetter {
                record_type: RecordType::DeadLetter,
                source: self.source.name().to_string(),
                line_number: self.line_number,
                reason,
                line,
            };
            if let RawLine::TooLong { bytes } = raw {
                let reason = format!(
                    "line is {bytes} bytes, over the limit of {MAX_LINE_BYTES}; only its first {DEAD_LINE_PREFIX} are kept here"
                );
                return Some(Ok(Line::Dead(dead(reason, String::from_utf8_lossy(&self.line).into()))));
            }
            let raw = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
            if raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
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

/// Lines a read-ahead thread parses before handing them over, and batches it may
/// have ready: a few thousand lines in flight per stream.
const BATCH_LINES: usize = 512;
const BATCHES_AHEAD: usize = 4;

/// A stream read and parsed on a thread of its own, ahead of its consumer.
pub struct ReadAhead {
    source: Source,
    batches: Receiver<Vec<io::Result<Line>>>,
    batch: std::vec::IntoIter<io::Result<Line>>,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    pub fn from_file(source: Source, path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let (sender, batches) = mpsc::sync_channel(BATCHES_AHEAD);
        let thread = std::thread::Builder::new().name(format!("read-{}", source.name())).spawn(move || {
            let mut reader = StreamReader::from_reader(source, BufReader::with_capacity(1 << 16, file));
            loop {
                let mut batch = Vec::with_capacity(BATCH_LINES);
                batch.extend(std::iter::from_fn(|| reader.next_line()).take(BATCH_LINES));
                // A short batch is the end of the file; a read error ends it too.
                let last = batch.len() < BATCH_LINES || batch.iter().any(|line| line.is_err());
                if batch.is_empty() || sender.send(batch).is_err() || last {
                    return;
                }
            }
        })?;
        Ok(ReadAhead { source, batches, batch: Vec::new().into_iter(), thread: Some(thread) })
    }

    pub fn next_line(&mut self) -> Option<io::Result<Line>> {
        loop {
            if let Some(line) = self.batch.next() {
                return Some(line);
            }
            match self.batches.recv() {
                Ok(batch) => self.batch = batch.into_iter(),
                // The thread is done: at the end of its file, or because it failed,
                // which must not pass for the end.
                Err(_) => {
                    let failed = self.thread.take().is_some_and(|thread| thread.join().is_err());
                    return failed.then(|| {
                        Err(io::Error::other(format!(
                            "reading the {} stream failed (its thread panicked)",
                            self.source.name()
                        )))
                    });
                }
            }
        }
    }
}

/// One stream's reader: parsing where it is called, or ahead on a thread.
enum Reader {
    Here(StreamReader),
    Ahead(ReadAhead),
}

impl Reader {
    fn next_line(&mut self) -> Option<io::Result<Line>> {
        match self {
            Reader::Here(reader) => reader.next_line(),
            Reader::Ahead(reader) => reader.next_line(),
        }
    }
}

/// The three streams interleaved by the event time of their next record.
pub struct MergedInput {
    readers: Vec<Reader>,
    heads: Vec<Option<Line>>,
}

impl MergedInput {
    pub fn new(readers: Vec<StreamReader>) -> Self {
        Self::of(readers.into_iter().map(Reader::Here).collect())
    }

    fn of(readers: Vec<Reader>) -> Self {
        let heads = readers.iter().map(|_| None).collect();
        MergedInput { readers, heads }
    }

    /// A dataset folder; a missing stream file is an empty stream, but at least one
    /// of the three must be there.
    pub fn from_dir(dir: &Path) -> io::Result<Self> {
        let mut readers = Vec::new();
        for source in Source::ALL {
            let path = dir.join(source.file_name());
            match ReadAhead::from_file(source, &path) {
                Ok(r) => readers.push(Reader::Ahead(r)),
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
        Ok(MergedInput::of(readers))
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
    fn a_line_over_the_limit_is_a_dead_letter_and_the_next_line_is_read() {
        let content = format!("{}\n{}\n{}\n", order("a", 10), "x".repeat(3 * MAX_LINE_BYTES), order("b", 30));
        let mut reader = StreamReader::from_reader(Source::Orders, io::Cursor::new(content.into_bytes()));
        let lines: Vec<Line> = std::iter::from_fn(|| reader.next_line()).map(Result::unwrap).collect();
        assert_eq!(times(&lines), vec![10, -2, 30]);
        let Line::Dead(d) = &lines[1] else { unreachable!() };
        assert!(d.reason.contains(&format!("line is {} bytes", 3 * MAX_LINE_BYTES)), "{}", d.reason);
        assert_eq!(d.line.len(), DEAD_LINE_PREFIX);
    }

    #[test]
    fn the_last_line_needs_no_newline_and_a_line_at_the_limit_is_read() {
        let padded = format!("{}{}", order("a", 10), " ".repeat(MAX_LINE_BYTES - order("a", 10).len()));
        let content = format!("{padded}\n{}", order("b", 30));
        let mut reader = StreamReader::from_reader(Source::Orders, io::Cursor::new(content.into_bytes()));
        let lines: Vec<Line> = std::iter::from_fn(|| reader.next_line()).map(Result::unwrap).collect();
        assert_eq!(times(&lines), vec![10, 30]);
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
    fn reading_ahead_gives_the_lines_and_dead_letters_of_reading_in_place() {
        let mut content = String::new();
        for i in 0..3 * BATCH_LINES + 7 {
            let line = match i {
                700 => "{oops".to_string(),
                701 => String::new(),
                _ => order(&format!("o{i}"), i as i64),
            };
            content.push_str(&line);
            content.push('\n');
        }
        let path = std::env::temp_dir().join(format!("vigil-read-ahead-{}.ndjson", std::process::id()));
        std::fs::write(&path, &content).unwrap();
        let mut ahead = ReadAhead::from_file(Source::Orders, &path).unwrap();
        let ahead: Vec<Line> = std::iter::from_fn(|| ahead.next_line()).map(Result::unwrap).collect();
        std::fs::remove_file(&path).unwrap();
        let mut here = StreamReader::from_reader(Source::Orders, io::Cursor::new(content.into_bytes()));
        let here: Vec<Line> = std::iter::from_fn(|| here.next_line()).map(Result::unwrap).collect();
        assert_eq!(ahead.len(), 3 * BATCH_LINES + 6);
        assert_eq!(ahead, here);
    }

    #[test]
    fn a_folder_without_any_stream_file_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("vigil-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = MergedInput::from_dir(&dir).err().unwrap().to_string();
        assert!(err.contains("vigil-generator --out"), "{err}");
    }
}
