//! The tools: `vigil provision` creates every topic (partitions, compacted changelogs)
//! and registers every value schema, idempotently; `vigil tail TOPIC…` prints output
//! topics in the seed's tagged NDJSON form, reading only committed records; `vigil
//! reset STAGE…|--all` makes stages process their inputs again from the start;
//! `vigil healthcheck URL` exits 0 if the URL answers 200 (for container
//! healthchecks, in images without curl).

pub mod healthcheck;
pub mod reset;
mod tail;

use anyhow::{Context, Result};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::BaseConsumer;
use vigil_kafka::codec::Codec;
use vigil_kafka::connection;
use vigil_kafka::names::Names;
use vigil_kafka::topics::{self, Provisioned, Replication};
use vigil_model::topology::Topology;
use vigil_model::Config;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

/// Where the broker and the registry are.
#[derive(Debug, clap::Args)]
pub struct Connection {
    #[arg(long, env = "VIGIL_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092")]
    bootstrap_servers: String,
    #[arg(long, env = "VIGIL_SCHEMA_REGISTRY_URL", default_value = "http://127.0.0.1:8081")]
    schema_registry_url: String,
}

#[derive(Debug, clap::Args)]
pub struct ProvisionArgs {
    #[command(flatten)]
    connection: Connection,
    /// Replication factor of new topics (else `topics.replication_factor`: three, or
    /// the broker count if fewer).
    #[arg(long)]
    replication: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub struct TailArgs {
    #[command(flatten)]
    connection: Connection,
    /// Topics to read, e.g. health-alerts payment-anomalies.
    #[arg(required = true)]
    topics: Vec<String>,
    /// Stop after this many seconds without a new record (default: follow forever).
    #[arg(long)]
    idle_exit_secs: Option<u64>,
    /// Where to start: beginning, end, or a time as epoch milliseconds.
    #[arg(long, default_value = "beginning")]
    from: tail::From,
    /// Start each line with the record's partition, offset, timestamp and key.
    #[arg(long)]
    details: bool,
}

/// The pipeline the tools act on.
fn topology() -> Topology {
    SeedPipeline::default().topology()
}

/// The security settings of the Kafka and registry clients, and the seed's
/// parameters, from `VIGIL_CONFIG` and the environment.
fn config() -> Result<Config> {
    let file = std::env::var_os("VIGIL_CONFIG").map(std::path::PathBuf::from);
    connection::load(file.as_deref())?;
    Ok(Config::load(None, std::env::vars())?)
}

/// A client for metadata and reading assigned partitions: it never joins a group.
fn reader(bootstrap_servers: &str) -> Result<BaseConsumer> {
    let mut config = connection::client_config(bootstrap_servers);
    config
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("group.id", format!("vigil-admin-{}", std::process::id()));
    connection::fetch_again_when_drained(&mut config, 20_000).create().context("cannot create a Kafka client")
}

pub fn provision(args: ProvisionArgs) -> Result<()> {
    let config = config()?;
    let Connection { bootstrap_servers, schema_registry_url } = &args.connection;
    let admin: AdminClient<DefaultClientContext> =
        connection::client_config(bootstrap_servers).create().context("cannot create the Kafka admin client")?;
    let topology = topology();
    let partitions = config.runtime.partitions;
    let reader = reader(bootstrap_servers)?;
    let mut wanted = config.topics.clone();
    wanted.replication_factor = args.replication.unwrap_or(wanted.replication_factor);
    let replication = Replication::for_cluster(&reader, &wanted)?;
    let names = Names::new(&config.topics, &topology);
    let report = topics::provision(&admin, &reader, &topology, &names, partitions, replication)?;
    let mut differing = false;
    for (topic, outcome) in report {
        match outcome {
            Provisioned::Created => println!(
                "topic {topic}: created ({partitions} partitions, replication {}{})",
                replication.factor,
                replication.min_insync.map(|n| format!(", min.insync.replicas {n}")).unwrap_or_default()
            ),
            Provisioned::AlreadyThere { differences } if differences.is_empty() => {
                println!("topic {topic}: already there ({partitions} partitions)")
            }
            Provisioned::AlreadyThere { differences } => {
                differing = true;
                println!("topic {topic}: already there, with other settings: {}", differences.join("; "))
            }
        }
    }
    if differing {
        eprintln!("{}", topics::DIFFERENCES_ADVICE);
    }
    for (subject, id) in Codec::new(schema_registry_url)?.named(names).register(&topology.topics())? {
        println!("schema {subject}: id {id}");
    }
    Ok(())
}

pub fn tail(args: TailArgs) -> Result<()> {
    let config = config()?;
    let Connection { bootstrap_servers, schema_registry_url } = &args.connection;
    let topology = topology();
    let names = Names::new(&config.topics, &topology);
    let options = tail::Options { from: args.from, details: args.details, idle_exit_secs: args.idle_exit_secs };
    tail::run(&reader(bootstrap_servers)?, schema_registry_url, &topology, &names, &args.topics, &options)
}

pub fn reset(args: reset::ResetArgs) -> Result<()> {
    let config = config()?;
    reset::run(args, &config)
}
