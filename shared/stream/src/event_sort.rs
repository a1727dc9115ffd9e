//! Releases records in event-time order as the watermark passes them, so a rule that
//! depends on the order of a key's records (a running mean, a gap between events)
//! gives the same answer whatever order the partitions interleaved in.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::changelog::{StateError, StateWrite};
use crate::state::OrderedState;
use crate::Millis;

/// Records waiting for the watermark, by (event time, tie-break, arrival).
#[derive(Debug, Clone)]
pub struct EventTimeBuffer<K: Ord, T> {
    items: OrderedState<(Millis, K, u64), T>,
    arrivals: u64,
}

impl<K: Ord, T> Default for EventTimeBuffer<K, T> {
    fn default() -> Self {
        EventTimeBuffer { items: OrderedState::default(), arrivals: 0 }
    }
}

impl<K: Ord + Clone, T> EventTimeBuffer<K, T> {
    /// Buffers `item`; records with equal time are released in `tie_break` order.
    pub fn push(&mut self, event_ts: Millis, tie_break: K, item: T) {
        self.arrivals += 1;
        self.items.insert((event_ts, tie_break, self.arrivals), item);
    }

    /// The earliest buffered record with an event time before `watermark`.
    pub fn pop_before(&mut self, watermark: Millis) -> Option<(Millis, T)> {
        let ((ts, _, _), _) = self.items.first_key_value()?;
        if *ts >= watermark {
            return None;
        }
        self.items.pop_first().map(|((ts, _, _), item)| (ts, item))
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn track_changes(&mut self) {
        self.items.track_changes();
    }
}

impl<K: Ord + Clone + Serialize + DeserializeOwned, T: Serialize + DeserializeOwned> EventTimeBuffer<K, T> {
    /// Every record buffered or released since the last drain, as entries of `namespace`.
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        self.items.drain_changes(namespace, out);
    }

    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        self.items.restore_entry(rest, value)
    }

    /// Arrival numbers go on after the highest restored one.
    pub fn finish_restore(&mut self) {
        self.arrivals = self.items.keys().map(|(_, _, n)| *n).max().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_time_then_tie_break_order_once_the_watermark_passes() {
        let mut b = EventTimeBuffer::default();
        b.push(30, "p3", 'c');
        b.push(10, "p2", 'b');
        b.push(10, "p1", 'a');
        assert_eq!(b.pop_before(10), None);
        assert_eq!(b.pop_before(11), Some((10, 'a')));
        assert_eq!(b.pop_before(11), Some((10, 'b')));
        assert_eq!(b.pop_before(11), None);
        assert_eq!(b.pop_before(Millis::MAX), Some((30, 'c')));
        assert!(b.is_empty());
    }
}
