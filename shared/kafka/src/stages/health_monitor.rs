//! health-monitor: the pipeline watching itself, from `device-events-ontime` and the
//! late side topic `device-events-late` (all partitions) → `health-alerts`, keyed by
//! reason.

use crate::codec::{Codec, CodecError};
use crate::service::{Outgoing, Service};
use crate::topics::{Topic, DEVICE_EVENTS_ONTIME, HEALTH_ALERTS};
use vigil_model::output::HealthAlert;
use vigil_model::topology;
use vigil_model::{Config, Millis};
use vigil_operators::{HealthInput, HealthMonitor};

#[derive(Debug, Clone, Copy)]
pub struct HealthMonitorService;

impl Service for HealthMonitorService {
    type Op = HealthMonitor;

    fn spec(&self) -> topology::Stage {
        topology::STAGE_HEALTH_MONITOR
    }

    fn operator(&self, config: &Config) -> HealthMonitor {
        HealthMonitor::new(config)
    }

    fn decode(&self, codec: &Codec, topic: Topic, payload: &[u8]) -> Result<HealthInput, CodecError> {
        Ok(if topic == DEVICE_EVENTS_ONTIME {
            HealthInput::OnTime(codec.decode(payload)?)
        } else {
            HealthInput::Late(codec.decode(payload)?)
        })
    }

    fn event_ts(&self, record: &HealthInput) -> Millis {
        match record {
            HealthInput::OnTime(e) => e.event_ts,
            HealthInput::Late(l) => l.event_ts_ms,
        }
    }

    fn encode(&self, codec: &Codec, alert: HealthAlert) -> Result<Outgoing, CodecError> {
        let reason = match &alert {
            HealthAlert::Throughput(a) => a.reason,
            HealthAlert::LateSpike(a) => a.reason,
            HealthAlert::WatermarkLag(a) => a.reason,
            HealthAlert::FaultRate(a) => a.reason,
        };
        Ok(Outgoing {
            topic: HEALTH_ALERTS,
            key: reason.as_str().to_string(),
            value: codec.encode(HEALTH_ALERTS, &alert)?,
        })
    }

    fn is_late(&self, _: &HealthAlert) -> bool {
        false
    }

    fn partition_key<'a>(&self, _: &'a <Self::Op as vigil_stream::Operator>::In) -> Option<&'a str> {
        None
    }
}
