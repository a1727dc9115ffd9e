//! The streams merged into one arrival order (`MergedInput`): each stream is read in
//! its own order, and the next line is taken from the stream whose next record has
//! the lowest event time, as a consumer reading the topics side by side would.

use std::io;
use std::path::Path;

use vigil_datagen::dataset::planted_lines_mixed;
use vigil_datagen::traffic::Mix;
use vigil_datagen::Dataset;
use vigil_model::Source;

use crate::read_ahead::ReadAhead;
use crate::stream_reader::{Line, StreamReader};

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
        MergedInput::planted_mixed(scale, seed, Mix::default())
    }

    /// The same, its traffic in the proportions of `mix`.
    pub fn planted_mixed(scale: u64, seed: u64, mix: Mix) -> Self {
        MergedInput::new(
            Source::ALL
                .iter()
                .map(|&s| StreamReader::from_lines(s, planted_lines_mixed(s, scale, seed, mix)))
                .collect(),
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
    use crate::test_support::{device, merged, order, times};
    use vigil_model::InputRecord;

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
    fn a_folder_without_any_stream_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = MergedInput::from_dir(dir.path()).err().unwrap().to_string();
        assert!(err.contains("vigil generate --out"), "{err}");
    }
}
