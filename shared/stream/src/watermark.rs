//! Event-time progress: a watermark per input partition (bounded out-of-orderness)
//! and the minimum over an operator's input channels.

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

/// Combines the watermarks of several input channels (partitions, or upstream tasks)
/// into one: the minimum over the channels that are not idle. It never goes back,
/// even when an idle channel wakes up behind it (its records may then be late).
/// When every channel is idle the combination is idle too, and holds its value.
#[derive(Debug, Clone)]
pub struct WatermarkTracker {
    channels: Vec<Channel>,
    current: Millis,
}

#[derive(Debug, Clone, Copy)]
struct Channel {
    watermark: Millis,
    idle: bool,
}

impl WatermarkTracker {
    pub fn new(channels: usize) -> Self {
        WatermarkTracker {
            channels: vec![Channel { watermark: NO_WATERMARK, idle: false }; channels],
            current: NO_WATERMARK,
        }
    }

    pub fn current(&self) -> Millis {
        self.current
    }

    /// Whether every channel is idle, so this combination should not hold anyone back.
    pub fn is_idle(&self) -> bool {
        self.channels.iter().all(|c| c.idle)
    }

    /// Sets a channel's watermark (and wakes it if idle); returns the combined
    /// watermark when it advanced.
    pub fn update(&mut self, channel: usize, watermark: Millis) -> Option<Millis> {
        let c = &mut self.channels[channel];
        c.watermark = c.watermark.max(watermark);
        c.idle = false;
        self.recompute()
    }

    /// Marks a channel idle or active; returns the combined watermark when it advanced.
    pub fn set_idle(&mut self, channel: usize, idle: bool) -> Option<Millis> {
        self.channels[channel].idle = idle;
        self.recompute()
    }

    fn recompute(&mut self) -> Option<Millis> {
        let min = self.channels.iter().filter(|c| !c.idle).map(|c| c.watermark).min()?;
        if min > self.current {
            self.current = min;
            Some(min)
        } else {
            None
        }
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

    #[test]
    fn combined_watermark_is_the_minimum_and_never_goes_back() {
        let mut t = WatermarkTracker::new(2);
        assert_eq!(t.update(0, 5_000), None, "the other channel has not spoken yet");
        assert_eq!(t.update(1, 3_000), Some(3_000));
        assert_eq!(t.update(1, 9_000), Some(5_000));
        assert_eq!(t.update(0, 4_000), None);
        assert_eq!(t.current(), 5_000);
    }

    #[test]
    fn idle_channels_do_not_hold_the_watermark_back() {
        let mut t = WatermarkTracker::new(3);
        t.update(0, 7_000);
        t.update(1, 9_000);
        assert_eq!(t.current(), NO_WATERMARK);
        assert_eq!(t.set_idle(2, true), Some(7_000));
        assert!(!t.is_idle());
        // Waking up behind the combined watermark does not move it back.
        assert_eq!(t.update(2, 1_000), None);
        assert_eq!(t.current(), 7_000);
        assert_eq!(t.update(0, 20_000), None, "channel 2 is active again and behind");
        assert_eq!(t.update(2, 30_000), Some(9_000));
    }

    #[test]
    fn all_idle_holds_the_value() {
        let mut t = WatermarkTracker::new(2);
        t.update(0, 1_000);
        t.update(1, 2_000);
        assert_eq!(t.set_idle(0, true), Some(2_000));
        assert_eq!(t.set_idle(1, true), None);
        assert!(t.is_idle());
        assert_eq!(t.current(), 2_000);
    }
}
