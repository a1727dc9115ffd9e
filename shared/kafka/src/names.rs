//! The names the pipeline's topics, consumer groups, transactional ids and registry
//! subjects have on a Kafka cluster: in the namespace of `[topics]` (so pipelines
//! share a cluster), and, for a topic users read that stages read too, the copy
//! between stages that carries the watermark markers (so users' readers of the
//! topic get records only).

use std::sync::Arc;

use vigil_model::config::TopicsConfig;
use vigil_model::topology::{self, Topic, Topology};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    namespace: String,
    /// The topics stages read from their copy between stages.
    copied: Arc<[&'static str]>,
}

impl Names {
    /// The names of `pipeline`'s topics in the namespace `topics` sets.
    pub fn new(topics: &TopicsConfig, pipeline: &Topology) -> Names {
        let copied = pipeline.read_by_users_and_stages().into_iter().map(|t| t.name).collect();
        Names { namespace: topics.namespace.clone(), copied }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A topic, consumer group or transactional id of Vigil's as the cluster knows it.
    pub fn of(&self, name: &str) -> String {
        if self.namespace.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.namespace)
        }
    }

    /// Whether stages pass the topic `name` to each other through its copy between
    /// stages.
    pub fn is_copied(&self, name: &str) -> bool {
        self.copied.contains(&name)
    }

    /// Where stages read the topic `name`, and write their watermark markers for it,
    /// on the cluster: its copy between stages if it has one, else the topic itself.
    pub fn between_stages(&self, name: &str) -> String {
        match self.is_copied(name) {
            true => self.of(&topology::between_stages(name)),
            false => self.of(name),
        }
    }

    /// The copies between stages, as the cluster knows them.
    pub fn copies(&self) -> impl Iterator<Item = String> + '_ {
        self.copied.iter().map(|t| self.of(&topology::between_stages(t)))
    }

    /// The registry subject of `topic`'s values (Confluent's topic name strategy).
    pub fn subject(&self, topic: &Topic) -> String {
        format!("{}-value", self.of(topic.name))
    }
}

#[cfg(test)]
mod tests {
    use vigil_model::topology::{DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, ENRICHED_PAYMENTS, HEALTH_ALERTS, ORDERS};
    use vigil_operators::SeedPipeline;
    use vigil_stream::Pipeline;

    use super::*;

    #[test]
    fn users_topics_that_stages_read_have_a_copy_between_stages_and_the_rest_none() {
        let names = Names::new(&TopicsConfig::default(), &SeedPipeline::default().topology());
        assert_eq!(names.between_stages(ENRICHED_PAYMENTS.name), "enriched-payments-between-stages");
        assert_eq!(names.between_stages(DEVICE_EVENTS_LATE.name), "device-events-late-between-stages");
        // Nobody reads it as results: it carries its markers itself.
        assert_eq!(names.between_stages(DEVICE_EVENTS_ONTIME.name), "device-events-ontime");
        assert!(!names.is_copied(HEALTH_ALERTS.name) && !names.is_copied(ORDERS.name));
        assert_eq!(names.copies().count(), 2);
    }

    #[test]
    fn a_namespace_prefixes_every_name_on_the_cluster() {
        let staging = TopicsConfig { namespace: "staging".into(), ..TopicsConfig::default() };
        let names = Names::new(&staging, &SeedPipeline::default().topology());
        assert_eq!(names.of("orders"), "staging.orders");
        assert_eq!(names.between_stages(ENRICHED_PAYMENTS.name), "staging.enriched-payments-between-stages");
        assert_eq!(names.subject(&ORDERS), "staging.orders-value");
    }
}
