//! `vigil taskmanager`: a worker of the Vigil cluster, as Flink's TaskManager is. Each
//! of its slots runs one member of every stage; which partitions a member processes
//! is decided by the stage's Kafka consumer group, so taskmanagers can come and go and
//! the work spreads over whoever is there. A member that fails is started again after
//! a back-off. It heartbeats its members' status to the jobmanager and serves
//! `/metrics` and `/healthz`.

mod heartbeat;
mod slots;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use vigil_kafka::cli::KafkaArgs;
use vigil_kafka::metrics::{now_ms, MetricsRegistry};
use vigil_kafka::observe::{self, Health};
use vigil_kafka::queries::StateQueries;
use vigil_kafka::services::{self, Service};

use crate::taskmanager::heartbeat::Reporter;
use crate::taskmanager::slots::{Process, Slots};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// The jobmanager, which this taskmanager registers with.
    #[arg(long, env = "VIGIL_JOBMANAGER_URL", default_value = "http://127.0.0.1:8081")]
    jobmanager_url: String,
    /// Slots; each runs one member of every stage.
    #[arg(long, env = "VIGIL_TASKMANAGER_SLOTS", default_value_t = 1)]
    slots: u32,
    /// This taskmanager's id (default: the host name, a container's id under Docker).
    #[arg(long, env = "VIGIL_TASKMANAGER_ID")]
    id: Option<String>,
    /// Address of /metrics and /healthz.
    #[arg(long, env = "VIGIL_METRICS_ADDR", default_value = "0.0.0.0:9249")]
    metrics_addr: SocketAddr,
    /// Only these stages (comma-separated; default: every stage).
    #[arg(long, env = "VIGIL_STAGES", value_delimiter = ',')]
    stages: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.slots == 0 {
        bail!("a taskmanager needs at least one slot (VIGIL_TASKMANAGER_SLOTS)");
    }
    let common = args.kafka.common()?;
    let stages: Vec<&'static dyn Service> = if args.stages.is_empty() {
        services::cluster_services()
    } else {
        args.stages
            .iter()
            .map(|name| {
                services::by_name(name).with_context(|| {
                    format!("`{name}` is not a stage; the stages are {}", crate::stage_names().join(", "))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let id = args.id.clone().unwrap_or_else(host_name);
    let registry = MetricsRegistry::new("taskmanager", &[("taskmanager", &id)]);
    registry.gauge("taskmanager_slots", "Slots of this taskmanager").set(f64::from(args.slots));
    let health = Health::new();
    let queries = StateQueries::new();
    let shutdown = Arc::new(AtomicBool::new(false));
    let bound = observe::serve(args.metrics_addr, registry.clone(), health.clone(), queries.clone(), shutdown.clone())?;
    tracing::info!(taskmanager = %id, slots = args.slots, %bound, "serving /metrics and /healthz");

    let process = Process { registry: registry.clone(), health, queries, shutdown: shutdown.clone() };
    let slots = Slots::start(&id, args.slots, &stages, &common, &process)?;
    let reporter = Reporter::new(&args.jobmanager_url, &id, bound.port(), args.slots, now_ms())?;
    while !shutdown.load(Ordering::SeqCst) {
        reporter.send(slots.statuses());
        // Short sleeps, so a shutdown is seen at once.
        for _ in 0..20 {
            if shutdown.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    tracing::info!(taskmanager = %id, "stopping: members commit their work and leave their groups");
    slots.join();
    tracing::info!(taskmanager = %id, "stopped");
    Ok(())
}

/// The machine's (or container's) host name.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "taskmanager".to_string())
}
