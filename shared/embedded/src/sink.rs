//! Where outputs go: the seed's tagged NDJSON lines on stdout, and optionally one
//! NDJSON file per output kind in a folder. [`WriteBehind`] formats and writes them
//! on a thread of its own.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use vigil_model::topology::{Topic, DEAD_LETTERS};
use vigil_model::Printed;

/// One record for the outputs: its topic (which gives its tag) and the record.
pub type Emitted = (&'static Topic, Arc<dyn Printed>);

pub struct OutputWriter {
    stdout: Option<Box<dyn Write + Send>>,
    /// The topics whose records are printed, each with its file and count.
    topics: Vec<PrintedTopic>,
    /// Tagged lines not yet written to stdout, each formatted in place here (so a
    /// line is not formatted in one buffer and copied into another); the line being
    /// formatted, when only files take them.
    pending: Vec<u8>,
}

struct PrintedTopic {
    topic: &'static Topic,
    tag: &'static str,
    file: Option<BufWriter<File>>,
    count: u64,
}

/// How many bytes of tagged lines are written to stdout at once.
const STDOUT_CHUNK: usize = 1 << 16;

impl OutputWriter {
    /// `topics`: those with a tag, whose records are printed; `tagged`: where the
    /// tagged lines go (stdout in the runner), or nowhere; `folder`: where each
    /// topic's records also go, one `<topic>.ndjson` file each.
    pub fn new(
        topics: &[&'static Topic],
        tagged: Option<Box<dyn Write + Send>>,
        folder: Option<&Path>,
    ) -> io::Result<Self> {
        if let Some(dir) = folder {
            std::fs::create_dir_all(dir)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
        }
        let topics = topics
            .iter()
            .filter_map(|&topic| Some((topic, topic.tag?)))
            .map(|(topic, tag)| {
                let file = match folder {
                    Some(dir) => Some(BufWriter::new(File::create(dir.join(file_name(topic)))?)),
                    None => None,
                };
                Ok(PrintedTopic { topic, tag, file, count: 0 })
            })
            .collect::<io::Result<_>>()?;
        Ok(OutputWriter { stdout: tagged, topics, pending: Vec::with_capacity(STDOUT_CHUNK + 1024) })
    }

    pub fn write(&mut self, topic: &'static Topic, record: &dyn Printed) -> io::Result<()> {
        let Some(printed) = self.topics.iter_mut().find(|p| p.topic.is(topic)) else {
            return Err(io::Error::other(format!("records of `{}` are not printed: it has no tag", topic.name)));
        };
        printed.count += 1;
        if self.stdout.is_none() && printed.file.is_none() {
            return Ok(());
        }
        // The line goes after the tag, behind the lines stdout has not taken yet.
        let start = match self.stdout {
            Some(_) => {
                self.pending.extend_from_slice(printed.tag.as_bytes());
                self.pending.extend_from_slice(b"> ");
                self.pending.len()
            }
            None => {
                self.pending.clear();
                0
            }
        };
        record.write_json(&mut self.pending);
        self.pending.push(b'\n');
        if let Some(file) = &mut printed.file {
            file.write_all(&self.pending[start..])?;
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

    /// How many records of each tag were written: the results in the topics' order,
    /// then the late side outputs, then the dead letters (a tag that several topics
    /// share counts them together).
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        let mut topics: Vec<&PrintedTopic> = self.topics.iter().collect();
        topics.sort_by_key(|p| (p.topic.is(&DEAD_LETTERS), p.topic.late));
        let mut counts: Vec<(&'static str, u64)> = Vec::new();
        for p in topics {
            match counts.iter_mut().find(|(tag, _)| *tag == p.tag) {
                Some((_, n)) => *n += p.count,
                None => counts.push((p.tag, p.count)),
            }
        }
        counts
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        if let Some(w) = &mut self.stdout {
            w.flush()?;
        }
        for f in self.topics.iter_mut().filter_map(|p| p.file.as_mut()) {
            f.flush()?;
        }
        Ok(())
    }
}

/// The file an output folder holds a topic's records in.
fn file_name(topic: &Topic) -> String {
    format!("{}.ndjson", topic.name)
}

/// Outputs handed over in batches: one send per batch, not per output.
const BATCH_OUTPUTS: usize = 1024;
const BATCHES_AHEAD: usize = 4;

/// An [`OutputWriter`] on a thread of its own. Formatting the lines is a good part
/// of the pipeline's work; with a second core it no longer holds up the thread that
/// processes. The order is the same, and a bounded queue keeps memory bounded when
/// the reader of stdout is slower than the pipeline.
///
/// Written batches come back to be emptied and filled again: their outputs are
/// dropped on the thread that made them, where freeing is cheaper for the allocator
/// than from another thread, and a batch is not allocated anew each time.
pub struct WriteBehind {
    batch: Vec<Emitted>,
    sender: Option<SyncSender<Vec<Emitted>>>,
    written: Receiver<Vec<Emitted>>,
    thread: Option<JoinHandle<io::Result<OutputWriter>>>,
}

impl WriteBehind {
    pub fn spawn(mut writer: OutputWriter) -> io::Result<Self> {
        let (sender, batches) = mpsc::sync_channel::<Vec<Emitted>>(BATCHES_AHEAD);
        // Room for every batch there is, so handing one back never waits.
        let (give_back, written) = mpsc::sync_channel::<Vec<Emitted>>(BATCHES_AHEAD + 2);
        let thread = std::thread::Builder::new().name("write-outputs".into()).spawn(move || {
            for batch in batches {
                for (topic, record) in &batch {
                    writer.write(topic, &**record)?;
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

    pub fn write(&mut self, topic: &'static Topic, record: Arc<dyn Printed>) -> io::Result<()> {
        self.batch.push((topic, record));
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
    use std::sync::Mutex;

    use vigil_ingest::MergedInput;
    use vigil_model::Config;
    use vigil_operators::SeedPipeline;
    use vigil_stream::Pipeline;

    use super::*;

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

    fn outputs() -> Vec<Emitted> {
        let mut all = Vec::new();
        let keep = |topic, record| {
            all.push((topic, record));
            Ok(())
        };
        crate::run(&SeedPipeline::default(), &Config::default(), MergedInput::planted(20, 7), keep, |_, _| {}).unwrap();
        assert!(all.len() > 3 * BATCH_OUTPUTS, "several batches: {}", all.len());
        all
    }

    fn printed() -> Vec<&'static Topic> {
        SeedPipeline::default().topology().topics()
    }

    fn captured(fail_after: usize) -> (Captured, OutputWriter) {
        let sink = Captured { bytes: Arc::default(), fail_after };
        let writer = OutputWriter::new(&printed(), Some(Box::new(sink.clone())), None).unwrap();
        (sink, writer)
    }

    #[test]
    fn writing_behind_gives_the_same_lines_in_the_same_order() {
        let outputs = outputs();
        let (direct, mut writer) = captured(usize::MAX);
        for (topic, record) in &outputs {
            writer.write(topic, &**record).unwrap();
        }
        writer.flush().unwrap();
        let (behind, writer) = captured(usize::MAX);
        let mut writer = WriteBehind::spawn(writer).unwrap();
        for (topic, record) in outputs.iter().cloned() {
            writer.write(topic, record).unwrap();
        }
        let counts: u64 = writer.finish().unwrap().counts().iter().map(|(_, n)| n).sum();
        assert_eq!(counts, outputs.len() as u64);
        assert_eq!(*behind.bytes.lock().unwrap(), *direct.bytes.lock().unwrap());
    }

    #[test]
    fn each_topics_file_holds_the_tagged_lines_of_its_records_without_the_tag() {
        let outputs = outputs();
        let dir = std::env::temp_dir().join(format!("vigil-sink-{}", std::process::id()));
        let sink = Captured { bytes: Arc::default(), fail_after: usize::MAX };
        let mut writer = OutputWriter::new(&printed(), Some(Box::new(sink.clone())), Some(&dir)).unwrap();
        for (topic, record) in &outputs {
            writer.write(topic, &**record).unwrap();
        }
        writer.flush().unwrap();
        let tagged = String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap();
        assert_eq!(tagged.lines().count(), outputs.len());
        let mut files = 0;
        for topic in printed().into_iter().filter(|t| t.tag.is_some()) {
            let mut line = Vec::new();
            let want: String = outputs
                .iter()
                .filter(|(t, _)| t.is(topic))
                .map(|(_, record)| {
                    line.clear();
                    record.write_json(&mut line);
                    format!("{}\n", String::from_utf8_lossy(&line))
                })
                .collect();
            let file = std::fs::read_to_string(dir.join(file_name(topic))).unwrap();
            assert_eq!(file, want, "{}", file_name(topic));
            files += 1;
        }
        // The late events of payments and devices share a tag, not a file.
        assert_eq!(files, 9);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_stops_the_run_with_its_cause() {
        let (_, writer) = captured(100_000);
        let mut writer = WriteBehind::spawn(writer).unwrap();
        let failed = outputs().into_iter().map(|(topic, record)| writer.write(topic, record)).find_map(Result::err);
        let error = match failed {
            Some(e) => e,
            None => writer.finish().err().expect("the write fails at the end at the latest"),
        };
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert!(error.to_string().contains("cannot write the output: disk full"), "{error}");
    }
}
