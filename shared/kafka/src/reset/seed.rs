//! The seed pipeline's stages and plans of them, for the tests.

use vigil_model::topology::StageTopology;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

use super::{plan, Options, Plan, StagePlan, Start};

pub(super) const SERVICES: [&str; 6] =
    ["join-enrich", "payment-metrics", "payment-anomalies", "device-router", "device-analytics", "health-monitor"];

pub(super) fn seed_stages() -> Vec<StageTopology> {
    SeedPipeline::default().topology().stages
}

pub(super) fn names(stages: &[&str]) -> Vec<String> {
    stages.iter().map(|s| s.to_string()).collect()
}

pub(super) fn plan_of(stages: &[&str], options: &Options) -> Plan {
    plan(&seed_stages(), &names(stages), options).unwrap()
}

pub(super) fn stage<'a>(plan: &'a Plan, name: &str) -> &'a StagePlan {
    plan.stages.iter().find(|s| s.stage == name).unwrap()
}

pub(super) fn start(plan: &Plan, name: &str, topic: &str) -> Start {
    stage(plan, name).inputs.iter().find(|i| i.topic == topic).unwrap().start.clone()
}

pub(super) fn end(by: &[&'static str]) -> Start {
    Start::End { rewritten_by: by.to_vec() }
}
