//! `vigil jobmanager`: the head of the Vigil cluster, as Flink's JobManager is. At
//! start it provisions every topic and schema (idempotently); then it serves the
//! dashboard, a Flink-compatible REST API and `/metrics` on one port, learns the
//! cluster from the taskmanagers' heartbeats, reads the consumer lag of every stage
//! from the broker, and follows the alert topics for the dashboard's live pane.
//! Which member processes which partition is Kafka's consumer groups' business,
//! never the jobmanager's: a jobmanager that is down stops no stage.

mod api;
mod cluster;
mod lag;
mod live;
mod metrics;
mod queries;
#[cfg(test)]
mod rules;
mod state;
mod view;
mod web;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil_kafka::connection;
use vigil_kafka::names::Names;

use anyhow::Context as _;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::BaseConsumer;
use tracing::{info, warn};
use vigil_kafka::cli::KafkaArgs;
use vigil_kafka::codec::Codec;
use vigil_kafka::metrics::now_ms;
use vigil_kafka::observe;
use vigil_kafka::runner::Common;
use vigil_kafka::topics::{self, Provisioned, Replication};

use vigil_model::topology::Topology;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

use crate::jobmanager::lag::LagProbe;
use crate::jobmanager::state::JobManager;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Address of the dashboard, the REST API and /metrics.
    #[arg(long, env = "VIGIL_JOBMANAGER_ADDR", default_value = "127.0.0.1:8081")]
    addr: SocketAddr,
    /// Replication factor of the topics it creates (else `topics.replication_factor`:
    /// three, or the broker count if fewer).
    #[arg(long, env = "VIGIL_REPLICATION_FACTOR")]
    replication: Option<u32>,
}

/// How often the consumer lag is read from the broker.
const LAG_EVERY: Duration = Duration::from_secs(5);

pub fn run(args: Args) -> anyhow::Result<()> {
    let common = args.kafka.common()?;
    let topology = SeedPipeline::default().topology();
    let jm = JobManager::new(&topology, Names::new(&common.config.topics, &topology));
    let shutdown = Arc::new(AtomicBool::new(false));
    {
        let (jm, common, shutdown) = (jm.clone(), common.clone(), shutdown.clone());
        std::thread::Builder::new()
            .name("background".into())
            .spawn(move || background(&jm, &common, args.replication, &shutdown))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        info!(addr = %args.addr, job = %jm.job_id, "serving the dashboard, the REST API and /metrics");
        axum::serve(listener, web::router(jm))
            .with_graceful_shutdown(async move {
                observe::wait_for_signal().await;
                info!("shutdown requested");
                shutdown.store(true, Ordering::SeqCst);
            })
            .await
            .context("the HTTP server failed")
    })
}

/// Provisions, then keeps the lag and the live pane up to date, until shutdown.
fn background(jm: &Arc<JobManager>, common: &Common, replication: Option<u32>, shutdown: &AtomicBool) {
    while !shutdown.load(Ordering::SeqCst) {
        match provision(common, &jm.topology, &jm.names, replication) {
            Ok(()) => break,
            Err(e) => {
                warn!("cannot provision yet ({e:#}); trying again in 2 s");
                *jm.ready.lock().expect("ready") = Err(format!("provisioning: {e:#}"));
                std::thread::sleep(Duration::from_secs(2));
            }
        }
    }
    *jm.ready.lock().expect("ready") = Ok(());
    info!("every topic and schema is provisioned");
    {
        let (jm, common) = (jm.clone(), common.clone());
        let spawned = std::thread::Builder::new().name("live".into()).spawn(move || loop {
            let never = AtomicBool::new(false);
            let (bootstrap, registry) = (&common.bootstrap_servers, &common.registry_url);
            match live::follow(bootstrap, registry, &jm.topology, &jm.names, &jm.live, &jm.metrics, &never) {
                Ok(()) => return,
                Err(e) => {
                    warn!("the live pane stopped ({e:#}); starting it again in 5 s");
                    std::thread::sleep(Duration::from_secs(5));
                }
            }
        });
        if let Err(e) = spawned {
            warn!("cannot start the live pane: {e}");
        }
    }
    let mut probe = None;
    while !shutdown.load(Ordering::SeqCst) {
        jm.cluster.lock().expect("cluster").expire(now_ms());
        if probe.is_none() {
            let (stages, partitions) = (&jm.topology.stages, common.config.runtime.partitions);
            probe = LagProbe::new(&common.bootstrap_servers, stages, &jm.names, partitions)
                .map_err(|e| warn!("cannot measure consumer lag: {e:#}"))
                .ok();
        }
        if let Some(p) = &probe {
            match p.measure(now_ms()) {
                Ok(lag) => *jm.lag.lock().expect("lag") = lag,
                Err(e) => {
                    // Its clients can keep an outage's view of the cluster: after a
                    // broker crash one answered `UnknownPartition` for a topic that was
                    // there, for good. New ones next time.
                    warn!("cannot measure consumer lag: {e:#}; trying again with new clients");
                    probe = None;
                }
            }
        }
        std::thread::sleep(LAG_EVERY);
    }
}

/// Every topic and every schema, as `vigil provision` does.
fn provision(common: &Common, topology: &Topology, names: &Names, replication: Option<u32>) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = connection::client_config(&common.bootstrap_servers)
        .create()
        .context("cannot create the Kafka admin client")?;
    let consumer: BaseConsumer =
        connection::client_config(&common.bootstrap_servers).create().context("cannot create a Kafka client")?;
    let mut wanted = common.config.topics.clone();
    wanted.replication_factor = replication.unwrap_or(wanted.replication_factor);
    let replication = Replication::for_cluster(&consumer, &wanted)?;
    let report = topics::provision(&admin, &consumer, topology, names, common.config.runtime.partitions, replication)?;
    let created = report.iter().filter(|(_, p)| *p == Provisioned::Created).count();
    for (topic, outcome) in &report {
        if let Provisioned::AlreadyThere { differences } = outcome {
            if !differences.is_empty() {
                warn!(topic, differences = differences.join("; "), "{}", topics::DIFFERENCES_ADVICE);
            }
        }
    }
    info!(created, existing = report.len() - created, replication = replication.factor, "topics provisioned");
    let schemas = Codec::new(&common.registry_url)?.named(names.clone()).register(&topology.topics())?;
    info!(schemas = schemas.len(), "schemas registered");
    Ok(())
}
