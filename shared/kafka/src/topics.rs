//! Every topic Vigil uses (the data topics are declared in `vigil_model::topology`;
//! here are the Kafka-only ones: changelogs, repartition topics, the leadership
//! topic), and the admin calls that create them (idempotently) and check them at
//! start-up.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

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

/// Every topic a pipeline uses, keyed topics with `partitions` partitions: the data
/// topics, each stage's changelog and repartition topics, and the leadership topic.
pub fn all_topics(topology: &Topology, partitions: u32) -> Vec<TopicSpec> {
    let keyed = |name: String, compacted| TopicSpec { name, compacted, partitions };
    let repartitions = topology.stages.iter().flat_map(|s| topology::repartitions(s).map(|(_, name)| name));
    topology
        .topics()
        .iter()
        .map(|t| keyed(t.name.to_string(), false))
        .chain(topology.stages.iter().map(|s| keyed(changelog(s.name), true)))
        .chain(repartitions.map(|name| keyed(name, false)))
        .chain([TopicSpec { name: LEADERSHIP.to_string(), compacted: false, partitions: 1 }])
        .collect()
}

/// What provisioning did to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provisioned {
    Created,
    AlreadyThere,
}

/// Creates every missing topic with `partitions` partitions; an existing topic is
/// left alone (and then checked). Safe to run any number of times.
pub fn provision(
    admin: &AdminClient<DefaultClientContext>,
    consumer: &BaseConsumer,
    topology: &Topology,
    partitions: u32,
    replication: i32,
) -> Result<Vec<(String, Provisioned)>, TopicError> {
    let specs = all_topics(topology, partitions);
    let topics: Vec<NewTopic> = specs
        .iter()
        .map(|spec| {
            let t = NewTopic::new(&spec.name, spec.partitions as i32, TopicReplication::Fixed(replication));
            if spec.compacted {
                t.set("cleanup.policy", "compact").set("max.message.bytes", MAX_SNAPSHOT_BYTES)
            } else {
                t
            }
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let results = runtime
        .block_on(admin.create_topics(&topics, &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))))
        .map_err(|e| TopicError::Create { topic: "*".into(), reason: e.to_string() })?;
    let mut report = Vec::new();
    for result in results {
        match result {
            Ok(name) => report.push((name, Provisioned::Created)),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => report.push((name, Provisioned::AlreadyThere)),
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
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|source| TopicError::Metadata { topic: topic.to_string(), source })?;
    Ok(metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map_or(0, |t| t.partitions().len()))
}
