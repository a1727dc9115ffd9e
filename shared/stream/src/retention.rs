//! A time-to-live for keyed state that would otherwise live forever (a customer's
//! running statistics, a device's failure count): a key idle for longer than the TTL,
//! in event time, is treated as gone, and dropped from memory (and its changelog)
//! at the next sweep.

use std::hash::Hash;

use crate::state::KeyedState;
use crate::Millis;

#[derive(Debug, Clone, Copy)]
pub struct Retention {
    ttl: Option<Millis>,
    next_sweep: Millis,
}

impl Retention {
    /// `None` keeps state forever.
    pub fn new(ttl: Option<Millis>) -> Self {
        Retention { ttl, next_sweep: Millis::MIN }
    }

    /// Whether state last touched at `last_ms` still counts for an event at `at_ms`.
    pub fn alive(&self, last_ms: Millis, at_ms: Millis) -> bool {
        self.ttl.is_none_or(|ttl| at_ms.saturating_sub(last_ms) <= ttl)
    }

    /// Drops the entries no event at or after `watermark` can see any more; sweeps
    /// every quarter of a TTL of event time, so the cost is spread thin.
    pub fn sweep<K: Hash + Eq + Clone, V>(
        &mut self,
        state: &mut KeyedState<K, V>,
        watermark: Millis,
        last_ms: impl Fn(&V) -> Millis,
    ) {
        let Some(ttl) = self.ttl else { return };
        if watermark < self.next_sweep {
            return;
        }
        self.next_sweep = watermark.saturating_add((ttl / 4).max(1));
        state.retain(|_, v| watermark.saturating_sub(last_ms(v)) <= ttl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_key_is_gone_after_the_ttl_and_swept_from_memory() {
        let mut r = Retention::new(Some(10_000));
        assert!(r.alive(0, 10_000) && !r.alive(0, 10_001));
        let mut state: KeyedState<String, Millis> = KeyedState::default();
        *state.get_or_insert_with("old", || 0) = 1_000;
        *state.get_or_insert_with("new", || 0) = 9_000;
        r.sweep(&mut state, 12_000, |&last| last);
        assert_eq!((state.get("old"), state.len()), (None, 1));
        assert!(Retention::new(None).alive(0, Millis::MAX), "no TTL: forever");
    }
}
