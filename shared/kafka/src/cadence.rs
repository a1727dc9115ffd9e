//! When a member commits. Under load, every commit interval: each commit is a
//! transaction round trip and writes watermark markers to every partition
//! downstream, so fewer of them is throughput. When the input goes quiet (a poll
//! comes back empty), waiting for the rest of the interval only adds latency: the
//! member then commits once a quarter of the interval has passed since the last
//! commit. A busy member never sees an empty poll, so its cadence is unchanged.

use std::time::Duration;

/// How long a poll waits while nothing is uncommitted.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How long a poll waits while something is: the time it takes to see the input
/// has gone quiet.
const QUIET_POLL: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    interval: Duration,
}

impl Cadence {
    pub fn new(interval: Duration) -> Self {
        Cadence { interval }
    }

    /// How long the next poll may wait for input.
    pub fn poll_timeout(&self, dirty: bool, since_commit: Duration) -> Duration {
        if dirty {
            QUIET_POLL.min(self.interval.saturating_sub(since_commit))
        } else {
            IDLE_POLL
        }
    }

    /// Whether to commit now; `quiet`: the last poll found nothing to read.
    pub fn due(&self, dirty: bool, since_commit: Duration, quiet: bool) -> bool {
        dirty && (since_commit >= self.interval || (quiet && since_commit >= self.interval / 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_busy_member_commits_every_interval_a_quiet_one_after_a_quarter() {
        let cadence = Cadence::new(100 * MS);
        assert!(!cadence.due(true, 99 * MS, false));
        assert!(cadence.due(true, 100 * MS, false));
        assert!(!cadence.due(true, 24 * MS, true));
        assert!(cadence.due(true, 25 * MS, true));
        // Nothing to commit, nothing due.
        assert!(!cadence.due(false, 500 * MS, true));
    }

    #[test]
    fn polls_wait_briefly_while_work_is_uncommitted() {
        let cadence = Cadence::new(100 * MS);
        assert_eq!(cadence.poll_timeout(false, Duration::ZERO), IDLE_POLL);
        assert_eq!(cadence.poll_timeout(true, 10 * MS), QUIET_POLL);
        assert_eq!(cadence.poll_timeout(true, 98 * MS), 2 * MS);
        assert_eq!(cadence.poll_timeout(true, 150 * MS), Duration::ZERO);
    }
}
