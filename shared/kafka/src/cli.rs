//! The command line every service shares: where Kafka and the registry are, who this
//! instance is, how often it commits; the seed's parameters come from the same
//! TOML file and `VIGIL_<SECTION>_<KEY>` variables as the embedded runner.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use vigil_model::Config;

use crate::observe::{self, Metrics};
use crate::runner::{Parallelism, Runner, Service, Settings};

#[derive(Debug, Parser)]
pub struct ServiceArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "VIGIL_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092")]
    pub bootstrap_servers: String,
    /// Confluent-compatible schema registry URL (for Apicurio: …/apis/ccompat/v7).
    #[arg(long, env = "VIGIL_SCHEMA_REGISTRY_URL", default_value = "http://127.0.0.1:8081")]
    pub schema_registry_url: String,
    /// Consumer group (default: vigil-<service>).
    #[arg(long, env = "VIGIL_GROUP_ID")]
    pub group_id: Option<String>,
    /// This instance's name, unique within the service; part of its transactional id.
    #[arg(long, env = "VIGIL_INSTANCE", default_value = "0")]
    pub instance: String,
    /// Milliseconds between transaction commits.
    #[arg(long, env = "VIGIL_COMMIT_INTERVAL_MS", default_value_t = 100)]
    pub commit_interval_ms: u64,
    /// Address of /metrics and /healthz.
    #[arg(long, env = "VIGIL_METRICS_ADDR", default_value = "127.0.0.1:0")]
    pub metrics_addr: SocketAddr,
    /// TOML file with the seed's parameters (see the README).
    #[arg(long, env = "VIGIL_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Everything a service binary's `main` does.
pub fn main_for<S: Service>(service: S) -> ExitCode {
    observe::init_tracing();
    let args = ServiceArgs::parse();
    match run(service, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run<S: Service>(service: S, args: ServiceArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref(), std::env::vars())?;
    let name = service.name();
    // A global service must have one active instance: a second one with the same
    // transactional id fences the first rather than double-counting.
    let transactional_id = match service.parallelism() {
        Parallelism::PerPartition => format!("vigil-{name}-{}", args.instance),
        Parallelism::Global => format!("vigil-{name}"),
    };
    let settings = Settings {
        bootstrap_servers: args.bootstrap_servers,
        registry_url: args.schema_registry_url,
        group_id: args.group_id.unwrap_or_else(|| format!("vigil-{name}")),
        transactional_id,
        commit_interval: Duration::from_millis(args.commit_interval_ms),
        config,
    };
    let metrics = Metrics::new(name);
    let shutdown = Arc::new(AtomicBool::new(false));
    let addr = observe::serve(args.metrics_addr, metrics.clone(), shutdown.clone())?;
    tracing::info!(service = name, %addr, "serving /metrics and /healthz");
    Runner::new(service, settings, metrics)?.run(&shutdown)
}
