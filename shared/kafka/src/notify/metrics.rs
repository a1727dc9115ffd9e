//! What a notifier counts: its ledger (alerts read = delivered + dead-lettered + in
//! flight) and each channel's deliveries, retries, failures and delivery time.

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The families, registered once per process.
pub struct NotifyFamilies {
    alerts: IntCounterVec,
    deliveries: IntCounterVec,
    delivery_seconds: HistogramVec,
    in_flight: IntGaugeVec,
    breaker_open: IntGaugeVec,
}

impl NotifyFamilies {
    pub fn register(registry: &Registry) -> NotifyFamilies {
        let counters = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique metric");
            c
        };
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let delivery_seconds = HistogramVec::new(
            HistogramOpts::new(
                "notify_delivery_seconds",
                "From an alert's record timestamp (its stage wrote it in a transaction then) to its delivery, by channel",
            )
            .buckets(vec![0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]),
            &["member", "channel"],
        )
        .expect("valid metric");
        registry.register(Box::new(delivery_seconds.clone())).expect("unique metric");
        NotifyFamilies {
            alerts: counters(
                "notify_alerts_total",
                "The notifier's ledger: alerts read, delivered to every channel, dead-lettered (read = delivered + \
                 dead_lettered + in flight)",
                &["member", "outcome"],
            ),
            deliveries: counters(
                "notify_deliveries_total",
                "Deliveries by channel and outcome: delivered, retried (an attempt that failed and was tried \
                 again), failed (for good: a dead letter)",
                &["member", "channel", "outcome"],
            ),
            delivery_seconds,
            in_flight: gauges("notify_in_flight", "Alerts read and not yet delivered or dead-lettered", &["member"]),
            breaker_open: gauges(
                "notify_breaker_open",
                "1 while a channel's circuit breaker is open (its receiver kept failing)",
                &["member", "channel"],
            ),
        }
    }

    pub fn member(&self, member: &str) -> NotifyMetrics {
        NotifyMetrics {
            member: member.to_string(),
            read: self.alerts.with_label_values(&[member, "read"]),
            delivered: self.alerts.with_label_values(&[member, "delivered"]),
            dead_lettered: self.alerts.with_label_values(&[member, "dead_lettered"]),
            in_flight: self.in_flight.with_label_values(&[member]),
            deliveries: self.deliveries.clone(),
            delivery_seconds: self.delivery_seconds.clone(),
            breaker_open: self.breaker_open.clone(),
        }
    }
}

/// One notifier member's series.
#[derive(Clone)]
pub struct NotifyMetrics {
    member: String,
    pub read: IntCounter,
    pub delivered: IntCounter,
    pub dead_lettered: IntCounter,
    pub in_flight: IntGauge,
    deliveries: IntCounterVec,
    delivery_seconds: HistogramVec,
    breaker_open: IntGaugeVec,
}

impl NotifyMetrics {
    /// A channel's delivery that took `retries` retries and ended `delivered` or not,
    /// `seconds` after its record was written.
    pub fn delivery(&self, channel: &str, retries: u32, delivered: bool, seconds: f64) {
        let l = |outcome| [self.member.as_str(), channel, outcome];
        self.deliveries.with_label_values(&l("retried")).inc_by(u64::from(retries));
        self.deliveries.with_label_values(&l(if delivered { "delivered" } else { "failed" })).inc();
        if delivered {
            self.delivery_seconds.with_label_values(&[self.member.as_str(), channel]).observe(seconds.max(0.0));
        }
    }

    pub fn breaker(&self, channel: &str, open: bool) {
        self.breaker_open.with_label_values(&[self.member.as_str(), channel]).set(i64::from(open));
    }
}
