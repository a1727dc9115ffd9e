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

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use vigil_datagen::dataset::planted_lines;
use vigil_datagen::Dataset;
use vigil_model::input::parse_line;
use vigil_model::output::{InvalidLine, RecordType};
use vigil_model::{InputRecord, Source};

/// One input line: a valid record, or a dead letter saying why not.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Record(InputRecord),
    Dead(InvalidLine),
}

/// The longest line taken as a record. A longer one is a dead letter (its first KiB
/// kept) and is skipped without being held in memory: one runaway line (a file with no
/// newlines, say) cannot take all memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;
const DEAD_LINE_PREFIX: usize = 1 << 10;

/// Bytes read from a file at a time.
const CHUNK_BYTES: usize = 1 << 15;

/// One line as a line source found it, without its newline.
enum RawLine<'a> {
    /// Known to be valid UTF-8.
    Text(&'a str),
    /// Not checked yet.
    Bytes(&'a [u8]),
    /// Longer than [`MAX_LINE_BYTES`]: its first bytes, and how many it had.
    TooLong { prefix: &'a [u8], bytes: u64 },
}

/// Where a stream's lines come from. Each call hands the lines it has ready to
/// `each`, in order, and says whether more may follow.
trait LineSource {
    fn next_lines(&mut self, each: &mut dyn FnMut(RawLine<'_>)) -> io::Result<More>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum More {
    Yes,
    No,
}

/// Lines of a reader, a chunk at a time. A chunk's whole lines are checked for UTF-8
/// in one pass (cheaper than line by line; a chunk that fails is checked line by
/// line, so each bad line is named), then parsed where they lie, without a copy.
struct ChunkedLines<R> {
    reader: R,
    /// At most `MAX_LINE_BYTES + 1` long, so a line it holds with its newline is
    /// within the limit.
    buf: Vec<u8>,
    /// `buf[start..end]` is read and not yet handed out; its first `searched` bytes
    /// hold no newline (a long line arriving in small reads is searched once).
    start: usize,
    end: usize,
    searched: usize,
    at_end: bool,
}

impl<R: Read> ChunkedLines<R> {
    fn new(reader: R) -> Self {
        ChunkedLines { reader, buf: vec![0; CHUNK_BYTES], start: 0, end: 0, searched: 0, at_end: false }
    }

    /// Reads more after what is pending, first moving it to the front, or growing
    /// the buffer when it already fills it (a line longer than a chunk).
    fn read_more(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.end == self.buf.len() {
            self.buf.resize((2 * self.buf.len()).min(MAX_LINE_BYTES + 1), 0);
        }
        loop {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => self.at_end = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            return Ok(());
        }
    }

    /// Reads past the rest of a line over [`MAX_LINE_BYTES`] whose first `bytes`
    /// were read and dropped; the line's length.
    fn skip_rest_of_line(&mut self, mut bytes: u64) -> io::Result<u64> {
        loop {
            if let Some(newline) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                self.start += newline + 1;
                return Ok(bytes + newline as u64);
            }
            bytes += (self.end - self.start) as u64;
            self.start = self.end;
            if self.at_end {
                return Ok(bytes);
            }
            self.read_more()?;
        }
    }
}

impl<R: Read> LineSource for ChunkedLines<R> {
    fn next_lines(&mut self, each: &mut dyn FnMut(RawLine<'_>)) -> io::Result<More> {
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some(last_newline) = memchr::memrchr(b'\n', &pending[self.searched..]) {
                let whole = &pending[..self.searched + last_newline];
                match std::str::from_utf8(whole) {
                    Ok(text) => {
                        // `memchr`'s search, not `str::split`'s: several times faster.
                        let mut from = 0;
                        for newline in memchr::memchr_iter(b'\n', whole).chain([whole.len()]) {
                            each(RawLine::Text(&text[from..newline]));
                            from = newline + 1;
                        }
                    }
                    Err(_) => whole.split(|&b| b == b'\n').for_each(|line| each(RawLine::Bytes(line))),
                }
                self.start += whole.len() + 1;
                self.searched = 0;
                return Ok(More::Yes);
            }
            self.searched = pending.len();
            if pending.len() > MAX_LINE_BYTES {
                let prefix = pending[..DEAD_LINE_PREFIX].to_vec();
                let read = pending.len() as u64;
                self.start = self.end;
                self.searched = 0;
                let bytes = self.skip_rest_of_line(read)?;
                each(RawLine::TooLong { prefix: &prefix, bytes });
                return Ok(More::Yes);
            }
            if self.at_end {
                // The last line needs no newline.
                if !pending.is_empty() {
                    each(RawLine::Bytes(pending));
                }
                self.start = self.end;
                return Ok(More::No);
            }
            self.read_more()?;
        }
    }
}

/// Lines already in memory (the built-in planted dataset), one per call.
struct StringLines<I>(I);

impl<I: Iterator<Item = String>> LineSource for StringLines<I> {
    fn next_lines(&mut self, each: &mut dyn FnMut(RawLine<'_>)) -> io::Result<More> {
        Ok(match self.0.next() {
            Some(line) => {
                each(RawLine::Text(&line));
                More::Yes
            }
            None => More::No,
        })
    }
}

pub struct StreamReader {
    source: Source,
    lines: Box<dyn LineSource>,
    line_number: u64,
    /// Lines parsed and not yet taken, and whether the source may have more.
    ready: VecDeque<io::Result<Line>>,
    more: More,
}

impl StreamReader {
    /// NDJSON lines of a reader (a file's content, say).
    pub fn from_reader(source: Source, reader: impl Read + 'static) -> Self {
        Self::of(source, Box::new(ChunkedLines::new(reader)))
    }

    pub fn from_lines(source: Source, lines: impl IntoIterator<Item = String> + 'static) -> Self {
        Self::of(source, Box::new(StringLines(lines.into_iter())))
    }

    fn of(source: Source, lines: Box<dyn LineSource>) -> Self {
        StreamReader { source, lines, line_number: 0, ready: VecDeque::new(), more: More::Yes }
    }

    /// The next non-blank line, parsed.
    pub fn next_line(&mut self) -> Option<io::Result<Line>> {
        self.fill();
        self.ready.pop_front()
    }

    /// The line `next_line` would give, left in place.
    fn peek(&mut self) -> Option<&io::Result<Line>> {
        self.fill();
        self.ready.front()
    }

    fn fill(&mut self) {
        while self.ready.is_empty() && self.more == More::Yes {
            let mut ready = std::mem::take(&mut self.ready);
            self.parse_next(|line| ready.push_back(line));
            self.ready = ready;
        }
    }

    /// Parses the lines the source has ready into `out`, skipping blank ones; a read
    /// error goes in last, and ends the stream.
    fn parse_next(&mut self, mut out: impl FnMut(io::Result<Line>)) {
        let (source, line_number) = (self.source, &mut self.line_number);
        let read = self.lines.next_lines(&mut |raw| {
            *line_number += 1;
            if let Some(line) = parse(source, *line_number, raw) {
                out(Ok(line));
            }
        });
        self.more = match read {
            Ok(more) => more,
            Err(e) => {
                out(Err(e));
                More::No
            }
        };
    }
}

/// One raw line as a record or a dead letter; `None` if it is blank.
fn parse(source: Source, line_number: u64, raw: RawLine<'_>) -> Option<Line> {
    let dead = |reason: String, line: String| {
        Line::Dead(InvalidLine {
            record_type: RecordType::DeadLetter,
            source: source.name().to_string(),
            line_number,
            reason,
            line,
        })
    };
    let text = match raw {
        RawLine::TooLong { prefix, bytes } => {
            let reason = format!(
                "line is {bytes} bytes, over the limit of {MAX_LINE_BYTES}; only its first {DEAD_LINE_PREFIX} are kept here"
            );
            return Some(dead(reason, String::from_utf8_lossy(prefix).into()));
        }
        RawLine::Text(text) => text.strip_suffix('\r').unwrap_or(text),
        RawLine::Bytes(bytes) => {
            let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            match std::str::from_utf8(bytes) {
                Ok(text) => text,
                Err(e) => {
                    return Some(dead(format!("line is not valid UTF-8: {e}"), String::from_utf8_lossy(bytes).into()))
                }
            }
        }
    };
    if text.bytes().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    Some(match parse_line(source, text) {
        Ok(record) => Line::Record(record),
        Err(reason) => dead(reason.0, text.to_string()),
    })
}

/// A read-ahead thread hands over the lines of as many chunks as make at least this
/// many (two of the generator's, about 600 lines), and may have a few batches ready:
/// a few thousand lines in flight per stream. On one core, each batch handed over
/// costs a switch between threads each way: batches of one chunk's lines switched
/// twice as often, and ran 2 % slower on the 1 M-event dataset. (Batches that were
/// freed by the processing thread, not given back, took peak memory from 16 to 58
/// MiB at this size: the allocator takes large blocks freed by another thread back
/// only late. Given back, 22 MiB.)
const BATCH_LINES: usize = CHUNK_BYTES / 64;
const BATCHES_AHEAD: usize = 4;

/// A stream read and parsed on a thread of its own, ahead of its consumer.
pub struct ReadAhead {
    source: Source,
    batches: Receiver<Batch>,
    /// The batch being taken, last line first (so a line is taken with a `pop`).
    batch: Batch,
    /// Batches taken go back to the thread to be filled again: no batch is allocated
    /// on one thread and freed on another, which the allocator reclaims late.
    emptied: SyncSender<Batch>,
    thread: Option<JoinHandle<()>>,
}

type Batch = Vec<io::Result<Line>>;

impl ReadAhead {
    pub fn from_file(source: Source, path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let (sender, batches) = mpsc::sync_channel(BATCHES_AHEAD);
        // Room for every batch there is, so giving one back never waits.
        let (emptied, to_fill) = mpsc::sync_channel::<Batch>(BATCHES_AHEAD + 2);
        let thread = std::thread::Builder::new().name(format!("read-{}", source.name())).spawn(move || {
            let mut reader = StreamReader::from_reader(source, file);
            loop {
                let mut batch = to_fill.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH_LINES));
                while batch.len() < BATCH_LINES && reader.more == More::Yes {
                    reader.parse_next(|line| batch.push(line));
                }
                batch.reverse();
                if !batch.is_empty() && sender.send(batch).is_err() || reader.more == More::No {
                    return;
                }
            }
        })?;
        Ok(ReadAhead { source, batches, batch: Vec::new(), emptied, thread: Some(thread) })
    }

    pub fn next_line(&mut self) -> Option<io::Result<Line>> {
        self.peek()?;
        self.batch.pop()
    }

    /// The line `next_line` would give, left in place.
    fn peek(&mut self) -> Option<&io::Result<Line>> {
        while self.batch.is_empty() {
            let taken = match self.batches.recv() {
                Ok(batch) => std::mem::replace(&mut self.batch, batch),
                // The thread is done: at the end of its file, or because it failed,
                // which must not pass for the end.
                Err(_) => {
                    let failed = self.thread.take().is_some_and(|thread| thread.join().is_err());
                    if !failed {
                        return None;
                    }
                    let message = format!("reading the {} stream failed (its thread panicked)", self.source.name());
                    self.batch.push(Err(io::Error::other(message)));
                    continue;
                }
            };
            // Dropped here only once the thread has stopped.
            let _ = self.emptied.try_send(taken);
        }
        self.batch.last()
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

    fn peek(&mut self) -> Option<&io::Result<Line>> {
        match self {
            Reader::Here(reader) => reader.peek(),
            Reader::Ahead(reader) => reader.peek(),
        }
    }
}

/// Where a stream's next line goes in the merge, lowest first: a read error at once;
/// a dead letter, which has no event time, as soon as it is next; records by event
/// time; [`ENDED`] for a stream with no more. Ties go to the stream listed first.
/// One integer, so picking the lowest of three takes two comparisons.
fn merge_key(line: Option<&io::Result<Line>>) -> i128 {
    match line {
        Some(Err(_)) => i128::MIN,
        Some(Ok(Line::Dead(_))) => i128::MIN + 1,
        Some(Ok(Line::Record(r))) => i128::from(r.event_ts()),
        None => ENDED,
    }
}

const ENDED: i128 = i128::MAX;

/// The three streams interleaved by the event time of their next record.
pub struct MergedInput {
    readers: Vec<Reader>,
    /// Each stream's next line's [`merge_key`]. A line stays in its reader's batch
    /// until it is taken, and only the stream that gave the last line has its key
    /// read again.
    keys: Vec<i128>,
    stale: std::ops::Range<usize>,
}

impl MergedInput {
    pub fn new(readers: Vec<StreamReader>) -> Self {
        Self::of(readers.into_iter().map(Reader::Here).collect())
    }

    fn of(readers: Vec<Reader>) -> Self {
        let keys = vec![ENDED; readers.len()];
        MergedInput { stale: 0..readers.len(), readers, keys }
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
                     write a dataset folder with `vigil generate --out DIR`",
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
        for i in self.stale.clone() {
            self.keys[i] = merge_key(self.readers[i].peek());
        }
        let mut pick = 0;
        for (i, &key) in self.keys.iter().enumerate().skip(1) {
            if key < self.keys[pick] {
                pick = i;
            }
        }
        if self.keys.get(pick).is_none_or(|&key| key == ENDED) {
            return None;
        }
        self.stale = pick..pick + 1;
        self.readers[pick].next_line()
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

    /// A reader handing out at most `step` bytes a read, as a pipe may.
    struct Trickle {
        content: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step).min(self.content.len() - self.at);
            buf[..n].copy_from_slice(&self.content[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn lines_come_out_the_same_however_the_reads_split_them() {
        let long = format!("{}{}", order("long", 20), " ".repeat(3 * CHUNK_BYTES));
        let over = vec![b'x'; MAX_LINE_BYTES + 5];
        let mut content = Vec::new();
        for part in [
            order("a", 10).as_bytes(),
            b"\n",
            order("b", 11).as_bytes(),
            b"\r\n   \n{\"order_id\":\"\xff\"}\n",
            long.as_bytes(),
            b"\n",
            &over,
            b"\n",
            order("c", 30).as_bytes(),
        ] {
            content.extend_from_slice(part);
        }
        let read = |step| {
            let mut reader =
                StreamReader::from_reader(Source::Orders, Trickle { content: content.clone(), at: 0, step });
            std::iter::from_fn(|| reader.next_line()).map(Result::unwrap).collect::<Vec<_>>()
        };
        let whole = read(usize::MAX);
        assert_eq!(times(&whole), vec![10, 11, -4, 20, -6, 30]);
        let reason = |line: &Line| match line {
            Line::Dead(d) => d.reason.clone(),
            other => panic!("expected a dead letter, got {other:?}"),
        };
        assert!(reason(&whole[2]).contains("not valid UTF-8"), "{}", reason(&whole[2]));
        assert!(reason(&whole[4]).contains(&format!("line is {} bytes", MAX_LINE_BYTES + 5)), "{}", reason(&whole[4]));
        for step in [1, 7, 4096] {
            assert_eq!(read(step), whole, "reads of {step} bytes");
        }
    }

    #[test]
    fn streams_interleave_by_event_time_and_each_keeps_its_own_order() {
        let lines = merged(vec![order("a", 10), order("b", 30)], vec![device(20), device(40), device(5), device(50)]);
        assert_eq!(times(&lines), vec![10, 20, 30, 40, 5, 50]);
    }

    #[test]
    fn a_dead_letter_goes_out_as_soon_as_it_is_next_and_a_tie_goes_to_the_first_stream() {
        let lines = merged(vec![order("a", 10), "{oops".into(), order("b", 30)], vec![device(10), device(20)]);
        assert_eq!(times(&lines), vec![10, -2, 10, 20, 30]);
        assert!(matches!(&lines[0], Line::Record(InputRecord::Order(_))), "{:?}", lines[0]);
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
        let dir = tempfile::tempdir().unwrap();
        let err = MergedInput::from_dir(dir.path()).err().unwrap().to_string();
        assert!(err.contains("vigil generate --out"), "{err}");
    }
}
