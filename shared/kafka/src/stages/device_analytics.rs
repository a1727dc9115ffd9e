//! device-analytics: sliding per-site metrics, fault spikes, reboot loops and
//! firmware failures from `device-events-ontime` → `device-metrics`,
//! `device-anomalies`.

use std::sync::Arc;

use crate::codec::{Codec, CodecError};
use crate::service::{Input, InputKind, Outgoing, Parallelism, Service};
use crate::topics::{Topic, DEVICE_ANOMALIES, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, DEVICE_METRICS};
use vigil_model::output::DeviceAnomaly;
use vigil_model::{Config, DeviceEvent, Millis};
use vigil_operators::{DeviceAnalytics, DeviceOutput};

#[derive(Debug, Clone, Copy)]
pub struct DeviceAnalyticsService;

impl Service for DeviceAnalyticsService {
    type Op = DeviceAnalytics;

    fn name(&self) -> &'static str {
        "device-analytics"
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::PerPartition
    }

    fn inputs(&self, _: &Config) -> Vec<Input> {
        vec![Input { topic: DEVICE_EVENTS_ONTIME, kind: InputKind::Upstream }]
    }

    fn outputs(&self) -> Vec<Topic> {
        vec![DEVICE_METRICS, DEVICE_ANOMALIES, DEVICE_EVENTS_LATE]
    }

    fn watermarked(&self) -> Vec<Topic> {
        Vec::new()
    }

    fn operator(&self, config: &Config) -> DeviceAnalytics {
        DeviceAnalytics::new(config)
    }

    fn decode(&self, codec: &Codec, _: Topic, payload: &[u8]) -> Result<Arc<DeviceEvent>, CodecError> {
        Ok(Arc::new(codec.decode(payload)?))
    }

    fn event_ts(&self, record: &Arc<DeviceEvent>) -> Millis {
        record.event_ts
    }

    fn encode(&self, codec: &Codec, output: DeviceOutput) -> Result<Outgoing, CodecError> {
        Ok(match output {
            DeviceOutput::Metrics(m) => {
                Outgoing { topic: DEVICE_METRICS, key: m.site_id.clone(), value: codec.encode(DEVICE_METRICS, &m)? }
            }
            DeviceOutput::Anomaly(a) => {
                let key = match &a {
                    DeviceAnomaly::FaultSpike(x) => x.site_id.clone(),
                    DeviceAnomaly::RebootLoop(x) => x.device_id.clone(),
                    DeviceAnomaly::FirmwareFailure(x) => x.site_id.clone(),
                };
                Outgoing { topic: DEVICE_ANOMALIES, key, value: codec.encode(DEVICE_ANOMALIES, &a)? }
            }
            DeviceOutput::Late(l) => Outgoing {
                topic: DEVICE_EVENTS_LATE,
                key: l.site_id.clone(),
                value: codec.encode(DEVICE_EVENTS_LATE, &l)?,
            },
        })
    }

    fn is_late(&self, output: &DeviceOutput) -> bool {
        matches!(output, DeviceOutput::Late(_))
    }
}
