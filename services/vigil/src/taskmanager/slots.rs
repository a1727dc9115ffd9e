//! The members a taskmanager runs: one per stage per slot, each on a thread of its own
//! and started again after a back-off when it fails.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::Context as _;
use vigil_kafka::metrics::MetricsRegistry;
use vigil_kafka::observe::Health;
use vigil_kafka::queries::StateQueries;
use vigil_kafka::runner::Common;
use vigil_kafka::services::Service;
use vigil_kafka::status::{MemberStatus, SharedStatus};
use vigil_kafka::supervise::Supervisor;

/// What the members share with their process: its metrics, health, state queries and
/// shutdown flag.
pub struct Process {
    pub registry: Arc<MetricsRegistry>,
    pub health: Arc<Health>,
    pub queries: Arc<StateQueries>,
    pub shutdown: Arc<AtomicBool>,
}

pub struct Slots {
    members: Vec<(SharedStatus, JoinHandle<()>)>,
}

impl Slots {
    pub fn start(
        taskmanager: &str,
        slots: u32,
        stages: &[&'static dyn Service],
        common: &Common,
        process: &Process,
    ) -> anyhow::Result<Slots> {
        let Process { registry, health, queries, shutdown } = process;
        let mut members = Vec::new();
        for slot in 0..slots {
            let member = format!("{taskmanager}-{slot}");
            for &stage in stages {
                let name = stage.name();
                let status = Arc::new(Mutex::new(MemberStatus::new(name, &member)));
                let supervisor = Supervisor {
                    service: stage,
                    member: member.clone(),
                    group_id: None,
                    common: common.clone(),
                    registry: registry.clone(),
                    status: status.clone(),
                    loop_health: health.watch(&format!("{name}/{member}")),
                    queries: queries.clone(),
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
