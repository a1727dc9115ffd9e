//! The Kafka shell around a stage member's pure core (`crate::core`): it polls the
//! input partitions and hands their records to the core, produces what the core
//! emits, and commits in one transaction — the outputs, the changelog entries that
//! changed, watermark markers for the stages downstream, and the input offsets
//! (`send_offsets_to_transaction` with the group metadata, Kafka Streams' EOS v2). A
//! task is restored from its changelog before its partition is processed; when a
//! commit fails the member takes a new producer and the core restores its tasks from
//! the changelog and rewinds the inputs, so nothing is lost or doubled. Any other
//! failure ends the member, which its `supervise::Supervisor` starts again.
//!
//! A fenced producer stops a keyed stage's member; in a global stage (one task over
//! every partition) the member Kafka elects leads and the others stand by (see
//! `election`), and a fenced leader steps back to standby.
//!
//! The runner's parts, one a file: its Kafka clients (`clients`), the group's
//! assignments and restores (`assignment`), reading and producing (`input`), what
//! cannot be read (`dead_letters`), idle and stuck partitions (`idleness`), and the
//! transaction (`transaction`).

mod assignment;
mod clients;
mod dead_letters;
mod idleness;
mod input;
mod transaction;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};
use rustc_hash::{FxHashMap, FxHashSet};
use tracing::{info, warn};
use vigil_model::topology::{Topic, DEAD_LETTERS};
use vigil_stream::Stage;

use crate::codec::Codec;
use crate::core::commit_policy::{CommitPolicy, Reading};
use crate::core::idle_check::IdleCheck;
use crate::core::{Slot, TaskCore};
use crate::election::Leadership;
use crate::group::{GroupContext, Membership, RebalanceLog, SharedLog};
use crate::inputs::{self, InputKind, Parallelism};
use crate::metrics::MemberMetrics;
use crate::observe::LoopHealth;
use crate::produce::Kafka;
use crate::queries::{Inbox, Reply};
pub use crate::settings::{Common, Settings};
use crate::status::{Ledger, Role, SharedStatus};
use crate::topics;

/// How long a call to the broker may take before the member counts it failed.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// An offset the broker or the consumer gave as a number (not `Beginning`, `End`,
/// `Invalid`...).
fn concrete(offset: Offset) -> Option<i64> {
    match offset {
        Offset::Offset(o) => Some(o),
        _ => None,
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

/// The parts a member runs with besides its settings: where it counts, reports and
/// shows it is alive.
pub struct Observers {
    pub metrics: MemberMetrics,
    pub status: SharedStatus,
    pub loop_health: LoopHealth,
    /// State queries for the member to answer (`crate::queries`).
    pub queries: Inbox,
}

pub struct Runner<S: Stage> {
    settings: Settings,
    metrics: MemberMetrics,
    status: SharedStatus,
    loop_health: LoopHealth,
    queries: Inbox,
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
    core: TaskCore<S, Codec>,
    /// Where this stage's watermark markers go (on the cluster), and its changelog.
    watermarked: Vec<String>,
    changelog: String,
    /// Every topic the member writes: its outputs, dead letters, repartition topics
    /// and changelog.
    written: Vec<String>,
    /// How long each assigned source partition has had nothing to read, for idleness
    /// and for a consumer stuck on one.
    idle_check: IdleCheck,
    /// Partitions delivering records counted already: warned about once, until the
    /// next record to count comes.
    redelivered: FxHashSet<Slot>,
    /// When an unreadable record batch was last met, and last written to the log.
    unreadable_seen: Option<Instant>,
    unreadable_logged: Option<Instant>,
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
    commit_policy: CommitPolicy,
    /// When the records of the open transaction were read, for their commit wait:
    /// each batch's read time and how many of its records are in the transaction.
    reads: Vec<(Instant, u32)>,
    /// When the batch being read had its first message (monotonic and wall clock),
    /// taken as the read time of all its records, and how many records it counted:
    /// the clocks are read once a batch, not for every record (docs/decisions.md,
    /// 2026-12-06, "Fewer clock reads"). A record later in a batch counts its wait
    /// there as processing, not queued: its outputs wait for the batch too.
    batch_read: Option<(Instant, i64)>,
    batch_records: u32,
    /// The input topics on the cluster, by input index; and the same for librdkafka's
    /// C calls.
    input_topics: Vec<String>,
    topic_names: Vec<CString>,
    /// Each output topic (by its name in the pipeline) on the cluster, and its copy
    /// between stages if it has one.
    output_topics: FxHashMap<&'static str, (String, Option<String>)>,
    /// Records-in counters by input index, records-out counters by topic.
    records_in: Vec<prometheus::IntCounter>,
    records_out: FxHashMap<&'static str, prometheus::IntCounter>,
}

impl<S: Stage> Runner<S> {
    pub fn new(stage: S, settings: Settings, observers: Observers) -> Result<Self> {
        // The registry client (its TLS roots loaded) is made while the Kafka clients
        // are made and check the topics (docs/decisions.md, 2026-12-02, "Offset
        // queries at once").
        let registry_url = settings.registry_url.clone();
        let names = settings.names.clone();
        let codec = std::thread::spawn(move || Codec::new(&registry_url).map(|c| c.named(names)));
        let topology = stage.topology();
        let rebalances: SharedLog = Arc::new(Mutex::new(RebalanceLog::default()));
        let consumer =
            clients::consumer(&settings, Parallelism::of(&topology), rebalances.clone(), &observers.metrics)?;
        let producer = clients::transactional_producer(&settings, &observers.metrics)?;
        let partitions = settings.config.runtime.partitions;
        let inputs = inputs::inputs(&topology, &settings.config);
        let outputs: Vec<&'static Topic> = topology.outputs.iter().copied().chain([&DEAD_LETTERS]).collect();
        let cluster = &settings.names;
        let input_topics: Vec<String> = inputs
            .iter()
            .map(|i| match i.kind {
                InputKind::Upstream => cluster.between_stages(i.records.name),
                InputKind::Source { .. } | InputKind::Repartition { .. } => cluster.of(&i.name),
            })
            .collect();
        let output_topics: FxHashMap<&'static str, (String, Option<String>)> = outputs
            .iter()
            .map(|t| (t.name, (cluster.of(t.name), cluster.is_copied(t.name).then(|| cluster.between_stages(t.name)))))
            .collect();
        let changelog = cluster.of(&topics::changelog(topology.name));
        let written: Vec<String> = (output_topics.values().flat_map(|(name, copy)| [Some(name), copy.as_ref()]))
            .flatten()
            .cloned()
            .chain(inputs.iter().zip(&input_topics).filter(|(i, _)| i.is_repartition()).map(|(_, n)| n.clone()))
            .chain([changelog.clone()])
            .collect();
        let mut names: Vec<String> = input_topics.iter().cloned().chain(written.iter().cloned()).collect();
        names.sort();
        names.dedup();
        topics::check(&consumer, &names, partitions)?;
        let codec = codec.join().expect("making the registry client does not panic")?;
        let core = TaskCore::new(stage, settings.config.clone(), codec);
        let Observers { metrics, status, loop_health, queries } = observers;
        let records_in = inputs.iter().map(|i| metrics.records_in(&i.name)).collect();
        let records_out = outputs.iter().map(|t| (t.name, metrics.records_out(t.name))).collect();
        let topic_names = input_topics.iter().map(|n| CString::new(n.as_str())).collect::<Result<_, _>>()?;
        Ok(Runner {
            topic_names,
            watermarked: topology.watermarked.iter().map(|t| cluster.between_stages(t.name)).collect(),
            changelog,
            input_topics,
            output_topics,
            written,
            idle_check: IdleCheck::new(Duration::from_millis(settings.config.runtime.idle_wall_clock_ms)),
            redelivered: FxHashSet::default(),
            unreadable_seen: None,
            unreadable_logged: None,
            commit_policy: CommitPolicy::new(settings.commit_interval),
            settings,
            metrics,
            status,
            loop_health,
            queries,
            consumer: Arc::new(consumer),
            producer,
            claim: None,
            rebalances,
            membership: Membership::default(),
            out_of_group: false,
            core,
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
        self.core.stage().topology().name
    }

    /// The Kafka topic of input `input` (its index in the core's inputs).
    fn topic(&self, input: usize) -> &str {
        &self.input_topics[input]
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
        match Parallelism::of(&self.core.stage().topology()) {
            Parallelism::PerPartition => {
                // The group join runs on librdkafka's threads while the producer
                // fences its predecessor; the assignment is taken only in `process`,
                // after that.
                let names: Vec<&str> = self.input_topics.iter().map(String::as_str).collect();
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
                    self.loop_health.went_round();
                    self.queries.take().into_iter().for_each(|q| q.answer(Reply::NotHere));
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
        let topic = self.settings.names.of(topics::LEADERSHIP);
        Leadership::join(&self.settings.bootstrap_servers, &topic, &self.settings.group_id, &self.settings.member)
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
            tpl.add_partition(self.topic(i), p);
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
        self.forget_tasks();
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
            self.loop_health.went_round();
            self.handle_rebalance()?;
            self.mark_idle_partitions()?;
            self.ask_idle_tasks_to_repeat();
            self.answer_asks();
            self.answer_queries();
            self.read_batch()?;
            self.emit()?;
            self.apply_flow()?;
            self.metrics.set_watermark(self.core.lowest_watermark());
            self.metrics.input_ended.set(i64::from(self.core.input_ended()));
            let reading = Reading {
                caught_up: self.caught_up,
                busy: !self.caught_up_since_commit,
                carries_records: self.carries_records,
            };
            let since_commit = self.last_commit.elapsed();
            if self.repeat_idle.is_some() || self.core.commit_due(&self.commit_policy, since_commit, reading) {
                self.commit()?;
            }
        }
        Ok(())
    }

    /// Answers the state queries asked since the last round, from the live state.
    fn answer_queries(&self) {
        for asked in self.queries.take() {
            let reply = self.core.query(&asked.what, &asked.key);
            asked.answer(reply);
        }
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
}
