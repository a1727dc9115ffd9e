//! payment-anomalies: the amount and velocity rules per customer, on the partitions
//! of `enriched-payments` → `payment-anomalies`, keyed by customer.

use std::sync::Arc;

use crate::codec::{Codec, CodecError};
use crate::service::{Outgoing, Service};
use crate::topics::{Topic, PAYMENT_ANOMALIES};
use vigil_model::output::{EnrichedPayment, PaymentAnomaly};
use vigil_model::topology;
use vigil_model::{Config, Millis};
use vigil_operators::{AnomalyOutput, PaymentAnomalies};

#[derive(Debug, Clone, Copy)]
pub struct PaymentAnomaliesService;

impl Service for PaymentAnomaliesService {
    type Op = PaymentAnomalies;

    fn spec(&self) -> topology::Stage {
        topology::STAGE_PAYMENT_ANOMALIES
    }

    fn operator(&self, config: &Config) -> PaymentAnomalies {
        PaymentAnomalies::new(config)
    }

    fn decode(&self, codec: &Codec, _: Topic, payload: &[u8]) -> Result<Arc<EnrichedPayment>, CodecError> {
        Ok(Arc::new(codec.decode(payload)?))
    }

    fn event_ts(&self, record: &Arc<EnrichedPayment>) -> Millis {
        record.payment_ts_ms
    }

    fn encode(&self, codec: &Codec, output: AnomalyOutput) -> Result<Outgoing, CodecError> {
        Ok(match output {
            AnomalyOutput::Anomaly(a) => {
                let key = match &a {
                    PaymentAnomaly::Amount(x) => x.customer_id.clone(),
                    PaymentAnomaly::Velocity(x) => x.customer_id.clone(),
                };
                Outgoing { topic: PAYMENT_ANOMALIES, key: key.to_string(), value: codec.encode(PAYMENT_ANOMALIES, &a)? }
            }
            AnomalyOutput::Late(l) => Outgoing::late_payment(codec, &l)?,
        })
    }

    fn is_late(&self, output: &AnomalyOutput) -> bool {
        matches!(output, AnomalyOutput::Late(_))
    }

    fn partition_key<'a>(&self, _: &'a <Self::Op as vigil_stream::Operator>::In) -> Option<&'a str> {
        None
    }
}
