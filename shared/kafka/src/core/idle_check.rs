//! When a source (or repartition) partition is idle, and when its consumer is stuck:
//! the shell's policy, kept here so a test reaches it without a broker.
//!
//! Each partition a member holds is checked once per `period` without a record. The
//! shell asks the broker where each such partition ends: read to its end, it is
//! idle (the watermark goes on without it); with committed records waiting beyond
//! what was read, it is behind. Behind for [`STUCK_CHECKS`] checks in a row with
//! nothing delivered, its consumer is stuck, and the member starts over with new
//! clients instead of holding the watermark for good (docs/decisions.md).
//!
//! A partition with nothing to read while the broker cannot be reached says nothing:
//! its producers wait on the broker too, and hold their records until it is back.
//! So once the broker has failed to answer (about a partition, or a commit), every
//! partition's period starts over when it answers again.

use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::Slot;

/// Checks in a row behind, with nothing delivered, after which a consumer is stuck.
pub const STUCK_CHECKS: u32 = 3;

#[derive(Debug)]
pub struct IdleCheck {
    period: Duration,
    slots: FxHashMap<Slot, Watched>,
    /// The broker failed to answer, and has not answered since.
    outage: bool,
}

#[derive(Debug, Clone, Copy)]
struct Watched {
    /// When its current period began: at its last record, or its last check.
    since: Instant,
    /// Checks in a row that found records waiting.
    behind: u32,
}

/// Where a partition has been read to, and how many committed records wait after
/// that, as the broker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unread {
    pub read: i64,
    pub waiting: i64,
}

/// What a check found a partition to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Read to its end: the watermark goes on without it.
    Idle,
    /// Records wait beyond what was read: it is slow, not idle.
    Behind,
    /// Behind for [`STUCK_CHECKS`] checks in a row with nothing delivered.
    Stuck(Unread),
}

impl IdleCheck {
    pub fn new(period: Duration) -> Self {
        IdleCheck { period, slots: FxHashMap::default(), outage: false }
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// Starts watching a newly assigned partition.
    pub fn watch(&mut self, slot: Slot, now: Instant) {
        self.slots.insert(slot, Watched { since: now, behind: 0 });
    }

    /// The partitions watched: the source and repartition partitions assigned.
    pub fn watched(&self) -> impl Iterator<Item = Slot> + '_ {
        self.slots.keys().copied()
    }

    /// The partition delivered something: its period starts over.
    pub fn heard(&mut self, slot: Slot, now: Instant) {
        if let Some(w) = self.slots.get_mut(&slot) {
            *w = Watched { since: now, behind: 0 };
        }
    }

    /// Forgets every partition (they were revoked).
    pub fn clear(&mut self) {
        self.slots.clear();
    }

    /// The partitions to ask the broker about: those without a record for a whole
    /// period as of `now` (each starts another), paused ones aside — a paused
    /// partition behind a backlog is slow, not idle.
    pub fn due(&mut self, now: Instant, paused: impl Fn(Slot) -> bool) -> Vec<Slot> {
        let mut due = Vec::new();
        for (&slot, w) in &mut self.slots {
            if now.saturating_duration_since(w.since) < self.period {
                continue;
            }
            w.since = now;
            if paused(slot) {
                w.behind = 0;
            } else {
                due.push(slot);
            }
        }
        due.sort_unstable();
        due
    }

    /// The broker did not answer (about a partition, or a commit).
    pub fn outage(&mut self) {
        self.outage = true;
    }

    /// The broker's answer at `now` for the partitions [`IdleCheck::due`] gave, in
    /// their order (`None`: no answer): what each is. The first answer after an
    /// outage judges nothing: every period starts over from it.
    pub fn judge(&mut self, now: Instant, due: &[Slot], answer: Option<&[Unread]>) -> Vec<(Slot, Verdict)> {
        let Some(answer) = answer else {
            self.outage = true;
            return Vec::new();
        };
        if std::mem::take(&mut self.outage) {
            for w in self.slots.values_mut() {
                *w = Watched { since: now, behind: 0 };
            }
            return Vec::new();
        }
        let mut verdicts = Vec::with_capacity(due.len());
        for (&slot, &unread) in due.iter().zip(answer) {
            let Some(w) = self.slots.get_mut(&slot) else { continue };
            let verdict = if unread.waiting == 0 {
                w.behind = 0;
                Verdict::Idle
            } else {
                w.behind += 1;
                if w.behind >= STUCK_CHECKS {
                    Verdict::Stuck(unread)
                } else {
                    Verdict::Behind
                }
            };
            verdicts.push((slot, verdict));
        }
        verdicts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(10);
    const READ: Unread = Unread { read: 5, waiting: 0 };
    const WAITING: Unread = Unread { read: 5, waiting: 3 };

    fn never_paused(_: Slot) -> bool {
        false
    }

    #[test]
    fn a_partition_is_due_after_a_period_without_a_record_and_again_a_period_later() {
        let t0 = Instant::now();
        let mut check = IdleCheck::new(PERIOD);
        check.watch((0, 0), t0);
        check.watch((0, 1), t0 + Duration::from_secs(4));
        let at = |s| t0 + Duration::from_secs(s);
        assert!(check.due(at(9), never_paused).is_empty());
        assert_eq!(check.due(at(10), never_paused), [(0, 0)]);
        assert_eq!(check.due(at(14), never_paused), [(0, 1)]);
        assert!(check.due(at(19), never_paused).is_empty());
        check.heard((0, 0), at(19));
        assert_eq!(check.due(at(24), never_paused), [(0, 1)]);
        assert!(check.due(at(28), never_paused).is_empty());
        assert_eq!(check.due(at(29), never_paused), [(0, 0)]);
    }

    #[test]
    fn read_to_its_end_it_is_idle_and_a_paused_one_is_not_asked_about() {
        let t0 = Instant::now();
        let mut check = IdleCheck::new(PERIOD);
        check.watch((0, 0), t0);
        check.watch((0, 1), t0);
        let due = check.due(t0 + PERIOD, |slot| slot == (0, 1));
        assert_eq!(due, [(0, 0)]);
        assert_eq!(check.judge(t0 + PERIOD, &due, Some(&[READ])), [((0, 0), Verdict::Idle)]);
    }

    #[test]
    fn stuck_only_after_checks_in_a_row_behind_with_nothing_delivered() {
        let t0 = Instant::now();
        let mut check = IdleCheck::new(PERIOD);
        check.watch((0, 0), t0);
        let judge = |check: &mut IdleCheck, n: u32, unread| {
            let now = t0 + PERIOD * n;
            let due = check.due(now, never_paused);
            check.judge(now, &due, Some(&[unread]))[0].1
        };
        assert_eq!(judge(&mut check, 1, WAITING), Verdict::Behind);
        assert_eq!(judge(&mut check, 2, WAITING), Verdict::Behind);
        assert_eq!(judge(&mut check, 3, READ), Verdict::Idle, "caught up: the count starts over");
        assert_eq!(judge(&mut check, 4, WAITING), Verdict::Behind);
        assert_eq!(judge(&mut check, 5, WAITING), Verdict::Behind);
        assert_eq!(judge(&mut check, 6, WAITING), Verdict::Stuck(WAITING));
        check.heard((0, 0), t0 + PERIOD * 6);
        assert_eq!(judge(&mut check, 7, WAITING), Verdict::Behind, "a record came: the count starts over");
    }

    #[test]
    fn after_an_outage_every_period_starts_over_when_the_broker_answers() {
        let t0 = Instant::now();
        let mut check = IdleCheck::new(PERIOD);
        check.watch((0, 0), t0);
        check.watch((0, 1), t0);
        let due = check.due(t0 + PERIOD, never_paused);
        assert_eq!(check.judge(t0 + PERIOD, &due, None), [], "no answer: nothing judged");
        let back = t0 + Duration::from_secs(25);
        let due = check.due(back, never_paused);
        assert_eq!(due, [(0, 0), (0, 1)]);
        assert_eq!(check.judge(back, &due, Some(&[READ, READ])), [], "the first answer after an outage judges nothing");
        assert!(check.due(back + PERIOD - Duration::from_millis(1), never_paused).is_empty());
        let due = check.due(back + PERIOD, never_paused);
        assert_eq!(check.judge(back + PERIOD, &due, Some(&[READ, WAITING])).len(), 2);
    }
}
