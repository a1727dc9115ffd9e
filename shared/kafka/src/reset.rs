//! Reprocessing on purpose, as Kafka Streams' `kafka-streams-application-reset`.
//!
//! A stage's progress lives in two places: the input offsets its consumer group
//! committed, and its internal topics: its state (windows, join buffers, watermarks)
//! in its compacted changelog, and the source records it re-keyed in its repartition
//! topics. Both outlive the stage's processes, which is what makes restarts
//! exactly-once — and what makes a second run continue where the first one ended:
//! after an end-of-input marker every watermark sits at the end of time, so whatever
//! comes next is late. A reset forgets both (the internal topics are deleted and
//! created again empty, as Kafka Streams does), so the stage's next start processes
//! its inputs again from the beginning with empty state.
//!
//! Where a reset stage starts each input:
//! - a topic users write (orders, payments, device-events): the beginning;
//! - a topic other stages write: the beginning too, unless every stage writing it is
//!   reset as well: they write it again, so the stage skips to its end (what it holds
//!   is the old run's output, ending in the old run's watermark markers);
//! - everything at its end with `to_latest`: forget the past, process only what is
//!   produced from now on (a new dataset after one that ended).
//!
//! Input and output topics are never touched: records already written stay, and a
//! replay appends its records after them.
//!
//! [`plan`] decides, without I/O, what to check and what to do (unit-tested here);
//! [`Admin`] checks and does it against a broker.

use crate::connection;
use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use vigil_model::topology::{self, StageTopology, Topology};

use crate::election::election_group;

use crate::topics::{self, Provisioned};

/// The consumer group of each stage unless told otherwise; `{stage}` stands for the
/// stage's name (the services' default for `VIGIL_GROUP_ID`).
pub const DEFAULT_GROUP: &str = "vigil-{stage}";
const STAGE: &str = "{stage}";

const TIMEOUT: Duration = Duration::from_secs(30);

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

    fn inputs_at_beginning(&self) -> Vec<&'static str> {
        self.inputs.iter().filter(|i| i.start == Start::Beginning).map(|i| i.topic).collect()
    }
}

/// What a reset does, stage by stage, and what it cannot make clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub stages: Vec<StagePlan>,
    /// Stages left out whose inputs or outputs the reset affects: said, not refused.
    pub warnings: Vec<String>,
}

/// One change a reset makes, in the order [`Plan::actions`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Forget a group's committed offsets (and its members' history).
    DeleteGroup { stage: &'static str, group: String, role: GroupRole },
    /// Commit `group`'s offsets at the current end of `topic`, so it skips what the
    /// topic holds.
    CommitAtEnd { stage: &'static str, group: String, topic: &'static str, rewritten_by: Vec<&'static str> },
    /// Forget one of the stage's internal topics.
    DeleteTopic { stage: &'static str, topic: String },
    /// The internal topics back, empty, exactly as `vigil provision` creates them.
    CreateTopics { topics: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRole {
    /// The stage's consumer group; the inputs listed are then read from the beginning.
    Consumer { from_beginning: Vec<&'static str> },
    /// A global stage's election: no offsets, but a member in it is a running one.
    Election,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::DeleteGroup { stage, group, role: GroupRole::Consumer { from_beginning } } => {
                write!(f, "{stage}: delete consumer group {group} (its committed offsets")?;
                if !from_beginning.is_empty() {
                    write!(f, "; reads {} from the beginning", from_beginning.join(", "))?;
                }
                write!(f, ")")
            }
            Action::DeleteGroup { stage, group, role: GroupRole::Election } => {
                write!(f, "{stage}: delete election group {group}")
            }
            Action::CommitAtEnd { stage, group, topic, rewritten_by } if rewritten_by.is_empty() => {
                write!(f, "{stage}: commit group {group} at the end of {topic} (--to-latest)")
            }
            Action::CommitAtEnd { stage, group, topic, rewritten_by } => {
                let (writers, verb) = (rewritten_by.join(", "), verb_for("write", rewritten_by.len()));
                write!(f, "{stage}: commit group {group} at the end of {topic} ({writers} {verb} it again)")
            }
            Action::DeleteTopic { stage, topic } if *topic == topology::changelog(stage) => {
                write!(f, "{stage}: delete topic {topic} (its state)")
            }
            Action::DeleteTopic { stage, topic } => write!(f, "{stage}: delete topic {topic} (its re-keyed records)"),
            Action::CreateTopics { topics } => {
                write!(f, "create topic {} again, empty, as provision does", topics.join(", "))
            }
        }
    }
}

impl Plan {
    /// The changes, stage by stage in the order given, then the internal topics
    /// created again all at once (a deleted topic takes a moment to go).
    pub fn actions(&self) -> Vec<Action> {
        let mut actions = Vec::new();
        for s in &self.stages {
            let role = GroupRole::Consumer { from_beginning: s.inputs_at_beginning() };
            actions.push(Action::DeleteGroup { stage: s.stage, group: s.group.clone(), role });
            if let Some(election) = &s.election_group {
                actions.push(Action::DeleteGroup {
                    stage: s.stage,
                    group: election.clone(),
                    role: GroupRole::Election,
                });
            }
            for input in &s.inputs {
                if let Start::End { rewritten_by } = &input.start {
                    actions.push(Action::CommitAtEnd {
                        stage: s.stage,
                        group: s.group.clone(),
                        topic: input.topic,
                        rewritten_by: rewritten_by.clone(),
                    });
                }
            }
            for topic in &s.internal_topics {
                actions.push(Action::DeleteTopic { stage: s.stage, topic: topic.clone() });
            }
        }
        let internal = self.stages.iter().flat_map(|s| s.internal_topics.iter().cloned()).collect();
        actions.push(Action::CreateTopics { topics: internal });
        actions
    }
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
        .chain(readers_left_out(graph, &selected, &is_reset, options.to_latest))
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
fn writers<'a>(graph: &'a [StageTopology], topic: &str) -> Vec<&'a StageTopology> {
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

/// An input some but not all of whose writers are reset cannot be replayed cleanly:
/// read from the beginning, the reset writers' records come twice.
fn half_reset_inputs(
    graph: &[StageTopology],
    selected: &[&StageTopology],
    is_reset: &impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for stage in selected {
        for (input, _) in stage.inputs {
            let (reset, kept): (Vec<&str>, Vec<&str>) =
                writers(graph, input.name).iter().map(|w| w.name).partition(|w| is_reset(w));
            if !reset.is_empty() && !kept.is_empty() {
                warnings.push(format!(
                    "{} reads {} again from the beginning, because {} (not reset) wrote to it too; what {} \
                     wrote there before comes to it twice: reset {} as well for a clean replay",
                    stage.name,
                    input.name,
                    kept.join(", "),
                    reset.join(", "),
                    kept.join(", ")
                ));
            }
        }
    }
    warnings
}

/// A stage left out that reads a reset stage's output sees the replay on top of its
/// old state and position.
fn readers_left_out(
    graph: &[StageTopology],
    selected: &[&StageTopology],
    is_reset: &impl Fn(&str) -> bool,
    to_latest: bool,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for reader in graph.iter().filter(|s| !is_reset(s.name)) {
        for (input, _) in reader.inputs {
            let reset_writers: Vec<&str> =
                selected.iter().filter(|w| w.outputs.iter().any(|o| o.name == input.name)).map(|w| w.name).collect();
            if reset_writers.is_empty() {
                continue;
            }
            let they = if reset_writers.len() == 1 { "it" } else { "they" };
            let write = verb_for("write", reset_writers.len());
            let effect = if to_latest {
                format!("keeps its old state for what {they} {write} next")
            } else {
                format!("sees what {they} {write} again a second time")
            };
            warnings.push(format!(
                "{} is not reset but reads {}, which {} {write}: it {effect}; reset it too (--all resets every stage)",
                reader.name,
                input.name,
                reset_writers.join(", "),
            ));
        }
    }
    warnings
}

/// `verb` agreeing with `n` subjects: "writes" for one, "write" for more.
fn verb_for(verb: &str, n: usize) -> String {
    if n == 1 {
        format!("{verb}s")
    } else {
        verb.to_string()
    }
}

/// A stage that still has members: what [`Admin::ensure_stopped`] refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    pub stage: &'static str,
    pub group: String,
    /// `client id on host` of each member.
    pub members: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot reset a running stage: {}. Stop every instance of {} (or the taskmanagers running them) first, \
     then reset again; a member stopped a moment ago stays listed until its session expires (10 s)",
    describe(.0),
    stage_names(.0)
)]
pub struct Running(pub Vec<Busy>);

fn describe(busy: &[Busy]) -> String {
    let each = busy.iter().map(|b| {
        let n = b.members.len();
        format!(
            "{} has {n} member{} in group {} ({})",
            b.stage,
            if n == 1 { "" } else { "s" },
            b.group,
            b.members.join(", ")
        )
    });
    each.collect::<Vec<_>>().join("; ")
}

fn stage_names(busy: &[Busy]) -> String {
    let mut stages: Vec<&str> = busy.iter().map(|b| b.stage).collect();
    stages.dedup();
    stages.join(", ")
}

/// How the internal topics are created again.
#[derive(Debug, Clone, Copy)]
pub struct Recreate {
    pub partitions: u32,
    /// Replication factor; `None`: the one the deleted topics had (else 1).
    pub replication: Option<i32>,
}

/// A plan carried out against a broker.
pub struct Admin {
    bootstrap_servers: String,
    admin: AdminClient<DefaultClientContext>,
    /// For metadata, groups and offsets only: it joins no group.
    client: BaseConsumer,
    runtime: tokio::runtime::Runtime,
    /// The largest replication factor of the topics deleted so far.
    replication_seen: Option<i32>,
    /// The pipeline whose topics provisioning creates again.
    topology: Topology,
}

impl Admin {
    pub fn connect(bootstrap_servers: &str, topology: Topology) -> Result<Admin> {
        let admin =
            connection::client_config(bootstrap_servers).create().context("cannot create the Kafka admin client")?;
        let client = connection::client_config(bootstrap_servers)
            // Never joined nor committed to; librdkafka wants one to list groups.
            .set("group.id", format!("vigil-admin-reset-{}", std::process::id()))
            .set("enable.auto.commit", "false")
            .create()
            .context("cannot create a Kafka client")?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("a tokio runtime")?;
        let bootstrap_servers = bootstrap_servers.to_string();
        Ok(Admin { bootstrap_servers, admin, client, runtime, replication_seen: None, topology })
    }

    /// The members of `group` (`client id on host`); none if the group does not exist.
    pub fn members(&self, group: &str) -> Result<Vec<String>> {
        let list = self
            .client
            .fetch_group_list(Some(group), TIMEOUT)
            .with_context(|| format!("cannot describe consumer group `{group}`"))?;
        let members = list.groups().iter().filter(|g| g.name() == group).flat_map(|g| g.members());
        Ok(members.map(|m| format!("{} on {}", m.client_id(), m.client_host().trim_start_matches('/'))).collect())
    }

    /// One line per group checked; [`Running`] if any stage of the plan has a member.
    pub fn ensure_stopped(&self, plan: &Plan) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        let mut busy = Vec::new();
        for stage in &plan.stages {
            for group in stage.groups() {
                let members = self.members(group)?;
                if members.is_empty() {
                    lines.push(format!("{}: group {group} has no member", stage.stage));
                } else {
                    busy.push(Busy { stage: stage.stage, group: group.to_string(), members });
                }
            }
        }
        if busy.is_empty() {
            Ok(lines)
        } else {
            Err(Running(busy).into())
        }
    }

    /// Does one action and says how it went.
    pub fn apply(&mut self, action: &Action, recreate: Recreate) -> Result<String> {
        match action {
            Action::DeleteGroup { group, .. } => self.delete_group(group),
            Action::CommitAtEnd { group, topic, .. } => self.commit_at_end(group, topic),
            Action::DeleteTopic { topic, .. } => self.delete_topic(topic),
            Action::CreateTopics { topics } => self.create_topics(topics, recreate),
        }
    }

    fn delete_group(&self, group: &str) -> Result<String> {
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = self
            .runtime
            .block_on(self.admin.delete_groups(&[group], &options))
            .with_context(|| format!("cannot delete consumer group `{group}`"))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok("deleted".into()),
            Some(Err((_, RDKafkaErrorCode::GroupIdNotFound))) => Ok("there was none".into()),
            // A member joined between the check and now.
            Some(Err((_, RDKafkaErrorCode::NonEmptyGroup))) => {
                bail!("consumer group `{group}` has members again: stop the stage's instances, then reset again")
            }
            Some(Err((_, code))) => bail!("cannot delete consumer group `{group}`: {code}"),
            None => bail!("the broker did not answer the deletion of consumer group `{group}`"),
        }
    }

    /// Commits `group`'s offsets at the high watermark of every partition of `topic`
    /// (not the last stable offset: an old run's transaction left open must be
    /// skipped too), without joining the group.
    fn commit_at_end(&self, group: &str, topic: &str) -> Result<String> {
        let partitions = topics::partition_count(&self.client, topic)? as i32;
        if partitions == 0 {
            bail!("topic `{topic}` does not exist; run `vigil provision` first");
        }
        let mut offsets = TopicPartitionList::new();
        let mut skipped = 0;
        for p in 0..partitions {
            let (low, high) = self
                .client
                .fetch_watermarks(topic, p, TIMEOUT)
                .with_context(|| format!("cannot read the end offsets of `{topic}`"))?;
            offsets.add_partition_offset(topic, p, Offset::Offset(high))?;
            skipped += high - low;
        }
        let committer: BaseConsumer = connection::client_config(&self.bootstrap_servers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .context("cannot create a Kafka client")?;
        committer
            .commit(&offsets, CommitMode::Sync)
            .with_context(|| format!("cannot commit the offsets of consumer group `{group}`"))?;
        Ok(format!("done: {skipped} records skipped in {partitions} partitions"))
    }

    fn delete_topic(&mut self, topic: &str) -> Result<String> {
        let Some(replication) = self.replication_of(topic)? else { return Ok("there was none".into()) };
        self.replication_seen = self.replication_seen.max(Some(replication));
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = self
            .runtime
            .block_on(self.admin.delete_topics(&[topic], &options))
            .with_context(|| format!("cannot delete topic `{topic}`"))?;
        match results.into_iter().next() {
            Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::UnknownTopicOrPartition))) => {}
            Some(Err((_, code))) => bail!("cannot delete topic `{topic}`: {code}"),
            None => bail!("the broker did not answer the deletion of topic `{topic}`"),
        }
        // Deletion is asynchronous; the name is free again once the metadata drops it.
        let deadline = Instant::now() + TIMEOUT;
        while topics::partition_count(&self.client, topic)? > 0 {
            if Instant::now() > deadline {
                bail!("topic `{topic}` is still there {TIMEOUT:?} after its deletion; run the reset again");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok("deleted".into())
    }

    /// The replication factor of `topic`, `None` if it does not exist.
    fn replication_of(&self, topic: &str) -> Result<Option<i32>> {
        let metadata = self
            .client
            .fetch_metadata(Some(topic), TIMEOUT)
            .with_context(|| format!("cannot read the metadata of `{topic}`"))?;
        let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none());
        Ok(found.and_then(|t| t.partitions().first()).map(|p| p.replicas().len() as i32))
    }

    /// Provisioning creates every missing topic, the deleted ones among them, with the
    /// same settings as `vigil provision`.
    fn create_topics(&self, internal: &[String], recreate: Recreate) -> Result<String> {
        let replication = recreate.replication.or(self.replication_seen).unwrap_or(1);
        let report = topics::provision(&self.admin, &self.client, &self.topology, recreate.partitions, replication)?;
        let created: Vec<&str> =
            report.iter().filter(|(_, p)| *p == Provisioned::Created).map(|(t, _)| t.as_str()).collect();
        let missing: Vec<&str> = internal.iter().map(String::as_str).filter(|c| !created.contains(c)).collect();
        if !missing.is_empty() {
            // Still there: the deletion has not gone through, and the old state with it.
            bail!("topic {} was not created again; run the reset again", missing.join(", "));
        }
        let others: Vec<&str> = created.iter().copied().filter(|t| !internal.iter().any(|c| c == t)).collect();
        let mut outcome = format!("created ({} partitions, replication {replication})", recreate.partitions);
        if !others.is_empty() {
            outcome.push_str(&format!("; also created missing topic {}", others.join(", ")));
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use vigil_operators::SeedPipeline;
    use vigil_stream::Pipeline;

    use super::*;

    const SERVICES: [&str; 6] =
        ["join-enrich", "payment-metrics", "payment-anomalies", "device-router", "device-analytics", "health-monitor"];

    fn seed_stages() -> Vec<StageTopology> {
        SeedPipeline::default().topology().stages
    }

    fn names(stages: &[&str]) -> Vec<String> {
        stages.iter().map(|s| s.to_string()).collect()
    }

    fn plan_of(stages: &[&str], options: &Options) -> Plan {
        plan(&seed_stages(), &names(stages), options).unwrap()
    }

    fn stage<'a>(plan: &'a Plan, name: &str) -> &'a StagePlan {
        plan.stages.iter().find(|s| s.stage == name).unwrap()
    }

    fn start(plan: &Plan, name: &str, topic: &str) -> Start {
        stage(plan, name).inputs.iter().find(|i| i.topic == topic).unwrap().start.clone()
    }

    fn end(by: &[&'static str]) -> Start {
        Start::End { rewritten_by: by.to_vec() }
    }

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
    fn the_stages_downstream_of_a_reset_are_warned_about() {
        let plan = plan_of(&["join-enrich"], &Options::default());
        assert_eq!(plan.warnings.len(), 2, "{:#?}", plan.warnings);
        for (warning, reader) in plan.warnings.iter().zip(["payment-metrics", "payment-anomalies"]) {
            assert!(warning
                .starts_with(&format!("{reader} is not reset but reads enriched-payments, which join-enrich writes")));
            assert!(warning.contains("a second time") && warning.contains("--all"), "{warning}");
        }
    }

    #[test]
    fn an_input_with_a_writer_left_out_is_read_from_the_beginning_with_a_warning() {
        let plan = plan_of(&["device-analytics", "health-monitor"], &Options::default());
        assert_eq!(start(&plan, "health-monitor", "device-events-late"), Start::Beginning);
        assert_eq!(start(&plan, "health-monitor", "device-events-ontime"), Start::Beginning);
        assert_eq!(plan.warnings.len(), 1, "{:#?}", plan.warnings);
        let warning = &plan.warnings[0];
        assert!(warning.starts_with("health-monitor reads device-events-late again from the beginning"), "{warning}");
        assert!(
            warning.contains("device-router (not reset)") && warning.contains("what device-analytics"),
            "{warning}"
        );
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

    #[test]
    fn the_actions_forget_offsets_and_state_stage_by_stage_then_create_the_internal_topics() {
        let plan = plan_of(&["join-enrich", "payment-metrics"], &Options::default());
        let lines: Vec<String> = plan.actions().iter().map(Action::to_string).collect();
        assert_eq!(
            lines,
            [
                "join-enrich: delete consumer group vigil-join-enrich (its committed offsets; reads orders, payments from the beginning)",
                "join-enrich: delete topic join-enrich-changelog (its state)",
                "join-enrich: delete topic join-enrich-repartition-orders (its re-keyed records)",
                "join-enrich: delete topic join-enrich-repartition-payments (its re-keyed records)",
                "payment-metrics: delete consumer group vigil-payment-metrics (its committed offsets)",
                "payment-metrics: delete election group vigil-payment-metrics-leader",
                "payment-metrics: commit group vigil-payment-metrics at the end of enriched-payments (join-enrich writes it again)",
                "payment-metrics: delete topic payment-metrics-changelog (its state)",
                "create topic join-enrich-changelog, join-enrich-repartition-orders, join-enrich-repartition-payments, \
                 payment-metrics-changelog again, empty, as provision does",
            ]
        );
    }

    #[test]
    fn a_refusal_names_the_stages_their_members_and_what_to_do() {
        let running = Running(vec![
            Busy {
                stage: "join-enrich",
                group: "vigil-join-enrich".into(),
                members: vec!["vigil-join-enrich-0 on 127.0.0.1".into()],
            },
            Busy {
                stage: "health-monitor",
                group: "vigil-health-monitor-leader".into(),
                members: vec!["tm-1 on 10.0.0.2".into(), "tm-2 on 10.0.0.3".into()],
            },
        ]);
        let text = running.to_string();
        assert!(
            text.contains("join-enrich has 1 member in group vigil-join-enrich (vigil-join-enrich-0 on 127.0.0.1)"),
            "{text}"
        );
        assert!(text.contains("health-monitor has 2 members in group vigil-health-monitor-leader"), "{text}");
        assert!(text.contains("Stop every instance of join-enrich, health-monitor (or the taskmanagers"), "{text}");
    }
}
