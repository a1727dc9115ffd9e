//! The changes a plan makes, in the order they are made, and the line that names
//! each one.

use std::fmt;

use vigil_model::topology;

use super::plan::{Plan, StagePlan, Start};
use super::verb_for;

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

impl StagePlan {
    fn inputs_at_beginning(&self) -> Vec<&'static str> {
        self.inputs.iter().filter(|i| i.start == Start::Beginning).map(|i| i.topic).collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reset::seed::plan_of;
    use crate::reset::Options;

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
}
