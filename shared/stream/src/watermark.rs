//! Event-time progress: a watermark per input partition (bounded out-of-orderness).

use crate::Millis;

/// No event time has been seen yet.
pub const NO_WATERMARK: Millis = Millis::MIN;
/// The input has ended: everything is due.
pub const END_OF_TIME: Millis = Millis::MAX;

/// The watermark of one input partition: the highest event time seen minus the
/// out-of-orderness bound. An event `bound` behind the newest one is still on time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundedOutOfOrderness {
    bound: Millis,
    max_event_ts: Millis,
}

impl BoundedOutOfOrderness {
    pub fn new(bound: Millis) -> Self {
        BoundedOutOfOrderness { bound, max_event_ts: NO_WATERMARK }
    }

    /// Notes an event; returns the watermark after it.
    pub fn observe(&mut self, event_ts: Millis) -> Millis {
        self.max_event_ts = self.max_event_ts.max(event_ts);
        self.current()
    }

    pub fn current(&self) -> Millis {
        if self.max_event_ts == NO_WATERMARK {
            NO_WATERMARK
        } else {
            self.max_event_ts.saturating_sub(self.bound)
        }
    }

    pub fn max_event_ts(&self) -> Millis {
        self.max_event_ts
    }

    pub fn bound(&self) -> Millis {
        self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_watermark_trails_the_newest_event_by_the_bound() {
        let mut w = BoundedOutOfOrderness::new(2000);
        assert_eq!(w.current(), NO_WATERMARK);
        assert_eq!(w.observe(10_000), 8_000);
        assert_eq!(w.observe(9_000), 8_000, "an older event does not move it back");
        assert_eq!(w.observe(41_650), 39_650);
    }
}
