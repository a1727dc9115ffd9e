//! `vigil`: Vigil on Kafka in one binary. A stage's name runs one member of that stage
//! (`vigil join-enrich`); `jobmanager` and `taskmanager` run the cluster's processes;
//! the rest are tools: `provision`, `tail`, `reset`, `generate`, `healthcheck`,
//! `receive-alerts`, `stages`, `outputs`. (The embedded pipeline is `vigil-pipeline`, which needs no Kafka.)

mod admin;
mod generate;
mod jobmanager;
mod receiver;
mod taskmanager;

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use vigil_kafka::observe;
use vigil_kafka::services;
use vigil_model::topology::DEAD_LETTERS;
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

#[derive(Debug, Parser)]
#[command(
    name = "vigil",
    version,
    about = "Vigil on Kafka: the stages, the jobmanager and taskmanagers, and the tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The head of the cluster: topics and schemas, the dashboard, the REST API.
    Jobmanager(jobmanager::Args),
    /// A worker of the cluster: members of every stage in its slots.
    Taskmanager(taskmanager::Args),
    /// Create every topic and register every schema (safe to repeat).
    Provision(admin::ProvisionArgs),
    /// Print records of output topics as tagged NDJSON lines (committed records only).
    Tail(admin::TailArgs),
    Reset(admin::reset::ResetArgs),
    /// Write datasets, stream generator records, or produce them to the input topics.
    Generate(generate::Args),
    /// Exit 0 if an http:// URL answers 200 within 3 seconds (a container healthcheck).
    Healthcheck {
        url: String,
    },
    /// A webhook receiver for the notifier and Alertmanager, to try them with: keeps
    /// one alert per idempotency key, prints each, shows them at GET /received.
    ReceiveAlerts {
        #[arg(long, env = "VIGIL_RECEIVER_ADDR", default_value = "127.0.0.1:9000")]
        listen: std::net::SocketAddr,
    },
    /// The stages, one a line, upstream first: what `vigil STAGE` runs.
    Stages,
    /// The topics of results, dead letters last, one a line: what `tail` prints.
    Outputs,
    #[command(external_subcommand)]
    Stage(Vec<String>),
}

/// The stages' names, upstream first: what `vigil STAGE` runs.
fn stage_names() -> Vec<&'static str> {
    services::seed_services().iter().map(|s| s.name()).collect()
}

fn main() -> ExitCode {
    let help = format!(
        "Stages (each runs one member of it: `vigil STAGE --help`): {}, and {} (delivers alerts: \
         docs/notifications.md)",
        stage_names().join(", "),
        vigil_kafka::notify::NAME
    );
    let matches = Cli::command().after_help(help).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let what = matches.subcommand_name().unwrap_or("vigil").to_string();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("vigil {what}: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Jobmanager(args) => {
            observe::init_tracing();
            jobmanager::run(args)
        }
        Command::Taskmanager(args) => {
            observe::init_tracing();
            taskmanager::run(args)
        }
        Command::Provision(args) => {
            observe::init_tracing_at("warn");
            admin::provision(args)
        }
        Command::Tail(args) => {
            observe::init_tracing_at("warn");
            admin::tail(args)
        }
        Command::Reset(args) => {
            observe::init_tracing_at("warn");
            admin::reset(args)
        }
        Command::Generate(args) => {
            observe::init_tracing();
            generate::run(args)
        }
        Command::Healthcheck { url } => admin::healthcheck::run(&url),
        Command::ReceiveAlerts { listen } => {
            observe::init_tracing();
            receiver::run(listen)
        }
        Command::Stages => {
            stage_names().iter().for_each(|name| println!("{name}"));
            Ok(())
        }
        Command::Outputs => {
            let topology = SeedPipeline::default().topology();
            topology.result_topics().iter().chain([&&DEAD_LETTERS]).for_each(|t| println!("{}", t.name));
            Ok(())
        }
        Command::Stage(args) => {
            let Some(service) = services::by_name(&args[0]) else {
                bail!("`{}` is neither a stage nor a command; the stages are {}", args[0], stage_names().join(", "));
            };
            observe::init_tracing();
            vigil_kafka::cli::run_stage(service, args)
        }
    }
}
