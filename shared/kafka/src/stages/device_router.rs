//! device-router: judges `device-events` against the watermark → on-time events to
//! `device-events-ontime`, late ones to the late side topic `device-events-late`.

use crate::codec::{Codec, CodecError};
use crate::service::{Outgoing, Service};
use crate::topics::{Topic, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME};
use vigil_model::topology;
use vigil_model::{Config, DeviceEvent, InputRecord, Millis};
use vigil_operators::{DeviceRouter, Routed};

#[derive(Debug, Clone, Copy)]
pub struct DeviceRouterService;

impl Service for DeviceRouterService {
    type Op = DeviceRouter;

    fn spec(&self) -> topology::Stage {
        topology::STAGE_DEVICE_ROUTER
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
                key: e.site_id.to_string(),
                value: codec.encode(DEVICE_EVENTS_ONTIME, &e)?,
            },
            Routed::Late(l) => Outgoing {
                topic: DEVICE_EVENTS_LATE,
                key: l.site_id.to_string(),
                value: codec.encode(DEVICE_EVENTS_LATE, &l)?,
            },
        })
    }

    fn is_late(&self, output: &Routed) -> bool {
        matches!(output, Routed::Late(_))
    }

    fn partition_key<'a>(&self, record: &'a DeviceEvent) -> Option<&'a str> {
        Some(&record.site_id)
    }
}
