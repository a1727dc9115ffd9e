//! A pipeline's stages as Kafka services: one member of a stage runs in a standalone
//! service process, or in each slot of a taskmanager. Each is its stage's definition
//! (`vigil_operators::stages`) and this runtime, nothing more.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;
use vigil_model::topology::{StageTopology, Topology};
use vigil_operators::SeedPipeline;
use vigil_stream::{Pipeline, Stage, StageVisitor};

use crate::inputs::Parallelism;
use crate::names::Names;
use crate::runner::{Observers, Runner};
use crate::settings::{Common, Settings};

/// A stage this runtime can run, whatever its operator's types.
pub trait Service: Send + Sync {
    fn topology(&self) -> StageTopology;

    fn name(&self) -> &'static str {
        self.topology().name
    }

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

/// A stage's definition as a [`Service`], and the pipeline it is part of.
struct StageService<S> {
    stage: S,
    pipeline: Arc<Topology>,
}

impl<S: Stage + Clone> Service for StageService<S> {
    fn topology(&self) -> StageTopology {
        self.stage.topology()
    }

    fn run(
        &self,
        member: &str,
        group_id: Option<String>,
        common: &Common,
        observers: Observers,
        shutdown: &AtomicBool,
    ) -> Result<()> {
        let topology = self.stage.topology();
        let names = Names::new(&common.config.topics, &self.pipeline);
        let settings = Settings::for_member(topology.name, Parallelism::of(&topology), member, group_id, common, names);
        Runner::new(self.stage.clone(), settings, observers)?.run(shutdown)
    }
}

/// Every stage of `pipeline` as a service, upstream first.
pub fn services<P: Pipeline>(pipeline: &P) -> Vec<Box<dyn Service>> {
    struct Collect(Vec<Box<dyn Service>>, Arc<Topology>);
    impl StageVisitor for Collect {
        fn visit<S: Stage + Clone>(&mut self, stage: &S) {
            self.0.push(Box::new(StageService { stage: stage.clone(), pipeline: self.1.clone() }));
        }
    }
    let mut collect = Collect(Vec::new(), Arc::new(pipeline.topology()));
    pipeline.visit_stages(&mut collect);
    collect.0
}

/// The seed pipeline's six stages, upstream first: what `vigil <stage>` and the
/// taskmanagers run.
pub fn seed_services() -> &'static [Box<dyn Service>] {
    static SERVICES: std::sync::OnceLock<Vec<Box<dyn Service>>> = std::sync::OnceLock::new();
    SERVICES.get_or_init(|| services(&SeedPipeline::default()))
}

/// The seed pipeline's stage named `name`, or the notifier.
pub fn by_name(name: &str) -> Option<&'static dyn Service> {
    static NOTIFIER: crate::notify::Notifier = crate::notify::Notifier;
    seed_services().iter().map(|s| &**s).chain([&NOTIFIER as &dyn Service]).find(|s| s.name() == name)
}

/// What a taskmanager runs by default: the seed pipeline's stages, and the notifier
/// if a channel is configured (`notify::settings`).
pub fn cluster_services() -> Vec<&'static dyn Service> {
    let notifier = (!crate::notify::settings::loaded().is_off()).then(|| by_name(crate::notify::NAME)).flatten();
    seed_services().iter().map(|s| &**s).chain(notifier).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_of_the_seed_pipeline_is_a_service() {
        let names: Vec<&str> = seed_services().iter().map(|s| s.name()).collect();
        let declared: Vec<&str> = SeedPipeline::default().topology().stages.iter().map(|s| s.name).collect();
        assert_eq!(names, declared);
        assert!(by_name("device-router").is_some() && by_name("nope").is_none());
        assert!(by_name("notifier").is_some());
    }
}
