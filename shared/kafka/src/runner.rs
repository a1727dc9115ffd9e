//! The Kafka shell around a stage member's pure core (`core`): it polls the input
//! partitions and hands their records to the core, produces what the core emits, and
//! commits every `commit_interval` in one transaction — the outputs, the changelog
//! entries that changed, watermark markers for the stages downstream, and the input
//! offsets (`send_offsets_to_transaction` with the group metadata, Kafka Streams'
//! EOS v2). A task is restored from its changelog before its partition is processed;
//! when a commit fails the member takes a new producer and the core restores its
//! tasks from the changelog and rewinds the inputs, so nothing is lost or doubled.
//! Any other failure ends the member, which its `supervise::Supervisor` starts again.
//!
//! A fenced producer stops a keyed stage's member; in a global stage (one task over
//! every partition) the member Kafka elects leads and the others stand by (see
//! `election`), and a fenced leader steps back to standby.

use crate::connection;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Serialize, Serializer};
use tracing::{info, warn};
use vigil_model::output::RecordType;

use crate::cadence::Cadence;
use crate::codec::{Codec, CodecError};
use crate::core::{CommitBatch, Correction, Incoming, Rewind, Routed, Slot, TaskCore};
use crate::election::Leadership;
use crate::epoch;
use crate::group::{GroupContext, Membership, RebalanceLog, SharedLog, Standing};
use crate::markers;
use crate::metrics::{now_ms, MemberMetrics};
use crate::observe::Beat;
use crate::produce::{self, Kafka};
use crate::restore;
use crate::service::{InputKind, Parallelism, Service};
pub use crate::settings::{Common, Settings};
use crate::silence::{Silence, STUCK_SPELLS};
use crate::status::{Commit, Ledger, Role, SharedStatus};
use crate::topics::{self, Topic, DEAD_LETTERS};

const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How much longer than its own timeout `send_offsets_to_transaction` may take.
const SEND_OFFSETS_MARGIN: Duration = Duration::from_secs(5);
/// How long to wait for the broker to say where a silent partition ends.
const END_OFFSET_TIMEOUT: Duration = Duration::from_secs(2);
/// Failed commits in a row after which a member starts over with new clients.
const COMMIT_ATTEMPTS: u32 = 3;
/// How often a task asked a generation it cannot answer yet asks the broker whether
/// its source partitions are read to their end (see `answer_asks`).
const ASK_CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// The most messages read in one turn of the loop (see `Runner::read_batch`).
const POLL_BATCH: usize = 64;

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

/// Where a partition has been read to, and how many records wait after that.
#[derive(Debug, Clone, Copy)]
struct Unread {
    read: i64,
    waiting: i64,
}

/// An offset the broker or the consumer gave as a number (not `Beginning`, `End`,
/// `Invalid`...).
fn concrete(offset: Offset) -> Option<i64> {
    match offset {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

/// The parts a member runs with besides its settings: where it counts, reports and
/// shows it is alive.
pub struct Observers {
    pub metrics: MemberMetrics,
    pub status: SharedStatus,
    pub beat: Beat,
}

fn transactional_producer(settings: &Settings) -> Result<Arc<Kafka>> {
    let producer = connection::client_config(&settings.bootstrap_servers)
        .set("transactional.id", &settings.transactional_id)
        .set("enable.idempotence", "true")
        // Same partition for the same key as Kafka's Java clients and the embedded runtime.
        .set("partitioner", "murmur2_random")
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "5")
        // A record that fails fails its transaction, and the commit reports it; a
        // report for every record delivered would be work for nothing (librdkafka
        // queues each to the producer's polling thread).
        .set("delivery.report.only.error", "true")
        .set("compression.type", "lz4")
        .set("message.max.bytes", "34000000")
        .create()
        .context("cannot create the Kafka producer")?;
    Ok(Arc::new(producer))
}

pub struct Runner<S: Service> {
    settings: Settings,
    codec: Codec,
    metrics: MemberMetrics,
    status: SharedStatus,
    beat: Beat,
    /// Shared so that a message can borrow a handle of its own while the loop changes
    /// the runner's state (see `read_batch`).
    consumer: Arc<BaseConsumer<GroupContext>>,
    /// Shared with the thread that sends a commit's offsets (see `send_offsets`).
    producer: Arc<Kafka>,
    /// The producer epoch's claim on the partitions the member writes, under way on
    /// a thread of its own (see `init_transactions`).
    claim: Option<JoinHandle<KafkaResult<()>>>,
    rebalances: SharedLog,
    membership: Membership,
    /// The member reported degraded for being out of its group.
    out_of_group: bool,
    core: TaskCore<S>,
    /// The input topics' names and record types by index, the topics that carry this
    /// stage's watermark, and its changelog.
    topics: Vec<(String, Topic)>,
    watermarked: Vec<Topic>,
    changelog: String,
    /// Every topic the member writes: its outputs, dead letters, repartition topics
    /// and changelog.
    written: Vec<String>,
    /// How long each assigned source partition has been silent, for idleness and
    /// for a consumer stuck on one.
    silence: Silence,
    /// Partitions delivering records counted already: warned about once, until the
    /// next record to count comes.
    redelivered: FxHashSet<Slot>,
    /// The last poll found nothing: everything fetched so far has been processed.
    drained: bool,
    /// The last poll found nothing, and no source partition has records waiting on
    /// the broker as its last fetch said (see `source_backlog`).
    caught_up: bool,
    /// The member has been caught up since the last commit: it is not behind.
    caught_up_since_commit: bool,
    in_transaction: bool,
    /// The open transaction holds records for readers downstream (outputs, rerouted
    /// records, dead letters), not only markers, state and input offsets.
    carries_records: bool,
    /// Commits that failed since the last one that went through.
    failed_commits: u32,
    last_commit: Instant,
    /// When the idle tasks were last asked to repeat that they are idle, and those
    /// to ask at the next commit (see `ask_idle_tasks_to_repeat`).
    idle_markers_repeated: Instant,
    repeat_idle: Option<BTreeSet<i32>>,
    /// When the tasks asked a generation are next checked (see `answer_asks`).
    next_ask_check: Instant,
    cadence: Cadence,
    /// When the records of the open transaction were read, for their commit wait:
    /// each batch's read time and how many of its records are in the transaction.
    reads: Vec<(Instant, u32)>,
    /// When the batch being read had its first message (monotonic and wall clock),
    /// taken as the read time of all its records, and how many records it counted:
    /// three clock reads a batch instead of four a record (clock reads were a tenth
    /// of a member's CPU, librdkafka's included). A record later in a batch counts
    /// its wait there as processing, not queued: its outputs wait for the batch too.
    batch_read: Option<(Instant, i64)>,
    batch_records: u32,
    /// The input topics' names for librdkafka's C calls, by input index.
    topic_names: Vec<CString>,
    /// Records-in counters by input index, records-out counters by topic.
    records_in: Vec<prometheus::IntCounter>,
    records_out: FxHashMap<&'static str, prometheus::IntCounter>,
}

impl<S: Service> Runner<S> {
    pub fn new(service: S, settings: Settings, observers: Observers) -> Result<Self> {
        // The registry client (TLS roots loaded, schemas parsed: about 75 ms) is made
        // while the Kafka clients are made and check the topics.
        let registry_url = settings.registry_url.clone();
        let codec = std::thread::spawn(move || Codec::new(&registry_url));
        let rebalances: SharedLog = Arc::new(Mutex::new(RebalanceLog::default()));
        let mut consumer_config = connection::client_config(&settings.bootstrap_servers);
        consumer_config
            .set("group.id", &settings.group_id)
            .set("client.id", &settings.transactional_id)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("isolation.level", "read_committed")
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", "10000")
            // The broker answers a fetch once it has this much or after this wait
            // (librdkafka's 500 ms default would dominate end-to-end latency). Answered
            // at the first byte, a member keeping up with its upstream's commits sent
            // a fetch for every few records: the broker spent a sixth to a third more
            // CPU in the keyed throughput run. Where less than 64 KiB comes in a
            // wait, the wait decides: 10 ms rather than 20 took about 4 ms off a
            // hop's median at 20 000 events/s, for 2 of the broker's 26 CPU seconds
            // (README, Performance); an idle member fetches every 10 ms.
            .set("fetch.min.bytes", "65536")
            .set("fetch.wait.max.ms", "10")
            // What is fetched of a partition ahead of the loop spans little event
            // time, so a task reads its partitions nearly in step: with 20 000
            // records and 1 MiB fetches (one to two hours of the generated traffic)
            // a task's orders ran that far ahead of its payments or behind them, and
            // its joins waited in state across commits (README, Performance,
            // "Reading in step, state in chunks").
            .set("max.partition.fetch.bytes", "131072");
        connection::fetch_again_when_drained(&mut consumer_config, 2_000);
        if service.parallelism() == Parallelism::PerPartition {
            // Static membership: a restarted member (same name) takes its partitions
            // back at once instead of waiting for the dead one's session to expire.
            consumer_config.set("group.instance.id", &settings.transactional_id);
        }
        let consumer: BaseConsumer<GroupContext> = consumer_config
            .create_with_context(GroupContext { log: rebalances.clone() })
            .context("cannot create the Kafka consumer")?;
        let producer = transactional_producer(&settings)?;
        let partitions = settings.config.runtime.partitions;
        let core = TaskCore::new(service, settings.config.clone());
        let service = core.service();
        let topics: Vec<(String, Topic)> = core.inputs().iter().map(|i| (i.name.clone(), i.records)).collect();
        let mut names: Vec<String> = topics.iter().map(|(name, _)| name.clone()).collect();
        let repartitions = core.inputs().iter().filter(|i| matches!(i.kind, InputKind::Repartition { .. }));
        let written: Vec<String> = (service.outputs().iter().chain([&DEAD_LETTERS]).map(|t| t.name.to_string()))
            .chain(repartitions.map(|i| i.name.clone()))
            .chain([topics::changelog(service.name())])
            .collect();
        names.extend(written.iter().cloned());
        names.sort();
        names.dedup();
        topics::check(&consumer, &names, partitions)?;
        let codec = codec.join().expect("making the registry client does not panic")?;
        let Observers { metrics, status, beat } = observers;
        let records_in = topics.iter().map(|(name, _)| metrics.records_in(name)).collect();
        let records_out =
            service.outputs().iter().chain([&DEAD_LETTERS]).map(|t| (t.name, metrics.records_out(t.name))).collect();
        let topic_names = topics.iter().map(|(name, _)| CString::new(name.as_str())).collect::<Result<_, _>>()?;
        Ok(Runner {
            topic_names,
            watermarked: service.watermarked(),
            changelog: topics::changelog(service.name()),
            written,
            silence: Silence::new(Duration::from_millis(settings.config.runtime.idle_wall_clock_ms)),
            redelivered: FxHashSet::default(),
            cadence: Cadence::new(settings.commit_interval),
            settings,
            codec,
            metrics,
            status,
            beat,
            consumer: Arc::new(consumer),
            producer,
            claim: None,
            rebalances,
            membership: Membership::default(),
            out_of_group: false,
            core,
            topics,
            drained: false,
            caught_up: false,
            caught_up_since_commit: false,
            in_transaction: false,
            carries_records: false,
            failed_commits: 0,
            last_commit: Instant::now(),
            idle_markers_repeated: Instant::now(),
            next_ask_check: Instant::now(),
            repeat_idle: None,
            reads: Vec::new(),
            batch_read: None,
            batch_records: 0,
            records_in,
            records_out,
        })
    }

    fn name(&self) -> &'static str {
        self.core.service().name()
    }

    /// Runs until `shutdown` is set, then commits what is done and leaves the group.
    pub fn run(mut self, shutdown: &AtomicBool) -> Result<()> {
        let mut election = None;
        let result = self.run_member(shutdown, &mut election);
        if result.is_err() {
            // librdkafka can hang closing a consumer that failed amid a rebalance (its
            // rebalance callback waits on the group's thread for good): a failed
            // member's clients close on a thread of their own, and its supervisor
            // starts it again with new ones meanwhile (they fence the old).
            let clients = (self.consumer, self.producer, election);
            std::thread::spawn(move || drop(clients));
        }
        result
    }

    fn run_member(&mut self, shutdown: &AtomicBool, election: &mut Option<Leadership>) -> Result<()> {
        match self.core.service().parallelism() {
            Parallelism::PerPartition => {
                // The group join runs on librdkafka's threads while the producer
                // fences its predecessor; the assignment is taken only in `process`,
                // after that.
                let names: Vec<&str> = self.topics.iter().map(|(name, _)| name.as_str()).collect();
                self.consumer.subscribe(&names).context("cannot subscribe")?;
                self.init_transactions()?;
                self.set_role(Role::Active);
                self.log_running();
                self.process(shutdown, None)?;
            }
            Parallelism::Global => {
                let election = election.insert(self.join_election()?);
                self.set_role(Role::Standby);
                self.log_running();
                while !shutdown.load(Ordering::SeqCst) {
                    self.beat.beat();
                    if !election.leads() {
                        if election.stranded() {
                            // Its client may hang closing, as a failed member's can.
                            let stranded = std::mem::replace(election, self.join_election()?);
                            std::thread::spawn(move || drop(stranded));
                        }
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    info!(service = self.name(), member = %self.settings.member, "leading the stage");
                    match self.lead(shutdown, election) {
                        Ok(()) if shutdown.load(Ordering::SeqCst) => break,
                        Ok(()) => warn!("lost the lead; standing by"),
                        Err(e) if e.downcast_ref::<Fenced>().is_some() => warn!("{e:#}; standing by"),
                        Err(e) => return Err(e),
                    }
                    self.stand_by()?;
                }
            }
        }
        if self.core.is_dirty() {
            self.commit()?;
        }
        if self.in_transaction {
            self.metrics.aborts.inc();
            let _ = self.fence_open_transaction();
        }
        self.consumer.unsubscribe();
        info!(service = self.name(), "stopped cleanly");
        Ok(())
    }

    fn join_election(&self) -> Result<Leadership> {
        Leadership::join(&self.settings.bootstrap_servers, &self.settings.group_id, &self.settings.member)
    }

    fn log_running(&self) {
        info!(
            service = self.name(),
            member = %self.settings.member,
            transactional_id = %self.settings.transactional_id,
            "running"
        );
    }

    /// A global stage's leader: every partition, until the lead is lost.
    fn lead(&mut self, shutdown: &AtomicBool, election: &Leadership) -> Result<()> {
        // Fences the previous leader and aborts what it left open.
        self.init_transactions()?;
        let mut tpl = TopicPartitionList::new();
        for (i, p) in self.core.all_slots() {
            tpl.add_partition(&self.topics[i].0, p);
        }
        self.consumer.assign(&tpl).context("cannot assign the input partitions")?;
        let all: Vec<(String, i32)> = tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        self.take_partitions(&all)?;
        self.set_role(Role::Active);
        self.process(shutdown, Some(election))
    }

    /// Drops everything uncommitted and waits for the lead again, with a new producer
    /// (the old one may have been fenced).
    ///
    /// The open transaction is left to the next leader, whose new epoch aborts it (or
    /// to the coordinator's timeout): aborting it with this producer's own epoch
    /// could leave it hanging (see `fence_open_transaction`), and fencing it from here
    /// would fence that leader.
    fn stand_by(&mut self) -> Result<()> {
        self.in_transaction = false;
        let _ = self.consumer.unassign();
        self.core.revoke_all();
        self.silence.clear();
        self.redelivered.clear();
        self.publish_tasks();
        self.replace_producer()?;
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
            self.ask_idle_tasks_to_repeat();
            self.answer_asks();
            self.read_batch()?;
            self.emit()?;
            self.apply_flow()?;
            self.metrics.set_watermark(self.core.lowest_watermark());
            self.metrics.input_ended.set(i64::from(self.core.input_ended()));
            let busy = !self.caught_up_since_commit;
            // Going quiet hurries a commit for what readers wait for: the records written
            // in its transaction, a watermark that moved. Other changes of state (records
            // read that wrote nothing yet, new tasks' entries, upstream markers read)
            // wait for the interval: committed early, the records a stage holds for
            // the watermark (a join's orders, the amount rule's payments) went to the
            // changelog at nearly every commit, and out again at the next.
            let quiet = self.caught_up && (self.carries_records || self.core.has_news());
            if self.core.decision_unsent()
                || self.core.answer_unsent()
                || self.repeat_idle.is_some()
                || self.cadence.due(self.core.is_dirty(), self.last_commit.elapsed(), quiet, busy)
            {
                self.commit()?;
            }
        }
        Ok(())
    }

    /// Reads what the consumer has, up to `POLL_BATCH` messages, waiting for the
    /// first as long as the cadence allows. What the loop does besides reading
    /// (producing the outputs, pausing partitions, judging the cadence) is then done
    /// once a batch instead of once a record: it cost a health monitor's loop about
    /// as much as the records themselves.
    fn read_batch(&mut self) -> Result<()> {
        let mut timeout = self.cadence.poll_timeout(self.core.is_dirty(), self.last_commit.elapsed());
        let consumer = Arc::clone(&self.consumer);
        self.batch_read = None;
        self.batch_records = 0;
        for _ in 0..POLL_BATCH {
            let polled = consumer.poll(timeout);
            timeout = Duration::ZERO;
            self.drained = polled.is_none();
            self.caught_up = self.drained && !self.source_backlog();
            self.caught_up_since_commit |= self.caught_up;
            match polled {
                Some(Ok(message)) => self.on_message(&message)?,
                // A fatal consumer error (a static member fenced after its session
                // ran out in a broker outage, say) leaves the consumer unusable: the
                // member fails and its supervisor starts it with new clients.
                Some(Err(e)) => match self.consumer.client().fatal_error() {
                    Some((_, reason)) => bail!("the consumer failed fatally: {reason} ({e})"),
                    None => warn!(error = %e, "consumer error"),
                },
                None => break,
            }
        }
        // A record's outputs go to the producer once its batch is read (`emit`).
        if let Some((read, _)) = self.batch_read.filter(|_| self.batch_records > 0) {
            let processing = read.elapsed().as_secs_f64();
            (0..self.batch_records).for_each(|_| self.metrics.processing.observe(processing));
        }
        Ok(())
    }

    /// Whether a source partition being read has records on the broker beyond what
    /// was read, as its last fetch said (librdkafka's cached high watermark, no
    /// request): a member reading a backlog drains its fetched records whenever a
    /// fetch is slower than the processing, which is not the input going quiet.
    /// Source topics only: upstream topics hold open transactions, whose records lie
    /// below the high watermark but cannot be read yet. (A source written in
    /// transactions holds them only while one is open.) The consumer's position
    /// counts as read where it is further: it moves past transaction markers.
    fn source_backlog(&self) -> bool {
        let client = self.consumer.client().native_ptr();
        let mut positions = None;
        self.silence.watched().any(|slot| {
            if !self.core.inputs()[slot.0].is_source() || self.core.is_paused(slot) {
                return false;
            }
            let consumer = positions.get_or_insert_with(|| self.consumer.position().ok());
            let position = consumer.as_ref().and_then(|p| p.find_partition(&self.topics[slot.0].0, slot.1));
            let Some(read) = position.and_then(|e| concrete(e.offset())).max(self.core.position(slot)) else {
                return false;
            };
            let (mut low, mut high) = (0i64, 0i64);
            let topic = &self.topic_names[slot.0];
            // SAFETY: the client outlives the call; the name is a NUL-terminated copy.
            let err = unsafe {
                rdkafka::bindings::rd_kafka_get_watermark_offsets(client, topic.as_ptr(), slot.1, &mut low, &mut high)
            };
            err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high > read
        })
    }

    fn set_role(&self, role: Role) {
        self.metrics.active.set(i64::from(role == Role::Active));
        self.status.lock().expect("status").role = role;
    }

    /// Tells the status and the metrics what the tasks hold as of the last commit.
    fn publish_tasks(&self) {
        let tasks = self.core.task_statuses();
        self.metrics.tasks.set(tasks.len() as i64);
        self.metrics.state_entries.set(self.core.live_entries() as i64);
        let mut ledger = Ledger::default();
        tasks.iter().for_each(|t| ledger.add(&t.ledger));
        self.metrics.set_ledger(&ledger);
        let mut status = self.status.lock().expect("status");
        status.tasks = tasks;
        status.aborts = self.metrics.aborts.get();
        status.restored_records = self.metrics.restored_records.get();
    }

    fn handle_rebalance(&mut self) -> Result<()> {
        let RebalanceLog { revoked, joined, assigned } =
            std::mem::take(&mut *self.rebalances.lock().expect("rebalance log"));
        if revoked {
            self.membership.left(Instant::now());
            // Eager rebalancing takes every partition away; their next owner redoes
            // the work since the last commit, so nothing is rewound here. A new
            // producer is taken even with no transaction open: its
            // `init_transactions` returns only once the last commit's markers are
            // written, and until then that commit's offsets and changelog records
            // cannot be read (a commit returns once the coordinator has logged it).
            // Read too soon, the tasks would come back one commit old (seen in the
            // chaos suite after a broker restart: a restore gave up waiting on that
            // commit, and records were judged again against mixed state).
            let open = self.in_transaction;
            self.fence_open_transaction()?;
            if open {
                self.metrics.aborts.inc();
                info!("partitions revoked; the work since the last commit is redone by their next owner");
            }
            self.core.revoke_all();
            self.silence.clear();
            self.redelivered.clear();
            self.publish_tasks();
        }
        if joined {
            self.membership.joined();
        }
        if !assigned.is_empty() {
            self.take_partitions(&assigned)?;
        }
        self.judge_membership()
    }

    /// Reports a member out of its group for long degraded, and fails one whose
    /// rejoin is stuck: its supervisor starts it again with new clients.
    fn judge_membership(&mut self) -> Result<()> {
        match self.membership.standing(Instant::now()) {
            Standing::Stuck(out) => bail!(
                "out of the consumer group for {out:?}: the partitions were revoked and the group has not assigned \
                 any since (librdkafka's rejoin is stuck, as after a broker crash); starting over with new clients"
            ),
            Standing::Degraded(out) if !self.out_of_group => {
                warn!(?out, "out of the consumer group since the partitions were revoked; still rejoining");
                self.beat.degraded(format!("out of the consumer group for {out:?}, rejoining"));
                self.metrics.degraded.set(1);
                self.out_of_group = true;
            }
            Standing::In if self.out_of_group => {
                self.beat.recovered();
                self.metrics.degraded.set(0);
                self.out_of_group = false;
            }
            _ => {}
        }
        Ok(())
    }

    fn slot_of(&self, topic: &str, partition: i32) -> Option<Slot> {
        self.topics.iter().position(|(name, _)| name == topic).map(|i| (i, partition))
    }

    /// Restores the tasks of newly assigned partitions and learns where to read from.
    fn take_partitions(&mut self, assigned: &[(String, i32)]) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (topic, p) in assigned {
            tpl.add_partition(topic, *p);
        }
        // librdkafka keeps a partition paused across an eager rebalance; the core
        // starts it afresh, unpaused, so the consumer must too.
        self.consumer.resume(&tpl).context("cannot resume the assigned partitions")?;
        let offsets = self.committed_offsets(tpl)?;
        let slots: Vec<Slot> = assigned.iter().filter_map(|(t, p)| self.slot_of(t, *p)).collect();
        let committed: Vec<(Slot, Option<i64>)> = offsets
            .elements()
            .iter()
            .filter_map(|e| {
                let offset = if let Offset::Offset(o) = e.offset() { Some(o) } else { None };
                Some((self.slot_of(e.topic(), e.partition())?, offset))
            })
            .collect();
        for &slot in &slots {
            let input = &self.core.inputs()[slot.0];
            if input.is_source() || input.is_repartition() {
                self.silence.watch(slot, Instant::now());
            }
        }
        let tasks = self.core.assign(&slots, &committed);
        self.restore_tasks(&tasks)?;
        // The new tasks' entries wait for their first records' commit, or an interval.
        self.last_commit = Instant::now();
        self.read_from_next_to_count(&slots)
    }

    /// Each partition read from its next record to count, as the tasks' state and
    /// the committed offsets say, whatever the consumer's own fetch position (its own
    /// read of the group's offsets at an assignment, or how far it had fetched before
    /// a rewind). A partition never committed is read from its beginning.
    fn read_from_next_to_count(&self, slots: &[Slot]) -> Result<()> {
        for &slot in slots {
            self.seek(slot, self.core.next_to_count(slot).map_or(Offset::Beginning, Offset::Offset))?;
        }
        Ok(())
    }

    /// Where the group committed for the assigned partitions. read_committed asks for
    /// stable offsets, and an offset commit left open on __consumer_offsets holds them
    /// unstable: for good if no transaction marker will ever end it (a "hanging
    /// transaction": a commit request of an older epoch that reached the broker after
    /// its transaction ended, which librdkafka cannot prevent without KIP-890; seen in
    /// the chaos suite after a broker restart). When the offsets cannot be read, this
    /// member aborts a transaction holding one offset commit: the abort marker of its
    /// producer id ends every transaction of that producer id still open on the
    /// group's partition, a hanging one of its own included. For any other cause
    /// it changes nothing, and the error names the remedy.
    fn committed_offsets(&mut self, tpl: TopicPartitionList) -> Result<TopicPartitionList> {
        let first = match self.read_committed_offsets(tpl.clone()) {
            Ok(offsets) => return Ok(offsets),
            Err(e) => e,
        };
        warn!(error = %format!("{first:#}"), "cannot read the committed offsets; ending what this member may have left open on them");
        self.abort_an_offset_commit(&tpl).context("cannot end an offset commit left open")?;
        info!("ended what this member left open on its group's offsets; reading them again");
        self.read_committed_offsets(tpl).with_context(|| {
            format!(
                "cannot read the committed offsets of group `{}`; if this repeats while the broker answers, a \
                 transaction of another producer left open on __consumer_offsets may hold them: \
                 `kafka-transactions.sh describe-producers --topic __consumer_offsets --partition <p>` shows it (a \
                 start offset whose producer's transaction is not ongoing), `kafka-transactions.sh abort --topic \
                 __consumer_offsets --partition <p> --start-offset <offset>` ends it",
                self.settings.group_id
            )
        })
    }

    /// The committed offsets, or an error if any partition's could not be read (an
    /// unreadable one must not pass for "never committed").
    fn read_committed_offsets(&self, tpl: TopicPartitionList) -> Result<TopicPartitionList> {
        let offsets = self.consumer.committed_offsets(tpl, IO_TIMEOUT)?;
        for e in offsets.elements() {
            e.error().with_context(|| format!("committed offset of {} [{}]", e.topic(), e.partition()))?;
        }
        Ok(offsets)
    }

    /// One offset commit in a transaction, aborted at once: nothing is committed, and
    /// the abort marker reaches the group's partition of __consumer_offsets.
    fn abort_an_offset_commit(&mut self, tpl: &TopicPartitionList) -> Result<()> {
        if self.in_transaction {
            self.metrics.aborts.inc();
            self.fence_open_transaction()?;
        }
        let mut any = TopicPartitionList::new();
        for e in tpl.elements() {
            // Never applied (aborted), but librdkafka leaves out offsets below zero.
            any.add_partition_offset(e.topic(), e.partition(), Offset::Offset(0))?;
        }
        let group = self.consumer.group_metadata().context("the consumer has no group metadata")?;
        self.await_claim()?;
        self.producer.begin_transaction().map_err(|e| self.fatal(e))?;
        self.producer.send_offsets_to_transaction(&any, &group, IO_TIMEOUT).map_err(|e| self.fatal(e))?;
        self.producer.abort_transaction(IO_TIMEOUT).map_err(|e| self.fatal(e))?;
        Ok(())
    }

    /// Each task back to what its changelog holds. Returns the input partitions
    /// whose offset the state corrected (see `report_corrections`): the caller reads
    /// them from there.
    fn restore_tasks(&mut self, tasks: &[i32]) -> Result<Vec<Slot>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        for &task in tasks {
            self.core.begin_restore(task);
        }
        let partitions = self.core.partitions();
        let mut restored = restore::read_tasks(
            &self.settings.bootstrap_servers,
            &self.settings.group_id,
            &self.changelog,
            partitions,
            self.core.restoring(tasks),
        )?;
        let corrections: Vec<Correction> =
            restored.tasks.drain(..).flat_map(|task| self.core.finish_restore(task)).collect();
        let took = started.elapsed();
        self.metrics.restored_records.inc_by(restored.records);
        self.metrics.restore_seconds.set(took.as_secs_f64());
        let with_state = restored.entries.len();
        self.status.lock().expect("status").restored_tasks += with_state as u64;
        info!(
            ?tasks,
            restored = with_state > 0,
            entries = restored.entries.values().sum::<u64>(),
            records = restored.records,
            seconds = took.as_secs_f64(),
            "tasks ready"
        );
        self.publish_tasks();
        self.report_corrections(&corrections);
        Ok(corrections.iter().map(|c| c.slot).collect())
    }

    /// Says which partitions will be read from where their task's state was
    /// committed, rather than from the offset believed committed.
    fn report_corrections(&self, corrections: &[Correction]) {
        for &Correction { slot, believed, changelog } in corrections {
            let (topic, partition) = (&self.topics[slot.0].0, slot.1);
            warn!(
                topic,
                partition,
                believed = ?believed,
                state_committed_at = changelog,
                "the offset committed with this partition's state differs from the committed offset read or \
                 believed; reading from the state's (an offset commit of an earlier transaction that landed late, \
                 or a commit reported failed that completed). To process records again on purpose, use \
                 `vigil-admin reset`"
            );
            self.metrics.offset_corrections.inc();
        }
    }

    /// Seeks a partition; one just assigned, librdkafka refuses (`Erroneous state`)
    /// until its fetcher has started, which follows the assignment shortly.
    fn seek(&self, (i, p): Slot, to: Offset) -> Result<()> {
        let deadline = Instant::now() + IO_TIMEOUT;
        let not_started = RDKafkaErrorCode::State.to_string();
        loop {
            match self.consumer.seek(&self.topics[i].0, p, to, IO_TIMEOUT) {
                Err(KafkaError::Seek(e)) if e == not_started && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                result => return result.with_context(|| format!("cannot seek {} [{p}]", self.topics[i].0)),
            }
        }
    }

    fn begin(&mut self) -> Result<()> {
        if !self.in_transaction {
            self.await_claim()?;
            self.producer.begin_transaction().map_err(|e| self.fatal(e))?;
            self.in_transaction = true;
            self.reads.clear();
            self.carries_records = false;
        }
        Ok(())
    }

    fn on_message(&mut self, message: &BorrowedMessage<'_>) -> Result<()> {
        let (read, read_ms) = *self.batch_read.get_or_insert_with(|| (Instant::now(), now_ms()));
        let (p, offset) = (message.partition(), message.offset());
        let Some(slot) = self.slot_of(message.topic(), p) else { return Ok(()) };
        if self.rebalances.lock().expect("rebalance log").pending() {
            // The rebalance came inside the poll that returned this record: settle the
            // tasks first (restoring new ones, and reading their partitions from where
            // they say); the record comes again if it is still this member's to count.
            return self.handle_rebalance();
        }
        if let Some(next) = self.core.next_to_count(slot).filter(|&next| offset < next) {
            // Counted already: delivered again, from a fetch position that disagreed
            // with the tasks' (after a rebalance or a rewind). Counting it again
            // would double it.
            self.metrics.redelivered.inc();
            if self.redelivered.insert(slot) {
                warn!(
                    topic = message.topic(),
                    partition = p,
                    offset,
                    next,
                    "a record counted already was delivered again; skipping what comes before the next to count"
                );
            }
            return Ok(());
        }
        self.redelivered.remove(&slot);
        self.silence.heard(slot, read);
        self.begin()?;
        let payload = message.payload().unwrap_or_default();
        let mut undecodable = None;
        let incoming = match markers::read(message) {
            Some(marker) => Incoming::Marker(marker),
            None => {
                let service = self.core.service();
                match service.decode(&self.codec, self.topics[slot.0].1, payload) {
                    Ok(record) => Incoming::Record { event_ts: service.event_ts(&record), record },
                    Err(CodecError::Decode(reason)) => {
                        undecodable = Some(reason);
                        Incoming::Undecodable
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let is_record = !matches!(incoming, Incoming::Marker(_));
        let routed = self.core.on_input(slot, offset, incoming)?;
        self.watch_woken();
        match routed {
            // Read again later: nothing of it counts yet.
            Routed::Held { seek } => {
                if let Some(from) = seek {
                    self.pause_and_rewind(slot, from)?;
                }
                return Ok(());
            }
            Routed::Reroute { input, partition, key } => {
                // The record as it came, to the partition of its key in the repartition topic.
                self.metrics.rerouted.inc();
                let record =
                    BaseRecord::to(&self.topics[input].0).partition(partition).key(key.as_str()).payload(payload);
                self.send(record)?;
                self.carries_records = true;
            }
            Routed::Done => {}
        }
        if is_record {
            self.records_in[slot.0].inc();
            if let Some(created) = message.timestamp().to_millis() {
                self.metrics.queued.observe((read_ms - created).max(0) as f64 / 1000.0);
            }
            self.batch_records += 1;
            match self.reads.last_mut() {
                Some((at, records)) if *at == read => *records += 1,
                _ => self.reads.push((read, 1)),
            }
        }
        if let Some(reason) = undecodable {
            self.dead_letter(&self.topics[slot.0].0, p, offset, reason, payload)?;
            self.carries_records = true;
        }
        Ok(())
    }

    fn pause_and_rewind(&self, slot: Slot, from: i64) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topics[slot.0].0, slot.1);
        self.consumer.pause(&tpl).context("cannot pause partitions")?;
        self.seek(slot, Offset::Offset(from))
    }

    /// A source or repartition partition silent for `idle_wall_clock_ms` stops
    /// holding its readers back (`TaskCore::mark_idle`) — but only if nothing of it
    /// can be on its way: it is not paused (a paused partition behind a backlog is
    /// slow, not idle), the consumer has drained what it fetched, and the broker says
    /// now that the partition ends where it has been read to (see `unread`). A
    /// broker that is restarting or stalled does not answer, and the partitions wait;
    /// once it answers again, their spells start over (see `Silence::answered`).
    /// A partition silent and unpaused with records waiting for `STUCK_SPELLS`
    /// spells in a row has a stuck consumer: the member fails, and its supervisor
    /// starts it again with new clients.
    fn mark_idle_partitions(&mut self) -> Result<()> {
        if !self.drained {
            return Ok(());
        }
        let mut ended = self.silence.ended_spells(Instant::now());
        ended.retain(|&slot| {
            let paused = self.core.is_paused(slot);
            if paused {
                self.silence.not_behind(slot);
            }
            !paused
        });
        if ended.is_empty() {
            return Ok(());
        }
        let Some(unread) = self.unread(&ended) else {
            self.silence.outage();
            return Ok(());
        };
        if !self.silence.answered(Instant::now()) {
            return Ok(());
        }
        for (slot, unread) in ended.into_iter().zip(unread) {
            match unread {
                Unread { waiting: 0, .. } => {
                    self.silence.not_behind(slot);
                    if self.core.mark_idle(slot) {
                        info!(topic = %self.topics[slot.0].0, partition = slot.1, "partition idle: read to its end and silent; the watermark goes on without it");
                    }
                }
                unread if self.silence.behind(slot) => bail!(
                    "the consumer delivered nothing of {} [{}] for {:?} while {} committed records wait after \
                     offset {}: its fetch is stuck; starting over with new clients",
                    self.topics[slot.0].0,
                    slot.1,
                    self.silence.after() * STUCK_SPELLS,
                    unread.waiting,
                    unread.read,
                ),
                _ => {}
            }
        }
        Ok(())
    }

    /// Idle source partitions the core woke because their task's input resumed (see
    /// `TaskCore::resume`): each holds the watermark until it has a record, or is
    /// silent and read to its end for another spell.
    fn watch_woken(&mut self) {
        // Called after every message: the clock is read only when there is one.
        let mut now = None;
        for slot in self.core.take_woken() {
            self.silence.heard(slot, *now.get_or_insert_with(Instant::now));
            info!(topic = %self.topics[slot.0].0, partition = slot.1, "idle partition woken: its task's input resumed, and it may have records to come");
        }
    }

    /// Every half idle timeout, idle tasks are asked to say again that they are idle,
    /// at a commit that is not put off (see `TaskCore::prepare_commit`): readers that
    /// took their idleness back when other input resumed wait for it. Downstream,
    /// only those whose inputs the broker says are read to their end. A broker that
    /// does not answer gets no commit from it.
    fn ask_idle_tasks_to_repeat(&mut self) {
        if !self.drained || self.idle_markers_repeated.elapsed() < self.silence.after() / 2 {
            return;
        }
        self.idle_markers_repeated = Instant::now();
        let idle = self.core.idle_tasks();
        if let Some(answers) = self.read_to_end(idle) {
            self.repeat_idle = Some(answers.into_iter().filter_map(|(task, done)| done.then_some(task)).collect());
        }
    }

    /// A task asked a generation that it cannot vouch for on its own (see
    /// `TaskCore::to_verify`) answers it once the broker says the partitions listed
    /// are read to their end (see `markers`): asked after the ask was read, the
    /// broker's end covers every record produced before the reader that asked
    /// resumed. Unlike marking a partition idle, this need not wait for the member
    /// to drain its fetches: records fetched and not yet processed are unread by the
    /// consumer's position too.
    fn answer_asks(&mut self) {
        let tasks = self.core.to_verify();
        if tasks.is_empty() {
            return;
        }
        let now = Instant::now();
        if now < self.next_ask_check {
            return;
        }
        self.next_ask_check = now + ASK_CHECK_INTERVAL;
        match self.read_to_end(tasks) {
            // An unanswered query blocks the loop: ask no sooner than it waited.
            None => self.next_ask_check = Instant::now() + END_OFFSET_TIMEOUT,
            Some(answers) => {
                for (task, done) in answers {
                    if done {
                        self.core.verified(task);
                    }
                }
            }
        }
    }

    /// For each task with its partitions, whether the broker says every one of them
    /// is read to its end; `None` if it does not answer (the silence watch is told:
    /// see `Silence::outage`).
    fn read_to_end(&mut self, tasks: Vec<(i32, Vec<Slot>)>) -> Option<Vec<(i32, bool)>> {
        let slots: Vec<Slot> = tasks.iter().flat_map(|(_, slots)| slots.iter().copied()).collect();
        let Some(unread) = self.unread(&slots) else {
            self.silence.outage();
            return None;
        };
        let waiting: BTreeSet<Slot> =
            slots.into_iter().zip(unread).filter(|(_, u)| u.waiting > 0).map(|(s, _)| s).collect();
        Some(tasks.into_iter().map(|(task, slots)| (task, !slots.iter().any(|s| waiting.contains(s)))).collect())
    }

    /// How far each of `slots` has been read and how many records wait after that,
    /// as the broker says now (`None`: no answer). The position is the consumer's own
    /// where it has one: it moves past the offsets never delivered under
    /// read_committed (transaction markers, aborted records), and a seek clears it.
    /// The end is the last stable offset (librdkafka asks with the consumer's
    /// isolation level), so records of a transaction still open do not count.
    fn unread(&self, slots: &[Slot]) -> Option<Vec<Unread>> {
        let ends = self.broker_offsets(slots, Offset::End)?;
        let positions = self.consumer.position().ok();
        let consumer_position =
            |(i, p): Slot| concrete(positions.as_ref()?.find_partition(&self.topics[i].0, p)?.offset());
        let read: Vec<Option<i64>> =
            slots.iter().map(|&slot| consumer_position(slot).max(self.core.position(slot))).collect();
        // Nothing read yet: the partition's first offset is where reading starts.
        let unstarted: Vec<Slot> = slots.iter().zip(&read).filter(|(_, r)| r.is_none()).map(|(&s, _)| s).collect();
        let mut starts = self.broker_offsets(&unstarted, Offset::Beginning)?.into_iter();
        let unread = read.into_iter().zip(ends).map(|(read, end)| {
            let read = read.or_else(|| starts.next()).expect("a start offset for every partition not read yet");
            Unread { read, waiting: (end - read).max(0) }
        });
        Some(unread.collect())
    }

    /// The offsets of `slots` at `Offset::Beginning` or `Offset::End`, in one
    /// `ListOffsets` request to each broker that leads any of them: a member asks
    /// about all its silent partitions at once, and a query blocks its loop.
    fn broker_offsets(&self, slots: &[Slot], at: Offset) -> Option<Vec<i64>> {
        if slots.is_empty() {
            return Some(Vec::new());
        }
        let mut query = TopicPartitionList::new();
        for &(i, p) in slots {
            query.add_partition_offset(&self.topics[i].0, p, at).ok()?;
        }
        let answer = self.consumer.offsets_for_times(query, END_OFFSET_TIMEOUT).ok()?;
        let offset = |(i, p): Slot| {
            let element = answer.find_partition(&self.topics[i].0, p)?;
            element.error().ok()?;
            concrete(element.offset())
        };
        slots.iter().map(|&slot| offset(slot)).collect()
    }

    /// Pauses the partitions that ran too far ahead of their task, resumes those back
    /// within reach.
    fn apply_flow(&mut self) -> Result<()> {
        let flow = self.core.flow();
        let list = |slots: &[Slot]| {
            let mut tpl = TopicPartitionList::new();
            for &(i, p) in slots {
                tpl.add_partition(&self.topics[i].0, p);
            }
            tpl
        };
        let (pause, resume) = (list(&flow.pause), list(&flow.resume));
        if pause.count() > 0 {
            self.consumer.pause(&pause).context("cannot pause partitions")?;
        }
        for &(slot, from) in &flow.rewind {
            self.pause_and_rewind(slot, from)?;
        }
        if resume.count() > 0 {
            self.consumer.resume(&resume).context("cannot resume partitions")?;
        }
        self.metrics.paused.set(self.core.paused() as i64);
        Ok(())
    }

    /// Produces what the operators emitted.
    fn emit(&mut self) -> Result<()> {
        let outputs: Vec<_> = self.core.take_outputs().collect();
        if outputs.is_empty() {
            return Ok(());
        }
        self.begin()?;
        self.carries_records = true;
        for emitted in outputs {
            if emitted.late {
                self.metrics.late_records.inc();
            }
            let out = self.core.service().encode(&self.codec, emitted.output)?;
            if let Some(counter) = self.records_out.get(out.topic.name) {
                counter.inc();
            }
            self.send(BaseRecord::to(out.topic.name).key(out.key.as_str()).payload(out.value.as_slice()))?;
        }
        Ok(())
    }

    fn dead_letter(&self, topic: &str, partition: i32, offset: i64, reason: String, payload: &[u8]) -> Result<()> {
        warn!(topic, partition, offset, %reason, "dead letter");
        self.metrics.dead_letters.inc();
        let letter =
            DeadLetter { record_type: RecordType::DeadLetter, source: topic, partition, offset, reason, payload };
        let value = self.codec.encode(DEAD_LETTERS, &letter)?;
        self.records_out[DEAD_LETTERS.name].inc();
        self.send(BaseRecord::to(DEAD_LETTERS.name).key(topic).payload(&value))
    }

    fn send<K: rdkafka::message::ToBytes + ?Sized>(&self, record: BaseRecord<'_, K, [u8]>) -> Result<()> {
        produce::send(&self.producer, record).map_err(|e| match self.producer.client().fatal_error() {
            Some((_, reason)) => self.fenced(reason),
            None => e,
        })
    }

    /// Commits everything since the last commit in one transaction.
    fn commit(&mut self) -> Result<()> {
        let started = Instant::now();
        let started_ms = now_ms();
        // Outputs of the records this commit counts go in its transaction.
        self.emit()?;
        self.begin()?;
        let batch = self.core.prepare_commit(self.repeat_idle.take().as_ref());
        self.write_batch(&batch)?;
        let mut offsets = TopicPartitionList::new();
        for &((i, p), next) in &batch.offsets {
            offsets.add_partition_offset(&self.topics[i].0, p, Offset::Offset(next))?;
        }
        let group = self.consumer.group_metadata().ok_or_else(|| anyhow!("the consumer has no group metadata"))?;
        let result = self.send_offsets(offsets, group).and_then(|()| {
            if !produce::await_deliveries(&self.producer, IO_TIMEOUT) {
                return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
            }
            self.producer.commit_transaction(IO_TIMEOUT)
        });
        self.in_transaction = false;
        let took = started.elapsed();
        // A commit held up as long as an unanswered end-offset query is an outage too.
        if result.is_err() || took >= END_OFFSET_TIMEOUT {
            self.silence.outage();
        }
        match result {
            Ok(()) => {
                self.failed_commits = 0;
                self.core.committed();
                self.last_commit = Instant::now();
                self.caught_up_since_commit = false;
                self.cadence.committed(took);
                self.metrics.commits.inc();
                self.metrics.commit_seconds.observe(took.as_secs_f64());
                let now = Instant::now();
                for (read, records) in self.reads.drain(..) {
                    let wait = (now - read).as_secs_f64();
                    (0..records).for_each(|_| self.metrics.commit_wait.observe(wait));
                }
                self.metrics.committed_now();
                self.metrics.degraded.set(0);
                self.beat.recovered();
                let state_bytes = batch.changelog_bytes();
                self.metrics.changelog_records.inc_by(batch.changelog.len() as u64);
                self.metrics.changelog_bytes.inc_by(state_bytes);
                self.publish_tasks();
                self.status.lock().expect("status").committed(Commit {
                    seq: 0,
                    started_ms,
                    duration_ms: took.as_millis() as u64,
                    state_bytes,
                    tasks: self.core.tasks().count() as u32,
                });
                Ok(())
            }
            Err(KafkaError::Transaction(t)) if t.is_fatal() => Err(self.fatal(KafkaError::Transaction(t))),
            // Redoing the work with the same consumer did not help (its group
            // membership is stale after a broker restart, say): the member fails, and
            // its supervisor starts it again with new clients.
            Err(e) if self.failed_commits + 1 >= COMMIT_ATTEMPTS => {
                Err(anyhow!("{COMMIT_ATTEMPTS} commits in a row failed, the last with: {e}"))
            }
            Err(e) => {
                self.failed_commits += 1;
                warn!(error = %e, "commit failed; redoing the work since the last commit");
                self.abort()
            }
        }
    }

    /// `send_offsets_to_transaction`, bounded. librdkafka can wait past the timeout
    /// it is given, for good, while the group coordinator it has cached does not come
    /// back (confluentinc/librdkafka#5456 and #5511; seen in the chaos suite after a
    /// broker restart: a member's loop blocked here for five minutes, until
    /// `max.poll.interval.ms` expelled its consumer). The call runs on a thread of its
    /// own; if it has not returned in time the commit fails, and the abort that
    /// follows gives up this producer for a new one (the thread keeps the old one
    /// until librdkafka lets go of it).
    fn send_offsets(&self, offsets: TopicPartitionList, group: ConsumerGroupMetadata) -> KafkaResult<()> {
        let (done, outcome) = mpsc::channel();
        let producer = Arc::clone(&self.producer);
        std::thread::spawn(move || {
            let _ = done.send(producer.send_offsets_to_transaction(&offsets, &group, IO_TIMEOUT));
        });
        outcome.recv_timeout(IO_TIMEOUT + SEND_OFFSETS_MARGIN).unwrap_or_else(|_| {
            warn!(
                waited = ?(IO_TIMEOUT + SEND_OFFSETS_MARGIN),
                "sending the commit's offsets to the transaction has not returned; giving up this producer"
            );
            Err(KafkaError::Global(RDKafkaErrorCode::OperationTimedOut))
        })
    }

    /// The markers and changelog records of a commit.
    fn write_batch(&self, batch: &CommitBatch) -> Result<()> {
        let repartitions = self.core.inputs().iter().filter(|i| matches!(i.kind, InputKind::Repartition { .. }));
        let to_watermarked = batch.markers.iter().flat_map(|m| self.watermarked.iter().map(move |t| (t.name, m)));
        let to_repartitions =
            batch.repartition_markers.iter().flat_map(|m| repartitions.clone().map(move |i| (i.name.as_str(), m)));
        for (topic, marker) in to_watermarked.chain(to_repartitions) {
            for q in 0..self.core.partitions() {
                self.send(BaseRecord::<[u8], [u8]>::to(topic).partition(q).headers(markers::headers(*marker)))?;
            }
        }
        for w in &batch.changelog {
            let record = BaseRecord::to(&self.changelog).partition(w.partition).key(w.key.as_slice());
            // No payload is a tombstone: compaction drops the key.
            self.send(match &w.value {
                Some(v) => record.payload(v.as_slice()),
                None => record,
            })?;
        }
        Ok(())
    }

    /// Gives up the open transaction after a commit that failed without a verdict (a
    /// timeout, say); the tasks come back from their changelogs and the inputs rewind
    /// to the last commit. The producer is not reused: librdkafka lacks KIP-890, so a
    /// commit or abort it still has in flight could complete a later transaction. A
    /// new one (a new epoch) fences whatever the old one left.
    fn abort(&mut self) -> Result<()> {
        self.metrics.aborts.inc();
        self.fence_open_transaction()?;
        let Rewind { tasks, mut slots } = self.core.abort();
        slots.extend(self.restore_tasks(&tasks)?);
        slots.sort_unstable();
        slots.dedup();
        self.read_from_next_to_count(&slots)?;
        info!("rewound to the last commit with a new producer");
        Ok(())
    }

    /// A new transactional producer in place of the current one. The old one is
    /// dropped on a thread of its own: librdkafka's teardown of a producer whose
    /// transaction failed can wait on a coordinator that is not answering, and the
    /// loop must not wait with it (the new producer's epoch fences the old one).
    fn replace_producer(&mut self) -> Result<()> {
        // A claim still under way was the old producer's; one that failed says no
        // more than the new producer's `init_transactions` will.
        if let Some(claim) = self.claim.take() {
            let _ = claim.join();
        }
        let old = std::mem::replace(&mut self.producer, transactional_producer(&self.settings)?);
        std::thread::spawn(move || drop(old));
        Ok(())
    }

    /// Ends the open transaction by fencing it: a new producer with the same
    /// transactional id takes a new epoch, and the coordinator aborts what the old
    /// one left open under that epoch. An abort by the producer itself keeps its
    /// epoch, and without KIP-890 a write of that transaction still on its way (held
    /// up by a stalled broker, say) then opens a transaction on its partition that
    /// the coordinator does not know: one that hangs, holding the partition's
    /// read_committed readers for good, or that this producer's next commit
    /// completes, writing its records twice. Under the new epoch the broker refuses
    /// such a write, and one that came before the abort marker ends with it. That
    /// `init_transactions` also returns only once every earlier transaction of this
    /// id has ended, its markers written.
    fn fence_open_transaction(&mut self) -> Result<()> {
        self.in_transaction = false;
        self.replace_producer()?;
        self.init_transactions()
    }

    /// The producer's `init_transactions` (a new epoch, which fences older ones and
    /// waits for their transactions to end), then that epoch's claim on every
    /// partition the member writes (see `epoch`): a write of an older epoch still on
    /// its way is refused from then on, and one that came first is aborted. The
    /// claim writes one partition per request, five at a time (librdkafka's most for
    /// an idempotent producer), about 0.1-0.2 s for a stage's 16-24 partitions: it
    /// runs while the member joins its group and restores its tasks, and the
    /// member's first transaction waits for it (`await_claim`). Restores read
    /// committed records only, so they see the same with or without it done.
    fn init_transactions(&mut self) -> Result<()> {
        self.producer.init_transactions(IO_TIMEOUT).map_err(|e| self.fatal(e))?;
        let (producer, written, partitions) =
            (Arc::clone(&self.producer), self.written.clone(), self.core.partitions());
        self.claim =
            Some(std::thread::spawn(move || epoch::claim_partitions(&producer, &written, partitions, IO_TIMEOUT)));
        Ok(())
    }

    /// Waits for the producer epoch's claim to be done (see `init_transactions`).
    fn await_claim(&mut self) -> Result<()> {
        let Some(claim) = self.claim.take() else { return Ok(()) };
        claim
            .join()
            .expect("claiming partitions does not panic")
            .map_err(|e| self.fatal(e))
            .context("cannot claim the partitions this member writes for its new producer epoch")
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
