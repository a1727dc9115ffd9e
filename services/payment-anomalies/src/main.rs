//! payment-anomalies: the amount and velocity rules per customer, on the partitions
//! of `enriched-payments` → `payment-anomalies`, keyed by customer.

use std::process::ExitCode;
use std::sync::Arc;

use vigil_kafka::codec::{Codec, CodecError};
use vigil_kafka::runner::{Input, InputKind, Outgoing, Parallelism, Service};
use vigil_kafka::topics::{Topic, ENRICHED_PAYMENTS, ENRICHED_PAYMENTS_LATE, PAYMENT_ANOMALIES};
use vigil_model::output::{EnrichedPayment, PaymentAnomaly};
use vigil_model::{Config, Millis};
use vigil_operators::{AnomalyOutput, PaymentAnomalies};

struct PaymentAnomaliesService;

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

fn main() -> ExitCode {
    vigil_kafka::cli::main_for(PaymentAnomaliesService)
}
