//! Event-time timers per key.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::Millis;

/// Pending timers, ordered by time then key, so they fire in a deterministic order.
/// A timer set for `t` fires once the watermark passes `t` (watermark > t): then no
/// on-time event at or before `t` can still arrive.
///
/// A binary heap: registering is cheap, and there is no deleting. A user whose timer
/// moves registers the new one and, when the old one pops, sees that it is no longer
/// the key's (window state keeps each key's timer beside its panes).
#[derive(Debug, Clone)]
pub struct TimerQueue<K: Ord> {
    timers: BinaryHeap<Reverse<(Millis, K)>>,
}

impl<K: Ord + Clone> Default for TimerQueue<K> {
    fn default() -> Self {
        TimerQueue { timers: BinaryHeap::new() }
    }
}

impl<K: Ord + Clone> TimerQueue<K> {
    /// Registers a timer; the same (time, key) registered twice fires once.
    pub fn register(&mut self, time: Millis, key: K) {
        self.timers.push(Reverse((time, key)));
    }

    /// Removes and returns the earliest timer that is due at `watermark`.
    pub fn pop_due(&mut self, watermark: Millis) -> Option<(Millis, K)> {
        if self.timers.peek().is_none_or(|Reverse((t, _))| *t >= watermark) {
            return None;
        }
        let Reverse(due) = self.timers.pop()?;
        while self.timers.peek().is_some_and(|Reverse(next)| *next == due) {
            self.timers.pop();
        }
        Some(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_strictly_after_the_timer_time_in_time_then_key_order() {
        let mut q = TimerQueue::default();
        q.register(10, "b");
        q.register(10, "a");
        q.register(5, "z");
        q.register(10, "a");
        assert_eq!(q.pop_due(5), None, "a timer at 5 waits for a watermark past 5");
        assert_eq!(q.pop_due(6), Some((5, "z")));
        assert_eq!(q.pop_due(11), Some((10, "a")));
        assert_eq!(q.pop_due(11), Some((10, "b")));
        assert_eq!(q.pop_due(Millis::MAX), None);
    }
}
