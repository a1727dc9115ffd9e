//! Who a stage member is and how it reaches Kafka and the registry.

use std::time::Duration;

use vigil_model::Config;

use crate::inputs::Parallelism;
use crate::names::Names;

/// How to reach Kafka and the registry, who this member is, and how often to commit.
#[derive(Debug, Clone)]
pub struct Settings {
    pub bootstrap_servers: String,
    pub registry_url: String,
    pub group_id: String,
    /// This member's name, unique within its stage.
    pub member: String,
    pub transactional_id: String,
    pub commit_interval: Duration,
    pub config: Config,
    /// The pipeline's names on the cluster.
    pub names: Names,
}

/// What every member in a process shares: where Kafka and the registry are, how often
/// to commit, and the seed's parameters.
#[derive(Debug, Clone)]
pub struct Common {
    pub bootstrap_servers: String,
    pub registry_url: String,
    pub commit_interval: Duration,
    pub config: Config,
}

impl Settings {
    /// A member of `stage` in the consumer group `vigil-<stage>` (unless `group_id`
    /// says otherwise), in the namespace of `[topics]`. A keyed stage's members each
    /// have a transactional id of their own; a global stage's members share one, so a
    /// new leader fences the old one.
    pub fn for_member(
        stage: &str,
        parallelism: Parallelism,
        member: &str,
        group_id: Option<String>,
        common: &Common,
        names: Names,
    ) -> Settings {
        let named = |name: String| names.of(&name);
        Settings {
            bootstrap_servers: common.bootstrap_servers.clone(),
            registry_url: common.registry_url.clone(),
            group_id: group_id.unwrap_or_else(|| named(format!("vigil-{stage}"))),
            member: member.to_string(),
            transactional_id: named(match parallelism {
                Parallelism::PerPartition => format!("vigil-{stage}-{member}"),
                Parallelism::Global => format!("vigil-{stage}"),
            }),
            commit_interval: common.commit_interval,
            config: common.config.clone(),
            names,
        }
    }
}
