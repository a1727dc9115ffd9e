//! The harness the Kafka test files share (`services.rs`, `reset.rs`, `faults.rs`): a freshly
//! provisioned broker and registry (from VIGIL_BOOTSTRAP_SERVERS and
//! VIGIL_SCHEMA_REGISTRY_URL, as `scripts/test.sh` exports them), the workspace's
//! binaries run as service processes with a log each, input produced as the
//! generator sends it, and the embedded runtime's records to compare with.

// Each test file uses part of the harness.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use vigil_datagen::Dataset;
use vigil_ingest::{Line, MergedInput};
use vigil_kafka::produce::InputProducer;
use vigil_kafka::topics;
use vigil_model::topology::{Topic, Topology};
use vigil_model::{Config, Source};
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

/// Each test resets every topic, so the tests of a file take this in turn.
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The partitions of every topic the tests provision.
pub const PARTITIONS: i32 = 4;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run the Kafka tests through scripts/test.sh"))
}

/// The brokers of the stack (`VIGIL_BROKERS` in its env file; 1 when not given).
pub fn brokers() -> u32 {
    std::env::var("VIGIL_BROKERS").ok().and_then(|n| n.parse().ok()).unwrap_or(1)
}

/// The pipeline the tests run: the seed's.
pub fn topology() -> Topology {
    SeedPipeline::default().topology()
}

/// The seed pipeline's names on the cluster, in no namespace.
pub fn names() -> vigil_kafka::names::Names {
    vigil_kafka::names::Names::new(&Default::default(), &topology())
}

/// The topics of results a user reads.
pub fn result_topics() -> Vec<&'static Topic> {
    topology().result_topics()
}

/// The workspace's `vigil` binary, next to this test's own executable.
fn binary() -> std::path::PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let path = deps.parent().unwrap().join("vigil");
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first (scripts/test.sh does)",
        path.display()
    );
    path
}

pub struct Stack {
    /// Where the Vigil processes this stack starts reach Kafka and the registry.
    pub bootstrap: String,
    pub registry: String,
    pub run: String,
    /// The broker's plaintext listener, for the test's own clients.
    plain_bootstrap: String,
    /// The security settings of the Vigil processes (none on the plaintext stack).
    security: Vec<(String, String)>,
    /// The namespace of the pipeline's topics and groups (`[topics] namespace`); empty:
    /// none, and each service in a group of this run's (`VIGIL_GROUP_ID`).
    namespace: String,
}

impl Stack {
    /// Every topic deleted and provisioned again; a fresh run id for groups, starting
    /// with `run_prefix` (which tells one test file's groups and logs from another's).
    pub fn fresh(run_prefix: &str) -> Stack {
        let bootstrap = env("VIGIL_BOOTSTRAP_SERVERS");
        Stack::provisioned(run_prefix, bootstrap.clone(), env("VIGIL_SCHEMA_REGISTRY_URL"), Vec::new())
    }

    /// As [`Stack::fresh`], with the Vigil processes on the local stack's secured
    /// side: the broker's SASL_SSL listener (SCRAM-SHA-512, the stack's CA), set by
    /// `VIGIL_KAFKA_*` variables, and the registry over https with basic auth, set in
    /// the configuration file (`VIGIL_CONFIG`), so both ways are used.
    pub fn fresh_secured(run_prefix: &str) -> Stack {
        let (user, password, ca) =
            (env("VIGIL_SECURE_USERNAME"), env("VIGIL_SECURE_PASSWORD"), env("VIGIL_SECURE_CA_LOCATION"));
        // Beside the stack's CA, in its own state folder, where its passwords already
        // are: not in the machine's shared temporary folder.
        let config = std::path::Path::new(&ca).with_file_name(format!("vigil-secured-{}.toml", std::process::id()));
        let registry =
            format!("[schema_registry]\nusername = {user:?}\npassword = {password:?}\nca_location = {ca:?}\n");
        std::fs::write(&config, registry).unwrap();
        let security = [
            ("VIGIL_KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
            ("VIGIL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512"),
            ("VIGIL_KAFKA_SASL_USERNAME", &user),
            ("VIGIL_KAFKA_SASL_PASSWORD", &password),
            ("VIGIL_KAFKA_SSL_CA_LOCATION", &ca),
            ("VIGIL_CONFIG", config.to_str().unwrap()),
        ];
        let security = security.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Stack::provisioned(
            run_prefix,
            env("VIGIL_SECURE_BOOTSTRAP_SERVERS"),
            env("VIGIL_SECURE_REGISTRY_URL"),
            security,
        )
    }

    fn provisioned(run_prefix: &str, bootstrap: String, registry: String, security: Vec<(String, String)>) -> Stack {
        let stack = Stack {
            bootstrap,
            registry,
            run: format!(
                "{run_prefix}{}-{}",
                std::process::id(),
                RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ),
            plain_bootstrap: env("VIGIL_BOOTSTRAP_SERVERS"),
            security,
            namespace: String::new(),
        };
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &stack.plain_bootstrap).create().unwrap();
        let names: Vec<String> =
            topics::all_topics(&topology(), &names(), PARTITIONS as u32).into_iter().map(|t| t.name).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _ = rt.block_on(admin.delete_topics(&refs, &AdminOptions::new()));
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", &stack.plain_bootstrap).create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while names.iter().any(|n| topics::partition_count(&consumer, n).unwrap_or(0) > 0) {
            assert!(Instant::now() < deadline, "topics were not deleted");
            std::thread::sleep(Duration::from_millis(200));
        }
        let status = stack.admin(&["provision"]).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "vigil provision failed");
        stack
    }

    /// `vigil` with `command`, its first argument.
    fn command(&self, command: &str) -> Command {
        let mut cmd = Command::new(binary());
        cmd.arg(command)
            .env("VIGIL_BOOTSTRAP_SERVERS", &self.bootstrap)
            .env("VIGIL_SCHEMA_REGISTRY_URL", &self.registry)
            .env("RUST_LOG", "info,rdkafka=warn")
            .envs(self.security.iter().map(|(k, v)| (k, v)));
        if !self.namespace.is_empty() {
            cmd.env("VIGIL_TOPICS_NAMESPACE", &self.namespace);
        }
        cmd
    }

    /// The same broker and registry for a pipeline in `namespace` (new to the cluster):
    /// its topics provisioned, its services in its namespace's groups.
    pub fn namespaced(&self, namespace: &str) -> Stack {
        let stack = Stack {
            bootstrap: self.bootstrap.clone(),
            registry: self.registry.clone(),
            run: format!("{namespace}-{}", self.run),
            plain_bootstrap: self.plain_bootstrap.clone(),
            security: self.security.clone(),
            namespace: namespace.to_string(),
        };
        let status = stack.admin(&["provision"]).stdout(Stdio::null()).status().unwrap();
        assert!(status.success(), "vigil provision in namespace {namespace} failed");
        stack
    }

    /// One of `vigil`'s tools: `args` starts with its name (`provision`, `tail`, …).
    pub fn admin(&self, args: &[&str]) -> Command {
        let mut cmd = self.command(args[0]);
        cmd.args(&args[1..]);
        cmd
    }

    pub fn generator(&self, args: &[&str]) -> Command {
        let mut cmd = self.command("generate");
        cmd.arg("--kafka").args(args);
        cmd
    }

    /// A stage's consumer group in this run, as the services are given it.
    pub fn group(&self, stage: &str) -> String {
        format!("vigil-{stage}-{}", self.run)
    }

    /// One service instance, logging to a file of its own under the target folder.
    pub fn spawn(&self, service: &str, instance: &str) -> Running {
        self.spawn_with(service, instance, &[])
    }

    /// One service instance with variables of its own besides the stack's.
    pub fn spawn_with(&self, service: &str, instance: &str, vars: &[(&str, &str)]) -> Running {
        let log_dir = binary().parent().unwrap().join("kafka-test-logs");
        std::fs::create_dir_all(&log_dir).unwrap();
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log = log_dir.join(format!("{}-{service}-{instance}-{n}.log", self.run));
        let mut cmd = self.command(service);
        if service == "join-enrich" {
            // The tests pause their input mid-stream (to commit, kill, stall the
            // broker), longer than the wall-clock idle timeout: the join's orders
            // partitions could go idle while its payments still flow, and payments of
            // the next burst overtake their orders, judged unmatched as Flink's
            // idleness would judge them. Every test input ends with end markers, so
            // the join never needs idleness to finish; the sparse device partitions do.
            cmd.env("VIGIL_RUNTIME_IDLE_WALL_CLOCK_MS", "600000");
        }
        if self.namespace.is_empty() {
            cmd.env("VIGIL_GROUP_ID", self.group(service));
        }
        let child = cmd
            .envs(vars.iter().copied())
            .env("VIGIL_INSTANCE", instance)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Running { name: service.to_string(), child, log }
    }

    /// Every service, each ready (tasks restored, loop running) when this returns.
    pub fn spawn_all(&self) -> Vec<Running> {
        self.spawn_all_with(|_| &[])
    }

    /// As [`Stack::spawn_all`], each service with the variables `vars` gives it.
    pub fn spawn_all_with<'a>(&self, vars: impl Fn(&str) -> &'a [(&'a str, &'a str)]) -> Vec<Running> {
        let services: Vec<Running> =
            topology().stages.iter().map(|s| self.spawn_with(s.name, "0", vars(s.name))).collect();
        services.iter().for_each(Running::wait_ready);
        services
    }

    /// The test's own producer (on the plaintext stack: it is a client without the
    /// processes' security settings).
    pub fn producer(&self) -> InputProducer {
        assert!(self.security.is_empty(), "the secured stack takes its input from `vigil generate`");
        let topics = vigil_model::config::TopicsConfig { namespace: self.namespace.clone(), ..Default::default() };
        InputProducer::new(&self.bootstrap, &self.registry, Config::default().runtime.partitions)
            .unwrap()
            .named(vigil_kafka::names::Names::new(&topics, &topology()))
    }
}

/// A test's start: its turn (held until the guard drops), then a fresh stack (see
/// [`Stack::fresh`]) with every service running and ready.
pub fn start(run_prefix: &str) -> (MutexGuard<'static, ()>, Stack, Vec<Running>) {
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh(run_prefix);
    let services = stack.spawn_all();
    (one, stack, services)
}

/// Produces an input line as the generator does: a record as Avro, a bad line as it is.
pub fn send_line(producer: &InputProducer, line: &Line) {
    match line {
        Line::Record(r) => producer.send_record(r).unwrap(),
        Line::Dead(d) => producer.send_line(Source::from_name(&d.source).unwrap(), &d.line).unwrap(),
    }
}

/// The embedded runtime's tagged lines for a dataset, sorted, without dead letters.
pub fn reference(dataset: Dataset) -> Vec<String> {
    let pipeline = SeedPipeline::default();
    let mut lines =
        vigil_embedded::result_lines(&pipeline, &Config::default(), MergedInput::from_dataset(dataset)).unwrap();
    lines.sort();
    lines
}

/// `got` equals `expected`; `what` says what each is when they differ.
pub fn assert_same(got: &[String], expected: &[String], what: &str) {
    if got != expected {
        // As multisets: a line written twice is an extra one.
        let (got_counts, expected_counts) = (counts(got), counts(expected));
        let surplus = |of: &BTreeMap<&str, i64>, over: &BTreeMap<&str, i64>| -> Vec<String> {
            of.iter()
                .filter_map(|(l, n)| {
                    let more = n - over.get(l).copied().unwrap_or(0);
                    (more > 0).then(|| format!("{more}× {l}"))
                })
                .take(10)
                .collect()
        };
        let missing = surplus(&expected_counts, &got_counts);
        let extra = surplus(&got_counts, &expected_counts);
        panic!(
            "{what}: {} records vs {} expected\nmissing: {missing:#?}\nextra: {extra:#?}",
            got.len(),
            expected.len()
        );
    }
}

fn counts(lines: &[String]) -> BTreeMap<&str, i64> {
    let mut counts = BTreeMap::new();
    lines.iter().for_each(|l| *counts.entry(l.as_str()).or_default() += 1);
    counts
}

/// Each service's /metrics, next to its log (`<log>.metrics`), for a failed test's
/// post-mortem: what was paused, idle, restored or degraded when the output fell short.
pub fn keep_metrics(services: &[Running]) {
    for s in services {
        let text = std::panic::catch_unwind(|| s.metrics_text()).unwrap_or_else(|_| "no answer".into());
        let _ = std::fs::write(s.log.with_extension("metrics"), text);
    }
}

/// Each service's committed ledger (records read, on time, late, dead letters,
/// rerouted, written) and transaction aborts, one metric line each: where a failed
/// test's records went.
pub fn ledgers(services: &[Running]) -> String {
    let lines = services.iter().flat_map(|s| {
        let text = std::panic::catch_unwind(|| s.metrics_text()).unwrap_or_else(|_| format!("{}: no answer", s.name));
        let wanted =
            |l: &&str| l.starts_with("vigil_member_ledger_records") || l.starts_with("vigil_transaction_aborts");
        text.lines().filter(wanted).map(str::to_string).collect::<Vec<_>>()
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// A running service process and its log.
pub struct Running {
    pub name: String,
    pub child: Child,
    log: std::path::PathBuf,
}

impl Running {
    pub fn log_text(&self) -> String {
        let raw = std::fs::read_to_string(&self.log).unwrap_or_default();
        // Drop the colour codes of the log lines.
        let mut text = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                chars.by_ref().take_while(|&c| c != 'm').for_each(drop);
            } else {
                text.push(c);
            }
        }
        text
    }

    pub fn wait_ready(&self) {
        self.wait_for_log("running service=", 1, Duration::from_secs(60));
    }

    /// Waits until the log holds `count` lines with `needle`.
    pub fn wait_for_log(&self, needle: &str, count: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.log_text().lines().filter(|l| l.contains(needle)).count() < count {
            assert!(Instant::now() < deadline, "{}: no {count} lines of {needle:?}:\n{}", self.name, self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }
}

/// A failing test must not leave services running into the next one.
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Stack {
    /// What the output topics hold now, as sorted tagged lines, and the dead letters.
    pub fn outputs(&self) -> (Vec<String>, Vec<String>) {
        let mut args = vec!["tail", "--idle-exit-secs", "3", "dead-letters"];
        args.extend(result_topics().iter().map(|t| t.name));
        let out = self.admin(&args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let (dead, mut lines): (Vec<String>, Vec<String>) =
            text.lines().map(str::to_string).partition(|l| l.starts_with("DEAD_LETTER>"));
        lines.sort();
        (lines, dead)
    }

    /// Waits until the outputs equal `expected` (or the time is up) and returns them.
    pub fn wait_for(&self, expected: &[String], within: Duration) -> (Vec<String>, Vec<String>) {
        let deadline = Instant::now() + within;
        loop {
            let got = self.outputs();
            if got.0 == expected || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// Produces input lines as the generator does: records as Avro, bad lines as they are.
pub fn send_lines(producer: &InputProducer, lines: &[Line]) {
    for line in lines {
        send_line(producer, line);
    }
    producer.flush().unwrap();
}

impl Running {
    /// The service's own /metrics, as Prometheus reads it.
    pub fn metrics_text(&self) -> String {
        self.get("/metrics").1
    }

    /// A GET of `path` on the service's /metrics address: the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let text = self.log_text();
        let addr = text.split("addr=").nth(1).and_then(|r| r.split_whitespace().next()).expect("a metrics address");
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        write!(conn, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string());
        (status, body)
    }

    /// A counter from the service's own /metrics.
    pub fn metric(&self, name: &str) -> u64 {
        self.metric_where(name, "")
    }

    /// A metric summed over its series whose line holds `label` (`outcome="read"`, say).
    pub fn metric_where(&self, name: &str, label: &str) -> u64 {
        self.metrics_text()
            .lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    }
}

/// Waits until each of `names` has committed at least `min_records` input records
/// (its committed ledger): each then has state and offsets committed for part of its
/// input. How many commits that takes depends on how its input arrived, so it is not
/// counted: a member that read everything in one go commits once and then idles.
pub fn wait_for_commits(services: &[Running], names: &[&str], min_records: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let behind: Vec<(&str, u64)> = services
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
            .map(|s| (s.name.as_str(), s.metric_where("vigil_member_ledger_records", r#"outcome="read""#)))
            .filter(|&(_, committed)| committed < min_records)
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "the services did not get going: (service, committed records) {behind:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
