//! The member's Kafka clients: a consumer reading committed records only, and a
//! transactional, idempotent producer. Both report librdkafka's statistics to the
//! member's metrics (`client_stats`).

use std::sync::Arc;

use anyhow::{Context as _, Result};
use rdkafka::consumer::BaseConsumer;

use crate::client_stats::{self, ClientKind, StatsContext};
use crate::connection;
use crate::group::{GroupContext, SharedLog};
use crate::inputs::Parallelism;
use crate::metrics::MemberMetrics;
use crate::produce::Kafka;
use crate::settings::Settings;

pub(super) fn consumer(
    settings: &Settings,
    parallelism: Parallelism,
    rebalances: SharedLog,
    metrics: &MemberMetrics,
) -> Result<BaseConsumer<GroupContext>> {
    let mut config = connection::client_config(&settings.bootstrap_servers);
    config
        .set("group.id", &settings.group_id)
        .set("client.id", &settings.transactional_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("partition.assignment.strategy", "range")
        .set("session.timeout.ms", "10000")
        // The broker answers a fetch once it has this much or after this wait
        // (librdkafka's default of 500 ms would dominate end-to-end latency); a
        // member that kept up fetched for every few records at the first byte
        // (docs/decisions.md, 2026-12-05).
        .set("fetch.min.bytes", "65536")
        .set("fetch.wait.max.ms", "10")
        // Little of a partition is fetched ahead, so a task reads its partitions
        // nearly in step (docs/decisions.md, 2026-12-06, "Reading in step").
        .set("max.partition.fetch.bytes", "131072");
    connection::fetch_again_when_drained(&mut config, 2_000);
    if parallelism == Parallelism::PerPartition {
        // Static membership: a restarted member (same name) takes its partitions
        // back at once instead of waiting for the dead one's session to expire.
        config.set("group.instance.id", &settings.transactional_id);
    }
    let stats = client_stats::enable(&mut config).then(|| metrics.client_stats(ClientKind::Consumer));
    config.create_with_context(GroupContext { log: rebalances, stats }).context("cannot create the Kafka consumer")
}

pub(super) fn transactional_producer(settings: &Settings, metrics: &MemberMetrics) -> Result<Arc<Kafka>> {
    let mut config = connection::client_config(&settings.bootstrap_servers);
    config
        .set("transactional.id", &settings.transactional_id)
        .set("enable.idempotence", "true")
        // Same partition for the same key as Kafka's Java clients and the embedded runtime.
        .set("partitioner", "murmur2_random")
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "5")
        // A record that fails fails its transaction, and the commit reports it; a
        // report for every record delivered would be work for nothing (librdkafka
        // queues each to the producer's polling thread).
        .set("delivery.report.only.error", "true")
        .set("compression.type", &settings.config.topics.compression)
        .set("message.max.bytes", "34000000");
    let stats = client_stats::enable(&mut config).then(|| metrics.client_stats(ClientKind::Producer));
    let producer = config.create_with_context(StatsContext { stats }).context("cannot create the Kafka producer")?;
    Ok(Arc::new(producer))
}
