//! The exactly-once consume-transform-produce loop every service runs.
//!
//! One task (operator instance) per input partition — or one for all of them in a
//! global service — as in the embedded runtime. In a transaction that commits every
//! `commit_interval`: the outputs, each touched task's snapshot to the service's
//! compacted changelog, watermark markers on every output partition, and the input
//! offsets (`send_offsets_to_transaction` with the group metadata, Kafka Streams'
//! EOS v2). A task is restored from the changelog (read_committed) before its
//! partition is processed. When a transaction fails the loop aborts it, puts every
//! task back to its last committed snapshot and rewinds the inputs to the committed
//! offsets, so nothing is lost or doubled. A fenced producer stops a keyed stage's
//! member; in a global stage (one task over every partition) the member that Kafka
//! elects leads and the others stand by (see `election`), and a fenced leader steps
//! back to standby.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize, Serializer};
use tracing::{info, warn};
use vigil_model::output::{LatePayment, RecordType};
use vigil_model::{Config, Millis};
use vigil_stream::snapshot::{decode, encode, Stateful};
use vigil_stream::source_clock::{Idleness, Progress, SourceClock};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Operator;

use crate::codec::{Codec, CodecError};
use crate::election::Leadership;
use crate::markers::{self, Marker, UpstreamWatermarks, Writer};
use crate::metrics::{now_ms, MemberMetrics};
use crate::observe::Beat;
use crate::produce::{self, Kafka};
use crate::status::{Commit, Ledger, Role, SharedStatus, TaskStatus};
use crate::topics::{self, Topic, DEAD_LETTERS, ENRICHED_PAYMENTS_LATE};

const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a service's input comes from, which decides how its watermark is known.
#[derive(Debug, Clone, Copy)]
pub enum InputKind {
    /// Written by users: the watermark trails the records' event times by `bound_ms`.
    Source { bound_ms: Millis },
    /// Written by another Vigil service: the watermark comes in its markers.
    Upstream,
}

#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub topic: Topic,
    pub kind: InputKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// One task per input partition; partitions are shared out in a consumer group.
    PerPartition,
    /// One task over every partition (a global aggregate): one active instance.
    Global,
}

/// A record a service writes.
pub struct Outgoing {
    pub topic: Topic,
    pub key: String,
    pub value: Vec<u8>,
}

impl Outgoing {
    /// A payment that reached a payment window after it closed, on the late topic.
    pub fn late_payment(codec: &Codec, late: &LatePayment) -> Result<Self, CodecError> {
        let value = codec.encode(ENRICHED_PAYMENTS_LATE, late)?;
        Ok(Outgoing { topic: ENRICHED_PAYMENTS_LATE, key: late.payment.key().to_string(), value })
    }
}

/// What makes a service: its operator, its topics, and how records map to both.
pub trait Service {
    type Op: Operator + Stateful;

    fn name(&self) -> &'static str;
    fn parallelism(&self) -> Parallelism;
    fn inputs(&self, config: &Config) -> Vec<Input>;
    /// Every topic this service writes records to.
    fn outputs(&self) -> Vec<Topic>;
    /// The outputs other services read, which carry this service's watermark.
    fn watermarked(&self) -> Vec<Topic>;
    fn operator(&self, config: &Config) -> Self::Op;
    fn decode(&self, codec: &Codec, topic: Topic, payload: &[u8]) -> Result<<Self::Op as Operator>::In, CodecError>;
    /// Event time of an input record (used for `Source` inputs).
    fn event_ts(&self, record: &<Self::Op as Operator>::In) -> Millis;
    fn encode(&self, codec: &Codec, output: <Self::Op as Operator>::Out) -> Result<Outgoing, CodecError>;
    /// Whether an output is a late side output (counted in the metrics).
    fn is_late(&self, output: &<Self::Op as Operator>::Out) -> bool;
}

/// How to reach Kafka and the registry, who this member is, and how often to commit.
#[derive(Debug, Clone)]
pub struct Settings {
    pub bootstrap_servers: String,
    pub registry_url: String,
    pub group_id: String,
    /// This member's name, unique within its stage.
    pub member: String,
    pub transactional_id: String,
    pub commit_interval: Duration,
    pub config: Config,
}

/// What every member in a process shares: where Kafka and the registry are, how often
/// to commit, and the seed's parameters.
#[derive(Debug, Clone)]
pub struct Common {
    pub bootstrap_servers: String,
    pub registry_url: String,
    pub commit_interval: Duration,
    pub config: Config,
}

impl Settings {
    /// A member of `stage` in the consumer group `vigil-<stage>` (unless `group_id`
    /// says otherwise). A keyed stage's members each have a transactional id of their
    /// own; a global stage's members share one, so a new leader fences the old one.
    pub fn for_member(
        stage: &str,
        parallelism: Parallelism,
        member: &str,
        group_id: Option<String>,
        common: &Common,
    ) -> Settings {
        Settings {
            bootstrap_servers: common.bootstrap_servers.clone(),
            registry_url: common.registry_url.clone(),
            group_id: group_id.unwrap_or_else(|| format!("vigil-{stage}")),
            member: member.to_string(),
            transactional_id: match parallelism {
                Parallelism::PerPartition => format!("vigil-{stage}-{member}"),
                Parallelism::Global => format!("vigil-{stage}"),
            },
            commit_interval: common.commit_interval,
            config: common.config.clone(),
        }
    }
}

/// The producer lost its transactional id to another member (or failed for good).
#[derive(Debug, thiserror::Error)]
#[error(
    "the transactional producer `{transactional_id}` was fenced or failed fatally ({reason}); another member with \
     the same transactional id has taken over"
)]
pub struct Fenced {
    transactional_id: String,
    reason: String,
}

/// The value a service writes to its changelog for one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TaskSnapshot {
    operator: Vec<u8>,
    input_watermark: Millis,
    sent_watermark: Millis,
    /// Whether the last markers said the task is idle.
    sent_idle: bool,
    /// (input index, partition, progress) for source inputs.
    sources: Vec<(usize, i32, Progress)>,
    /// (input index, partition, per-writer watermarks) for upstream inputs.
    upstream: Vec<(usize, i32, Vec<Writer>)>,
    ledger: Ledger,
}

struct Task<O> {
    operator: O,
    input_watermark: Millis,
    sent_watermark: Millis,
    /// Every input is idle: the task says so downstream instead of holding it back.
    idle: bool,
    sent_idle: bool,
    /// What the changelog holds for this task: where an abort puts it back.
    committed: Option<Vec<u8>>,
    touched: bool,
    ledger: Ledger,
    committed_ledger: Ledger,
}

/// The record a bad input becomes on `dead-letters`.
#[derive(Serialize)]
struct DeadLetter<'a> {
    record_type: RecordType,
    source: &'a str,
    partition: i32,
    offset: i64,
    reason: String,
    #[serde(serialize_with = "bytes")]
    payload: &'a [u8],
}

fn bytes<S: Serializer>(b: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(b)
}

/// Rebalances reported by the consumer's callbacks, handled by the loop.
#[derive(Default)]
struct RebalanceLog {
    revoked: bool,
    assigned: Vec<(String, i32)>,
}

struct GroupContext {
    log: Arc<Mutex<RebalanceLog>>,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            self.log.lock().expect("rebalance log").revoked = true;
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut log = self.log.lock().expect("rebalance log");
            log.assigned.extend(tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())));
        }
    }
}

/// The changelog reader waits for the end of its partition, which librdkafka also
/// reports as an error; only real errors are worth a log line.
struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            warn!(%error, reason, "changelog reader error");
        }
    }
}

impl ConsumerContext for QuietEof {}

pub struct Runner<S: Service> {
    service: S,
    settings: Settings,
    codec: Codec,
    metrics: MemberMetrics,
    status: SharedStatus,
    beat: Beat,
    consumer: BaseConsumer<GroupContext>,
    producer: Kafka,
    rebalances: Arc<Mutex<RebalanceLog>>,
    inputs: Vec<Input>,
    watermarked: Vec<Topic>,
    changelog: String,
    partitions: i32,
    clocks: Vec<Option<SourceClock>>,
    upstream: Vec<Option<UpstreamWatermarks>>,
    tasks: BTreeMap<i32, Task<S::Op>>,
    /// Next offset to read per input partition, and as of the last commit.
    positions: HashMap<(String, i32), i64>,
    committed: HashMap<(String, i32), i64>,
    /// When each assigned source partition last delivered anything, for idleness.
    last_heard: HashMap<(usize, i32), Instant>,
    idle_after: Duration,
    /// The last poll found nothing: everything fetched so far has been processed.
    drained: bool,
    in_transaction: bool,
    dirty: bool,
    last_commit: Instant,
    scratch: Vec<<S::Op as Operator>::Out>,
    /// Records-in counters by input index, records-out counters by topic.
    records_in: Vec<prometheus::IntCounter>,
    records_out: HashMap<&'static str, prometheus::IntCounter>,
}

/// The parts a member runs with besides its settings: where it counts, reports and
/// shows it is alive.
pub struct Observers {
    pub metrics: MemberMetrics,
    pub status: SharedStatus,
    pub beat: Beat,
}

fn transactional_producer(settings: &Settings) -> Result<Kafka> {
    ClientConfig::new()
        .set("bootstrap.servers", &settings.bootstrap_servers)
        .set("transactional.id", &settings.transactional_id)
        .set("enable.idempotence", "true")
        // Same partition for the same key as Kafka's Java clients and the embedded runtime.
        .set("partitioner", "murmur2_random")
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .set("message.max.bytes", "34000000")
        .create()
        .context("cannot create the Kafka producer")
}

impl<S: Service> Runner<S> {
    pub fn new(service: S, settings: Settings, observers: Observers) -> Result<Self> {
        let codec = Codec::new(&settings.registry_url)?;
        let rebalances = Arc::new(Mutex::new(RebalanceLog::default()));
        let mut consumer_config = ClientConfig::new();
        consumer_config
            .set("bootstrap.servers", &settings.bootstrap_servers)
            .set("group.id", &settings.group_id)
            .set("client.id", &settings.transactional_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", "read_committed")
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", "10000")
            // The broker answers a fetch as soon as there is data or after this wait;
            // librdkafka's 500 ms default would dominate end-to-end latency.
            .set("fetch.wait.max.ms", "20");
        if service.parallelism() == Parallelism::PerPartition {
            // Static membership: a restarted member (same name) takes its partitions
            // back at once instead of waiting for the dead one's session to expire.
            consumer_config.set("group.instance.id", &settings.transactional_id);
        }
        let consumer: BaseConsumer<GroupContext> = consumer_config
            .create_with_context(GroupContext { log: rebalances.clone() })
            .context("cannot create the Kafka consumer")?;
        let producer = transactional_producer(&settings)?;
        let partitions = settings.config.runtime.partitions as i32;
        let inputs = service.inputs(&settings.config);
        let mut topic_names: Vec<String> = inputs.iter().map(|i| i.topic.name.to_string()).collect();
        topic_names.extend(service.outputs().iter().map(|t| t.name.to_string()));
        topic_names.push(DEAD_LETTERS.name.to_string());
        topic_names.push(topics::changelog(service.name()));
        topics::check(&consumer, &topic_names, partitions as u32)?;
        let Observers { metrics, status, beat } = observers;
        let records_in = inputs.iter().map(|i| metrics.records_in(i.topic.name)).collect();
        let records_out =
            service.outputs().iter().chain([&DEAD_LETTERS]).map(|t| (t.name, metrics.records_out(t.name))).collect();
        let mut runner = Runner {
            watermarked: service.watermarked(),
            changelog: topics::changelog(service.name()),
            idle_after: Duration::from_millis(settings.config.runtime.idle_timeout_ms),
            service,
            settings,
            codec,
            metrics,
            status,
            beat,
            consumer,
            producer,
            rebalances,
            inputs,
            partitions,
            clocks: Vec::new(),
            upstream: Vec::new(),
            tasks: BTreeMap::new(),
            positions: HashMap::new(),
            committed: HashMap::new(),
            last_heard: HashMap::new(),
            drained: false,
            in_transaction: false,
            dirty: false,
            last_commit: Instant::now(),
            scratch: Vec::new(),
            records_in,
            records_out,
        };
        runner.reset_clocks();
        Ok(runner)
    }

    /// Source clocks and upstream watermarks as before any record.
    fn reset_clocks(&mut self) {
        let partitions = self.partitions as u32;
        self.clocks = self
            .inputs
            .iter()
            .map(|i| match i.kind {
                InputKind::Source { bound_ms } => Some(SourceClock::new(partitions, bound_ms, Idleness::Marked)),
                InputKind::Upstream => None,
            })
            .collect();
        // Every upstream task writes every partition; there is one per partition.
        self.upstream = self
            .inputs
            .iter()
            .map(|i| matches!(i.kind, InputKind::Upstream).then(|| UpstreamWatermarks::new(partitions, partitions)))
            .collect();
    }

    /// Runs until `shutdown` is set, then commits what is done and leaves the group.
    pub fn run(mut self, shutdown: &AtomicBool) -> Result<()> {
        match self.service.parallelism() {
            Parallelism::PerPartition => {
                self.producer.init_transactions(IO_TIMEOUT).map_err(|e| self.fatal(e))?;
                let topics: Vec<&str> = self.inputs.iter().map(|i| i.topic.name).collect();
                self.consumer.subscribe(&topics).context("cannot subscribe")?;
                self.set_role(Role::Active);
                self.log_running();
                self.process(shutdown, None)?;
            }
            Parallelism::Global => {
                let election =
                    Leadership::join(&self.settings.bootstrap_servers, &self.settings.group_id, &self.settings.member)?;
                self.set_role(Role::Standby);
                self.log_running();
                while !shutdown.load(Ordering::SeqCst) {
                    self.beat.beat();
                    if !election.leads() {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    info!(service = self.service.name(), member = %self.settings.member, "leading the stage");
                    match self.lead(shutdown, &election) {
                        Ok(()) if shutdown.load(Ordering::SeqCst) => break,
                        Ok(()) => warn!("lost the lead; standing by"),
                        Err(e) if e.downcast_ref::<Fenced>().is_some() => warn!("{e:#}; standing by"),
                        Err(e) => return Err(e),
                    }
                    self.stand_by()?;
                }
            }
        }
        if self.dirty {
            self.commit()?;
        }
        if self.in_transaction {
            let _ = self.producer.abort_transaction(IO_TIMEOUT);
        }
        self.consumer.unsubscribe();
        info!(service = self.service.name(), "stopped cleanly");
        Ok(())
    }

    fn log_running(&self) {
        info!(
            service = self.service.name(),
            member = %self.settings.member,
            transactional_id = %self.settings.transactional_id,
            "running"
        );
    }

    /// A global stage's leader: every partition, until the lead is lost.
    fn lead(&mut self, shutdown: &AtomicBool, election: &Leadership) -> Result<()> {
        // Fences the previous leader and aborts what it left open.
        self.producer.init_transactions(IO_TIMEOUT).map_err(|e| self.fatal(e))?;
        let mut tpl = TopicPartitionList::new();
        for input in &self.inputs {
            for p in 0..self.partitions {
                tpl.add_partition(input.topic.name, p);
            }
        }
        self.consumer.assign(&tpl).context("cannot assign the input partitions")?;
        let all: Vec<(String, i32)> = tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        self.take_partitions(&all)?;
        self.set_role(Role::Active);
        self.process(shutdown, Some(election))
    }

    /// Drops everything uncommitted and waits for the lead again, with a new producer
    /// (the old one may have been fenced).
    fn stand_by(&mut self) -> Result<()> {
        if self.in_transaction {
            let _ = self.producer.abort_transaction(IO_TIMEOUT);
            self.in_transaction = false;
        }
        let _ = self.consumer.unassign();
        self.drop_tasks();
        self.reset_clocks();
        self.producer = transactional_producer(&self.settings)?;
        self.set_role(Role::Standby);
        Ok(())
    }

    /// The consume-transform-produce loop, until shutdown or (for a leader) the lead
    /// is lost.
    fn process(&mut self, shutdown: &AtomicBool, election: Option<&Leadership>) -> Result<()> {
        while !shutdown.load(Ordering::SeqCst) {
            if election.is_some_and(|e| !e.leads()) {
                return Ok(());
            }
            self.beat.beat();
            self.handle_rebalance()?;
            self.mark_idle_partitions()?;
            let polled = self.consumer.poll(Duration::from_millis(100));
            self.drained = polled.is_none();
            match polled {
                // Detached (copied) so the loop can change its own state while handling it.
                Some(Ok(message)) => {
                    let message = message.detach();
                    self.on_message(&message)?
                }
                Some(Err(e)) => warn!(error = %e, "consumer error"),
                None => {}
            }
            if self.dirty && self.last_commit.elapsed() >= self.settings.commit_interval {
                self.commit()?;
            }
        }
        Ok(())
    }

    fn drop_tasks(&mut self) {
        self.tasks.clear();
        self.positions.clear();
        self.committed.clear();
        self.last_heard.clear();
        self.dirty = false;
        self.publish_tasks();
    }

    fn set_role(&self, role: Role) {
        self.metrics.active.set(i64::from(role == Role::Active));
        self.status.lock().expect("status").role = role;
    }

    /// Tells the status and the metrics what the tasks hold as of the last commit.
    fn publish_tasks(&self) {
        let tasks: Vec<TaskStatus> = self
            .tasks
            .iter()
            .map(|(&task, t)| TaskStatus {
                task,
                watermark_ms: (t.input_watermark != NO_WATERMARK).then_some(t.input_watermark),
                idle: t.idle,
                ledger: t.committed_ledger,
            })
            .collect();
        self.metrics.tasks.set(tasks.len() as i64);
        let mut status = self.status.lock().expect("status");
        status.tasks = tasks;
        status.aborts = self.metrics.aborts.get();
        status.restored_records = self.metrics.restored_records.get();
    }

    fn task_of(&self, partition: i32) -> i32 {
        match self.service.parallelism() {
            Parallelism::PerPartition => partition,
            Parallelism::Global => 0,
        }
    }

    /// The input partitions a task reads, as (input index, partition).
    fn partitions_of(&self, task: i32) -> Vec<(usize, i32)> {
        let ps: Vec<i32> = match self.service.parallelism() {
            Parallelism::PerPartition => vec![task],
            Parallelism::Global => (0..self.partitions).collect(),
        };
        (0..self.inputs.len()).flat_map(|i| ps.iter().map(move |&p| (i, p))).collect()
    }

    fn rebalance_pending(&self) -> bool {
        let log = self.rebalances.lock().expect("rebalance log");
        log.revoked || !log.assigned.is_empty()
    }

    fn handle_rebalance(&mut self) -> Result<()> {
        let (revoked, assigned) = {
            let mut log = self.rebalances.lock().expect("rebalance log");
            (std::mem::take(&mut log.revoked), std::mem::take(&mut log.assigned))
        };
        if revoked {
            // Eager rebalancing takes every partition away; uncommitted work is redone
            // by whoever gets the partitions, from the last commit.
            if self.dirty {
                // The partitions are gone: no rewind, their next owner redoes the work.
                self.abort_transaction()?;
                info!("partitions revoked; the work since the last commit is redone by their next owner");
            }
            self.drop_tasks();
            // The next owner of each partition restores its progress from the changelog.
            self.reset_clocks();
        }
        if !assigned.is_empty() {
            self.take_partitions(&assigned)?;
        }
        Ok(())
    }

    /// Restores the tasks of newly assigned partitions and learns where to read from.
    fn take_partitions(&mut self, assigned: &[(String, i32)]) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (topic, p) in assigned {
            tpl.add_partition(topic, *p);
        }
        let committed =
            self.consumer.committed_offsets(tpl, IO_TIMEOUT).context("cannot read the committed offsets")?;
        for (topic, p) in assigned {
            if let Some(i) = self.inputs.iter().position(|i| i.topic.name == topic) {
                if self.clocks[i].is_some() {
                    self.last_heard.insert((i, *p), Instant::now());
                }
            }
        }
        for e in committed.elements() {
            let key = (e.topic().to_string(), e.partition());
            if let Offset::Offset(o) = e.offset() {
                self.committed.insert(key.clone(), o);
                self.positions.insert(key, o);
            }
        }
        let mut new_tasks: Vec<i32> = assigned.iter().map(|(_, p)| self.task_of(*p)).collect();
        new_tasks.sort();
        new_tasks.dedup();
        for id in new_tasks {
            if self.tasks.contains_key(&id) {
                continue;
            }
            let snapshot = self.read_changelog(id)?;
            let mut task = Task {
                operator: self.service.operator(&self.settings.config),
                input_watermark: NO_WATERMARK,
                sent_watermark: NO_WATERMARK,
                idle: false,
                sent_idle: false,
                committed: snapshot.clone(),
                touched: false,
                ledger: Ledger::default(),
                committed_ledger: Ledger::default(),
            };
            if let Some(bytes) = &snapshot {
                self.apply_snapshot(&mut task, bytes)?;
                self.status.lock().expect("status").restored_tasks += 1;
            }
            info!(task = id, restored = snapshot.is_some(), watermark = task.input_watermark, "task ready");
            self.tasks.insert(id, task);
        }
        self.publish_tasks();
        Ok(())
    }

    /// The task's last committed snapshot, read with read_committed up to the end of
    /// its changelog partition.
    fn read_changelog(&self, task: i32) -> Result<Option<Vec<u8>>> {
        let reader: BaseConsumer<QuietEof> = ClientConfig::new()
            .set("bootstrap.servers", &self.settings.bootstrap_servers)
            .set("group.id", format!("{}-restore", self.settings.group_id))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .create_with_context(QuietEof)
            .context("cannot create the changelog reader")?;
        let partition = task % self.partitions;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.changelog, partition, Offset::Beginning)?;
        reader.assign(&tpl)?;
        let key = task.to_string();
        let mut latest = None;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if Instant::now() > deadline {
                bail!(
                    "restoring task {task} from `{}` took over two minutes; is a transaction stuck open?",
                    self.changelog
                );
            }
            match reader.poll(Duration::from_millis(500)) {
                Some(Ok(m)) => {
                    self.metrics.restored_records.inc();
                    if m.key() == Some(key.as_bytes()) {
                        latest = m.payload().map(<[u8]>::to_vec);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(latest),
                Some(Err(e)) => return Err(anyhow!(e).context(format!("cannot read `{}`", self.changelog))),
                None => {}
            }
        }
    }

    fn apply_snapshot(&mut self, task: &mut Task<S::Op>, bytes: &[u8]) -> Result<()> {
        let s: TaskSnapshot = decode(bytes)?;
        task.operator.restore(&s.operator)?;
        task.input_watermark = s.input_watermark;
        task.sent_watermark = s.sent_watermark;
        task.sent_idle = s.sent_idle;
        task.ledger = s.ledger;
        task.committed_ledger = s.ledger;
        for (input, p, progress) in s.sources {
            if let Some(Some(clock)) = self.clocks.get_mut(input) {
                clock.restore(p as usize, progress);
                // Idle when committed: still idle until a record says otherwise, so a
                // takeover does not hold every reader back for another idle timeout.
                clock.mark_idle(p as usize, s.sent_idle);
            }
        }
        task.idle = s.sent_idle;
        for (input, p, writers) in s.upstream {
            if let Some(Some(u)) = self.upstream.get_mut(input) {
                u.restore_partition(p as usize, writers);
            }
        }
        Ok(())
    }

    fn snapshot(&self, id: i32, task: &Task<S::Op>) -> Vec<u8> {
        let mut s = TaskSnapshot {
            operator: task.operator.snapshot(),
            input_watermark: task.input_watermark,
            sent_watermark: task.sent_watermark,
            sent_idle: task.sent_idle,
            sources: Vec::new(),
            upstream: Vec::new(),
            ledger: task.ledger,
        };
        for (i, p) in self.partitions_of(id) {
            if let Some(clock) = &self.clocks[i] {
                s.sources.push((i, p, clock.progress(p as usize)));
            }
            if let Some(u) = &self.upstream[i] {
                s.upstream.push((i, p, u.partition(p as usize)));
            }
        }
        encode(&s)
    }

    fn begin(&mut self) -> Result<()> {
        if !self.in_transaction {
            self.producer.begin_transaction().map_err(|e| self.fatal(e))?;
            self.in_transaction = true;
        }
        Ok(())
    }

    fn on_message(&mut self, message: &OwnedMessage) -> Result<()> {
        let (topic, p, offset) = (message.topic().to_string(), message.partition(), message.offset());
        let Some(input) = self.inputs.iter().position(|i| i.topic.name == topic) else { return Ok(()) };
        let id = self.task_of(p);
        if self.rebalance_pending() {
            // The rebalance came inside the poll that returned this record: settle the
            // tasks first (restoring new ones), then read the record again from there.
            self.handle_rebalance()?;
            if self.tasks.contains_key(&id) {
                self.consumer.seek(&topic, p, Offset::Offset(offset), IO_TIMEOUT)?;
            }
            return Ok(());
        }
        if !self.tasks.contains_key(&id) {
            bail!("a record arrived for partition {p} of `{topic}`, which this member was not given");
        }
        self.begin()?;
        self.positions.insert((topic.clone(), p), offset + 1);
        self.dirty = true;
        if let Some(heard) = self.last_heard.get_mut(&(input, p)) {
            *heard = Instant::now();
        }
        if let Some(marker) = markers::read(message) {
            self.on_marker(input, p, marker);
        } else {
            self.records_in[input].inc();
            let payload = message.payload().unwrap_or_default();
            let decoded = self.service.decode(&self.codec, self.inputs[input].topic, payload);
            let task = self.tasks.get_mut(&id).expect("checked above");
            task.ledger.read += 1;
            task.touched = true;
            match decoded {
                Ok(record) => {
                    let ts = self.service.event_ts(&record);
                    task.operator.on_record(record, &mut self.scratch);
                    // A record is late if the operator sent it to a late side output.
                    if self.scratch.iter().any(|o| self.service.is_late(o)) {
                        task.ledger.late += 1;
                    } else {
                        task.ledger.on_time += 1;
                    }
                    if let Some(clock) = &mut self.clocks[input] {
                        clock.observe(p as usize, ts);
                    }
                    self.emit_scratch(id)?;
                }
                Err(CodecError::Decode(reason)) => {
                    task.ledger.dead_letters += 1;
                    task.ledger.written += 1;
                    self.dead_letter(&topic, p, offset, reason, payload)?
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.advance_watermarks()
    }

    fn on_marker(&mut self, input: usize, p: i32, marker: Marker) {
        match (&mut self.clocks[input], &mut self.upstream[input], marker.task) {
            (Some(clock), _, None) if marker.watermark == Millis::MAX => clock.finish_partition(p as usize),
            (_, Some(u), Some(writer)) => u.update(p as usize, writer, marker.watermark, marker.idle),
            _ => warn!(partition = p, ?marker, "ignoring a watermark marker this input does not expect"),
        }
    }

    /// A source partition silent for `idle_timeout_ms` on the wall clock stops holding
    /// its readers back (its next record wakes it) — but only once it has nothing
    /// left to read: the consumer has drained what it fetched, and the partition's
    /// position is at its end. A partition behind a backlog is slow, not idle; taking
    /// it for idle would let the watermark overtake its records.
    fn mark_idle_partitions(&mut self) -> Result<()> {
        if !self.drained {
            return Ok(());
        }
        let mut changed = false;
        for (&(input, p), heard) in &self.last_heard {
            if heard.elapsed() < self.idle_after {
                continue;
            }
            let topic = self.inputs[input].topic.name;
            let Some((low, high)) = cached_watermarks(&self.consumer, topic, p) else { continue };
            let position = self.positions.get(&(topic.to_string(), p)).copied().unwrap_or(low);
            // One offset of slack: a transactional producer's commit marker takes the
            // last offset of its partition and is never delivered as a record.
            if high < 0 || high - position > 1 {
                continue;
            }
            if let Some(clock) = &mut self.clocks[input] {
                changed |= clock.mark_idle(p as usize, true);
            }
        }
        if changed {
            self.advance_watermarks()?;
        }
        Ok(())
    }

    /// Gives every task the watermark of its input partitions, if it moved.
    fn advance_watermarks(&mut self) -> Result<()> {
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        let mut lowest = Millis::MAX;
        for id in ids {
            // Idle inputs are left out; a task whose inputs are all idle is idle itself.
            let active: Vec<Millis> = self
                .partitions_of(id)
                .into_iter()
                .filter_map(|(i, p)| match (&self.clocks[i], &self.upstream[i]) {
                    (Some(clock), _) => clock.partition_watermark(p as usize),
                    (_, Some(u)) => u.watermark(p as usize),
                    _ => Some(NO_WATERMARK),
                })
                .collect();
            let idle = active.is_empty();
            let task = self.tasks.get_mut(&id).expect("a listed task");
            if idle != task.idle {
                task.idle = idle;
                task.touched = true;
                self.dirty = true;
            }
            let watermark = active.into_iter().min().unwrap_or(task.input_watermark);
            if watermark > task.input_watermark {
                task.input_watermark = watermark;
                task.operator.on_watermark(watermark, &mut self.scratch);
                task.touched = true;
                self.dirty = true;
                self.begin()?;
                self.emit_scratch(id)?;
            }
            lowest = lowest.min(self.tasks[&id].input_watermark);
        }
        self.metrics.set_watermark((lowest != NO_WATERMARK && lowest != Millis::MAX).then_some(lowest));
        Ok(())
    }

    /// Produces what task `id`'s operator just emitted.
    fn emit_scratch(&mut self, id: i32) -> Result<()> {
        if let Some(task) = self.tasks.get_mut(&id) {
            task.ledger.written += self.scratch.len() as u64;
        }
        for output in std::mem::take(&mut self.scratch) {
            if self.service.is_late(&output) {
                self.metrics.late_records.inc();
            }
            let out = self.service.encode(&self.codec, output)?;
            if let Some(counter) = self.records_out.get(out.topic.name) {
                counter.inc();
            }
            self.send(BaseRecord::to(out.topic.name).key(out.key.as_str()).payload(out.value.as_slice()))?;
        }
        Ok(())
    }

    fn dead_letter(&mut self, topic: &str, partition: i32, offset: i64, reason: String, payload: &[u8]) -> Result<()> {
        warn!(topic, partition, offset, %reason, "dead letter");
        self.metrics.dead_letters.inc();
        let letter =
            DeadLetter { record_type: RecordType::DeadLetter, source: topic, partition, offset, reason, payload };
        let value = self.codec.encode(DEAD_LETTERS, &letter)?;
        self.records_out[DEAD_LETTERS.name].inc();
        self.send(BaseRecord::to(DEAD_LETTERS.name).key(topic).payload(&value))
    }

    fn send(&self, record: BaseRecord<'_, str, [u8]>) -> Result<()> {
        produce::send(&self.producer, record).map_err(|e| match self.producer.client().fatal_error() {
            Some((_, reason)) => self.fenced(reason),
            None => e,
        })
    }

    /// Commits everything since the last commit in one transaction.
    fn commit(&mut self) -> Result<()> {
        let started = Instant::now();
        let started_ms = now_ms();
        self.begin()?;
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        let mut snapshots = Vec::new();
        for id in ids {
            let out_watermark = self.tasks[&id].operator.output_watermark();
            let idle = self.tasks[&id].idle;
            if out_watermark > self.tasks[&id].sent_watermark || idle != self.tasks[&id].sent_idle {
                let marker = Marker { task: Some(id as u32), watermark: out_watermark, idle };
                for topic in &self.watermarked {
                    for q in 0..self.partitions {
                        self.send(BaseRecord::to(topic.name).partition(q).headers(markers::headers(marker)))?;
                    }
                }
                let task = self.tasks.get_mut(&id).expect("a listed task");
                task.sent_watermark = task.sent_watermark.max(out_watermark);
                task.sent_idle = idle;
            }
            if self.tasks[&id].touched {
                let bytes = self.snapshot(id, &self.tasks[&id]);
                let key = id.to_string();
                let record = BaseRecord::to(&self.changelog).partition(id % self.partitions).key(key.as_str());
                self.send(record.payload(bytes.as_slice()))?;
                snapshots.push((id, bytes));
            }
        }
        let mut offsets = TopicPartitionList::new();
        for ((topic, p), next) in &self.positions {
            offsets.add_partition_offset(topic, *p, Offset::Offset(*next))?;
        }
        let group = self.consumer.group_metadata().ok_or_else(|| anyhow!("the consumer has no group metadata"))?;
        let result = self
            .producer
            .send_offsets_to_transaction(&offsets, &group, IO_TIMEOUT)
            .and_then(|()| self.producer.commit_transaction(IO_TIMEOUT));
        self.in_transaction = false;
        match result {
            Ok(()) => {
                let took = started.elapsed();
                self.metrics.commits.inc();
                self.metrics.commit_seconds.observe(took.as_secs_f64());
                self.metrics.committed_now();
                self.committed = self.positions.clone();
                let state_bytes = snapshots.iter().map(|(_, b)| b.len() as u64).sum();
                for (id, bytes) in snapshots {
                    let task = self.tasks.get_mut(&id).expect("a listed task");
                    task.committed = Some(bytes);
                    task.committed_ledger = task.ledger;
                    task.touched = false;
                }
                self.dirty = false;
                self.last_commit = Instant::now();
                self.publish_tasks();
                self.status.lock().expect("status").committed(Commit {
                    seq: 0,
                    started_ms,
                    duration_ms: took.as_millis() as u64,
                    state_bytes,
                    tasks: self.tasks.len() as u32,
                });
                Ok(())
            }
            Err(KafkaError::Transaction(t)) if t.is_fatal() => Err(self.fatal(KafkaError::Transaction(t))),
            Err(e) => {
                warn!(error = %e, "commit failed; aborting and redoing the work since the last commit");
                self.in_transaction = true;
                self.abort("commit failed")
            }
        }
    }

    /// Aborts the open transaction and puts every task and input back to the last
    /// commit.
    fn abort(&mut self, why: &str) -> Result<()> {
        self.abort_transaction()?;
        let ids: Vec<i32> = self.tasks.keys().copied().collect();
        for id in ids {
            let mut task = self.tasks.remove(&id).expect("a listed task");
            task.operator = self.service.operator(&self.settings.config);
            task.input_watermark = NO_WATERMARK;
            task.sent_watermark = NO_WATERMARK;
            task.idle = false;
            task.sent_idle = false;
            task.touched = false;
            task.ledger = Ledger::default();
            task.committed_ledger = Ledger::default();
            if let Some(bytes) = task.committed.clone() {
                self.apply_snapshot(&mut task, &bytes)?;
            }
            self.tasks.insert(id, task);
        }
        for ((topic, p), next) in &self.committed {
            self.consumer.seek(topic, *p, Offset::Offset(*next), IO_TIMEOUT)?;
        }
        for (topic, p) in self.positions.keys().cloned().collect::<Vec<_>>() {
            if !self.committed.contains_key(&(topic.clone(), p)) {
                self.consumer.seek(&topic, p, Offset::Beginning, IO_TIMEOUT)?;
            }
        }
        self.positions = self.committed.clone();
        self.dirty = false;
        self.publish_tasks();
        info!(why, "rewound to the last commit");
        Ok(())
    }

    fn abort_transaction(&mut self) -> Result<()> {
        if self.in_transaction {
            self.producer.abort_transaction(IO_TIMEOUT).map_err(|e| self.fatal(e))?;
            self.in_transaction = false;
        }
        self.metrics.aborts.inc();
        Ok(())
    }

    /// A fenced or otherwise fatal producer cannot go on: another member with the
    /// same transactional id has taken over.
    fn fatal(&self, e: KafkaError) -> anyhow::Error {
        match &e {
            KafkaError::Transaction(t) if t.is_fatal() => self.fenced(e.to_string()),
            _ => anyhow!(e),
        }
    }

    fn fenced(&self, reason: String) -> anyhow::Error {
        anyhow::Error::new(Fenced { transactional_id: self.settings.transactional_id.clone(), reason })
    }
}

/// The low and high offsets of a partition as of the consumer's last fetch from it,
/// without asking the broker (librdkafka keeps them; rdkafka does not expose them).
fn cached_watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<(i64, i64)> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer lives as long as `consumer`; the call only reads
    // librdkafka's cached offsets into the two locals.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then_some((low, high))
}
