//! Reading a task's state back from its changelog partition: every record up to the
//! partition's end (read_committed, so an aborted transaction's writes never come
//! back), in order, the task's own entries handed to the core.

use crate::connection::{self, QuietEof};
use crate::patience::patiently;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info};
use vigil_stream::changelog::Stateful;

use crate::core::{entry_of, RestoredTask, TaskRestore};

/// How long a restore may read nothing before it is taken for stuck: a transaction
/// left open holds the read_committed end back until the broker times it out (the
/// transaction timeout, 10 s, plus the broker's sweep of timed-out transactions, 10 s
/// by default). A restore that goes on reading may take as long as it needs.
const STALL_LIMIT: Duration = Duration::from_secs(60);
const WATERMARKS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a restore waits for the transactions open on its changelog partitions
/// to end: beyond the transaction timeout and the broker's sweep of timed-out
/// transactions, which end those of a writer that died.
const OPEN_TRANSACTION_WAIT: Duration = Duration::from_secs(60);
/// After this long waiting, a restore says what it waits for.
const OPEN_TRANSACTION_NOTICE: Duration = Duration::from_secs(5);

/// A client closed on a thread of its own when dropped: librdkafka's destroy (leaving
/// the group, closing connections) would hold up every restore, one of empty
/// changelogs included, before the member could start reading (docs/decisions.md,
/// 2026-12-02, "Offset queries at once, clients closed aside").
struct ClosedAside<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> std::ops::Deref for ClosedAside<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_ref().expect("a client until dropped")
    }
}

impl<T: Send + 'static> Drop for ClosedAside<T> {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            std::thread::spawn(move || drop(client));
        }
    }
}

/// What a restore read.
#[derive(Default)]
pub struct Restored {
    /// Records of the partitions read (every task's, tombstones included).
    pub records: u64,
    /// Entries handed over, per task.
    pub entries: BTreeMap<i32, u64>,
    /// Each task's end, for [`crate::core::TaskCore::finish_restore`].
    pub tasks: Vec<RestoredTask>,
}

/// How many changelog partitions a restore reads at once, each with a client and a
/// thread of its own (and up to 3 MiB fetched ahead).
const READERS: usize = 8;

/// Restores the given tasks, each from its changelog partition (`task % partitions`):
/// every entry in order, then the task's `finish`. Up to [`READERS`] partitions are
/// read at once, each by a client of its own on a thread that also applies its
/// entries: one client fetches one request at a time, and one thread applying every
/// record left cores idle (docs/decisions.md, 2026-12-03, "Restores: a client and a
/// thread per partition").
pub fn read_tasks<O: Stateful + Send>(
    bootstrap_servers: &str,
    group_id: &str,
    changelog: &str,
    partitions: i32,
    tasks: Vec<TaskRestore<'_, O>>,
) -> Result<Restored> {
    let mut by_partition: BTreeMap<i32, Vec<TaskRestore<'_, O>>> = BTreeMap::new();
    for task in tasks {
        by_partition.entry(task.task() % partitions).or_default().push(task);
    }
    let wanted: BTreeSet<i32> = by_partition.keys().copied().collect();
    let readable = wait_for_open_transactions(bootstrap_servers, changelog, &wanted)?;
    // Partitions that hold nothing (a new stage's) are done without reading: waiting
    // for their end-of-partition event cost about half a second of start-up.
    let (empty, to_read): (Vec<_>, Vec<_>) =
        by_partition.into_iter().partition(|(p, _)| readable[p].0 >= readable[p].1);
    let mut reads = vec![Ok(finish(empty.into_iter().flat_map(|(_, tasks)| tasks).collect(), Restored::default()))];
    let queue = Mutex::new(to_read.into_iter().map(|(p, tasks)| (p, readable[&p].0, tasks)).collect::<Vec<_>>());
    let failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..READERS.min(queue.lock().expect("queue").len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut reads = Vec::new();
                    loop {
                        let next = queue.lock().expect("queue").pop();
                        let Some((p, first, tasks)) = next.filter(|_| !failed.load(Ordering::Relaxed)) else {
                            return reads;
                        };
                        let read = read_partition(bootstrap_servers, group_id, changelog, (p, first), tasks, &failed);
                        failed.fetch_or(read.is_err(), Ordering::Relaxed);
                        reads.push(read);
                    }
                })
            })
            .collect();
        for reader in readers {
            reads.extend(reader.join().expect("a changelog reader does not panic"));
        }
    });
    let mut restored = Restored::default();
    for read in reads {
        let read = read?;
        restored.records += read.records;
        restored.entries.extend(read.entries);
        restored.tasks.extend(read.tasks);
    }
    Ok(restored)
}

/// Reads one changelog partition to its end, applying the entries of its tasks.
/// Stops early, with an error of no interest, once `failed` says another did.
fn read_partition<O: Stateful>(
    bootstrap_servers: &str,
    group_id: &str,
    changelog: &str,
    (partition, first): (i32, i64),
    mut tasks: Vec<TaskRestore<'_, O>>,
    failed: &AtomicBool,
) -> Result<Restored> {
    let reader: BaseConsumer<QuietEof> = connection::client_config(bootstrap_servers)
        .set("group.id", format!("{group_id}-restore"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        // Small fetches, with a thread per partition: larger ones ran slower and
        // took more memory, their buffers no longer in cache. 1 MiB is
        // the least librdkafka takes (`message.max.bytes`); a larger record batch
        // still comes whole.
        .set("fetch.max.bytes", "1048576")
        .set("max.partition.fetch.bytes", "1048576")
        .set("fetch.wait.max.ms", "10")
        // Fetch again as soon as the queue is below two fetches: librdkafka's
        // defaults (100 000 records queued, then a second's pause) left a restore
        // idle half the time.
        .set("queued.max.messages.kbytes", "2048")
        .set("queued.min.messages", "10000000")
        .set("fetch.queue.backoff.ms", "1")
        .create_with_context(QuietEof)
        .context("cannot create the changelog reader")?;
    let reader = ClosedAside(Some(reader));
    let mut tpl = TopicPartitionList::new();
    // From its first offset, known already: asked to start at `Beginning`, a new
    // client looks that offset up and retries the lookup only after 500 ms before it
    // knows the partition's leader. (Should the log's start move meanwhile,
    // `auto.offset.reset` reads from the new one.)
    tpl.add_partition_offset(changelog, partition, Offset::Offset(first))?;
    reader.assign(&tpl)?;
    let mut restored = Restored::default();
    let mut idle_since: Option<Instant> = None;
    let mut last_error: Option<KafkaError> = None;
    loop {
        let m = match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => m,
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(finish(tasks, restored)),
            Some(Err(e)) if reader.client().fatal_error().is_some() => {
                return Err(anyhow!(e).context(format!("cannot read `{changelog}` [{partition}]")));
            }
            // Not fatal: one broker of several down (its connection refused) while
            // the partition's new leader serves it, say. The client retries by
            // itself, as the member's consumer does; only a stall fails the restore.
            polled => {
                if let Some(Err(e)) = polled {
                    debug!(%changelog, partition, error = %e, "changelog reader error; reading on");
                    last_error = Some(e);
                }
                if failed.load(Ordering::Relaxed) {
                    bail!("another changelog partition's restore failed");
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > STALL_LIMIT {
                    let cause = match &last_error {
                        Some(e) => format!("the last error: {e}"),
                        None => "a transaction left open may be holding it back".to_string(),
                    };
                    bail!(
                        "restoring from `{changelog}` read nothing for {STALL_LIMIT:?} before the end of partition \
                         {partition}; {cause}"
                    );
                }
                continue;
            }
        };
        idle_since = None;
        restored.records += 1;
        let Some(key) = m.key() else { continue };
        let Some(task) = key.get(..4).map(|t| i32::from_be_bytes([t[0], t[1], t[2], t[3]])) else { continue };
        let Some(t) = tasks.iter_mut().find(|t| t.task() == task) else { continue };
        let entry = entry_of(task, key).expect("the key starts with its task");
        *restored.entries.entry(task).or_default() += 1;
        t.entry(entry, m.payload())?;
    }
}

/// Every task's end, after its last entry.
fn finish<O: Stateful>(tasks: Vec<TaskRestore<'_, O>>, mut restored: Restored) -> Restored {
    restored.tasks = tasks.into_iter().map(TaskRestore::finish).collect();
    restored
}

/// Of each changelog partition, the first offset and the last stable one.
type Readable = BTreeMap<i32, (i64, i64)>;

/// Waits until no transaction is open on the changelog partitions (the last stable
/// offset reaches the high watermark as it was at the start): an open one may be a
/// commit whose markers are on their way, and reading without it would bring back
/// state older than the offsets committed with it. After [`OPEN_TRANSACTION_WAIT`]
/// the restore fails and the member starts over; a hanging transaction of its own
/// producer id ends with its new epoch's claim (`epoch`). docs/kafka.md, "Restores wait
/// for open transactions", has the cases. Returns each partition's first offset and
/// last stable one.
fn wait_for_open_transactions(
    bootstrap_servers: &str,
    changelog: &str,
    partitions: &BTreeSet<i32>,
) -> Result<Readable> {
    let client = |isolation| -> Result<ClosedAside<BaseConsumer>> {
        let client: BaseConsumer = connection::client_config(bootstrap_servers)
            .set("isolation.level", isolation)
            .create()
            .context("cannot create the changelog's offset client")?;
        // Asked for offsets before it knows the partition's leader, a new client asks
        // for the leader, often before its connection is up, then asks again at
        // growing intervals: half a second lost in about one restore of twelve. A metadata
        // request waits for the connection instead.
        patiently(changelog, WATERMARKS_TIMEOUT, |t| client.fetch_metadata(Some(changelog), t))
            .with_context(|| format!("cannot read the metadata of `{changelog}`"))?;
        Ok(ClosedAside(Some(client)))
    };
    let (uncommitted, committed) = std::thread::scope(|scope| {
        let committed = scope.spawn(|| client("read_committed"));
        (client("read_uncommitted"), committed.join().expect("making an offset client does not panic"))
    });
    let (uncommitted, committed) = (uncommitted?, committed?);
    // Each query is a round trip to the broker: all partitions' go at once.
    let ends = |client_end: &(dyn Fn(i32) -> KafkaResult<(i64, i64)> + Sync)| -> Result<Readable> {
        std::thread::scope(|scope| {
            let queries: Vec<_> = partitions.iter().map(|&p| (p, scope.spawn(move || client_end(p)))).collect();
            queries
                .into_iter()
                .map(|(p, query)| {
                    let ends = query
                        .join()
                        .expect("an offset query does not panic")
                        .with_context(|| format!("cannot read the offsets of `{changelog}` [{p}]"))?;
                    Ok((p, ends))
                })
                .collect()
        })
    };
    let written = ends(&|p| uncommitted.fetch_watermarks(changelog, p, WATERMARKS_TIMEOUT))?;
    let started = Instant::now();
    let mut noticed = false;
    loop {
        let readable = ends(&|p| committed.fetch_watermarks(changelog, p, WATERMARKS_TIMEOUT))?;
        let open: BTreeSet<i32> = partitions.iter().copied().filter(|p| readable[p].1 < written[p].1).collect();
        if open.is_empty() {
            return Ok(readable);
        }
        let waited = started.elapsed();
        if waited > OPEN_TRANSACTION_WAIT {
            bail!(
                "a transaction on partitions {open:?} of `{changelog}` is still open after {OPEN_TRANSACTION_WAIT:?}: \
                 a commit whose markers wait on a broker in trouble, or a hanging transaction of another member's \
                 producer id. Restoring without it could do committed work again, so the member starts over to \
                 restore later. If this repeats while the broker answers, the transaction hangs: `kafka-transactions.sh describe-producers --topic \
                 {changelog} --partition <p>` shows where it starts (CurrentTransactionStartOffset), and \
                 `kafka-transactions.sh abort --topic {changelog} --partition <p> --start-offset <offset>` ends it"
            );
        }
        if !noticed && waited > OPEN_TRANSACTION_NOTICE {
            noticed = true;
            info!(
                changelog,
                partitions = ?open,
                "waiting for a transaction open on the changelog to end (a commit's markers on their way, or the \
                 transaction timeout of a writer that died)"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
