//! The six stages as Kafka services: each one's topics, its operator, and how its
//! records map to Avro. A standalone service binary runs one member of one stage; a
//! taskmanager runs a member of every stage in each of its slots.

mod device_analytics;
mod device_router;
mod health_monitor;
mod join_enrich;
mod payment_anomalies;
mod payment_metrics;

use std::sync::atomic::AtomicBool;

use anyhow::Result;

pub use device_analytics::DeviceAnalyticsService;
pub use device_router::DeviceRouterService;
pub use health_monitor::HealthMonitorService;
pub use join_enrich::JoinEnrichService;
pub use payment_anomalies::PaymentAnomaliesService;
pub use payment_metrics::PaymentMetricsService;

use crate::runner::{Observers, Runner};
use crate::service::Service;
use crate::settings::{Common, Settings};
use crate::topics::Topic;

/// A stage's place in the job graph, as the topology declares it: what it reads and
/// writes.
#[derive(Debug, Clone)]
pub struct StageInfo {
    pub name: &'static str,
    /// One active member over every partition (the others stand by).
    pub global: bool,
    pub inputs: Vec<Topic>,
    pub outputs: Vec<Topic>,
}

/// The job graph: every declared stage with its topics.
pub fn topology() -> Vec<StageInfo> {
    vigil_model::topology::STAGES
        .iter()
        .map(|s| StageInfo {
            name: s.name,
            global: s.global,
            inputs: s.inputs.iter().map(|(t, _)| *t).collect(),
            outputs: s.outputs.to_vec(),
        })
        .collect()
}

/// A stage, whatever its operator's types.
pub trait Stage: Sync {
    fn stage_name(&self) -> &'static str;
    /// Runs one member of the stage until `shutdown`.
    fn run(
        &self,
        member: &str,
        group_id: Option<String>,
        common: &Common,
        observers: Observers,
        shutdown: &AtomicBool,
    ) -> Result<()>;
}

impl<S: Service + Copy + Sync> Stage for S {
    fn stage_name(&self) -> &'static str {
        self.name()
    }

    fn run(
        &self,
        member: &str,
        group_id: Option<String>,
        common: &Common,
        observers: Observers,
        shutdown: &AtomicBool,
    ) -> Result<()> {
        let settings = Settings::for_member(self.name(), self.parallelism(), member, group_id, common);
        Runner::new(*self, settings, observers)?.run(shutdown)
    }
}

/// Every stage, upstream first.
pub static STAGES: [&dyn Stage; 6] = [
    &JoinEnrichService,
    &PaymentMetricsService,
    &PaymentAnomaliesService,
    &DeviceRouterService,
    &DeviceAnalyticsService,
    &HealthMonitorService,
];

pub fn by_name(name: &str) -> Option<&'static dyn Stage> {
    STAGES.iter().copied().find(|s| s.stage_name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::SERVICES;

    #[test]
    fn every_declared_stage_is_a_service() {
        let names: Vec<&str> = STAGES.iter().map(|s| s.stage_name()).collect();
        assert_eq!(names, SERVICES);
        assert!(by_name("device-router").is_some() && by_name("nope").is_none());
    }
}
