//! Every topic Vigil uses (the data topics are declared in `vigil_model::topology`;
//! here are the Kafka-only ones: changelogs, repartition topics, the leadership
//! topic), and the admin calls that create them (idempotently) and check them at
//! start-up.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

use vigil_model::config::TopicsConfig;

use crate::names::Names;
use crate::patience::{patiently, QUERY_PATIENCE};
use vigil_model::topology::{self, Topology};
pub use vigil_model::topology::{changelog, repartition, Topic};

/// The one-partition topic on which each global stage elects its active member (see
/// `election`); no record is ever written to it.
pub const LEADERSHIP: &str = "vigil-leadership";

/// The largest task snapshot a changelog takes (Kafka's default is 1 MB; a join
/// buffering a burst, or a global task whose inputs are skewed, can hold more).
pub const MAX_SNAPSHOT_BYTES: &str = "33554432";

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("topic `{topic}` does not exist; run `vigil provision` first")]
    Missing { topic: String },
    #[error(
        "topic `{topic}` has {actual} partitions but Vigil is configured for {expected} \
         (every keyed topic must have runtime.partitions partitions so keys stay co-partitioned); \
         recreate it or set VIGIL_RUNTIME_PARTITIONS={actual}"
    )]
    Partitions { topic: String, actual: usize, expected: usize },
    #[error("cannot read the metadata of topic `{topic}`: {source}")]
    Metadata { topic: String, source: rdkafka::error::KafkaError },
    #[error("cannot create topic `{topic}`: {reason}")]
    Create { topic: String, reason: String },
}

/// A topic to provision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub compacted: bool,
    pub partitions: u32,
}

/// Every topic a pipeline uses, as `names` names them on the cluster, keyed topics
/// with `partitions` partitions: the data topics and their copies between stages,
/// each stage's changelog and repartition topics, the leadership topic and the
/// notifier's dead letters.
pub fn all_topics(topology: &Topology, names: &Names, partitions: u32) -> Vec<TopicSpec> {
    let keyed = |name: String, compacted| TopicSpec { name: names.of(&name), compacted, partitions };
    let repartitions = topology.stages.iter().flat_map(|s| topology::repartitions(s).map(|(_, name)| name));
    let copies = names.copies().map(|name| TopicSpec { name, compacted: false, partitions });
    topology
        .topics()
        .iter()
        .map(|t| keyed(t.name.to_string(), false))
        .chain(copies)
        .chain(topology.stages.iter().map(|s| keyed(changelog(s.name), true)))
        .chain(repartitions.map(|name| keyed(name, false)))
        .chain([TopicSpec { name: names.of(LEADERSHIP), compacted: false, partitions: 1 }])
        .chain([keyed(crate::notify::DEAD_LETTERS.to_string(), false)])
        .collect()
}

/// How the topics Vigil creates are replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub factor: i32,
    /// `min.insync.replicas`; `None`: the broker's default.
    pub min_insync: Option<i32>,
}

impl Replication {
    /// What `[topics]` asks for on a cluster of `brokers` brokers: its factor, else
    /// three (fewer if the cluster has fewer brokers), and its `min.insync.replicas`,
    /// else 2 where there are three replicas or more, so one broker may fail without
    /// stopping writes and no acknowledged write rests on one disk.
    pub fn chosen(config: &TopicsConfig, brokers: usize) -> Replication {
        let factor = match config.replication_factor {
            0 => (brokers.clamp(1, 3)) as i32,
            n => n as i32,
        };
        let min_insync = match config.min_insync_replicas {
            0 => (factor >= 3).then_some(2),
            n => Some(n as i32),
        };
        Replication { factor, min_insync }
    }

    /// As [`Replication::chosen`], with the cluster's broker count read from its metadata.
    pub fn for_cluster<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
        consumer: &C,
        config: &TopicsConfig,
    ) -> Result<Replication, TopicError> {
        let metadata = patiently("the cluster's metadata", QUERY_PATIENCE, |t| consumer.fetch_metadata(None, t))
            .map_err(|source| TopicError::Metadata { topic: "*".into(), source })?;
        Ok(Replication::chosen(config, metadata.brokers().len()))
    }
}

/// What provisioning did to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provisioned {
    Created,
    /// It was there; how its settings differ from what Vigil would have created
    /// (left as they are: changing them is the operator's call).
    AlreadyThere {
        differences: Vec<String>,
    },
}

/// Creates every missing topic with `partitions` partitions; an existing topic is
/// left alone, checked, and its settings compared. Safe to run any number of times.
pub fn provision(
    admin: &AdminClient<DefaultClientContext>,
    consumer: &BaseConsumer,
    topology: &Topology,
    names: &Names,
    partitions: u32,
    replication: Replication,
) -> Result<Vec<(String, Provisioned)>, TopicError> {
    let specs = all_topics(topology, names, partitions);
    let min_insync = replication.min_insync.map(|n| n.to_string());
    let topics: Vec<NewTopic> = specs
        .iter()
        .map(|spec| {
            let mut t = NewTopic::new(&spec.name, spec.partitions as i32, TopicReplication::Fixed(replication.factor));
            if let Some(n) = &min_insync {
                t = t.set("min.insync.replicas", n);
            }
            if spec.compacted {
                t.set("cleanup.policy", "compact").set("max.message.bytes", MAX_SNAPSHOT_BYTES)
            } else {
                t
            }
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = runtime
        .block_on(admin.create_topics(&topics, &options))
        .map_err(|e| TopicError::Create { topic: "*".into(), reason: e.to_string() })?;
    let mut report = Vec::new();
    for result in results {
        match result {
            Ok(name) => report.push((name, Provisioned::Created)),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                let spec = specs.iter().find(|s| s.name == name).expect("a topic asked for");
                let differences = differences(&runtime, admin, consumer, spec, replication)?;
                report.push((name, Provisioned::AlreadyThere { differences }));
            }
            Err((name, code)) => return Err(TopicError::Create { topic: name, reason: code.to_string() }),
        }
    }
    // A new topic shows in the metadata a moment after it is created.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match specs.iter().try_for_each(|s| check(consumer, std::slice::from_ref(&s.name), s.partitions)) {
            Err(TopicError::Missing { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other.map(|()| report),
        }
    }
}

/// How an existing topic's replication, `min.insync.replicas` and cleanup policy
/// differ from what provisioning would have given it.
fn differences(
    runtime: &tokio::runtime::Runtime,
    admin: &AdminClient<DefaultClientContext>,
    consumer: &BaseConsumer,
    spec: &TopicSpec,
    wanted: Replication,
) -> Result<Vec<String>, TopicError> {
    let topic = spec.name.as_str();
    let metadata =
        patiently(&format!("the metadata of `{topic}`"), QUERY_PATIENCE, |t| consumer.fetch_metadata(Some(topic), t))
            .map_err(|source| TopicError::Metadata { topic: topic.to_string(), source })?;
    let mut differences = Vec::new();
    let factor = metadata.topics().iter().find(|t| t.name() == topic).and_then(|t| t.partitions().first());
    if let Some(actual) = factor.map(|p| p.replicas().len() as i32).filter(|n| *n != wanted.factor) {
        differences.push(format!("replication factor {actual}, not {}", wanted.factor));
    }
    let configs = runtime
        .block_on(admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new()))
        .map_err(|e| TopicError::Create { topic: topic.to_string(), reason: e.to_string() })?;
    let Some(Ok(resource)) = configs.into_iter().next() else { return Ok(differences) };
    let value = |name: &str| resource.get(name).and_then(|e| e.value.clone()).unwrap_or_default();
    if let Some(wanted) = wanted.min_insync.map(|n| n.to_string()).filter(|n| *n != value("min.insync.replicas")) {
        differences.push(format!("min.insync.replicas {}, not {wanted}", value("min.insync.replicas")));
    }
    let policy = value("cleanup.policy");
    if spec.compacted && !policy.split(',').any(|p| p == "compact") {
        differences.push(format!("cleanup.policy {policy}, not compact: its state would be deleted by age"));
    }
    Ok(differences)
}

/// What to do about an existing topic whose settings differ, said once per report.
pub const DIFFERENCES_ADVICE: &str = "Vigil left these topics as they are. To change the replication factor, \
    reassign their partitions (kafka-reassign-partitions); other settings change with kafka-configs --alter; \
    or, before any data matters, delete them and run `vigil provision` again.";

/// Fails with a message that says what to do when a topic is missing or has the
/// wrong number of partitions.
pub fn check<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
    consumer: &C,
    topics: &[String],
    partitions: u32,
) -> Result<(), TopicError> {
    for topic in topics {
        let actual = partition_count(consumer, topic)?;
        if actual == 0 {
            return Err(TopicError::Missing { topic: topic.clone() });
        }
        if actual != partitions as usize {
            return Err(TopicError::Partitions { topic: topic.clone(), actual, expected: partitions as usize });
        }
    }
    Ok(())
}

pub fn partition_count<C: Consumer<X>, X: rdkafka::consumer::ConsumerContext>(
    consumer: &C,
    topic: &str,
) -> Result<usize, TopicError> {
    let metadata =
        patiently(&format!("the metadata of `{topic}`"), QUERY_PATIENCE, |t| consumer.fetch_metadata(Some(topic), t))
            .map_err(|source| TopicError::Metadata { topic: topic.to_string(), source })?;
    Ok(metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map_or(0, |t| t.partitions().len()))
}
