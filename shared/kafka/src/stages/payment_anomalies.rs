//! payment-anomalies: the amount and velocity rules per customer, on the partitions
//! of `enriched-payments` → `payment-anomalies`, keyed by customer.

use std::sync::Arc;

use crate::codec::{Codec, CodecError};
use crate::service::{Input, InputKind, Outgoing, Parallelism, Service};
use crate::topics::{Topic, ENRICHED_PAYMENTS, ENRICHED_PAYMENTS_LATE, PAYMENT_ANOMALIES};
use vigil_model::output::{EnrichedPayment, PaymentAnomaly};
use vigil_model::{Config, Millis};
use vigil_operators::{AnomalyOutput, PaymentAnomalies};

#[derive(Debug, Clone, Copy)]
pub struct PaymentAnomaliesService;

impl Service for PaymentAnomaliesService {
    type Op = PaymentAnomalies;

    fn name(&self) -> &'static str {
        "payment-anomalies"
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::PerPartition
    }

    fn inputs(&self, _: &Config) -> Vec<Input> {
        vec![Input { topic: ENRICHED_PAYMENTS, kind: InputKind::Upstream }]
    }

    fn outputs(&self) -> Vec<Topic> {
        vec![PAYMENT_ANOMALIES, ENRICHED_PAYMENTS_LATE]
    }

    fn watermarked(&self) -> Vec<Topic> {
        Vec::new()
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
                Outgoing { topic: PAYMENT_ANOMALIES, key, value: codec.encode(PAYMENT_ANOMALIES, &a)? }
            }
            AnomalyOutput::Late(l) => Outgoing::late_payment(codec, &l)?,
        })
    }

    fn is_late(&self, output: &AnomalyOutput) -> bool {
        matches!(output, AnomalyOutput::Late(_))
    }
}
