//! When a member commits. Each commit is a transaction: round trips to the broker
//! that the member waits out, and watermark markers to every partition downstream.
//!
//! - Under load (no poll has come back empty since the last commit), every commit
//!   interval, or later if commits are slow: at least `BUSY_SHARE` times the last
//!   commit's duration after it, so that committing takes at most a ninth of a busy
//!   member's time (on a loaded broker a commit takes as long as the interval, and
//!   committing every interval would halve the member's throughput). Capped at
//!   `MAX_STRETCH` intervals, which bounds what a backlog adds to latency. On a slow
//!   broker each commit costs it more than the records in it (the transaction's
//!   markers on every partition it touched, its states on the transaction log), and
//!   state alive at a commit goes to the changelog: fewer commits under load are
//!   less of both (docs/decisions.md, 2026-12-08).
//! - When the input goes quiet (a poll comes back empty) while records or a moved
//!   watermark wait for the commit, waiting for the rest of the interval only adds
//!   latency: the member commits once a quarter of the interval has passed since
//!   the last commit.

use std::time::Duration;

/// How long a poll waits while nothing is uncommitted.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How long a poll waits while something is: the time it takes to see the input
/// has gone quiet.
const QUIET_POLL: Duration = Duration::from_millis(5);
/// Under load, the time from one commit to the next is at least this many times
/// what the last commit took.
const BUSY_SHARE: u32 = 8;
/// Under load, commits come at least every this many intervals.
const MAX_STRETCH: u32 = 30;

/// How a member's reading stands, as the policy weighs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The last poll found nothing, and no source partition has records waiting on
    /// the broker: the input has gone quiet.
    pub caught_up: bool,
    /// No poll has come back empty since the last commit: the member is under load.
    pub busy: bool,
    /// The open transaction holds records for readers downstream (outputs, rerouted
    /// records, dead letters), not only markers, state and input offsets.
    pub carries_records: bool,
}

#[derive(Debug, Clone, Copy)]
pub struct CommitPolicy {
    interval: Duration,
    /// How long the last commit took.
    last_took: Duration,
}

impl CommitPolicy {
    pub fn new(interval: Duration) -> Self {
        CommitPolicy { interval, last_took: Duration::ZERO }
    }

    /// A commit went through in `took`.
    pub fn committed(&mut self, took: Duration) {
        self.last_took = took;
    }

    /// How long the next poll may wait for input.
    pub fn poll_timeout(&self, dirty: bool, since_commit: Duration) -> Duration {
        if dirty {
            QUIET_POLL.min(self.interval.saturating_sub(since_commit))
        } else {
            IDLE_POLL
        }
    }

    /// Whether to commit now; `quiet`: the last poll found nothing to read, and
    /// records or a moved watermark wait for the commit; `busy`:
    /// no poll has come back empty since the last commit.
    pub fn due(&self, dirty: bool, since_commit: Duration, quiet: bool, busy: bool) -> bool {
        let wait = match busy {
            true => (self.last_took * BUSY_SHARE).clamp(self.interval, self.interval * MAX_STRETCH),
            false => self.interval,
        };
        dirty && (since_commit >= wait || (quiet && since_commit >= self.interval / 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_member_commits_every_interval_and_after_a_quarter_once_quiet() {
        let policy = CommitPolicy::new(100 * MS);
        assert!(!policy.due(true, 99 * MS, false, false));
        assert!(policy.due(true, 100 * MS, false, false));
        assert!(!policy.due(true, 24 * MS, true, false));
        assert!(policy.due(true, 25 * MS, true, false));
        // Nothing to commit, nothing due.
        assert!(!policy.due(false, 500 * MS, true, false));
    }

    #[test]
    fn a_busy_member_whose_commits_are_slow_commits_less_often_up_to_a_bound() {
        let mut policy = CommitPolicy::new(100 * MS);
        // Fast commits: every interval, busy or not.
        policy.committed(12 * MS);
        assert!(policy.due(true, 100 * MS, false, true));
        // A commit of 60 ms: the next, under load, 480 ms after it.
        policy.committed(60 * MS);
        assert!(!policy.due(true, 479 * MS, false, true));
        assert!(policy.due(true, 480 * MS, false, true));
        // Not under load: every interval still.
        assert!(policy.due(true, 100 * MS, false, false));
        // A commit of 2 s: at most thirty intervals apart.
        policy.committed(2000 * MS);
        assert!(!policy.due(true, 2999 * MS, false, true));
        assert!(policy.due(true, 3000 * MS, false, true));
    }

    #[test]
    fn polls_wait_briefly_while_work_is_uncommitted() {
        let policy = CommitPolicy::new(100 * MS);
        assert_eq!(policy.poll_timeout(false, Duration::ZERO), IDLE_POLL);
        assert_eq!(policy.poll_timeout(true, 10 * MS), QUIET_POLL);
        assert_eq!(policy.poll_timeout(true, 98 * MS), 2 * MS);
        assert_eq!(policy.poll_timeout(true, 150 * MS), Duration::ZERO);
    }
}
