//! Idle and stuck partitions, as the broker tells them: a partition with nothing to
//! read for a while is asked about (its end against what was read), and the core
//! decides; tasks asked a generation answer once the broker confirms their input
//! is read to its end.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::info;
use vigil_stream::Stage;

use super::{concrete, Runner};
use crate::core::idle_check::{Unread, Verdict, STUCK_CHECKS};
use crate::core::Slot;

/// How long to wait for the broker to say where a silent partition ends.
pub(super) const END_OFFSET_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a task asked a generation it cannot answer yet asks the broker whether
/// its source partitions are read to their end (see `answer_asks`).
const ASK_CHECK_INTERVAL: Duration = Duration::from_millis(50);

impl<S: Stage> Runner<S> {
    /// A source or repartition partition without a record for `idle_wall_clock_ms`
    /// stops holding its readers back (`TaskCore::mark_idle`) if the consumer has
    /// drained what it fetched and the broker says it ends where it has been read to;
    /// one whose consumer is stuck fails the member, and its supervisor starts it
    /// again with new clients ([`IdleCheck`](crate::core::idle_check::IdleCheck)
    /// decides which).
    pub(super) fn mark_idle_partitions(&mut self) -> Result<()> {
        if !self.drained {
            return Ok(());
        }
        let now = Instant::now();
        let due = self.idle_check.due(now, |slot| self.core.is_paused(slot));
        if due.is_empty() {
            return Ok(());
        }
        let unread = self.unread(&due);
        for ((input, partition), verdict) in self.idle_check.judge(now, &due, unread.as_deref()) {
            match verdict {
                Verdict::Idle => {
                    if self.core.mark_idle((input, partition)) {
                        info!(
                            topic = %self.topic(input),
                            partition,
                            "partition idle: read to its end and silent; the watermark goes on without it"
                        );
                    }
                }
                Verdict::Stuck(Unread { read, waiting }) => bail!(
                    "the consumer delivered nothing of {} [{partition}] for {:?} while {waiting} committed \
                     records wait after offset {read}: its fetch is stuck; starting over with new clients",
                    self.topic(input),
                    self.idle_check.period() * STUCK_CHECKS,
                ),
                Verdict::Behind => {}
            }
        }
        Ok(())
    }

    /// Idle source partitions the core woke because their task's input resumed (see
    /// `TaskCore::resume`): each holds the watermark until it has a record, or is
    /// read to its end without a record for another period.
    pub(super) fn watch_woken(&mut self) {
        // Called after every message: the clock is read, and the list allocated, only
        // when there is one.
        let woken: Vec<Slot> = self.core.take_woken().collect();
        let mut now = None;
        for slot in woken {
            self.idle_check.heard(slot, *now.get_or_insert_with(Instant::now));
            info!(topic = %self.topic(slot.0), partition = slot.1, "idle partition woken: its task's input resumed, and it may have records to come");
        }
    }

    /// Every half idle timeout, idle tasks are asked to say again that they are idle,
    /// at a commit that is not put off (see `TaskCore::prepare_commit`): readers that
    /// took their idleness back when other input resumed wait for it. Downstream,
    /// only those whose inputs the broker says are read to their end. A broker that
    /// does not answer gets no commit from it.
    pub(super) fn ask_idle_tasks_to_repeat(&mut self) {
        if !self.drained || self.idle_markers_repeated.elapsed() < self.idle_check.period() / 2 {
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
    pub(super) fn answer_asks(&mut self) {
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
    /// is read to its end; `None` if it does not answer (the idle check is told:
    /// see `IdleCheck::outage`).
    pub(super) fn read_to_end(&mut self, tasks: Vec<(i32, Vec<Slot>)>) -> Option<Vec<(i32, bool)>> {
        let slots: Vec<Slot> = tasks.iter().flat_map(|(_, slots)| slots.iter().copied()).collect();
        let Some(unread) = self.unread(&slots) else {
            self.idle_check.outage();
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
    pub(super) fn unread(&self, slots: &[Slot]) -> Option<Vec<Unread>> {
        let ends = self.broker_offsets(slots, Offset::End)?;
        let positions = self.consumer.position().ok();
        let consumer_position = |(i, p): Slot| concrete(positions.as_ref()?.find_partition(self.topic(i), p)?.offset());
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
    pub(super) fn broker_offsets(&self, slots: &[Slot], at: Offset) -> Option<Vec<i64>> {
        if slots.is_empty() {
            return Some(Vec::new());
        }
        let mut query = TopicPartitionList::new();
        for &(i, p) in slots {
            query.add_partition_offset(self.topic(i), p, at).ok()?;
        }
        let answer = self.consumer.offsets_for_times(query, END_OFFSET_TIMEOUT).ok()?;
        let offset = |(i, p): Slot| {
            let element = answer.find_partition(self.topic(i), p)?;
            element.error().ok()?;
            concrete(element.offset())
        };
        slots.iter().map(|&slot| offset(slot)).collect()
    }
}
