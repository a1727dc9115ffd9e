//! Any bytes as the content of each input stream's file: every non-blank line comes
//! out once, as a record that meets its stream's rules or as a dead letter with a
//! reason, and reading never panics.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use vigil_ingest::{Line, StreamReader};
use vigil_model::Source;

fuzz_target!(|content: &[u8]| {
    let lines = content.split(|&b| b == b'\n');
    let non_blank = lines.filter(|l| !l.strip_suffix(b"\r").unwrap_or(l).iter().all(u8::is_ascii_whitespace)).count();
    for source in Source::ALL {
        let mut reader = StreamReader::from_reader(source, Cursor::new(content.to_vec()));
        let mut read = 0;
        while let Some(line) = reader.next_line() {
            match line.expect("reading from memory cannot fail") {
                Line::Record(record) => assert!(record.validate().is_ok(), "{record:?} passed parsing only"),
                Line::Dead(dead) => assert!(!dead.reason.is_empty(), "a dead letter without a reason"),
            }
            read += 1;
        }
        assert_eq!(read, non_blank, "every non-blank line is accounted for once");
    }
});
