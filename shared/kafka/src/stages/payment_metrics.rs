//! payment-metrics: the tumbling payment window over every partition of
//! `enriched-payments` → `payment-metrics`, keyed by window start.

use std::sync::Arc;

use crate::codec::{Codec, CodecError};
use crate::service::{Input, InputKind, Outgoing, Parallelism, Service};
use crate::topics::{Topic, ENRICHED_PAYMENTS, ENRICHED_PAYMENTS_LATE, PAYMENT_METRICS};
use vigil_model::output::EnrichedPayment;
use vigil_model::{Config, Millis};
use vigil_operators::{MetricsOutput, PaymentMetrics};

#[derive(Debug, Clone, Copy)]
pub struct PaymentMetricsService;

impl Service for PaymentMetricsService {
    type Op = PaymentMetrics;

    fn name(&self) -> &'static str {
        "payment-metrics"
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Global
    }

    fn inputs(&self, _: &Config) -> Vec<Input> {
        vec![Input { topic: ENRICHED_PAYMENTS, kind: InputKind::Upstream }]
    }

    fn outputs(&self) -> Vec<Topic> {
        vec![PAYMENT_METRICS, ENRICHED_PAYMENTS_LATE]
    }

    fn watermarked(&self) -> Vec<Topic> {
        Vec::new()
    }

    fn operator(&self, config: &Config) -> PaymentMetrics {
        PaymentMetrics::new(config)
    }

    fn decode(&self, codec: &Codec, _: Topic, payload: &[u8]) -> Result<Arc<EnrichedPayment>, CodecError> {
        Ok(Arc::new(codec.decode(payload)?))
    }

    fn event_ts(&self, record: &Arc<EnrichedPayment>) -> Millis {
        record.payment_ts_ms
    }

    fn encode(&self, codec: &Codec, output: MetricsOutput) -> Result<Outgoing, CodecError> {
        Ok(match output {
            MetricsOutput::Metrics(m) => Outgoing {
                topic: PAYMENT_METRICS,
                key: m.window_start_ms.to_string(),
                value: codec.encode(PAYMENT_METRICS, &m)?,
            },
            MetricsOutput::Late(l) => Outgoing::late_payment(codec, &l)?,
        })
    }

    fn is_late(&self, output: &MetricsOutput) -> bool {
        matches!(output, MetricsOutput::Late(_))
    }
}
