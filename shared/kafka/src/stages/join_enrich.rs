//! join-enrich: orders ⋈ payments by order_id → `enriched-payments`, keyed by customer.

use crate::codec::{Codec, CodecError};
use crate::service::{Outgoing, Service};
use crate::topics::{Topic, ENRICHED_PAYMENTS, ORDERS};
use vigil_model::output::EnrichedPayment;
use vigil_model::topology;
use vigil_model::{Config, InputRecord, Millis, Order, Payment};
use vigil_operators::{JoinEnrich, JoinInput};

#[derive(Debug, Clone, Copy)]
pub struct JoinEnrichService;

impl Service for JoinEnrichService {
    type Op = JoinEnrich;

    fn spec(&self) -> topology::Stage {
        topology::STAGE_JOIN_ENRICH
    }

    fn operator(&self, config: &Config) -> JoinEnrich {
        JoinEnrich::new(config)
    }

    fn decode(&self, codec: &Codec, topic: Topic, payload: &[u8]) -> Result<JoinInput, CodecError> {
        let record = if topic == ORDERS {
            InputRecord::Order(codec.decode::<Order>(payload)?)
        } else {
            InputRecord::Payment(codec.decode::<Payment>(payload)?)
        };
        record.validate().map_err(|e| CodecError::Decode(e.0))?;
        Ok(match record {
            InputRecord::Order(o) => JoinInput::Order(o),
            InputRecord::Payment(p) => JoinInput::Payment(p),
            InputRecord::Device(_) => unreachable!("join-enrich reads no device events"),
        })
    }

    fn event_ts(&self, record: &JoinInput) -> Millis {
        match record {
            JoinInput::Order(o) => o.order_ts,
            JoinInput::Payment(p) => p.payment_ts,
        }
    }

    fn encode(&self, codec: &Codec, e: EnrichedPayment) -> Result<Outgoing, CodecError> {
        Ok(Outgoing { topic: ENRICHED_PAYMENTS, key: e.key().to_string(), value: codec.encode(ENRICHED_PAYMENTS, &e)? })
    }

    fn is_late(&self, _: &EnrichedPayment) -> bool {
        false
    }

    fn partition_key<'a>(&self, record: &'a JoinInput) -> Option<&'a str> {
        Some(match record {
            JoinInput::Order(o) => &o.order_id,
            JoinInput::Payment(p) => &p.order_id,
        })
    }
}
