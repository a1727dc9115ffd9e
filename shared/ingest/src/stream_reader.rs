//! A stream's NDJSON lines as records or dead letters: `StreamReader` takes lines
//! from a line source, numbers them, skips blank ones and parses the rest, so a bad
//! line becomes a dead letter saying why rather than an error that stops the run.

use std::collections::VecDeque;
use std::io::{self, Read};

use vigil_model::input::parse_line;
use vigil_model::output::{InvalidLine, RecordType};
use vigil_model::{InputRecord, Source};

use crate::line_source::{ChunkedLines, LineSource, More, RawLine, StringLines, DEAD_LINE_PREFIX, MAX_LINE_BYTES};

/// One input line: a valid record, or a dead letter saying why not.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Record(InputRecord),
    Dead(InvalidLine),
}

pub struct StreamReader {
    source: Source,
    lines: Box<dyn LineSource>,
    line_number: u64,
    /// Lines parsed and not yet taken, and whether the source may have more.
    ready: VecDeque<io::Result<Line>>,
    pub(crate) more: More,
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
    pub(crate) fn peek(&mut self) -> Option<&io::Result<Line>> {
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
    pub(crate) fn parse_next(&mut self, mut out: impl FnMut(io::Result<Line>)) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{merged, order, times};

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
}
