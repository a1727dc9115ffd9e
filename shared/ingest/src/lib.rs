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

mod line_source;
mod merge;
mod read_ahead;
mod stream_reader;
#[cfg(test)]
mod test_support;

pub use line_source::MAX_LINE_BYTES;
pub use merge::MergedInput;
pub use read_ahead::ReadAhead;
pub use stream_reader::{Line, StreamReader};
/// How the built-in dataset's traffic divides among the streams.
pub use vigil_datagen::traffic::Mix;
