//! payment-metrics: the tumbling payment window over every partition of
//! `enriched-payments` → `payment-metrics`, keyed by window start.

use std::sync::Arc;

use crate::codec::{Codec, CodecError};
use crate::service::{Outgoing, Service};
use crate::topics::{Topic, PAYMENT_METRICS};
use vigil_model::output::EnrichedPayment;
use vigil_model::topology;
use vigil_model::{Config, Millis};
use vigil_operators::{MetricsOutput, PaymentMetrics};

#[derive(Debug, Clone, Copy)]
pub struct PaymentMetricsService;

impl Service for PaymentMetricsService {
    type Op = PaymentMetrics;

    fn spec(&self) -> topology::Stage {
        topology::STAGE_PAYMENT_METRICS
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

    fn partition_key<'a>(&self, _: &'a <Self::Op as vigil_stream::Operator>::In) -> Option<&'a str> {
        None
    }
}
