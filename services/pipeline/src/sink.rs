//! Where outputs go: the seed's tagged NDJSON lines on stdout, and optionally one
//! NDJSON file per output kind in a folder. [`WriteBehind`] formats and writes them
//! on a thread of its own.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use vigil_model::output::{Output, OutputKind};

pub struct OutputWriter {
    stdout: Option<Box<dyn Write + Send>>,
    files: Option<Vec<BufWriter<File>>>,
    counts: [u64; OutputKind::ALL.len()],
    /// Tagged lines not yet written to stdout, each formatted in place here (so a
    /// line is not formatted in one buffer and copied into another); the line being
    /// formatted, when only files take them.
    pending: Vec<u8>,
}

/// How many bytes of tagged lines are written to stdout at once.
const STDOUT_CHUNK: usize = 1 << 16;

impl OutputWriter {
    /// `tagged`: where the tagged lines go (stdout in the runner), or nowhere.
    pub fn new(tagged: Option<Box<dyn Write + Send>>, folder: Option<&Path>) -> io::Result<Self> {
        let files = match folder {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
                let open = |k: &OutputKind| File::create(dir.join(k.file_name())).map(BufWriter::new);
                Some(OutputKind::ALL.iter().map(open).collect::<io::Result<Vec<_>>>()?)
            }
            None => None,
        };
        Ok(OutputWriter {
            stdout: tagged,
            files,
            counts: [0; OutputKind::ALL.len()],
            pending: Vec::with_capacity(STDOUT_CHUNK + 1024),
        })
    }

    pub fn write(&mut self, output: &Output) -> io::Result<()> {
        let kind = output.kind();
        self.counts[kind as usize] += 1;
        if self.stdout.is_none() && self.files.is_none() {
            return Ok(());
        }
        // The line goes after the tag, behind the lines stdout has not taken yet.
        let start = match self.stdout {
            Some(_) => {
                self.pending.extend_from_slice(kind.tag().as_bytes());
                self.pending.extend_from_slice(b"> ");
                self.pending.len()
            }
            None => {
                self.pending.clear();
                0
            }
        };
        output.write_json(&mut self.pending);
        self.pending.push(b'\n');
        if let Some(files) = &mut self.files {
            files[kind as usize].write_all(&self.pending[start..])?;
        }
        if self.pending.len() >= STDOUT_CHUNK {
            self.write_pending()?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> io::Result<()> {
        if let Some(w) = &mut self.stdout {
            w.write_all(&self.pending)?;
        }
        self.pending.clear();
        Ok(())
    }

    /// How many records of each kind were written, in the summary's order.
    pub fn counts(&self) -> impl Iterator<Item = (OutputKind, u64)> + '_ {
        OutputKind::ALL.iter().map(|&k| (k, self.counts[k as usize]))
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        if let Some(w) = &mut self.stdout {
            w.flush()?;
        }
        for f in self.files.iter_mut().flatten() {
            f.flush()?;
        }
        Ok(())
    }
}

/// Outputs handed over in batches: one send per batch, not per output.
const BATCH_OUTPUTS: usize = 1024;
const BATCHES_AHEAD: usize = 4;

/// An [`OutputWriter`] on a thread of its own. Formatting the lines is about a sixth
/// of the pipeline's work; with a second core it no longer holds up the thread that
/// processes. The order is the same, and a bounded queue keeps memory bounded when
/// the reader of stdout is slower than the pipeline.
///
/// Written batches come back to be emptied and filled again: their outputs are
/// dropped on the thread that made them, where freeing is cheaper for the allocator
/// than from another thread, and a batch is not allocated anew each time.
pub struct WriteBehind {
    batch: Vec<Output>,
    sender: Option<SyncSender<Vec<Output>>>,
    written: Receiver<Vec<Output>>,
    thread: Option<JoinHandle<io::Result<OutputWriter>>>,
}

impl WriteBehind {
    pub fn spawn(mut writer: OutputWriter) -> io::Result<Self> {
        let (sender, batches) = mpsc::sync_channel::<Vec<Output>>(BATCHES_AHEAD);
        // Room for every batch there is, so handing one back never waits.
        let (give_back, written) = mpsc::sync_channel::<Vec<Output>>(BATCHES_AHEAD + 2);
        let thread = std::thread::Builder::new().name("write-outputs".into()).spawn(move || {
            for batch in batches {
                for output in &batch {
                    writer.write(output)?;
                }
                // Dropped here only once the pipeline has stopped taking them back.
                let _ = give_back.try_send(batch);
            }
            writer.flush()?;
            Ok(writer)
        })?;
        Ok(WriteBehind {
            batch: Vec::with_capacity(BATCH_OUTPUTS),
            sender: Some(sender),
            written,
            thread: Some(thread),
        })
    }

    pub fn write(&mut self, output: Output) -> io::Result<()> {
        self.batch.push(output);
        if self.batch.len() == BATCH_OUTPUTS {
            self.send()?;
        }
        Ok(())
    }

    /// Writes what is left and flushes; the writer comes back for its counts.
    pub fn finish(mut self) -> io::Result<OutputWriter> {
        if !self.batch.is_empty() {
            self.send()?;
        }
        self.join()
    }

    fn send(&mut self) -> io::Result<()> {
        let next = match self.written.try_recv() {
            Ok(mut written) => {
                written.clear();
                written
            }
            Err(_) => Vec::with_capacity(BATCH_OUTPUTS),
        };
        let batch = std::mem::replace(&mut self.batch, next);
        let sent = self.sender.as_ref().is_some_and(|sender| sender.send(batch).is_ok());
        if sent {
            return Ok(());
        }
        // The thread stopped early: only a failed write does that.
        Err(self.join().err().unwrap_or_else(|| io::Error::other("the output writer stopped early")))
    }

    fn join(&mut self) -> io::Result<OutputWriter> {
        self.sender = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result.map_err(|e| io::Error::new(e.kind(), format!("cannot write the output: {e}"))),
            Some(Err(_)) => Err(io::Error::other("the output writer's thread panicked")),
            None => Err(io::Error::other("the output writer has stopped already")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use vigil_model::Config;

    use super::*;
    use crate::ingest::MergedInput;

    /// A stdout stand-in the test can read back, failing once `fail_after` bytes are in.
    #[derive(Clone)]
    struct Captured {
        bytes: Arc<Mutex<Vec<u8>>>,
        fail_after: usize,
    }

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut bytes = self.bytes.lock().unwrap();
            if bytes.len() + buf.len() > self.fail_after {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
            }
            bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn outputs() -> Vec<Output> {
        let mut all = Vec::new();
        let keep = |o| {
            all.push(o);
            Ok(())
        };
        crate::run(&Config::default(), MergedInput::planted(20, 7), keep, |_, _| {}).unwrap();
        assert!(all.len() > 3 * BATCH_OUTPUTS, "several batches: {}", all.len());
        all
    }

    fn captured(fail_after: usize) -> (Captured, OutputWriter) {
        let sink = Captured { bytes: Arc::default(), fail_after };
        let writer = OutputWriter::new(Some(Box::new(sink.clone())), None).unwrap();
        (sink, writer)
    }

    #[test]
    fn writing_behind_gives_the_same_lines_in_the_same_order() {
        let outputs = outputs();
        let (direct, mut writer) = captured(usize::MAX);
        for o in &outputs {
            writer.write(o).unwrap();
        }
        writer.flush().unwrap();
        let (behind, writer) = captured(usize::MAX);
        let mut writer = WriteBehind::spawn(writer).unwrap();
        for o in outputs.iter().cloned() {
            writer.write(o).unwrap();
        }
        let counts: u64 = writer.finish().unwrap().counts().map(|(_, n)| n).sum();
        assert_eq!(counts, outputs.len() as u64);
        assert_eq!(*behind.bytes.lock().unwrap(), *direct.bytes.lock().unwrap());
    }

    #[test]
    fn each_kinds_file_holds_the_tagged_lines_of_its_kind_without_the_tag() {
        let outputs = outputs();
        let dir = std::env::temp_dir().join(format!("vigil-sink-{}", std::process::id()));
        let sink = Captured { bytes: Arc::default(), fail_after: usize::MAX };
        let mut writer = OutputWriter::new(Some(Box::new(sink.clone())), Some(&dir)).unwrap();
        for o in &outputs {
            writer.write(o).unwrap();
        }
        writer.flush().unwrap();
        let tagged = String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap();
        assert_eq!(tagged.lines().count(), outputs.len());
        for kind in OutputKind::ALL {
            let prefix = format!("{}> ", kind.tag());
            let want: String =
                tagged.lines().filter_map(|l| l.strip_prefix(&prefix)).map(|l| format!("{l}\n")).collect();
            let file = std::fs::read_to_string(dir.join(kind.file_name())).unwrap();
            assert_eq!(file, want, "{}", kind.file_name());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_stops_the_run_with_its_cause() {
        let (_, writer) = captured(100_000);
        let mut writer = WriteBehind::spawn(writer).unwrap();
        let failed = outputs().into_iter().map(|o| writer.write(o)).find_map(Result::err);
        let error = match failed {
            Some(e) => e,
            None => writer.finish().err().expect("the write fails at the end at the latest"),
        };
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert!(error.to_string().contains("cannot write the output: disk full"), "{error}");
    }
}
