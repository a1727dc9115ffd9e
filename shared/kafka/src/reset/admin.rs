//! A plan carried out against a broker: the check that no stage of it runs, then
//! its actions one by one.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use vigil_model::topology::Topology;

use super::{Action, Busy, Plan, Running};
use crate::connection;
use crate::names::Names;
use crate::patience::patiently;
use crate::topics::{self, Provisioned, Replication};
use vigil_model::config::TopicsConfig;

const TIMEOUT: Duration = Duration::from_secs(30);

/// How the internal topics are created again.
#[derive(Debug, Clone)]
pub struct Recreate {
    pub partitions: u32,
    /// How `[topics]` asks topics to be laid out.
    pub topics: TopicsConfig,
    /// Replication factor; `None`: the one the deleted topics had (else what
    /// provisioning chooses for the cluster).
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
    /// The pipeline whose topics provisioning creates again, and their names on the
    /// cluster (a plan names them as the pipeline does).
    topology: Topology,
    names: Names,
}

impl Admin {
    pub fn connect(bootstrap_servers: &str, topology: Topology, names: Names) -> Result<Admin> {
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
        Ok(Admin { bootstrap_servers, admin, client, runtime, replication_seen: None, topology, names })
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
    pub fn apply(&mut self, action: &Action, recreate: &Recreate) -> Result<String> {
        match action {
            Action::DeleteGroup { group, .. } => self.delete_group(group),
            // Stages read a topic users read too from its copy between stages.
            Action::CommitAtEnd { group, topic, .. } => self.commit_at_end(group, &self.names.between_stages(topic)),
            Action::DeleteTopic { topic, .. } => self.delete_topic(&self.names.of(topic)),
            Action::CreateTopics { topics } => {
                let internal: Vec<String> = topics.iter().map(|t| self.names.of(t)).collect();
                self.create_topics(&internal, recreate)
            }
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
        let metadata = patiently(topic, TIMEOUT, |t| self.client.fetch_metadata(Some(topic), t))
            .with_context(|| format!("cannot read the metadata of `{topic}`"))?;
        let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none());
        Ok(found.and_then(|t| t.partitions().first()).map(|p| p.replicas().len() as i32))
    }

    /// Provisioning creates every missing topic, the deleted ones among them, with the
    /// same settings as `vigil provision`.
    fn create_topics(&self, internal: &[String], recreate: &Recreate) -> Result<String> {
        let mut wanted = recreate.topics.clone();
        if let Some(factor) = recreate.replication.or(self.replication_seen) {
            wanted.replication_factor = factor as u32;
        }
        let replication = Replication::for_cluster(&self.client, &wanted)?;
        let report = topics::provision(
            &self.admin,
            &self.client,
            &self.topology,
            &self.names,
            recreate.partitions,
            replication,
        )?;
        let created: Vec<&str> =
            report.iter().filter(|(_, p)| *p == Provisioned::Created).map(|(t, _)| t.as_str()).collect();
        let missing: Vec<&str> = internal.iter().map(String::as_str).filter(|c| !created.contains(c)).collect();
        if !missing.is_empty() {
            // Still there: the deletion has not gone through, and the old state with it.
            bail!("topic {} was not created again; run the reset again", missing.join(", "));
        }
        let others: Vec<&str> = created.iter().copied().filter(|t| !internal.iter().any(|c| c == t)).collect();
        let mut outcome = format!("created ({} partitions, replication {})", recreate.partitions, replication.factor);
        if !others.is_empty() {
            outcome.push_str(&format!("; also created missing topic {}", others.join(", ")));
        }
        Ok(outcome)
    }
}
