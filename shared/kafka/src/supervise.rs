//! Keeping a stage member running through the faults a Kafka deployment meets: a
//! broker restarted or stalled, a schema registry gone for a while, a transaction
//! that timed out. A member that fails is dropped whole (its consumer, its producer,
//! its tasks) and started again after a back-off, as a restarted process would be:
//! it restores its tasks from their changelogs and reads on from the last commit, so
//! nothing is lost or doubled. While it waits it reports degraded on `/healthz` and
//! in `vigil_member_degraded`; its first commit after the restart clears that.
//!
//! A fenced producer is retried too: Kafka fences a producer whose transaction it
//! timed out as it fences one whose id another member took, and the two cannot be
//! told apart. Two instances given the same name take the id from each other in
//! turns (slowly, with the back-off, and without a record lost or doubled); their
//! logs say why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, info};

use crate::metrics::MetricsRegistry;
use crate::observe::LoopHealth;
use crate::queries::StateQueries;
use crate::runner::{Common, Observers};
use crate::services::Service;
use crate::status::{Role, SharedStatus};

/// The first wait before a failed member starts again; it doubles up to the maximum,
/// and starts over once a member has run for a while.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// The wait after a run of `ran` that followed a wait of `last`.
pub fn next_backoff(last: Duration, ran: Duration) -> Duration {
    if ran >= HEALTHY_RUN {
        FIRST_BACKOFF
    } else {
        (last * 2).min(MAX_BACKOFF)
    }
}

/// One member of one stage, started again whenever it fails.
pub struct Supervisor {
    pub service: &'static dyn Service,
    pub member: String,
    pub group_id: Option<String>,
    pub common: Common,
    pub registry: Arc<MetricsRegistry>,
    pub status: SharedStatus,
    pub loop_health: LoopHealth,
    /// Where the process's `/state/…` queries reach the member.
    pub queries: Arc<StateQueries>,
    pub shutdown: Arc<AtomicBool>,
}

impl Supervisor {
    /// Runs the member until shutdown.
    pub fn run(self) {
        let name = self.service.name();
        let metrics = self.registry.member(name, &self.member);
        let inbox = self.queries.inbox(name);
        let mut backoff = FIRST_BACKOFF;
        while !self.shutdown.load(Ordering::SeqCst) {
            let observers = Observers {
                metrics: metrics.clone(),
                status: self.status.clone(),
                loop_health: self.loop_health.clone(),
                queries: inbox.clone(),
            };
            let started = Instant::now();
            let result = self.service.run(&self.member, self.group_id.clone(), &self.common, observers, &self.shutdown);
            let Err(e) = result else { break };
            let reason = format!("{e:#}");
            error!(stage = name, member = %self.member, "member failed: {reason}; starting it again in {backoff:?}");
            {
                let mut status = self.status.lock().expect("status");
                status.role = Role::Failed;
                status.tasks.clear();
                status.error = Some(reason.clone());
            }
            self.loop_health.degraded(format!("{reason}; retrying"));
            metrics.degraded.set(1);
            self.registry.restarted(name);
            self.wait(backoff);
            backoff = next_backoff(backoff, started.elapsed());
            self.status.lock().expect("status").error = None;
            info!(stage = name, member = %self.member, "starting the member again");
        }
    }

    /// Sleeps, still going round (a member waiting to start again is not stalled), and
    /// wakes early on shutdown.
    fn wait(&self, period: Duration) {
        let until = Instant::now() + period;
        while Instant::now() < until && !self.shutdown.load(Ordering::SeqCst) {
            self.loop_health.went_round();
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_a_ceiling_and_starts_over_after_a_healthy_run() {
        let quick = Duration::from_secs(2);
        let mut waits = vec![FIRST_BACKOFF];
        for _ in 0..6 {
            waits.push(next_backoff(*waits.last().unwrap(), quick));
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(next_backoff(MAX_BACKOFF, HEALTHY_RUN), FIRST_BACKOFF);
    }
}
