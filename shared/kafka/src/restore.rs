//! Reading a task's state back from its changelog partition: every record up to the
//! partition's end (read_committed, so an aborted transaction's writes never come
//! back), in order, the task's own entries handed to the core.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tracing::warn;

use crate::core::entry_of;

/// How long a restore may take before it is taken for stuck (a transaction left open
/// holds the read_committed end back until the broker times it out).
const RESTORE_LIMIT: Duration = Duration::from_secs(600);

/// The reader waits for the end of its partition, which librdkafka also reports as
/// an error; only real errors are worth a log line.
struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            warn!(%error, reason, "changelog reader error");
        }
    }
}

impl ConsumerContext for QuietEof {}

/// What a restore read.
#[derive(Debug, Default, Clone, Copy)]
pub struct Restored {
    /// Records of the partition read (every task's, tombstones included).
    pub records: u64,
    /// Entries of this task handed over.
    pub entries: u64,
}

/// Feeds `apply` every entry of `task` in `changelog` partition `partition`, in order.
pub fn read_task(
    bootstrap_servers: &str,
    group_id: &str,
    changelog: &str,
    partition: i32,
    task: i32,
    mut apply: impl FnMut(&[u8], Option<&[u8]>) -> Result<()>,
) -> Result<Restored> {
    let reader: BaseConsumer<QuietEof> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap_servers)
        .set("group.id", format!("{group_id}-restore"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // Large fetches: a restore reads a whole partition as fast as it can.
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "52428800")
        .set("queued.max.messages.kbytes", "262144")
        .create_with_context(QuietEof)
        .context("cannot create the changelog reader")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(changelog, partition, Offset::Beginning)?;
    reader.assign(&tpl)?;
    let deadline = Instant::now() + RESTORE_LIMIT;
    let mut restored = Restored::default();
    loop {
        if Instant::now() > deadline {
            bail!("restoring task {task} from `{changelog}` took over {RESTORE_LIMIT:?}; is a transaction stuck open?");
        }
        match reader.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                restored.records += 1;
                if let Some(entry) = m.key().and_then(|k| entry_of(task, k)) {
                    restored.entries += 1;
                    apply(entry, m.payload())?;
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(restored),
            Some(Err(e)) => return Err(anyhow!(e).context(format!("cannot read `{changelog}`"))),
            None => {}
        }
    }
}
