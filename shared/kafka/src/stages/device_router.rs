//! device-router: judges `device-events` against the watermark → on-time events to
//! `device-events-ontime`, late ones to the late side topic `device-events-late`.

use crate::codec::{Codec, CodecError};
use crate::service::{Input, InputKind, Outgoing, Parallelism, Service};
use crate::topics::{Topic, DEVICE_EVENTS, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME};
use vigil_model::{Config, DeviceEvent, InputRecord, Millis};
use vigil_operators::{DeviceRouter, Routed};

#[derive(Debug, Clone, Copy)]
pub struct DeviceRouterService;

impl Service for DeviceRouterService {
    type Op = DeviceRouter;

    fn name(&self) -> &'static str {
        "device-router"
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::PerPartition
    }

    fn inputs(&self, config: &Config) -> Vec<Input> {
        let bound_ms = config.devices.out_of_order_bound_ms as Millis;
        vec![Input { topic: DEVICE_EVENTS, kind: InputKind::Source { bound_ms } }]
    }

    fn outputs(&self) -> Vec<Topic> {
        vec![DEVICE_EVENTS_ONTIME, DEVICE_EVENTS_LATE]
    }

    fn watermarked(&self) -> Vec<Topic> {
        vec![DEVICE_EVENTS_ONTIME, DEVICE_EVENTS_LATE]
    }

    fn operator(&self, config: &Config) -> DeviceRouter {
        DeviceRouter::new(config)
    }

    fn decode(&self, codec: &Codec, _: Topic, payload: &[u8]) -> Result<DeviceEvent, CodecError> {
        let record = InputRecord::Device(codec.decode(payload)?);
        record.validate().map_err(|e| CodecError::Decode(e.0))?;
        match record {
            InputRecord::Device(d) => Ok(d),
            _ => unreachable!("decoded as a device event above"),
        }
    }

    fn event_ts(&self, record: &DeviceEvent) -> Millis {
        record.event_ts
    }

    fn encode(&self, codec: &Codec, output: Routed) -> Result<Outgoing, CodecError> {
        Ok(match output {
            Routed::OnTime(e) => Outgoing {
                topic: DEVICE_EVENTS_ONTIME,
                key: e.site_id.clone(),
                value: codec.encode(DEVICE_EVENTS_ONTIME, &e)?,
            },
            Routed::Late(l) => Outgoing {
                topic: DEVICE_EVENTS_LATE,
                key: l.site_id.clone(),
                value: codec.encode(DEVICE_EVENTS_LATE, &l)?,
            },
        })
    }

    fn is_late(&self, output: &Routed) -> bool {
        matches!(output, Routed::Late(_))
    }
}
