//! device-analytics: sliding per-site metrics, fault spikes, reboot loops and
//! firmware failures from `device-events-ontime` → `device-metrics`,
//! `device-anomalies`.

use crate::codec::{Codec, CodecError};
use crate::service::{Outgoing, Service};
use crate::topics::{Topic, DEVICE_ANOMALIES, DEVICE_EVENTS_LATE, DEVICE_METRICS};
use vigil_model::output::DeviceAnomaly;
use vigil_model::topology;
use vigil_model::{Config, DeviceEvent, Millis};
use vigil_operators::{DeviceAnalytics, DeviceOutput};

#[derive(Debug, Clone, Copy)]
pub struct DeviceAnalyticsService;

impl Service for DeviceAnalyticsService {
    type Op = DeviceAnalytics;

    fn spec(&self) -> topology::Stage {
        topology::STAGE_DEVICE_ANALYTICS
    }

    fn operator(&self, config: &Config) -> DeviceAnalytics {
        DeviceAnalytics::new(config)
    }

    fn decode(&self, codec: &Codec, _: Topic, payload: &[u8]) -> Result<DeviceEvent, CodecError> {
        codec.decode(payload)
    }

    fn event_ts(&self, record: &DeviceEvent) -> Millis {
        record.event_ts
    }

    fn encode(&self, codec: &Codec, output: DeviceOutput) -> Result<Outgoing, CodecError> {
        Ok(match output {
            DeviceOutput::Metrics(m) => {
                Outgoing { topic: DEVICE_METRICS, key: m.site_id.to_string(), value: codec.encode(DEVICE_METRICS, &m)? }
            }
            DeviceOutput::Anomaly(a) => {
                let key = match &a {
                    DeviceAnomaly::FaultSpike(x) => x.site_id.clone(),
                    DeviceAnomaly::RebootLoop(x) => x.device_id.clone(),
                    DeviceAnomaly::FirmwareFailure(x) => x.site_id.clone(),
                };
                Outgoing { topic: DEVICE_ANOMALIES, key: key.to_string(), value: codec.encode(DEVICE_ANOMALIES, &a)? }
            }
            DeviceOutput::Late(l) => Outgoing {
                topic: DEVICE_EVENTS_LATE,
                key: l.site_id.to_string(),
                value: codec.encode(DEVICE_EVENTS_LATE, &l)?,
            },
        })
    }

    fn is_late(&self, output: &DeviceOutput) -> bool {
        matches!(output, DeviceOutput::Late(_))
    }

    fn partition_key<'a>(&self, _: &'a <Self::Op as vigil_stream::Operator>::In) -> Option<&'a str> {
        None
    }
}
