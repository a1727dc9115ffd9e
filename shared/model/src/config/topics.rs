//! `[topics]`: how the Kafka runtime lays out its topics on a cluster it may share.

use serde::{Deserialize, Serialize};

/// The codecs Kafka has, as librdkafka's `compression.type` names them.
pub const COMPRESSIONS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// How the Kafka runtime names, replicates and compresses what it writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicsConfig {
    /// A prefix (`<namespace>.`) for every topic, consumer group, transactional id and
    /// registry subject of this pipeline, so that pipelines share a cluster; empty:
    /// none.
    pub namespace: String,
    /// Replicas of each topic Vigil creates; 0: three, or as many as the cluster has
    /// brokers if fewer.
    pub replication_factor: u32,
    /// `min.insync.replicas` of the topics Vigil creates; 0: 2 where they have three
    /// replicas or more, else the broker's default.
    pub min_insync_replicas: u32,
    /// The codec of every record batch Vigil writes (outputs, changelogs, markers,
    /// dead letters): none, gzip, snappy, lz4 or zstd. Input may come in any of them.
    pub compression: String,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        TopicsConfig {
            namespace: String::new(),
            replication_factor: 0,
            min_insync_replicas: 0,
            compression: "zstd".into(),
        }
    }
}

impl TopicsConfig {
    /// What is wrong with these settings, if anything.
    pub fn problem(&self) -> Option<String> {
        if !COMPRESSIONS.contains(&self.compression.as_str()) {
            return Some(format!(
                "topics.compression is {:?}; it takes one of {}",
                self.compression,
                COMPRESSIONS.join(", ")
            ));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.namespace.len() > 100 || !self.namespace.chars().all(allowed) {
            return Some(format!(
                "topics.namespace is {:?}; it takes up to 100 of the characters Kafka allows in a topic name \
                 (letters, digits, '.', '_' and '-')",
                self.namespace
            ));
        }
        if self.min_insync_replicas > 0
            && self.replication_factor > 0
            && self.min_insync_replicas > self.replication_factor
        {
            return Some(format!(
                "topics.min_insync_replicas ({}) is more than topics.replication_factor ({}): no write could succeed",
                self.min_insync_replicas, self.replication_factor
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codecs_names_kafka_cannot_take_and_impossible_quorums_are_refused() {
        let codec = TopicsConfig { compression: "brotli".into(), ..TopicsConfig::default() };
        assert!(codec.problem().unwrap().contains("none, gzip, snappy, lz4, zstd"));
        let name = TopicsConfig { namespace: "team a".into(), ..TopicsConfig::default() };
        assert!(name.problem().unwrap().contains("topics.namespace"));
        let quorum = TopicsConfig { replication_factor: 2, min_insync_replicas: 3, ..TopicsConfig::default() };
        assert!(quorum.problem().unwrap().contains("no write could succeed"));
        assert_eq!(TopicsConfig::default().problem(), None);
    }
}
