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
use vigil_model::Config;

pub use device_analytics::DeviceAnalyticsService;
pub use device_router::DeviceRouterService;
pub use health_monitor::HealthMonitorService;
pub use join_enrich::JoinEnrichService;
pub use payment_anomalies::PaymentAnomaliesService;
pub use payment_metrics::PaymentMetricsService;

use crate::runner::{Observers, Runner};
use crate::service::{Parallelism, Service};
use crate::settings::{Common, Settings};
use crate::topics::Topic;

/// What a stage reads and writes: the job graph's vertex.
#[derive(Debug, Clone)]
pub struct StageInfo {
    pub name: &'static str,
    /// One active member over every partition (the others stand by).
    pub global: bool,
    pub inputs: Vec<Topic>,
    pub outputs: Vec<Topic>,
}

/// A stage, whatever its operator's types.
pub trait Stage: Sync {
    fn stage_name(&self) -> &'static str;
    fn info(&self, config: &Config) -> StageInfo;
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

    fn info(&self, config: &Config) -> StageInfo {
        StageInfo {
            name: self.name(),
            global: self.parallelism() == Parallelism::Global,
            inputs: self.inputs(config).iter().map(|i| i.topic).collect(),
            outputs: self.outputs(),
        }
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

/// The job graph: every stage with its topics.
pub fn topology(config: &Config) -> Vec<StageInfo> {
    STAGES.iter().map(|s| s.info(config)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::SERVICES;

    #[test]
    fn every_service_is_a_stage_and_the_graph_connects() {
        let graph = topology(&Config::default());
        let names: Vec<&str> = graph.iter().map(|s| s.name).collect();
        assert_eq!(names, SERVICES);
        let globals: Vec<&str> = graph.iter().filter(|s| s.global).map(|s| s.name).collect();
        assert_eq!(globals, ["payment-metrics", "health-monitor"]);
        // Every stage's input is an external source or another stage's output.
        let sources = ["orders", "payments", "device-events"];
        for stage in &graph {
            for input in &stage.inputs {
                assert!(
                    sources.contains(&input.name)
                        || graph.iter().any(|s| s.outputs.iter().any(|o| o.name == input.name)),
                    "{} reads {}, which no stage writes",
                    stage.name,
                    input.name
                );
            }
        }
        assert!(by_name("device-router").is_some() && by_name("nope").is_none());
    }
}
