//! The transaction: begun with the first record of a commit interval, committed
//! with the outputs, markers, changelog writes and input offsets at once, or
//! aborted — the tasks then come back from their changelogs and the inputs rewind.
//! A producer whose transaction failed without a verdict is replaced, never reused.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _, Result};
use rdkafka::consumer::{Consumer, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};
use vigil_stream::Stage;

use super::idleness::END_OFFSET_TIMEOUT;
use super::{clients, Fenced, Runner, IO_TIMEOUT};
use crate::core::{CommitBatch, Rewind};
use crate::epoch;
use crate::marker_headers;
use crate::metrics::now_ms;
use crate::produce;
use crate::status::Commit;

/// How much longer than its own timeout `send_offsets_to_transaction` may take.
const SEND_OFFSETS_MARGIN: Duration = Duration::from_secs(5);
/// Failed commits in a row after which a member starts over with new clients.
const COMMIT_ATTEMPTS: u32 = 3;

impl<S: Stage> Runner<S> {
    pub(super) fn begin(&mut self) -> Result<()> {
        if !self.in_transaction {
            self.await_claim()?;
            self.producer.begin_transaction().map_err(|e| self.fatal(e))?;
            self.in_transaction = true;
            self.reads.clear();
            self.carries_records = false;
        }
        Ok(())
    }

    /// Commits everything since the last commit in one transaction.
    pub(super) fn commit(&mut self) -> Result<()> {
        let started = Instant::now();
        let started_ms = now_ms();
        // Outputs of the records this commit counts go in its transaction.
        self.emit()?;
        self.begin()?;
        let batch = self.core.prepare_commit(self.repeat_idle.take().as_ref());
        self.write_batch(&batch)?;
        let mut offsets = TopicPartitionList::new();
        for &((i, p), next) in &batch.offsets {
            offsets.add_partition_offset(self.topic(i), p, Offset::Offset(next))?;
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
            self.idle_check.outage();
        }
        match result {
            Ok(()) => {
                self.failed_commits = 0;
                self.core.committed();
                self.last_commit = Instant::now();
                self.caught_up_since_commit = false;
                self.commit_policy.committed(took);
                self.metrics.commits.inc();
                self.metrics.commit_seconds.observe(took.as_secs_f64());
                let now = Instant::now();
                for (read, records) in self.reads.drain(..) {
                    let wait = (now - read).as_secs_f64();
                    (0..records).for_each(|_| self.metrics.commit_wait.observe(wait));
                }
                self.metrics.committed_now();
                if !self.unreadable_lately() {
                    self.metrics.degraded.set(0);
                    self.loop_health.recovered();
                }
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
    /// back (confluentinc/librdkafka#5456 and #5511). The call runs on a thread of its
    /// own; if it has not returned in time the commit fails, and the abort that
    /// follows gives up this producer for a new one (the thread keeps the old one
    /// until librdkafka lets go of it).
    pub(super) fn send_offsets(&self, offsets: TopicPartitionList, group: ConsumerGroupMetadata) -> KafkaResult<()> {
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
    pub(super) fn write_batch(&self, batch: &CommitBatch) -> Result<()> {
        let to_watermarked = batch.markers.iter().flat_map(|m| self.watermarked.iter().map(move |t| (t.as_str(), m)));
        let to_repartitions = batch.repartition_markers.iter().map(|(r, m)| (self.input_topics[*r].as_str(), m));
        for (topic, marker) in to_watermarked.chain(to_repartitions) {
            for q in 0..self.core.partitions() {
                self.send(BaseRecord::<[u8], [u8]>::to(topic).partition(q).headers(marker_headers::headers(*marker)))?;
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
    pub(super) fn abort(&mut self) -> Result<()> {
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
    pub(super) fn replace_producer(&mut self) -> Result<()> {
        // A claim still under way was the old producer's; one that failed says no
        // more than the new producer's `init_transactions` will.
        if let Some(claim) = self.claim.take() {
            let _ = claim.join();
        }
        let old =
            std::mem::replace(&mut self.producer, clients::transactional_producer(&self.settings, &self.metrics)?);
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
    pub(super) fn fence_open_transaction(&mut self) -> Result<()> {
        self.in_transaction = false;
        self.replace_producer()?;
        self.init_transactions()
    }

    /// The producer's `init_transactions` (a new epoch, which fences older ones and
    /// waits for their transactions to end), then that epoch's claim on every
    /// partition the member writes (see `epoch`): a write of an older epoch still on
    /// its way is refused from then on, and one that came first is aborted. The
    /// claim writes one partition per request, five at a time (librdkafka's most for
    /// an idempotent producer), several round trips: it runs while the member joins
    /// its group and restores its tasks, and the member's first transaction waits
    /// for it (`await_claim`; docs/decisions.md, 2026-12-03, "The claim in the
    /// background"). Restores read committed records only, so they see the same
    /// with or without it done.
    pub(super) fn init_transactions(&mut self) -> Result<()> {
        self.producer.init_transactions(IO_TIMEOUT).map_err(|e| self.fatal(e))?;
        let (producer, written, partitions) =
            (Arc::clone(&self.producer), self.written.clone(), self.core.partitions());
        self.claim =
            Some(std::thread::spawn(move || epoch::claim_partitions(&producer, &written, partitions, IO_TIMEOUT)));
        Ok(())
    }

    /// Waits for the producer epoch's claim to be done (see `init_transactions`).
    pub(super) fn await_claim(&mut self) -> Result<()> {
        let Some(claim) = self.claim.take() else { return Ok(()) };
        claim
            .join()
            .expect("claiming partitions does not panic")
            .map_err(|e| self.fatal(e))
            .context("cannot claim the partitions this member writes for its new producer epoch")
    }

    /// A fenced or otherwise fatal producer cannot go on: another member with the
    /// same transactional id has taken over.
    pub(super) fn fatal(&self, e: KafkaError) -> anyhow::Error {
        match &e {
            KafkaError::Transaction(t) if t.is_fatal() => self.fenced(e.to_string()),
            _ => anyhow!(e),
        }
    }

    pub(super) fn fenced(&self, reason: String) -> anyhow::Error {
        anyhow::Error::new(Fenced { transactional_id: self.settings.transactional_id.clone(), reason })
    }
}
