//! A stream read and parsed on a thread of its own (`ReadAhead`): parsing is about a
//! third of the pipeline's work, and with a second core it no longer holds up the
//! thread that processes. Lines go over in batches, which come back to be refilled.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use vigil_model::Source;

use crate::line_source::{More, CHUNK_BYTES};
use crate::stream_reader::{Line, StreamReader};

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
    pub(crate) fn peek(&mut self) -> Option<&io::Result<Line>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::order;

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
}
