//! Where outputs go: the seed's tagged NDJSON lines on stdout, and optionally one
//! NDJSON file per output kind in a folder.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use vigil_model::output::{Output, OutputKind};

pub struct OutputWriter {
    stdout: Option<BufWriter<Box<dyn Write>>>,
    files: Option<Vec<BufWriter<File>>>,
    counts: [u64; OutputKind::ALL.len()],
    line: Vec<u8>,
}

impl OutputWriter {
    /// `tagged`: where the tagged lines go (stdout in the runner), or nowhere.
    pub fn new(tagged: Option<Box<dyn Write>>, folder: Option<&Path>) -> io::Result<Self> {
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
            stdout: tagged.map(|w| BufWriter::with_capacity(1 << 16, w)),
            files,
            counts: [0; OutputKind::ALL.len()],
            line: Vec::with_capacity(512),
        })
    }

    pub fn write(&mut self, output: &Output) -> io::Result<()> {
        let kind = output.kind();
        self.counts[kind as usize] += 1;
        if self.stdout.is_none() && self.files.is_none() {
            return Ok(());
        }
        self.line.clear();
        output.write_json(&mut self.line);
        self.line.push(b'\n');
        if let Some(w) = &mut self.stdout {
            w.write_all(kind.tag().as_bytes())?;
            w.write_all(b"> ")?;
            w.write_all(&self.line)?;
        }
        if let Some(files) = &mut self.files {
            files[kind as usize].write_all(&self.line)?;
        }
        Ok(())
    }

    /// How many records of each kind were written, in the summary's order.
    pub fn counts(&self) -> impl Iterator<Item = (OutputKind, u64)> + '_ {
        OutputKind::ALL.iter().map(|&k| (k, self.counts[k as usize]))
    }

    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(w) = &mut self.stdout {
            w.flush()?;
        }
        for f in self.files.iter_mut().flatten() {
            f.flush()?;
        }
        Ok(())
    }
}
