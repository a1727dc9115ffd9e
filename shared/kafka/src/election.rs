//! One active member for a global stage, chosen by Kafka. Every member of the stage
//! joins a consumer group on the one-partition topic `vigil-leadership`; the member
//! the group gives that partition to is the leader and processes, the others stand
//! by. When the leader dies its session expires and the group gives the partition to
//! a standby within seconds; the new leader's producer (same transactional id) fences
//! the old one and aborts whatever it left open.
//!
//! The sticky cooperative assignor keeps the partition where it is when members join,
//! so a new taskmanager does not take the lead from a healthy one.
//!
//! A member can also be left standing by with nobody leading: after a broker crash,
//! a chaos run saw payment-metrics' only member lose its session and never get the
//! partition back (its client's requests to the broker timed out for good). So a
//! member that has stood by for `ALONE_PATIENCE` with no other member in its
//! election group, or with no answer from the broker about it, joins afresh with a
//! new client.

use crate::connection;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;
use tracing::{info, warn};

struct LeaseContext {
    held: Arc<AtomicBool>,
}

impl ClientContext for LeaseContext {}

/// The election group of a global stage whose consumer group is `group`.
pub fn election_group(group: &str) -> String {
    format!("{group}-leader")
}

impl ConsumerContext for LeaseContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            if tpl.count() > 0 {
                self.held.store(false, Ordering::SeqCst);
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            if tpl.count() > 0 {
                self.held.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// How long a member may stand by alone in its election group before it joins afresh.
const ALONE_PATIENCE: Duration = Duration::from_secs(30);
/// How often a member standing by asks the broker who else is in its election group.
const ALONE_CHECK: Duration = Duration::from_secs(5);

/// A member's place in its stage's election.
pub struct Leadership {
    consumer: BaseConsumer<LeaseContext>,
    held: Arc<AtomicBool>,
    group: String,
    member: String,
    solitude: Cell<Solitude>,
    next_check: Instant,
}

impl Leadership {
    /// Joins the election of the stage whose consumer group is `group`, held on
    /// `topic` (the leadership topic, in the pipeline's namespace).
    pub fn join(bootstrap_servers: &str, topic: &str, group: &str, member: &str) -> Result<Leadership> {
        let held = Arc::new(AtomicBool::new(false));
        let consumer: BaseConsumer<LeaseContext> = connection::client_config(bootstrap_servers)
            .set("group.id", election_group(group))
            .set("client.id", member)
            .set("enable.auto.commit", "false")
            .set("partition.assignment.strategy", "cooperative-sticky")
            // How long a dead leader keeps the lead: the broker's minimum session.
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "1000")
            .create_with_context(LeaseContext { held: held.clone() })
            .context("cannot create the leadership consumer")?;
        consumer.subscribe(&[topic]).context("cannot join the leadership group")?;
        info!(group, member, "joined the election");
        Ok(Leadership {
            consumer,
            held,
            group: election_group(group),
            member: member.to_string(),
            solitude: Cell::default(),
            next_check: Instant::now() + ALONE_CHECK,
        })
    }

    /// Whether this member, standing by, has been alone in its election group for
    /// `ALONE_PATIENCE`: nobody leads, and its client should be replaced. Asks the
    /// broker every `ALONE_CHECK`.
    pub fn stranded(&mut self) -> bool {
        if self.leads() || Instant::now() < self.next_check {
            return false;
        }
        self.next_check = Instant::now() + ALONE_CHECK;
        let others = self.consumer.fetch_group_list(Some(&self.group), Duration::from_secs(5)).ok().map(|list| {
            list.groups().iter().flat_map(|g| g.members()).filter(|m| m.client_id() != self.member).count()
        });
        let mut solitude = self.solitude.get();
        let stranded = solitude.heard(others, Instant::now());
        self.solitude.set(solitude);
        if stranded {
            warn!(group = %self.group, "standing by alone in the election, or unanswered: joining it afresh with a new client");
        }
        stranded
    }

    /// Whether this member leads now. Call it often: it also serves the group's
    /// callbacks (no record is ever written to the topic, so none is returned).
    pub fn leads(&self) -> bool {
        let _ = self.consumer.poll(Duration::ZERO);
        let held = self.held.load(Ordering::SeqCst);
        if held {
            self.solitude.set(Solitude::default());
        }
        held
    }
}

/// How long a member standing by has been alone in its election group.
#[derive(Debug, Default, Clone, Copy)]
struct Solitude {
    since: Option<Instant>,
}

impl Solitude {
    /// What the broker said at `now` (how many other members the group has; `None`:
    /// no answer): whether the member has now been alone, or unanswered, for
    /// `ALONE_PATIENCE`. No answer counts as alone: a wedged client never gets one
    /// (a chaos run saw a member's count start over on every unanswered question,
    /// for ten minutes), and while the broker is down a new client does no worse.
    fn heard(&mut self, others: Option<usize>, now: Instant) -> bool {
        match others {
            Some(0) | None => now.duration_since(*self.since.get_or_insert(now)) >= ALONE_PATIENCE,
            Some(_) => {
                self.since = None;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_stranded_only_once_alone_for_the_whole_patience() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut solitude = Solitude::default();
        assert!(!solitude.heard(Some(0), at(0)));
        assert!(!solitude.heard(Some(1), at(20)), "another member may lead: the count starts over");
        assert!(!solitude.heard(Some(0), at(25)));
        assert!(!solitude.heard(Some(0), at(50)), "alone 25 s, counted from the other member");
        assert!(solitude.heard(Some(0), at(55)));
        assert!(!solitude.heard(Some(1), at(60)));
        assert!(!solitude.heard(None, at(61)));
        assert!(!solitude.heard(None, at(90)), "unanswered 29 s");
        assert!(solitude.heard(Some(0), at(91)), "unanswered, then alone: 30 s in all");
    }

    #[test]
    fn a_member_whose_questions_go_unanswered_for_the_whole_patience_is_stranded() {
        let t0 = Instant::now();
        let mut solitude = Solitude::default();
        assert!(!solitude.heard(None, t0));
        assert!(!solitude.heard(None, t0 + Duration::from_secs(25)));
        assert!(solitude.heard(None, t0 + ALONE_PATIENCE), "a wedged client never gets an answer");
    }
}
