//! The consumer group's rebalances, as the consumer's callbacks report them: noted
//! here during a poll, handled by the member's loop after it.

use std::sync::{Arc, Mutex};

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tracing::warn;

/// How long an assignment waits for the group's committed offsets; past it,
/// librdkafka looks them up itself (and the member's own read tells what is wrong).
const ASSIGN_OFFSETS_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct RebalanceLog {
    pub revoked: bool,
    pub assigned: Vec<(String, i32)>,
}

impl RebalanceLog {
    pub fn pending(&self) -> bool {
        self.revoked || !self.assigned.is_empty()
    }
}

pub type SharedLog = Arc<Mutex<RebalanceLog>>;

pub struct GroupContext {
    pub log: SharedLog,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    /// As rdkafka's own, for eager rebalancing, but each assignment starts where the
    /// group committed (see [`at_committed_offsets`]).
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS {
                warn!(error = %RDKafkaErrorCode::from(err), "rebalance error; unassigning");
            }
            self.log.lock().expect("rebalance log").revoked = true;
            if let Err(e) = consumer.unassign() {
                warn!(error = %e, "cannot unassign the revoked partitions");
            }
            return;
        }
        if let Err(e) = at_committed_offsets(consumer, tpl) {
            warn!(error = %e, "cannot read the committed offsets of the assigned partitions; librdkafka looks them up");
        }
        if let Err(e) = consumer.assign(tpl) {
            warn!(error = %e, "cannot assign the partitions");
        }
        let mut log = self.log.lock().expect("rebalance log");
        log.assigned.extend(tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())));
    }
}

/// Sets each partition of `tpl` to where the group committed it (its beginning if
/// never), so that an assignment starts there. Given no offset, librdkafka looks the
/// committed offsets up itself, asynchronously, and its answer can come after the
/// member has sought a partition to where its tasks count next, undoing that seek
/// (seen in the chaos suite: a record counted already delivered again after a
/// restart; ahead of the tasks instead, records would be skipped).
pub fn at_committed_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tpl: &mut TopicPartitionList,
) -> KafkaResult<()> {
    let committed = consumer.committed_offsets(tpl.clone(), ASSIGN_OFFSETS_TIMEOUT)?;
    for e in committed.elements() {
        e.error()?;
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        tpl.set_partition_offset(e.topic(), e.partition(), offset)?;
    }
    Ok(())
}
