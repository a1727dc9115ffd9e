//! The six stages of the seed's pipeline, each a pure [`vigil_stream::Operator`]: one
//! module per stage, the same shape in each (parameters from the configuration,
//! `on_record`, `on_watermark`, `output_watermark`), no I/O and no Kafka. Their
//! definitions, what both runtimes drive, are in [`stages`].

pub mod device_analytics;
pub mod device_router;
pub mod health_monitor;
pub mod join_enrich;
mod money;
pub mod payment_anomalies;
pub mod payment_metrics;
pub mod stages;
#[cfg(test)]
mod test_records;

pub use device_analytics::{DeviceAnalytics, DeviceOutput};
pub use device_router::{DeviceRouter, Routed};
pub use health_monitor::{HealthInput, HealthMonitor};
pub use join_enrich::{JoinEnrich, JoinInput};
pub use payment_anomalies::{AnomalyOutput, PaymentAnomalies};
pub use payment_metrics::{MetricsOutput, PaymentMetrics};
pub use stages::SeedPipeline;
