//! How long each source (or repartition) partition a member holds has been silent,
//! in spells of `after`. The shell asks the broker about a partition at the end of
//! each silent spell: read to its end, it is idle (the watermark goes on without
//! it); with records waiting beyond what was read, it is behind. Behind for several
//! spells in a row, with nothing delivered, the consumer is stuck: seen after a
//! broker stall fenced a static member and its restart left one partition's fetch
//! dead until the next broker restart. The member then starts over with new clients
//! instead of holding the watermark for good.
//!
//! Silence while the broker cannot be reached says nothing about a partition: its
//! producers are waiting on the broker too, and hold their records until it is back.
//! Judged the moment it answers again, a partition whose producer has not yet
//! delivered would be idle, and the watermark could run ahead of the records it holds
//! (seen after a broker stalled for 20 s: on-time device events came late). So once
//! the broker has failed to answer, every spell starts over when it answers again.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::core::Slot;

/// Silent spells in a row with records waiting after which the consumer is stuck.
pub const STUCK_SPELLS: u32 = 3;

#[derive(Debug)]
pub struct Silence {
    after: Duration,
    slots: FxHashMap<Slot, Spell>,
    /// The broker failed to answer, and has not answered since.
    outage: bool,
}

#[derive(Debug, Clone, Copy)]
struct Spell {
    since: Instant,
    /// Spells in a row that ended with records waiting.
    behind: u32,
}

impl Silence {
    pub fn new(after: Duration) -> Self {
        Silence { after, slots: FxHashMap::default(), outage: false }
    }

    pub fn after(&self) -> Duration {
        self.after
    }

    /// Starts watching a newly assigned partition.
    pub fn watch(&mut self, slot: Slot, now: Instant) {
        self.slots.insert(slot, Spell { since: now, behind: 0 });
    }

    /// The partitions watched: the source and repartition partitions assigned.
    pub fn watched(&self) -> impl Iterator<Item = Slot> + '_ {
        self.slots.keys().copied()
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

    /// The broker did not answer (about a partition, or a commit).
    pub fn outage(&mut self) {
        self.outage = true;
    }

    /// The broker answered about a partition at `now`. The first answer after an
    /// outage judges nothing: every spell starts over from it, and this says false.
    pub fn answered(&mut self, now: Instant) -> bool {
        if !std::mem::take(&mut self.outage) {
            return true;
        }
        for spell in self.slots.values_mut() {
            *spell = Spell { since: now, behind: 0 };
        }
        false
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
    fn after_an_outage_every_spell_starts_over_when_the_broker_answers() {
        let t0 = Instant::now();
        let mut silence = Silence::new(SPELL);
        silence.watch((0, 0), t0);
        silence.watch((0, 1), t0);
        assert!(silence.answered(t0 + SPELL));
        assert!(!silence.behind((0, 1)));
        assert!(!silence.behind((0, 1)));
        silence.outage();
        silence.outage();
        let back = t0 + Duration::from_secs(25);
        assert!(!silence.answered(back));
        assert!(silence.answered(back));
        assert!(silence.ended_spells(back + SPELL - Duration::from_millis(1)).is_empty());
        assert_eq!(silence.ended_spells(back + SPELL), [(0, 0), (0, 1)]);
        // The count of spells behind starts over too (a third in a row is stuck).
        assert!(!silence.behind((0, 1)));
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
