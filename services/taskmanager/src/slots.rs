//! The members a taskmanager runs: one per stage per slot, each on a thread of its own
//! and started again after a back-off when it fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tracing::{error, info};
use vigil_kafka::metrics::MetricsRegistry;
use vigil_kafka::observe::{Beat, Health};
use vigil_kafka::runner::{Common, Observers};
use vigil_kafka::stages::Stage;
use vigil_kafka::status::{MemberStatus, Role, SharedStatus};

/// The first wait before a failed member starts again; it doubles up to the maximum,
/// and starts over once a member has run for a while.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const HEALTHY_RUN: Duration = Duration::from_secs(60);

pub struct Slots {
    members: Vec<(SharedStatus, JoinHandle<()>)>,
}

impl Slots {
    pub fn start(
        taskmanager: &str,
        slots: u32,
        stages: &[&'static dyn Stage],
        common: &Common,
        registry: &Arc<MetricsRegistry>,
        health: &Health,
        shutdown: &Arc<AtomicBool>,
    ) -> anyhow::Result<Slots> {
        let mut members = Vec::new();
        for slot in 0..slots {
            let member = format!("{taskmanager}-{slot}");
            for &stage in stages {
                let name = stage.stage_name();
                let status = Arc::new(Mutex::new(MemberStatus::new(name, &member)));
                let supervisor = Supervisor {
                    stage,
                    member: member.clone(),
                    common: common.clone(),
                    registry: registry.clone(),
                    status: status.clone(),
                    beat: health.watch(&format!("{name}/{member}")),
                    shutdown: shutdown.clone(),
                };
                let thread = std::thread::Builder::new()
                    .name(format!("{name}-{slot}"))
                    .spawn(move || supervisor.run())
                    .context("cannot start a member thread")?;
                members.push((status, thread));
            }
        }
        Ok(Slots { members })
    }

    pub fn statuses(&self) -> Vec<MemberStatus> {
        self.members.iter().map(|(status, _)| status.lock().expect("status").clone()).collect()
    }

    /// Waits for every member to finish (after shutdown).
    pub fn join(self) {
        for (_, thread) in self.members {
            let _ = thread.join();
        }
    }
}

struct Supervisor {
    stage: &'static dyn Stage,
    member: String,
    common: Common,
    registry: Arc<MetricsRegistry>,
    status: SharedStatus,
    beat: Beat,
    shutdown: Arc<AtomicBool>,
}

impl Supervisor {
    fn run(self) {
        let name = self.stage.stage_name();
        let mut backoff = FIRST_BACKOFF;
        while !self.shutdown.load(Ordering::SeqCst) {
            let observers = Observers {
                metrics: self.registry.member(name, &self.member),
                status: self.status.clone(),
                beat: self.beat.clone(),
            };
            let started = Instant::now();
            let result = self.stage.run(&self.member, None, &self.common, observers, &self.shutdown);
            let Err(e) = result else { break };
            error!(stage = name, member = %self.member, "member failed: {e:#}; starting it again in {backoff:?}");
            {
                let mut status = self.status.lock().expect("status");
                status.role = Role::Failed;
                status.tasks.clear();
                status.error = Some(format!("{e:#}"));
            }
            self.registry.restarted(name);
            self.wait(backoff);
            backoff = if started.elapsed() >= HEALTHY_RUN { FIRST_BACKOFF } else { (backoff * 2).min(MAX_BACKOFF) };
            self.status.lock().expect("status").error = None;
            info!(stage = name, member = %self.member, "starting the member again");
        }
    }

    /// Sleeps, still beating (a member waiting to start again is not stalled), and
    /// wakes early on shutdown.
    fn wait(&self, period: Duration) {
        let until = Instant::now() + period;
        while Instant::now() < until && !self.shutdown.load(Ordering::SeqCst) {
            self.beat.beat();
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
