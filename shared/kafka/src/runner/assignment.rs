//! The consumer group's side of a member: rebalances (partitions revoked and
//! assigned), where to read each partition from (its task's committed state and the
//! group's committed offsets), and restoring the tasks from their changelogs.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};
use vigil_stream::Stage;

use super::{concrete, Runner, IO_TIMEOUT};
use crate::core::{Correction, Slot};
use crate::group::{RebalanceLog, Standing};
use crate::restore;

impl<S: Stage> Runner<S> {
    pub(super) fn handle_rebalance(&mut self) -> Result<()> {
        let RebalanceLog { revoked, joined, assigned } =
            std::mem::take(&mut *self.rebalances.lock().expect("rebalance log"));
        if revoked {
            self.membership.left(Instant::now());
            // Eager rebalancing takes every partition away; their next owner redoes
            // the work since the last commit, so nothing is rewound here. A new
            // producer is taken even with no transaction open: its
            // `init_transactions` returns only once the last commit's markers are
            // written, and until then that commit's offsets and changelog records
            // cannot be read, and the tasks would come back one commit old
            // (docs/decisions.md, "Incidents behind the Kafka shell's defences").
            let open = self.in_transaction;
            self.fence_open_transaction()?;
            if open {
                self.metrics.aborts.inc();
                info!("partitions revoked; the work since the last commit is redone by their next owner");
            }
            self.forget_tasks();
        }
        if joined {
            self.membership.joined();
        }
        if !assigned.is_empty() {
            self.take_partitions(&assigned)?;
        }
        self.judge_membership()
    }

    /// Every partition taken away: the core forgets its tasks, the shell what it
    /// watched of their partitions, and the status says so.
    pub(super) fn forget_tasks(&mut self) {
        self.core.revoke_all();
        self.idle_check.clear();
        self.redelivered.clear();
        self.publish_tasks();
    }

    /// Reports a member out of its group for long degraded, and fails one whose
    /// rejoin is stuck: its supervisor starts it again with new clients.
    pub(super) fn judge_membership(&mut self) -> Result<()> {
        match self.membership.standing(Instant::now()) {
            Standing::Stuck(out) => bail!(
                "out of the consumer group for {out:?}: the partitions were revoked and the group has not assigned \
                 any since (librdkafka's rejoin is stuck, as after a broker crash); starting over with new clients"
            ),
            Standing::Degraded(out) if !self.out_of_group => {
                warn!(?out, "out of the consumer group since the partitions were revoked; still rejoining");
                self.loop_health.degraded(format!("out of the consumer group for {out:?}, rejoining"));
                self.metrics.degraded.set(1);
                self.out_of_group = true;
            }
            Standing::In if self.out_of_group => {
                self.loop_health.recovered();
                self.metrics.degraded.set(0);
                self.out_of_group = false;
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn slot_of(&self, topic: &str, partition: i32) -> Option<Slot> {
        self.input_topics.iter().position(|i| i == topic).map(|i| (i, partition))
    }

    /// Restores the tasks of newly assigned partitions and learns where to read from.
    pub(super) fn take_partitions(&mut self, assigned: &[(String, i32)]) -> Result<()> {
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
            .filter_map(|e| Some((self.slot_of(e.topic(), e.partition())?, concrete(e.offset()))))
            .collect();
        for &slot in &slots {
            let input = &self.core.inputs()[slot.0];
            if input.is_source() || input.is_repartition() {
                self.idle_check.watch(slot, Instant::now());
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
    pub(super) fn read_from_next_to_count(&self, slots: &[Slot]) -> Result<()> {
        for &slot in slots {
            self.seek(slot, self.core.next_to_count(slot).map_or(Offset::Beginning, Offset::Offset))?;
        }
        Ok(())
    }

    /// Where the group committed for the assigned partitions. read_committed asks for
    /// stable offsets, and an offset commit left open on __consumer_offsets holds them
    /// unstable: for good if no transaction marker will ever end it (a "hanging
    /// transaction": a commit request of an older epoch that reached the broker after
    /// its transaction ended, which librdkafka cannot prevent without KIP-890). When
    /// the offsets cannot be read, this member aborts a transaction holding one
    /// offset commit: the abort marker of its producer id ends every transaction of
    /// that producer id still open on the group's partition, a hanging one of its own
    /// included. For any other cause it changes nothing, and the error names the
    /// remedy.
    pub(super) fn committed_offsets(&mut self, tpl: TopicPartitionList) -> Result<TopicPartitionList> {
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
    pub(super) fn read_committed_offsets(&self, tpl: TopicPartitionList) -> Result<TopicPartitionList> {
        let offsets = self.consumer.committed_offsets(tpl, IO_TIMEOUT)?;
        for e in offsets.elements() {
            e.error().with_context(|| format!("committed offset of {} [{}]", e.topic(), e.partition()))?;
        }
        Ok(offsets)
    }

    /// One offset commit in a transaction, aborted at once: nothing is committed, and
    /// the abort marker reaches the group's partition of __consumer_offsets.
    pub(super) fn abort_an_offset_commit(&mut self, tpl: &TopicPartitionList) -> Result<()> {
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
    pub(super) fn restore_tasks(&mut self, tasks: &[i32]) -> Result<Vec<Slot>> {
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
    pub(super) fn report_corrections(&self, corrections: &[Correction]) {
        for &Correction { slot, believed, changelog } in corrections {
            let (topic, partition) = (self.topic(slot.0), slot.1);
            warn!(
                topic,
                partition,
                believed = ?believed,
                state_committed_at = changelog,
                "the offset committed with this partition's state differs from the committed offset read or \
                 believed; reading from the state's (an offset commit of an earlier transaction that landed late, \
                 or a commit reported failed that completed). To process records again on purpose, use \
                 `vigil reset`"
            );
            self.metrics.offset_corrections.inc();
        }
    }

    /// Seeks a partition; one just assigned, librdkafka refuses (`Erroneous state`)
    /// until its fetcher has started, which follows the assignment shortly.
    pub(super) fn seek(&self, (i, p): Slot, to: Offset) -> Result<()> {
        let deadline = Instant::now() + IO_TIMEOUT;
        let not_started = RDKafkaErrorCode::State.to_string();
        loop {
            match self.consumer.seek(self.topic(i), p, to, IO_TIMEOUT) {
                Err(KafkaError::Seek(e)) if e == not_started && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                result => return result.with_context(|| format!("cannot seek {} [{p}]", self.topic(i))),
            }
        }
    }
}
