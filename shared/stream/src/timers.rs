//! Event-time timers per key.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::Millis;

/// Pending timers, ordered by time then key, so they fire in a deterministic order.
/// A timer set for `t` fires once the watermark passes `t` (watermark > t): then no
/// on-time event at or before `t` can still arrive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimerQueue<K: Ord> {
    timers: BTreeSet<(Millis, K)>,
}

impl<K: Ord + Clone> Default for TimerQueue<K> {
    fn default() -> Self {
        TimerQueue { timers: BTreeSet::new() }
    }
}

impl<K: Ord + Clone> TimerQueue<K> {
    /// Registers a timer; registering the same (time, key) twice keeps one.
    pub fn register(&mut self, time: Millis, key: K) {
        self.timers.insert((time, key));
    }

    pub fn delete(&mut self, time: Millis, key: &K) {
        self.timers.remove(&(time, key.clone()));
    }

    /// Removes and returns the earliest timer that is due at `watermark`.
    pub fn pop_due(&mut self, watermark: Millis) -> Option<(Millis, K)> {
        match self.timers.first() {
            Some((t, _)) if *t < watermark => self.timers.pop_first(),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.timers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
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
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop_due(5), None, "a timer at 5 waits for a watermark past 5");
        assert_eq!(q.pop_due(6), Some((5, "z")));
        assert_eq!(q.pop_due(11), Some((10, "a")));
        assert_eq!(q.pop_due(11), Some((10, "b")));
        assert_eq!(q.pop_due(Millis::MAX), None);
    }
}
