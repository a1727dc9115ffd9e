//! `vigil-admin provision`: creates every topic (partitions, compacted changelogs) and
//! registers every value schema, idempotently. `vigil-admin tail TOPIC…`: prints
//! output topics in the seed's tagged NDJSON form, reading only committed records.
//! `vigil-admin healthcheck URL`: exits 0 if the URL answers 200 (for container
//! healthchecks, in images without curl).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use vigil_kafka::codec::Codec;
use vigil_kafka::markers;
use vigil_kafka::tail::tagged_line;
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
    /// Exit 0 if an http:// URL answers 200 within 3 seconds (a container healthcheck).
    Healthcheck { url: String },
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil-admin: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<()> {
    if let Command::Healthcheck { url } = &args.command {
        return healthcheck(url);
    }
    let config = Config::load(None, std::env::vars())?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap_servers)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        // Assigned partitions only; the group is never joined or committed to.
        .set("group.id", format!("vigil-admin-{}", std::process::id()))
        .create()
        .context("cannot create a Kafka client")?;
    match args.command {
        Command::Provision { replication } => {
            let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                .set("bootstrap.servers", &args.bootstrap_servers)
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
        Command::Healthcheck { .. } => unreachable!("answered above"),
        Command::Tail { topics: names, idle_exit_secs } => {
            let wanted: Vec<topics::Topic> = names
                .iter()
                .map(|n| topics::by_name(n).with_context(|| format!("`{n}` is not a Vigil topic")))
                .collect::<Result<_>>()?;
            let mut tpl = rdkafka::TopicPartitionList::new();
            for t in &wanted {
                let n = topics::partition_count(&consumer, t.name)?;
                if n == 0 {
                    bail!("topic `{}` does not exist; run `vigil-admin provision` first", t.name);
                }
                for p in 0..n as i32 {
                    tpl.add_partition_offset(t.name, p, rdkafka::Offset::Beginning)?;
                }
            }
            consumer.assign(&tpl)?;
            let codec = Codec::new(&args.schema_registry_url)?;
            let mut last = Instant::now();
            loop {
                match consumer.poll(Duration::from_millis(200)) {
                    Some(Ok(m)) => {
                        last = Instant::now();
                        if markers::read(&m).is_some() {
                            continue;
                        }
                        let topic = topics::by_name(m.topic()).expect("an assigned topic");
                        match codec.decode_value(m.payload().unwrap_or_default()) {
                            Ok(value) => println!("{}", tagged_line(topic, &value)),
                            Err(e) => eprintln!(
                                "vigil-admin: {} partition {} offset {}: {e}",
                                m.topic(),
                                m.partition(),
                                m.offset()
                            ),
                        }
                    }
                    Some(Err(e)) => eprintln!("vigil-admin: {e}"),
                    None => {}
                }
                if idle_exit_secs.is_some_and(|s| last.elapsed() >= Duration::from_secs(s)) {
                    return Ok(());
                }
            }
        }
    }
}

/// One HTTP/1.0 GET; healthy if the status is 200.
fn healthcheck(url: &str) -> Result<()> {
    use std::io::{Read, Write};
    use std::net::{TcpStream, ToSocketAddrs};
    let rest = url.strip_prefix("http://").with_context(|| format!("`{url}` is not an http:// URL"))?;
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve `{authority}`"))?
        .next()
        .with_context(|| format!("`{authority}` has no address"))?;
    let timeout = Duration::from_secs(3);
    let mut conn = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("cannot connect to {addr}"))?;
    conn.set_read_timeout(Some(timeout))?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n")?;
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    let status = answer.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default().trim();
        bail!("{url} answered `{status}`: {body}")
    }
}
