//! The consumer group's rebalances, as the consumer's callbacks report them: noted
//! here during a poll, handled by the member's loop after it.

use std::sync::{Arc, Mutex};

use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;

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
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(_) = rebalance {
            self.log.lock().expect("rebalance log").revoked = true;
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut log = self.log.lock().expect("rebalance log");
            log.assigned.extend(tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())));
        }
    }
}
