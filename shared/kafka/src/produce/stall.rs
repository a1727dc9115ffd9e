//! A stalled input producer's client replaced by a new one. librdkafka can leave a
//! partition without a leader for good after a broker restart
//! (confluentinc/librdkafka#5430: a metadata update with leader -1 is skipped), and
//! its records then wait out their delivery timeout and are dropped.

use std::time::{Duration, Instant};

use anyhow::Result;
use rdkafka::producer::{BaseRecord, Producer, PurgeConfig};
use tracing::warn;

use super::input_producer::InputProducer;
use super::keying::input_topics;
use super::{queue, reports};

/// How long records may wait without a single delivery report, the broker answering,
/// before the producer's client is taken for stalled (see [`InputProducer::restart`]).
const STALL: Duration = Duration::from_secs(30);
/// How long a stalled client is given to report the records it did send.
const STALLED_FLUSH: Duration = Duration::from_secs(30);

/// What the stall check last saw.
pub(super) struct Watch {
    checked: Instant,
    /// Since when records have been waiting for their delivery reports.
    waiting_since: Option<Instant>,
}

impl Watch {
    pub(super) fn new() -> Self {
        Watch { checked: Instant::now(), waiting_since: None }
    }
}

impl InputProducer {
    /// Restarts the client if records have waited `STALL` without a delivery report
    /// while the broker answers with a leader for every input partition.
    pub(super) fn restart_if_stalled(&self) -> Result<()> {
        let mut watch = self.watch.lock().expect("the stall watch");
        if watch.checked.elapsed() < STALL / 10 {
            return Ok(());
        }
        watch.checked = Instant::now();
        if self.lock().in_flight_count() == 0 {
            watch.waiting_since = None;
            return Ok(());
        }
        let waiting = watch.waiting_since.get_or_insert_with(Instant::now).elapsed();
        let stalled = waiting >= STALL && self.tally.since_last_report() >= STALL;
        drop(watch);
        if stalled && self.broker_leads_every_input_partition() {
            let carried = self.restart()?;
            warn!(
                carried,
                "records waited {STALL:?} without a delivery report, the broker up: a new Kafka client sends \
                 those not sent yet (librdkafka can lose a partition's leader over a broker restart)"
            );
        }
        Ok(())
    }

    fn broker_leads_every_input_partition(&self) -> bool {
        let metadata = match self.lock().client().fetch_metadata(None, Duration::from_secs(10)) {
            Ok(metadata) => metadata,
            Err(_) => return false,
        };
        input_topics().all(|topic| {
            metadata.topics().iter().any(|t| {
                t.name() == topic.name && !t.partitions().is_empty() && t.partitions().iter().all(|p| p.leader() >= 0)
            })
        })
    }

    /// Replaces the Kafka client with a new one, which sends again the records the
    /// old one had not sent yet (taken out of its queues, so none is sent twice);
    /// records it had sent keep their delivery reports. How many were carried over.
    pub fn restart(&self) -> Result<usize> {
        let mut client = self.lock();
        client.purge(PurgeConfig::default().queue());
        // The purged records' reports, and those of records sent, come in meanwhile.
        if let Err(e) = client.flush(STALLED_FLUSH) {
            warn!(error = %e, "a stalled producer's records sent are still unreported; they count as undelivered");
        }
        *client = reports::client(&self.config, &self.tally)?;
        let mut carried = self.tally.take_purged();
        carried.sort_by_key(|r| r.number);
        for r in &carried {
            let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&r.topic, r.number);
            if r.partition >= 0 {
                record = record.partition(r.partition);
            }
            if let Some(key) = &r.key {
                record = record.key(key);
            }
            if let Some(payload) = &r.payload {
                record = record.payload(payload);
            }
            if let Some(headers) = &r.headers {
                record = record.headers(headers.clone());
            }
            queue::send(&client, record)?;
        }
        drop(client);
        *self.watch.lock().expect("the stall watch") = Watch::new();
        Ok(carried.len())
    }
}
