//! health-monitor: the pipeline watching itself, from `device-events-ontime` and the
//! late side topic `device-events-late` (all partitions) → `health-alerts`, keyed by
//! reason.

use std::sync::Arc;

use crate::codec::{Codec, CodecError};
use crate::service::{Input, InputKind, Outgoing, Parallelism, Service};
use crate::topics::{Topic, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, HEALTH_ALERTS};
use vigil_model::output::HealthAlert;
use vigil_model::{Config, Millis};
use vigil_operators::{HealthInput, HealthMonitor};

#[derive(Debug, Clone, Copy)]
pub struct HealthMonitorService;

impl Service for HealthMonitorService {
    type Op = HealthMonitor;

    fn name(&self) -> &'static str {
        "health-monitor"
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Global
    }

    fn inputs(&self, _: &Config) -> Vec<Input> {
        vec![
            Input { topic: DEVICE_EVENTS_ONTIME, kind: InputKind::Upstream },
            Input { topic: DEVICE_EVENTS_LATE, kind: InputKind::Upstream },
        ]
    }

    fn outputs(&self) -> Vec<Topic> {
        vec![HEALTH_ALERTS]
    }

    fn watermarked(&self) -> Vec<Topic> {
        Vec::new()
    }

    fn operator(&self, config: &Config) -> HealthMonitor {
        HealthMonitor::new(config)
    }

    fn decode(&self, codec: &Codec, topic: Topic, payload: &[u8]) -> Result<HealthInput, CodecError> {
        Ok(if topic == DEVICE_EVENTS_ONTIME {
            HealthInput::OnTime(Arc::new(codec.decode(payload)?))
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
}
