//! The consumer group's rebalances, as the consumer's callbacks report them: noted
//! here during a poll, handled by the member's loop after it; and whether the member
//! is still in its group (`Membership`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;

use crate::client_stats::ClientStats;

#[derive(Default)]
pub struct RebalanceLog {
    pub revoked: bool,
    /// The group gave the member an assignment (it may be empty).
    pub joined: bool,
    pub assigned: Vec<(String, i32)>,
}

impl RebalanceLog {
    pub fn pending(&self) -> bool {
        self.revoked || self.joined
    }
}

pub type SharedLog = Arc<Mutex<RebalanceLog>>;

pub struct GroupContext {
    pub log: SharedLog,
    /// Where librdkafka's statistics of the consumer go (none: they are off).
    pub stats: Option<ClientStats>,
}

impl ClientContext for GroupContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(stats) = &self.stats {
            stats.record(&statistics);
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            self.log.lock().expect("rebalance log").revoked = true;
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut log = self.log.lock().expect("rebalance log");
            log.joined = true;
            log.assigned.extend(tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())));
        }
    }
}

/// Out of the group this long (past a session timeout and an ordinary rebalance),
/// a member reports degraded.
pub const DEGRADED_OUT_OF_GROUP: Duration = Duration::from_secs(20);
/// Out of the group this long, a member's rejoin is taken as stuck. Longer than a
/// rebalance that waits on a member busy restoring (up to a minute, see `restore`).
pub const STUCK_OUT_OF_GROUP: Duration = Duration::from_secs(120);

/// Whether the member is in its consumer group. A member whose partitions were
/// revoked is rejoining, and the group gives it an assignment (maybe empty) within a
/// rebalance; a rejoin can wait for good on a group coordinator librdkafka never
/// finds again (docs/decisions.md). Out of the group for `DEGRADED_OUT_OF_GROUP` it
/// is degraded; for `STUCK_OUT_OF_GROUP`, stuck: it starts over with new clients.
#[derive(Debug, Default)]
pub struct Membership {
    out_since: Option<Instant>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Standing {
    In,
    Rejoining,
    Degraded(Duration),
    Stuck(Duration),
}

impl Membership {
    /// The member's partitions were revoked: it is out until it is assigned again.
    pub fn left(&mut self, now: Instant) {
        self.out_since.get_or_insert(now);
    }

    pub fn joined(&mut self) {
        self.out_since = None;
    }

    pub fn standing(&self, now: Instant) -> Standing {
        let Some(since) = self.out_since else { return Standing::In };
        match now.saturating_duration_since(since) {
            out if out >= STUCK_OUT_OF_GROUP => Standing::Stuck(out),
            out if out >= DEGRADED_OUT_OF_GROUP => Standing::Degraded(out),
            _ => Standing::Rejoining,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_out_of_its_group_is_rejoining_then_degraded_then_stuck() {
        let t0 = Instant::now();
        let mut m = Membership::default();
        assert_eq!(m.standing(t0), Standing::In);
        m.left(t0);
        assert_eq!(m.standing(t0 + Duration::from_secs(5)), Standing::Rejoining);
        let later = t0 + DEGRADED_OUT_OF_GROUP;
        assert_eq!(m.standing(later), Standing::Degraded(DEGRADED_OUT_OF_GROUP));
        // A second revoke while out does not restart the clock.
        m.left(later);
        assert_eq!(m.standing(t0 + STUCK_OUT_OF_GROUP), Standing::Stuck(STUCK_OUT_OF_GROUP));
        m.joined();
        assert_eq!(m.standing(t0 + STUCK_OUT_OF_GROUP * 2), Standing::In);
    }
}
