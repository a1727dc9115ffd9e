//! `vigil-admin provision`: creates every topic (partitions, compacted changelogs) and
//! registers every value schema, idempotently. `vigil-admin tail TOPIC…`: prints
//! output topics in the seed's tagged NDJSON form, reading only committed records.
//! `vigil-admin reset STAGE…|--all`: makes stages process their inputs again from
//! the start. `vigil-admin healthcheck URL`: exits 0 if the URL answers 200 (for
//! container healthchecks, in images without curl).

mod healthcheck;
mod reset;
mod tail;

use std::process::ExitCode;
use vigil_kafka::connection;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::BaseConsumer;
use vigil_kafka::codec::Codec;
use vigil_kafka::topics::{self, Provisioned};
use vigil_model::Config;

#[derive(Debug, Parser)]
#[command(name = "vigil-admin", version)]
struct Args {
    #[arg(long, env = "VIGIL_BOOTSTRAP_SERVERS", default_value = "127.0.0.1:9092", global = true)]
    bootstrap_servers: String,
    #[arg(long, env = "VIGIL_SCHEMA_REGISTRY_URL", default_value = "http://127.0.0.1:8081", global = true)]
    schema_registry_url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create every topic and register every schema (safe to repeat).
    Provision {
        /// Replication factor of new topics.
        #[arg(long, default_value_t = 1)]
        replication: i32,
    },
    /// Print records of output topics as tagged NDJSON lines.
    Tail {
        /// Topics to read, e.g. health-alerts payment-anomalies.
        #[arg(required = true)]
        topics: Vec<String>,
        /// Stop after this many seconds without a new record (default: follow forever).
        #[arg(long)]
        idle_exit_secs: Option<u64>,
    },
    Reset(reset::ResetArgs),
    /// Exit 0 if an http:// URL answers 200 within 3 seconds (a container healthcheck).
    Healthcheck {
        url: String,
    },
}

fn main() -> ExitCode {
    vigil_kafka::observe::init_tracing_at("warn");
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil-admin: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<()> {
    vigil_kafka::connection::load(std::env::var_os("VIGIL_CONFIG").map(std::path::PathBuf::from).as_deref())?;
    if let Command::Healthcheck { url } = &args.command {
        return healthcheck::run(url);
    }
    let config = Config::load(None, std::env::vars())?;
    if let Command::Reset(reset) = args.command {
        return reset::run(reset, &args.bootstrap_servers, &config);
    }
    let mut consumer_config = connection::client_config(&args.bootstrap_servers);
    consumer_config
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        // Assigned partitions only; the group is never joined or committed to.
        .set("group.id", format!("vigil-admin-{}", std::process::id()));
    let consumer: BaseConsumer = connection::fetch_again_when_drained(&mut consumer_config, 20_000)
        .create()
        .context("cannot create a Kafka client")?;
    match args.command {
        Command::Provision { replication } => {
            let admin: AdminClient<DefaultClientContext> = connection::client_config(&args.bootstrap_servers)
                .create()
                .context("cannot create the Kafka admin client")?;
            let report = topics::provision(&admin, &consumer, config.runtime.partitions, replication)?;
            for (topic, outcome) in report {
                let what = if outcome == Provisioned::Created { "created" } else { "already there" };
                println!("topic {topic}: {what} ({} partitions)", config.runtime.partitions);
            }
            for (subject, id) in Codec::new(&args.schema_registry_url)?.register_all()? {
                println!("schema {subject}: id {id}");
            }
            Ok(())
        }
        Command::Tail { topics: names, idle_exit_secs } => {
            tail::run(&consumer, &args.schema_registry_url, &names, idle_exit_secs)
        }
        Command::Healthcheck { .. } | Command::Reset(_) => unreachable!("answered above"),
    }
}
