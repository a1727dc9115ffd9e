//! What a reset does, decided from the job graph alone: for each stage, its groups,
//! its internal topics and where it starts each input.

use vigil_model::topology::{self, StageTopology};

use super::warnings::{half_reset_inputs, readers_left_out};
use crate::election::election_group;

/// The consumer group of each stage unless told otherwise; `{stage}` stands for the
/// stage's name (the services' default for `VIGIL_GROUP_ID`).
pub const DEFAULT_GROUP: &str = "vigil-{stage}";
const STAGE: &str = "{stage}";

/// What to reset and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Consumer group of each stage; `{stage}` is replaced by the stage's name.
    pub group_id: String,
    /// Start every input at its end instead of its beginning.
    pub to_latest: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { group_id: DEFAULT_GROUP.to_string(), to_latest: false }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("name the stages to reset, or reset every one with --all")]
    NoStage,
    #[error("`{0}` is not a stage; the stages are {1}")]
    UnknownStage(String, String),
    #[error(
        "--group-id `{0}` would give every stage the same consumer group; put `{{stage}}` in it \
         (e.g. `{0}-{{stage}}`), or reset one stage at a time"
    )]
    SharedGroup(String),
}

/// Where a reset stage starts reading an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    Beginning,
    /// At the end: the stages listed write the topic again (empty with `to_latest`).
    End {
        rewritten_by: Vec<&'static str>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputStart {
    pub topic: &'static str,
    pub start: Start,
}

/// One stage's reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    pub stage: &'static str,
    pub group: String,
    /// The group a global stage's members elect their leader in.
    pub election_group: Option<String>,
    /// Its changelog (its state), then its repartition topics (its re-keyed records).
    pub internal_topics: Vec<String>,
    pub inputs: Vec<InputStart>,
}

impl StagePlan {
    /// Every group a running member of the stage belongs to.
    pub fn groups(&self) -> Vec<&str> {
        std::iter::once(self.group.as_str()).chain(self.election_group.as_deref()).collect()
    }
}

/// What a reset does, stage by stage, and what it cannot make clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub stages: Vec<StagePlan>,
    /// Stages left out whose inputs or outputs the reset affects: said, not refused.
    pub warnings: Vec<String>,
}

/// The stage names given on the command line, checked against the graph, in the
/// graph's order (upstream first), each once.
pub fn select<'a>(graph: &'a [StageTopology], names: &[String]) -> Result<Vec<&'a StageTopology>, PlanError> {
    if names.is_empty() {
        return Err(PlanError::NoStage);
    }
    if let Some(unknown) = names.iter().find(|n| !graph.iter().any(|s| s.name == n.as_str())) {
        let known: Vec<&str> = graph.iter().map(|s| s.name).collect();
        return Err(PlanError::UnknownStage(unknown.clone(), known.join(", ")));
    }
    Ok(graph.iter().filter(|s| names.iter().any(|n| n == s.name)).collect())
}

/// What resetting `names` does, given the job graph.
pub fn plan(graph: &[StageTopology], names: &[String], options: &Options) -> Result<Plan, PlanError> {
    let selected = select(graph, names)?;
    if selected.len() > 1 && !options.group_id.contains(STAGE) {
        return Err(PlanError::SharedGroup(options.group_id.clone()));
    }
    let is_reset = |name: &str| selected.iter().any(|s| s.name == name);
    let stages = selected
        .iter()
        .map(|stage| {
            let group = options.group_id.replace(STAGE, stage.name);
            StagePlan {
                stage: stage.name,
                election_group: stage.global.then(|| election_group(&group)),
                group,
                internal_topics: internal_topics(stage),
                inputs: stage
                    .inputs
                    .iter()
                    .map(|(t, _)| InputStart {
                        topic: t.name,
                        start: start_of(graph, t.name, &is_reset, options.to_latest),
                    })
                    .collect(),
            }
        })
        .collect();
    let warnings = half_reset_inputs(graph, &selected, &is_reset)
        .into_iter()
        .chain(readers_left_out(graph, &is_reset, options.to_latest))
        .collect();
    Ok(Plan { stages, warnings })
}

/// The topics only `stage` writes and reads: its changelog, and a repartition topic
/// for each source input (as `topics::all_topics` provisions them).
fn internal_topics(stage: &StageTopology) -> Vec<String> {
    let repartitions = topology::repartitions(stage).map(|(_, name)| name);
    std::iter::once(topology::changelog(stage.name)).chain(repartitions).collect()
}

/// The stages that write `topic` (none for a topic users write).
pub(super) fn writers<'a>(graph: &'a [StageTopology], topic: &str) -> Vec<&'a StageTopology> {
    graph.iter().filter(|s| s.outputs.iter().any(|o| o.name == topic)).collect()
}

fn start_of(graph: &[StageTopology], topic: &str, is_reset: &impl Fn(&str) -> bool, to_latest: bool) -> Start {
    let writers = writers(graph, topic);
    if to_latest {
        Start::End { rewritten_by: Vec::new() }
    } else if !writers.is_empty() && writers.iter().all(|w| is_reset(w.name)) {
        Start::End { rewritten_by: writers.iter().map(|w| w.name).collect() }
    } else {
        Start::Beginning
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reset::seed::{end, names, plan_of, seed_stages, stage, start, SERVICES};
    use crate::reset::Action;

    #[test]
    fn all_stages_replay_the_sources_and_skip_what_the_old_run_wrote_between_stages() {
        let plan = plan_of(&SERVICES, &Options::default());
        assert!(plan.warnings.is_empty(), "{:#?}", plan.warnings);
        let order: Vec<&str> = plan.stages.iter().map(|s| s.stage).collect();
        assert_eq!(order, SERVICES);
        assert_eq!(start(&plan, "join-enrich", "orders"), Start::Beginning);
        assert_eq!(start(&plan, "join-enrich", "payments"), Start::Beginning);
        assert_eq!(start(&plan, "device-router", "device-events"), Start::Beginning);
        assert_eq!(start(&plan, "payment-metrics", "enriched-payments"), end(&["join-enrich"]));
        assert_eq!(start(&plan, "payment-anomalies", "enriched-payments"), end(&["join-enrich"]));
        assert_eq!(start(&plan, "device-analytics", "device-events-ontime"), end(&["device-router"]));
        assert_eq!(
            start(&plan, "health-monitor", "device-events-late"),
            end(&["device-router", "device-analytics"]),
            "both writers are reset"
        );
        let lines: Vec<String> = plan.actions().iter().map(Action::to_string).collect();
        assert!(lines.contains(
            &"health-monitor: commit group vigil-health-monitor at the end of device-events-late (device-router, \
              device-analytics write it again)"
                .to_string()
        ));
    }

    #[test]
    fn groups_changelogs_and_elections_follow_the_services_names() {
        let plan = plan_of(&SERVICES, &Options::default());
        let join = stage(&plan, "join-enrich");
        assert_eq!(join.group, "vigil-join-enrich");
        assert_eq!(
            join.internal_topics,
            ["join-enrich-changelog", "join-enrich-repartition-orders", "join-enrich-repartition-payments"]
        );
        assert_eq!(stage(&plan, "payment-anomalies").internal_topics, ["payment-anomalies-changelog"]);
        assert_eq!(join.groups(), ["vigil-join-enrich"]);
        let metrics = stage(&plan, "payment-metrics");
        assert_eq!(metrics.groups(), ["vigil-payment-metrics", "vigil-payment-metrics-leader"]);
        let elected: Vec<&str> = plan.stages.iter().filter(|s| s.election_group.is_some()).map(|s| s.stage).collect();
        assert_eq!(elected, ["payment-metrics", "health-monitor"]);
    }

    #[test]
    fn a_group_pattern_names_every_stages_group_and_a_fixed_name_serves_one_stage_only() {
        let options = Options { group_id: "vigil-{stage}-run7".into(), ..Options::default() };
        let two = plan_of(&["health-monitor", "join-enrich"], &options);
        assert_eq!(
            stage(&two, "health-monitor").groups(),
            ["vigil-health-monitor-run7", "vigil-health-monitor-run7-leader"]
        );
        assert_eq!(stage(&two, "join-enrich").group, "vigil-join-enrich-run7");
        let fixed = Options { group_id: "mine".into(), ..Options::default() };
        assert_eq!(plan_of(&["payment-metrics"], &fixed).stages[0].groups(), ["mine", "mine-leader"]);
        let err = plan(&seed_stages(), &names(&["join-enrich", "device-router"]), &fixed).unwrap_err();
        assert_eq!(err, PlanError::SharedGroup("mine".into()));
        assert!(err.to_string().contains("{stage}"), "{err}");
    }

    #[test]
    fn stages_come_upstream_first_once_each_and_unknown_names_are_refused() {
        let twice = plan_of(&["health-monitor", "join-enrich", "health-monitor"], &Options::default());
        let order: Vec<&str> = twice.stages.iter().map(|s| s.stage).collect();
        assert_eq!(order, ["join-enrich", "health-monitor"]);
        let err = plan(&seed_stages(), &names(&["join"]), &Options::default()).unwrap_err();
        assert!(matches!(&err, PlanError::UnknownStage(n, _) if n == "join"));
        assert!(err.to_string().contains("join-enrich, payment-metrics"), "{err}");
        assert_eq!(plan(&seed_stages(), &[], &Options::default()).unwrap_err(), PlanError::NoStage);
    }

    #[test]
    fn a_stage_reset_alone_reads_again_what_its_upstream_wrote() {
        let plan = plan_of(&["payment-anomalies"], &Options::default());
        assert_eq!(start(&plan, "payment-anomalies", "enriched-payments"), Start::Beginning);
        assert!(plan.warnings.is_empty(), "nobody reads its outputs: {:#?}", plan.warnings);
        let actions = plan.actions();
        assert!(!actions.iter().any(|a| matches!(a, Action::CommitAtEnd { .. })));
    }

    #[test]
    fn to_latest_starts_every_input_at_its_end() {
        let options = Options { to_latest: true, ..Options::default() };
        let plan = plan_of(&SERVICES, &options);
        for s in &plan.stages {
            assert!(s.inputs.iter().all(|i| i.start == end(&[])), "{s:#?}");
        }
        let join = plan.actions().into_iter().find(|a| matches!(a, Action::CommitAtEnd { topic: "orders", .. }));
        assert_eq!(
            join.unwrap().to_string(),
            "join-enrich: commit group vigil-join-enrich at the end of orders (--to-latest)"
        );
        let alone = plan_of(&["device-router"], &options);
        assert!(alone.warnings.iter().all(|w| w.contains("keeps its old state")), "{:#?}", alone.warnings);
    }
}
