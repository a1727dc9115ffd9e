//! The seed's six stages, each defined once for both runtimes (see
//! [`vigil_stream::stage`]): the topics it reads with their event time, its operator,
//! the key each input is partitioned by, and the topic and key of each output.

use std::sync::Arc;

use vigil_model::output::{DeviceAnomaly, HealthAlert, PaymentAnomaly};
use vigil_model::topology::{
    Bound, EventTime, StageTopology, DEVICE_ANOMALIES, DEVICE_EVENTS, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME,
    DEVICE_METRICS, ENRICHED_PAYMENTS, ENRICHED_PAYMENTS_LATE, HEALTH_ALERTS, ORDERS, PAYMENTS, PAYMENT_ANOMALIES,
    PAYMENT_METRICS,
};
use vigil_model::{Config, DeviceEvent, Millis, Text};
use vigil_stream::stage::{In, Out};
use vigil_stream::{pipeline, ReadRecord, Stage, StageAnswer, WriteRecord};

use crate::{
    AnomalyOutput, DeviceAnalytics, DeviceOutput, DeviceRouter, HealthInput, HealthMonitor, JoinEnrich, JoinInput,
    MetricsOutput, PaymentAnomalies, PaymentMetrics, Routed,
};

/// The pipeline of the seed's specification: its six stages, upstream first.
pub type SeedPipeline = pipeline![
    JoinEnrichStage,
    PaymentMetricsStage,
    PaymentAnomaliesStage,
    DeviceRouterStage,
    DeviceAnalyticsStage,
    HealthMonitorStage
];

/// Orders ⋈ payments by order_id → `enriched-payments`, keyed by customer.
#[derive(Debug, Clone, Copy, Default)]
pub struct JoinEnrichStage;

impl Stage for JoinEnrichStage {
    type Op = JoinEnrich;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "join-enrich",
            global: false,
            inputs: &[(&ORDERS, EventTime::Source(Bound::Payments)), (&PAYMENTS, EventTime::Source(Bound::Payments))],
            outputs: &[&ENRICHED_PAYMENTS],
            watermarked: &[&ENRICHED_PAYMENTS],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> JoinEnrich {
        JoinEnrich::new(config)
    }

    fn read<R: ReadRecord>(&self, input: usize, record: R) -> Result<JoinInput, R::Error> {
        Ok(match input {
            0 => JoinInput::Order(record.read()?),
            _ => JoinInput::Payment(record.read()?),
        })
    }

    fn partition_key<'a>(&self, record: &'a JoinInput) -> &'a str {
        match record {
            JoinInput::Order(o) => &o.order_id,
            JoinInput::Payment(p) => &p.order_id,
        }
    }

    fn event_time(&self, record: &JoinInput) -> Millis {
        match record {
            JoinInput::Order(o) => o.order_ts,
            JoinInput::Payment(p) => p.payment_ts,
        }
    }

    fn write<W: WriteRecord>(&self, payment: Out<Self>, to: W) -> W::Written {
        to.write(&ENRICHED_PAYMENTS, payment.key().into(), Arc::new(payment))
    }
}

/// Tumbling windows over every enriched payment → `payment-metrics`; payments that
/// reach a closed window → `enriched-payments-late`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PaymentMetricsStage;

impl Stage for PaymentMetricsStage {
    type Op = PaymentMetrics;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "payment-metrics",
            global: true,
            inputs: &[(&ENRICHED_PAYMENTS, EventTime::Upstream)],
            outputs: &[&PAYMENT_METRICS, &ENRICHED_PAYMENTS_LATE],
            watermarked: &[],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> PaymentMetrics {
        PaymentMetrics::new(config)
    }

    fn read<R: ReadRecord>(&self, _: usize, record: R) -> Result<In<Self>, R::Error> {
        record.read()
    }

    fn partition_key<'a>(&self, payment: &'a In<Self>) -> &'a str {
        payment.key()
    }

    fn event_time(&self, payment: &In<Self>) -> Millis {
        payment.payment_ts_ms
    }

    fn write<W: WriteRecord>(&self, output: MetricsOutput, to: W) -> W::Written {
        match output {
            MetricsOutput::Metrics(m) => to.write(&PAYMENT_METRICS, m.window_start_ms.to_string().into(), m),
            MetricsOutput::Late(l) => to.write(&ENRICHED_PAYMENTS_LATE, l.payment.key().into(), l),
        }
    }
}

/// The amount and velocity rules per customer → `payment-anomalies`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PaymentAnomaliesStage;

impl Stage for PaymentAnomaliesStage {
    type Op = PaymentAnomalies;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "payment-anomalies",
            global: false,
            inputs: &[(&ENRICHED_PAYMENTS, EventTime::Upstream)],
            outputs: &[&PAYMENT_ANOMALIES, &ENRICHED_PAYMENTS_LATE],
            watermarked: &[],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> PaymentAnomalies {
        PaymentAnomalies::new(config)
    }

    fn read<R: ReadRecord>(&self, _: usize, record: R) -> Result<In<Self>, R::Error> {
        record.read()
    }

    fn partition_key<'a>(&self, payment: &'a In<Self>) -> &'a str {
        payment.key()
    }

    fn event_time(&self, payment: &In<Self>) -> Millis {
        payment.payment_ts_ms
    }

    fn write<W: WriteRecord>(&self, output: AnomalyOutput, to: W) -> W::Written {
        match output {
            AnomalyOutput::Anomaly(a) => {
                let customer = match &a {
                    PaymentAnomaly::Amount(x) => x.customer_id.clone(),
                    PaymentAnomaly::Velocity(x) => x.customer_id.clone(),
                };
                to.write(&PAYMENT_ANOMALIES, customer, a)
            }
            AnomalyOutput::Late(l) => to.write(&ENRICHED_PAYMENTS_LATE, l.payment.key().into(), l),
        }
    }

    /// `customers/{customer_id}`: the amount statistics and velocity window.
    fn query(&self, op: &PaymentAnomalies, what: &str, customer: &str) -> Option<StageAnswer> {
        (what == "customers").then(|| match op.customer(customer) {
            Some(state) => StageAnswer::Found(serde_json::to_value(state).expect("plain fields serialize")),
            None => StageAnswer::Unknown,
        })
    }
}

/// Judges `device-events` against the watermark: on-time events →
/// `device-events-ontime`, late ones → the late side topic `device-events-late`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceRouterStage;

impl Stage for DeviceRouterStage {
    type Op = DeviceRouter;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "device-router",
            global: false,
            inputs: &[(&DEVICE_EVENTS, EventTime::Source(Bound::Devices))],
            outputs: &[&DEVICE_EVENTS_ONTIME, &DEVICE_EVENTS_LATE],
            watermarked: &[&DEVICE_EVENTS_ONTIME, &DEVICE_EVENTS_LATE],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> DeviceRouter {
        DeviceRouter::new(config)
    }

    fn read<R: ReadRecord>(&self, _: usize, record: R) -> Result<DeviceEvent, R::Error> {
        record.read()
    }

    fn partition_key<'a>(&self, event: &'a DeviceEvent) -> &'a str {
        &event.site_id
    }

    fn event_time(&self, event: &DeviceEvent) -> Millis {
        event.event_ts
    }

    fn write<W: WriteRecord>(&self, output: Routed, to: W) -> W::Written {
        match output {
            Routed::OnTime(e) => to.write(&DEVICE_EVENTS_ONTIME, e.site_id.clone(), e),
            Routed::Late(l) => to.write(&DEVICE_EVENTS_LATE, l.site_id.clone(), l),
        }
    }
}

/// Sliding per-site metrics and the three device rules over on-time events →
/// `device-metrics`, `device-anomalies`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceAnalyticsStage;

impl Stage for DeviceAnalyticsStage {
    type Op = DeviceAnalytics;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "device-analytics",
            global: false,
            inputs: &[(&DEVICE_EVENTS_ONTIME, EventTime::Upstream)],
            outputs: &[&DEVICE_METRICS, &DEVICE_ANOMALIES, &DEVICE_EVENTS_LATE],
            watermarked: &[],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> DeviceAnalytics {
        DeviceAnalytics::new(config)
    }

    fn read<R: ReadRecord>(&self, _: usize, record: R) -> Result<DeviceEvent, R::Error> {
        record.read()
    }

    fn partition_key<'a>(&self, event: &'a DeviceEvent) -> &'a str {
        &event.site_id
    }

    fn event_time(&self, event: &DeviceEvent) -> Millis {
        event.event_ts
    }

    fn write<W: WriteRecord>(&self, output: DeviceOutput, to: W) -> W::Written {
        match output {
            DeviceOutput::Metrics(m) => to.write(&DEVICE_METRICS, m.site_id.clone(), m),
            DeviceOutput::Anomaly(a) => {
                let key: Text = match &a {
                    DeviceAnomaly::FaultSpike(x) => x.site_id.clone(),
                    DeviceAnomaly::RebootLoop(x) => x.device_id.clone(),
                    DeviceAnomaly::FirmwareFailure(x) => x.site_id.clone(),
                };
                to.write(&DEVICE_ANOMALIES, key, a)
            }
            DeviceOutput::Late(l) => to.write(&DEVICE_EVENTS_LATE, l.site_id.clone(), l),
        }
    }
}

/// The pipeline watching itself, over every on-time and late device event →
/// `health-alerts`, keyed by reason.
#[derive(Debug, Clone, Copy, Default)]
pub struct HealthMonitorStage;

impl Stage for HealthMonitorStage {
    type Op = HealthMonitor;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "health-monitor",
            global: true,
            inputs: &[(&DEVICE_EVENTS_ONTIME, EventTime::Upstream), (&DEVICE_EVENTS_LATE, EventTime::Upstream)],
            outputs: &[&HEALTH_ALERTS],
            watermarked: &[],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> HealthMonitor {
        HealthMonitor::new(config)
    }

    fn read<R: ReadRecord>(&self, input: usize, record: R) -> Result<HealthInput, R::Error> {
        Ok(match input {
            0 => HealthInput::OnTime(record.read()?),
            _ => HealthInput::Late(record.read()?),
        })
    }

    fn partition_key<'a>(&self, record: &'a HealthInput) -> &'a str {
        match record {
            HealthInput::OnTime(e) => &e.site_id,
            HealthInput::Late(l) => &l.site_id,
        }
    }

    fn event_time(&self, record: &HealthInput) -> Millis {
        match record {
            HealthInput::OnTime(e) => e.event_ts,
            HealthInput::Late(l) => l.event_ts_ms,
        }
    }

    fn write<W: WriteRecord>(&self, alert: HealthAlert, to: W) -> W::Written {
        let reason = match &alert {
            HealthAlert::Throughput(a) => a.reason,
            HealthAlert::LateSpike(a) => a.reason,
            HealthAlert::WatermarkLag(a) => a.reason,
            HealthAlert::FaultRate(a) => a.reason,
        };
        to.write(&HEALTH_ALERTS, reason.as_str().into(), alert)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_stream::Pipeline;

    #[test]
    fn the_seed_pipeline_reads_only_what_it_writes_or_users_write() {
        let topology = SeedPipeline::default().topology();
        assert_eq!(topology.check(), Ok(()));
        let names: Vec<&str> = topology.stages.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "join-enrich",
                "payment-metrics",
                "payment-anomalies",
                "device-router",
                "device-analytics",
                "health-monitor"
            ]
        );
    }

    #[test]
    fn the_docs_list_the_topics_as_declared() {
        let table = SeedPipeline::default().topology().topic_table();
        let docs = include_str!("../../../docs/kafka.md");
        assert!(docs.contains(&table), "docs/kafka.md's topic table is not the declared one:\n{table}");
    }
}
