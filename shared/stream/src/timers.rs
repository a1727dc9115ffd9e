//! Event-time timers per key.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::Millis;

/// Pending timers, ordered by time then key, so they fire in a deterministic order.
/// A timer set for `t` fires once the watermark passes `t` (watermark > t): then no
/// on-time event at or before `t` can still arrive.
///
/// There is no deleting: a user whose timer moves registers the new one and, when
/// the old one pops, sees that it is no longer the key's (window state keeps each
/// key's timer beside its panes).
///
/// Timers are mostly registered in the order they fire (a window's end, a join's
/// deadline: each later than the last), so a timer that sorts at or after the last
/// in `run` is appended to it, and only the others go to a binary heap. Firing takes
/// the smaller of the two heads: the same order as one heap's, for a comparison and
/// a pop instead of a heap's sifting (callgrind: the heaps' work was about 6 % of
/// the embedded pipeline's instructions).
#[derive(Debug, Clone)]
pub struct TimerQueue<K: Ord> {
    /// In firing order.
    run: VecDeque<(Millis, K)>,
    /// The timers that came after a later one.
    behind: BinaryHeap<Reverse<(Millis, K)>>,
}

impl<K: Ord + Clone> Default for TimerQueue<K> {
    fn default() -> Self {
        TimerQueue { run: VecDeque::new(), behind: BinaryHeap::new() }
    }
}

impl<K: Ord + Clone> TimerQueue<K> {
    /// Registers a timer; the same (time, key) registered twice fires once.
    pub fn register(&mut self, time: Millis, key: K) {
        match self.run.back() {
            Some((last, last_key)) if (*last, last_key) > (time, &key) => self.behind.push(Reverse((time, key))),
            _ => self.run.push_back((time, key)),
        }
    }

    /// Removes and returns the earliest timer that is due at `watermark`.
    pub fn pop_due(&mut self, watermark: Millis) -> Option<(Millis, K)> {
        let from_run = match (self.run.front(), self.behind.peek()) {
            (Some(first), Some(Reverse(other))) => first < other,
            (first, other) => first.is_some() || other.is_none(),
        };
        let due = if from_run {
            self.run.front().filter(|(t, _)| *t < watermark)?;
            self.run.pop_front()?
        } else {
            self.behind.peek().filter(|Reverse((t, _))| *t < watermark)?;
            self.behind.pop()?.0
        };
        // The same timer registered again fires once.
        while self.run.front() == Some(&due) {
            self.run.pop_front();
        }
        while self.behind.peek().is_some_and(|Reverse(next)| *next == due) {
            self.behind.pop();
        }
        Some(due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_log::{take_alike, Steps};

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

    /// The queue as it was before it kept an in-order run: one heap.
    #[derive(Default)]
    struct Heap(BinaryHeap<Reverse<(Millis, u64)>>);

    impl Heap {
        fn pop_due(&mut self, watermark: Millis) -> Option<(Millis, u64)> {
            if self.0.peek().is_none_or(|Reverse((t, _))| *t >= watermark) {
                return None;
            }
            let Reverse(due) = self.0.pop()?;
            while self.0.peek().is_some_and(|Reverse(next)| *next == due) {
                self.0.pop();
            }
            Some(due)
        }
    }

    /// Timers mostly later than the last, sometimes earlier, often tied in time with
    /// other keys, sometimes registered twice: they fire as from one heap.
    #[test]
    fn fires_what_one_heap_fires_in_the_same_order() {
        for seed in 1..=40u64 {
            let mut steps = Steps::seeded(seed);
            let (mut queue, mut heap) = (TimerQueue::default(), Heap::default());
            let (mut clock, mut watermark) = (0, 0);
            for _ in 0..3_000 {
                if steps.next(10) < 7 {
                    clock += steps.next(3) as Millis;
                    let time = clock - steps.next(4) as Millis * (steps.next(3) as Millis);
                    let key = steps.next(6);
                    queue.register(time, key);
                    heap.0.push(Reverse((time, key)));
                } else {
                    watermark = watermark.max(clock - steps.next(5) as Millis);
                    let (queue, heap) = (&mut queue, &mut heap);
                    take_alike(|| queue.pop_due(watermark), || heap.pop_due(watermark), &format!("seed {seed}"));
                }
            }
            take_alike(|| queue.pop_due(Millis::MAX), || heap.pop_due(Millis::MAX), &format!("seed {seed}"));
        }
    }
}
