//! The command line every Kafka process shares: where Kafka and the registry are, how
//! often to commit; the seed's parameters come from the same TOML file and
//! `VIGIL_<SECTION>_<KEY>` variables as the embedded runner. A stage's own process
//! (`vigil <stage>`) adds who it is and runs one member of its stage.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser};
use vigil_model::Config;

use crate::metrics::MetricsRegistry;
use crate::observe::{self, Health};
use crate::queries::StateQueries;
use crate::runner::Common;
use crate::services::Service;
use crate::status::MemberStatus;
use crate::supervise::Supervisor;

/// Connection and commit settings, shared by the services and the taskmanager.
#[derive(Debug, Clone, Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "VIGIL_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092")]
    pub bootstrap_servers: String,
    /// Confluent-compatible schema registry URL (for Apicurio: …/apis/ccompat/v7).
    #[arg(long, env = "VIGIL_SCHEMA_REGISTRY_URL", default_value = "http://127.0.0.1:8081")]
    pub schema_registry_url: String,
    /// Milliseconds between transaction commits.
    #[arg(long, env = "VIGIL_COMMIT_INTERVAL_MS", default_value_t = 100)]
    pub commit_interval_ms: u64,
    /// TOML file with the seed's parameters (docs/configuration.md).
    #[arg(long, env = "VIGIL_CONFIG")]
    pub config: Option<PathBuf>,
}

impl KafkaArgs {
    /// The settings every member shares; also reads the security settings of the
    /// Kafka and registry clients (`connection`), so a mistake there stops the
    /// process as it starts.
    pub fn common(&self) -> anyhow::Result<Common> {
        crate::connection::load(self.config.as_deref())?;
        crate::notify::settings::load(self.config.as_deref())?;
        Ok(Common {
            bootstrap_servers: self.bootstrap_servers.clone(),
            registry_url: self.schema_registry_url.clone(),
            commit_interval: Duration::from_millis(self.commit_interval_ms),
            config: Config::load(self.config.as_deref(), std::env::vars())?,
        })
    }
}

/// One member of a stage, until SIGTERM or SIGINT.
#[derive(Debug, Parser)]
struct ServiceArgs {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Consumer group (default: vigil-<service>).
    #[arg(long, env = "VIGIL_GROUP_ID")]
    group_id: Option<String>,
    /// This instance's name, unique within the service; part of its transactional id.
    #[arg(long, env = "VIGIL_INSTANCE", default_value = "0")]
    instance: String,
    /// Address of /metrics and /healthz.
    #[arg(long, env = "VIGIL_METRICS_ADDR", default_value = "127.0.0.1:0")]
    metrics_addr: SocketAddr,
}

/// One member of `service`, until SIGTERM or SIGINT; `args` is its command line, the
/// stage's name first.
pub fn run_stage(service: &'static dyn Service, args: Vec<String>) -> anyhow::Result<()> {
    // `--help` and mistakes in the arguments print as clap prints them, and exit.
    let command = std::iter::once(format!("vigil {}", service.name())).chain(args.into_iter().skip(1));
    let args = ServiceArgs::try_parse_from(command).unwrap_or_else(|e| e.exit());
    run(service, args)
}

fn run(service: &'static dyn Service, args: ServiceArgs) -> anyhow::Result<()> {
    let name = service.name();
    let common = args.kafka.common()?;
    let registry = MetricsRegistry::new("service", &[]);
    let health = Health::new();
    let queries = StateQueries::new();
    let shutdown = Arc::new(AtomicBool::new(false));
    let supervisor = Supervisor {
        service,
        member: args.instance.clone(),
        group_id: args.group_id,
        common,
        registry: registry.clone(),
        status: Arc::new(Mutex::new(MemberStatus::new(name, &args.instance))),
        loop_health: health.watch(name),
        queries: queries.clone(),
        shutdown: shutdown.clone(),
    };
    let addr = observe::serve(args.metrics_addr, registry, health, queries, shutdown)?;
    tracing::info!(service = name, %addr, "serving /metrics and /healthz");
    supervisor.run();
    Ok(())
}
