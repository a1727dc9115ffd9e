//! How long each source (or repartition) partition a member holds has been silent,
//! in spells of `after`. The shell asks the broker about a partition at the end of
//! each silent spell: read to its end, it is idle (the watermark goes on without
//! it); with records waiting beyond what was read, it is behind. Behind for several
//! spells in a row, with nothing delivered, the consumer is stuck: seen after a
//! broker stall fenced a static member and its restart left one partition's fetch
//! dead until the next broker restart. The member then starts over with new clients
//! instead of holding the watermark for good.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::core::Slot;

/// Silent spells in a row with records waiting after which the consumer is stuck.
pub const STUCK_SPELLS: u32 = 3;

#[derive(Debug)]
pub struct Silence {
    after: Duration,
    slots: HashMap<Slot, Spell>,
}

#[derive(Debug, Clone, Copy)]
struct Spell {
    since: Instant,
    /// Spells in a row that ended with records waiting.
    behind: u32,
}

impl Silence {
    pub fn new(after: Duration) -> Self {
        Silence { after, slots: HashMap::new() }
    }

    pub fn after(&self) -> Duration {
        self.after
    }

    /// Starts watching a newly assigned partition.
    pub fn watch(&mut self, slot: Slot, now: Instant) {
        self.slots.insert(slot, Spell { since: now, behind: 0 });
    }

    /// The partition delivered something: its silence starts over.
    pub fn heard(&mut self, slot: Slot, now: Instant) {
        if let Some(spell) = self.slots.get_mut(&slot) {
            *spell = Spell { since: now, behind: 0 };
        }
    }

    /// Forgets every partition (they were revoked).
    pub fn clear(&mut self) {
        self.slots.clear();
    }

    /// The partitions silent for a whole spell as of `now`; each starts another.
    pub fn ended_spells(&mut self, now: Instant) -> Vec<Slot> {
        let mut ended = Vec::new();
        for (slot, spell) in &mut self.slots {
            if now.saturating_duration_since(spell.since) >= self.after {
                spell.since = now;
                ended.push(*slot);
            }
        }
        ended.sort_unstable();
        ended
    }

    /// A spell of `slot` ended with records waiting beyond what was read; true once
    /// that has happened `STUCK_SPELLS` times in a row.
    pub fn behind(&mut self, slot: Slot) -> bool {
        self.slots.get_mut(&slot).is_some_and(|spell| {
            spell.behind += 1;
            spell.behind >= STUCK_SPELLS
        })
    }

    /// A spell of `slot` ended with nothing waiting (or the partition paused): it
    /// is not behind.
    pub fn not_behind(&mut self, slot: Slot) {
        if let Some(spell) = self.slots.get_mut(&slot) {
            spell.behind = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPELL: Duration = Duration::from_secs(10);

    #[test]
    fn a_spell_ends_after_the_silence_and_starts_again() {
        let t0 = Instant::now();
        let mut silence = Silence::new(SPELL);
        silence.watch((0, 0), t0);
        silence.watch((0, 1), t0 + Duration::from_secs(4));
        assert!(silence.ended_spells(t0 + Duration::from_secs(9)).is_empty());
        assert_eq!(silence.ended_spells(t0 + SPELL), [(0, 0)]);
        assert_eq!(silence.ended_spells(t0 + Duration::from_secs(14)), [(0, 1)]);
        assert!(silence.ended_spells(t0 + Duration::from_secs(19)).is_empty());
        silence.heard((0, 0), t0 + Duration::from_secs(19));
        assert_eq!(silence.ended_spells(t0 + Duration::from_secs(24)), [(0, 1)]);
        assert!(silence.ended_spells(t0 + Duration::from_secs(28)).is_empty());
        assert_eq!(silence.ended_spells(t0 + Duration::from_secs(29)), [(0, 0)]);
    }

    #[test]
    fn stuck_only_after_spells_in_a_row_behind_with_nothing_delivered() {
        let t0 = Instant::now();
        let mut silence = Silence::new(SPELL);
        silence.watch((0, 0), t0);
        assert!(!silence.behind((0, 0)));
        assert!(!silence.behind((0, 0)));
        // A record arrives: the count starts over.
        silence.heard((0, 0), t0 + SPELL);
        assert!(!silence.behind((0, 0)));
        assert!(!silence.behind((0, 0)));
        // Caught up (or paused) for a spell: so does it.
        silence.not_behind((0, 0));
        assert!(!silence.behind((0, 0)));
        assert!(!silence.behind((0, 0)));
        assert!(silence.behind((0, 0)));
        // A partition no longer held is never stuck.
        silence.clear();
        assert!(!silence.behind((0, 0)));
        assert!(silence.ended_spells(t0 + SPELL * 10).is_empty());
    }
}
