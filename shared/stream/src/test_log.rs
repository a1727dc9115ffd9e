//! What the state tests share: a changelog kept as compaction leaves it, and a
//! deterministic source of steps.

use std::collections::BTreeMap;

use crate::changelog::StateWrite;

/// Applies writes to a changelog kept as a map, as compaction leaves it.
pub fn apply(log: &mut BTreeMap<Vec<u8>, Vec<u8>>, writes: Vec<StateWrite>) {
    for w in writes {
        match w.value {
            Some(v) => log.insert(w.key, v),
            None => log.remove(&w.key),
        };
    }
}

/// A small deterministic generator (xorshift), so a failure replays.
pub struct Steps(pub u64);

impl Steps {
    /// Seeded from a test's case number, spread over the bits.
    pub fn seeded(seed: u64) -> Self {
        Steps(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Takes from both sides until the first gives nothing, each pair the same.
pub fn take_alike<T: PartialEq + std::fmt::Debug>(
    mut one: impl FnMut() -> Option<T>,
    mut other: impl FnMut() -> Option<T>,
    context: &str,
) {
    loop {
        let taken = one();
        assert_eq!(taken, other(), "{context}");
        if taken.is_none() {
            return;
        }
    }
}
