//! Where a stream's lines come from: a reader cut into lines a chunk at a time
//! (`ChunkedLines`), or lines already in memory (`StringLines`). Kept apart from
//! parsing so the byte handling — one UTF-8 check a chunk, no copy a line, a cap on
//! a line's length — can be read and tested on its own.

use std::io::{self, Read};

/// The longest line taken as a record. A longer one is a dead letter (its first KiB
/// kept) and is skipped without being held in memory: one runaway line (a file with no
/// newlines, say) cannot take all memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;
pub(crate) const DEAD_LINE_PREFIX: usize = 1 << 10;

/// Bytes read from a file at a time.
pub(crate) const CHUNK_BYTES: usize = 1 << 15;

/// One line as a line source found it, without its newline.
pub(crate) enum RawLine<'a> {
    /// Known to be valid UTF-8.
    Text(&'a str),
    /// Not checked yet.
    Bytes(&'a [u8]),
    /// Longer than [`MAX_LINE_BYTES`]: its first bytes, and how many it had.
    TooLong { prefix: &'a [u8], bytes: u64 },
}

/// Where a stream's lines come from. Each call hands the lines it has ready to
/// `each`, in order, and says whether more may follow.
pub(crate) trait LineSource {
    fn next_lines(&mut self, each: &mut dyn FnMut(RawLine<'_>)) -> io::Result<More>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum More {
    Yes,
    No,
}

/// Lines of a reader, a chunk at a time. A chunk's whole lines are checked for UTF-8
/// in one pass (cheaper than line by line; a chunk that fails is checked line by
/// line, so each bad line is named), then parsed where they lie, without a copy.
pub(crate) struct ChunkedLines<R> {
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
    pub(crate) fn new(reader: R) -> Self {
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
pub(crate) struct StringLines<I>(pub(crate) I);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{order, times};
    use crate::{Line, StreamReader};
    use vigil_model::Source;

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
}
