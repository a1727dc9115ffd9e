//! Reading and producing: a batch of messages polled and handed to the core, held
//! partitions paused and rewound, and what the core emitted sent to its topics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::warn;
use vigil_stream::Stage;

use super::{concrete, Runner};
use crate::codec::{CodecError, Decoding};
use crate::core::{Emitted, Handling, Incoming, Slot, Stamp};
use crate::inputs;
use crate::marker_headers;
use crate::metrics::now_ms;
use crate::produce;

/// The most messages read in one turn of the loop (see `Runner::read_batch`).
const POLL_BATCH: usize = 64;

/// How often an unreadable record batch is written to the log.
const UNREADABLE_LOG_EVERY: Duration = Duration::from_secs(10);
/// How long a member stays degraded after its last unreadable batch (the consumer
/// retries one at every fetch, so a partition still stuck renews it at once).
const UNREADABLE_HOLD: Duration = Duration::from_secs(30);

/// Whether a consumer error says a record batch cannot be read: compressed with a
/// codec this build lacks, or corrupt.
fn unreadable_batch(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::{
        BadCompression, BadMessage, InvalidMessage, InvalidRecord, NotImplemented, UnsupportedCompressionType,
    };
    let code = e.rdkafka_error_code();
    matches!(
        code,
        Some(
            BadCompression | BadMessage | InvalidMessage | NotImplemented | UnsupportedCompressionType | InvalidRecord
        )
    )
}

impl<S: Stage> Runner<S> {
    /// Reads what the consumer has, up to `POLL_BATCH` messages, waiting for the
    /// first as long as the commit policy allows. What the loop does besides
    /// reading (producing the outputs, pausing partitions, asking whether to commit)
    /// is then done once a batch instead of once a record (docs/decisions.md,
    /// 2026-12-03, "The services' own cost per record").
    pub(super) fn read_batch(&mut self) -> Result<()> {
        let mut timeout = self.commit_policy.poll_timeout(self.core.is_dirty(), self.last_commit.elapsed());
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
                    None if unreadable_batch(&e) => self.on_unreadable_batch(&e),
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

    /// A record batch the consumer cannot read (librdkafka names neither its topic nor
    /// its partition): that partition makes no progress, so the member reports
    /// degraded, counts it for the alert rule, and says how to fix it, at most once
    /// every `UNREADABLE_LOG_EVERY` in the log (the consumer retries the batch at
    /// every fetch).
    fn on_unreadable_batch(&mut self, e: &KafkaError) {
        self.unreadable_seen = Some(Instant::now());
        self.metrics.unreadable_batches.inc();
        self.metrics.degraded.set(1);
        let why = format!(
            "a record batch of an input partition cannot be read ({e}); the partition makes no progress. \
             Vigil reads batches in none, gzip, snappy, lz4 and zstd: check the producer's compression.type; \
             a corrupt batch is passed only by resetting the stage (`vigil reset STAGE --to-latest`, docs/operations.md), \
             which skips all of its unread input"
        );
        if self.unreadable_logged.is_none_or(|at| at.elapsed() >= UNREADABLE_LOG_EVERY) {
            self.unreadable_logged = Some(Instant::now());
            warn!("{why}");
        }
        self.loop_health.degraded(why);
    }

    /// Whether an unreadable batch was met lately: a commit (which other partitions
    /// still make) does not clear the member's degraded state then.
    pub(super) fn unreadable_lately(&self) -> bool {
        self.unreadable_seen.is_some_and(|at| at.elapsed() < UNREADABLE_HOLD)
    }

    /// Whether a source partition being read has records on the broker beyond what
    /// was read, as its last fetch said (librdkafka's cached high watermark, no
    /// request): a member reading a backlog drains its fetched records whenever a
    /// fetch is slower than the processing, which is not the input going quiet.
    /// Source topics only: upstream topics hold open transactions, whose records lie
    /// below the high watermark but cannot be read yet. (A source written in
    /// transactions holds them only while one is open.) The consumer's position
    /// counts as read where it is further: it moves past transaction markers.
    pub(super) fn source_backlog(&self) -> bool {
        let client = self.consumer.client().native_ptr();
        let mut positions = None;
        self.idle_check.watched().any(|slot| {
            if !self.core.inputs()[slot.0].is_source() || self.core.is_paused(slot) {
                return false;
            }
            let consumer = positions.get_or_insert_with(|| self.consumer.position().ok());
            let position = consumer.as_ref().and_then(|p| p.find_partition(self.topic(slot.0), slot.1));
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

    pub(super) fn on_message(&mut self, message: &BorrowedMessage<'_>) -> Result<()> {
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
        self.idle_check.heard(slot, read);
        self.begin()?;
        let payload = message.payload().unwrap_or_default();
        let mut undecodable = None;
        let incoming = match marker_headers::read(message) {
            Some(marker) => Incoming::Marker(marker),
            None => {
                let stage = self.core.stage();
                // A repartition topic holds its source's records, read as that input's.
                let topic = self.core.inputs()[slot.0].records;
                let input = inputs::declared(self.core.inputs(), slot.0);
                let stamp = match self.core.inputs()[slot.0].is_source() {
                    true => Some(Stamp {
                        at_ms: message.timestamp().to_millis().unwrap_or(0),
                        seq: if self.core.stamps_needed(slot) { marker_headers::seq(message) } else { 0 },
                        partition: p,
                        offset,
                    }),
                    false if self.core.inputs()[slot.0].is_repartition() => marker_headers::origin(message),
                    false => None,
                };
                match stage.read(input, Decoding::new(self.core.encoder(), topic, payload)) {
                    Ok(record) => Incoming::Record { event_ts: stage.event_time(&record), record, stamp },
                    Err(CodecError::Decode(reason)) => {
                        undecodable = Some(reason);
                        Incoming::Undecodable
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let is_record = !matches!(incoming, Incoming::Marker(_));
        let handling = self.core.on_input(slot, offset, incoming)?;
        self.watch_woken();
        match handling {
            // Forwarded before a restart: counted then.
            Handling::Seen => return Ok(()),
            // Read again later: nothing of it counts yet.
            Handling::Held { seek } => {
                if let Some(from) = seek {
                    self.pause_and_rewind(slot, from)?;
                }
                return Ok(());
            }
            Handling::Reroute { input, partition, key, origin } => {
                // The record as it came, to the partition of its key in the repartition
                // topic, with where and when it was produced.
                self.metrics.rerouted.inc();
                let record = BaseRecord::to(self.topic(input))
                    .partition(partition)
                    .key(key.as_str())
                    .payload(payload)
                    .headers(marker_headers::origin_headers(origin));
                self.send(record)?;
                self.carries_records = true;
            }
            Handling::Processed => {}
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
            self.dead_letter(self.topic(slot.0), p, offset, reason, payload)?;
            self.carries_records = true;
        }
        Ok(())
    }

    pub(super) fn pause_and_rewind(&self, slot: Slot, from: i64) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(self.topic(slot.0), slot.1);
        self.consumer.pause(&tpl).context("cannot pause partitions")?;
        self.seek(slot, Offset::Offset(from))
    }

    /// Pauses the partitions that ran too far ahead of their task, resumes those back
    /// within reach.
    pub(super) fn apply_flow(&mut self) -> Result<()> {
        let flow = self.core.flow();
        let list = |slots: &[Slot]| {
            let mut tpl = TopicPartitionList::new();
            for &(i, p) in slots {
                tpl.add_partition(self.topic(i), p);
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
        self.metrics.held_for_order.set(self.core.held_for_order() as i64);
        let behind = self.core.out_of_order().saturating_sub(self.metrics.out_of_order.get());
        self.metrics.out_of_order.inc_by(behind);
        Ok(())
    }

    /// Produces what the operators emitted.
    pub(super) fn emit(&mut self) -> Result<()> {
        let outputs: Vec<Emitted> = self.core.take_outputs()?.collect();
        if outputs.is_empty() {
            return Ok(());
        }
        self.begin()?;
        self.carries_records = true;
        for Emitted { topic, key, value } in outputs {
            if topic.late {
                self.metrics.late_records.inc();
            }
            if let Some(counter) = self.records_out.get(topic.name) {
                counter.inc();
            }
            let (name, copy) = &self.output_topics[topic.name];
            self.send(BaseRecord::to(name).key(key.as_str()).payload(value.as_slice()))?;
            if let Some(copy) = copy {
                // Users read `name`; stages read the copy, where the markers go too.
                self.send(BaseRecord::to(copy).key(key.as_str()).payload(value.as_slice()))?;
            }
        }
        Ok(())
    }

    pub(super) fn send<K: rdkafka::message::ToBytes + ?Sized>(&self, record: BaseRecord<'_, K, [u8]>) -> Result<()> {
        produce::send(&self.producer, record).map_err(|e| match self.producer.client().fatal_error() {
            Some((_, reason)) => self.fenced(reason),
            None => e,
        })
    }
}
