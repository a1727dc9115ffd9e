//! Stage 3 for payments: matched payments keyed by customer, scored by two rules.
//!
//! - Amount: each customer's running mean and sample standard deviation (Welford's
//!   update, numerically stable) in keyed state; a payment is an anomaly when it is
//!   above `mean + k·σ` of the payments before it, once `min_samples_for_dynamic`
//!   exist, and above the static floor before that.
//! - Velocity: more than `max_transactions_per_window` payments in a sliding window.
//!
//! A running statistic depends on the order of a customer's payments, and payments
//! of one customer reach this operator from many join partitions in no fixed order.
//! So payments are scored in event-time order, `(payment_ts, payment_id)`, as the
//! watermark passes them: the same input gives the same anomalies on any runtime.
//!
//! That verdict waits for the out-of-orderness bound. With `[anomalies] provisional`
//! a payment is also judged as it arrives, against its customer's statistics as of
//! then, and an anomaly found so goes out at once marked provisional. The event-time
//! verdict then follows only where it differs, as revision 2: a retraction, or an
//! anomaly the provisional verdict missed; a confirmation is implicit.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vigil_model::output::{
    AmountAnomaly, AnomalyType, EnrichedPayment, LatePayment, PaymentAnomaly, RecordType, VelocityAnomaly,
};
use vigil_model::time::round2;
use vigil_model::{Config, Millis};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::event_sort::EventTimeBuffer;
use vigil_stream::retention::Retention;
use vigil_stream::state::{KeyedState, StrKey};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::window::{Aggregate, KeyedWindows, SlidingWindows, WindowResult};
use vigil_stream::Operator;

use crate::money::{from_cents, to_cents};

#[derive(Debug, Clone, PartialEq)]
pub enum AnomalyOutput {
    Anomaly(PaymentAnomaly),
    Late(LatePayment),
}

/// Welford's running mean and variance, and when it last changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RunningStats {
    count: u64,
    mean: f64,
    m2: f64,
    /// Event time of the last payment (for the state's time-to-live); entries written
    /// before this field existed read as 0.
    #[serde(default)]
    last_ms: Millis,
}

impl RunningStats {
    pub fn add(&mut self, x: f64, at_ms: Millis) {
        self.last_ms = self.last_ms.max(at_ms);
        self.count += 1;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// Sample standard deviation (n − 1); 0 below two samples.
    pub fn std_dev(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2 / (self.count - 1) as f64).sqrt()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Velocity {
    count: u64,
    cents: i64,
}

impl Aggregate for Velocity {
    fn merge(&mut self, o: &Self) {
        self.count += o.count;
        self.cents += o.cents;
    }
}

pub struct PaymentAnomalies {
    provisional: bool,
    sigma: f64,
    floor: f64,
    min_samples: u64,
    watermark: Millis,
    waiting: EventTimeBuffer<StrKey, Arc<EnrichedPayment>>,
    stats: KeyedState<StrKey, RunningStats>,
    /// Payments given a provisional anomaly and not yet scored in event-time order.
    flagged: KeyedState<StrKey, ()>,
    velocity: KeyedWindows<StrKey, Velocity>,
    fired: Vec<WindowResult<StrKey, Velocity>>,
    /// Payments a watermark released, while they are scored (kept for its buffer).
    released: Vec<Arc<EnrichedPayment>>,
    retention: Retention,
    written: Scalar,
}

impl PaymentAnomalies {
    pub fn new(config: &Config) -> Self {
        let p = &config.payments;
        let windows =
            SlidingWindows::sliding(p.window_size_seconds as Millis * 1000, p.window_slide_seconds as Millis * 1000);
        let max_transactions = p.max_transactions_per_window;
        PaymentAnomalies {
            provisional: config.anomalies.provisional,
            sigma: p.amount_sigma_multiplier,
            floor: p.amount_static_floor,
            min_samples: p.min_samples_for_dynamic,
            watermark: NO_WATERMARK,
            waiting: EventTimeBuffer::default(),
            stats: KeyedState::default(),
            flagged: KeyedState::default(),
            velocity: KeyedWindows::new(windows, 0)
                .emitting_only_monotone(move |v: &Velocity| v.count > max_transactions),
            fired: Vec::new(),
            released: Vec::new(),
            retention: Retention::new(Config::ttl_ms(config.retention.payment_anomalies_ttl_seconds)),
            written: Scalar::default(),
        }
    }

    /// The threshold a customer's next payment is judged against.
    fn threshold(&self, stats: &RunningStats) -> f64 {
        if stats.count() < self.min_samples.max(2) {
            self.floor
        } else {
            stats.mean() + self.sigma * stats.std_dev()
        }
    }

    /// The amount anomaly of payment `p` against `threshold`, as a first verdict.
    fn amount_anomaly(p: &EnrichedPayment, customer: &StrKey, threshold: f64) -> AmountAnomaly {
        AmountAnomaly {
            record_type: RecordType::Anomaly,
            anomaly_type: AnomalyType::Amount,
            customer_id: customer.clone(),
            payment_id: p.payment_id.clone(),
            order_id: p.order_id.clone(),
            amount: p.paid_amount,
            threshold: round2(threshold),
            event_time: p.payment_ts_ms,
            provisional: false,
            retracted: false,
            revision: 1,
        }
    }

    /// Judges a payment as it arrives, against its customer's statistics as of now.
    fn judge_on_arrival(&mut self, p: &EnrichedPayment, out: &mut Vec<AnomalyOutput>) {
        let Some(customer) = &p.customer_id else { return };
        let stats = self.stats.get(customer.as_str()).copied().unwrap_or_default();
        let threshold = self.threshold(&stats);
        if p.paid_amount > threshold {
            self.flagged.get_or_insert_with(p.payment_id.as_str(), || ());
            let anomaly = AmountAnomaly { provisional: true, ..Self::amount_anomaly(p, customer, threshold) };
            out.push(AnomalyOutput::Anomaly(PaymentAnomaly::Amount(anomaly)));
        }
    }

    /// Scores a payment in event-time order; `judged_on_arrival`: it was given a
    /// provisional verdict, which this one confirms or corrects.
    fn score(&mut self, p: Arc<EnrichedPayment>, judged_on_arrival: bool, out: &mut Vec<AnomalyOutput>) {
        let Some(customer) = &p.customer_id else { return };
        let (at, retention) = (p.payment_ts_ms, self.retention);
        let stats = self.stats.get_or_insert_with(customer.as_str(), RunningStats::default);
        if !retention.alive(stats.last_ms, at) {
            // Idle past its time-to-live: the customer starts over, as a new one would.
            *stats = RunningStats::default();
        }
        let before = *stats;
        stats.add(p.paid_amount, at);
        let threshold = self.threshold(&before);
        let anomaly = p.paid_amount > threshold;
        let flagged = judged_on_arrival && self.flagged.remove(p.payment_id.as_str()).is_some();
        let verdict = match (judged_on_arrival, flagged, anomaly) {
            (false, _, true) => Some(Self::amount_anomaly(&p, customer, threshold)),
            // Missed on arrival, or taken back.
            (true, false, true) => Some(AmountAnomaly { revision: 2, ..Self::amount_anomaly(&p, customer, threshold) }),
            (true, true, false) => {
                Some(AmountAnomaly { retracted: true, revision: 2, ..Self::amount_anomaly(&p, customer, threshold) })
            }
            _ => None,
        };
        if let Some(verdict) = verdict {
            out.push(AnomalyOutput::Anomaly(PaymentAnomaly::Amount(verdict)));
        }
        let cents = to_cents(p.paid_amount);
        let added = self.velocity.add(
            customer,
            p.payment_ts_ms,
            self.watermark,
            |v| {
                v.count += 1;
                v.cents += cents;
            },
            &mut self.fired,
        );
        if added.is_err() {
            let lag_ms = self.watermark - p.payment_ts_ms;
            out.push(AnomalyOutput::Late(LatePayment { payment: p, watermark_ms: self.watermark, lag_ms }));
        }
        self.emit_velocity(out);
    }

    fn emit_velocity(&mut self, out: &mut Vec<AnomalyOutput>) {
        if self.fired.is_empty() {
            return; // Most watermarks fire no window (draining an empty vector is not free).
        }
        out.extend(self.fired.drain(..).map(|r| {
            AnomalyOutput::Anomaly(PaymentAnomaly::Velocity(VelocityAnomaly {
                record_type: RecordType::Anomaly,
                anomaly_type: AnomalyType::Velocity,
                customer_id: r.key,
                transaction_count: r.value.count,
                total_amount: from_cents(r.value.cents),
                window_start: r.window.start,
                window_end: r.window.end,
                revision: r.revision,
            }))
        }));
    }
}

/// What the rules hold for one customer, as a state query answers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CustomerState {
    pub customer_id: String,
    /// The amount rule: payments scored so far, their mean and sample standard
    /// deviation, and the threshold the next payment is judged against.
    pub count: u64,
    pub mean: f64,
    pub std_dev: f64,
    pub threshold: f64,
    /// The velocity rule: the payments its open windows hold (those the watermark
    /// has not closed), the span they cover, and their total.
    pub velocity_open_from: Option<Millis>,
    pub velocity_open_to: Option<Millis>,
    pub velocity_open_count: u64,
    pub velocity_open_amount: f64,
    /// Payments read and not yet scored (waiting for event-time order) are not in
    /// these figures; the watermark says how far scoring is.
    pub watermark: Millis,
}

impl PaymentAnomalies {
    /// The customer's statistics and velocity window; `None` if it has neither.
    pub fn customer(&self, customer: &str) -> Option<CustomerState> {
        let stats = self.stats.get(customer).copied();
        let velocity = self.velocity.held(customer);
        if stats.is_none() && velocity.is_none() {
            return None;
        }
        let stats = stats.unwrap_or_default();
        let (window, v) = velocity.map_or((None, Velocity::default()), |(w, v)| (Some(w), v));
        Some(CustomerState {
            customer_id: customer.to_string(),
            count: stats.count(),
            mean: stats.mean(),
            std_dev: stats.std_dev(),
            threshold: round2(self.threshold(&stats)),
            velocity_open_from: window.map(|w| w.start),
            velocity_open_to: window.map(|w| w.end),
            velocity_open_count: v.count,
            velocity_open_amount: from_cents(v.cents),
            watermark: self.watermark,
        })
    }
}

impl Operator for PaymentAnomalies {
    type In = Arc<EnrichedPayment>;
    type Out = AnomalyOutput;

    fn on_record(&mut self, p: Arc<EnrichedPayment>, out: &mut Vec<AnomalyOutput>) {
        if p.unmatched {
            return; // only matched payments have a customer to score against
        }
        if p.payment_ts_ms < self.watermark {
            // Its turn in event-time order has passed: score it now rather than lose it.
            self.score(p, false, out);
        } else {
            if self.provisional {
                self.judge_on_arrival(&p, out);
            }
            self.waiting.push(p.payment_ts_ms, p.payment_id.clone(), p);
        }
    }

    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<AnomalyOutput>) {
        let watermark = self.watermark.max(watermark);
        // Score everything the new watermark releases while the windows still see the
        // old one, so no window fires before all of its payments are in. The payments
        // are taken out first, each customer's statistics asked for from memory, so
        // that with millions of customers their misses overlap; then scored in order.
        let mut released = std::mem::take(&mut self.released);
        while let Some((_, p)) = self.waiting.pop_before(watermark) {
            if let Some(customer) = &p.customer_id {
                self.stats.prefetch(customer.as_str());
            }
            released.push(p);
        }
        for p in released.drain(..) {
            self.score(p, self.provisional, out);
        }
        self.released = released;
        self.watermark = watermark;
        self.velocity.advance(watermark, &mut self.fired);
        self.emit_velocity(out);
        self.retention.sweep(&mut self.stats, watermark, |s| s.last_ms);
    }

    fn output_watermark(&self) -> Millis {
        self.watermark
    }
}

/// The watermark; each customer's statistics and velocity windows; the payments
/// waiting for their turn in event-time order.
const STATS: u8 = 1;
const VELOCITY: u8 = 2;
/// The waiting payments one entry each, as changelogs written before chunks hold them.
const WAITING_SINGLES: u8 = 3;
const WAITING: u8 = 4;
/// The payments given a provisional anomaly, until their event-time verdict.
const FLAGGED: u8 = 5;

impl Stateful for PaymentAnomalies {
    fn track_changes(&mut self) {
        self.stats.track_changes();
        self.flagged.track_changes();
        self.velocity.track_changes();
        self.waiting.track_changes();
    }

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        self.written.write_if_changed(meta_key(), &self.watermark, out);
        self.stats.drain_changes(STATS, out);
        self.flagged.drain_changes(FLAGGED, out);
        self.velocity.drain_changes(VELOCITY, out);
        self.waiting.drain_changes(WAITING, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?, value) {
            ((META, _), Some(bytes)) => {
                self.watermark = decode_value(bytes)?;
                self.written.restored(bytes);
                Ok(())
            }
            ((STATS, rest), value) => self.stats.restore_entry(rest, value),
            ((FLAGGED, rest), value) => self.flagged.restore_entry(rest, value),
            ((VELOCITY, rest), value) => self.velocity.restore_entry(rest, value),
            ((WAITING, rest), value) => self.waiting.restore_entry(rest, value),
            ((WAITING_SINGLES, rest), value) => self.waiting.restore_single(WAITING_SINGLES, rest, value),
            ((ns, _), _) => Err(StateError::Namespace(ns)),
        }
    }

    fn finish_restore(&mut self) {
        self.velocity.finish_restore();
        self.waiting.finish_restore();
    }

    fn live_entries(&self) -> usize {
        self.stats.len() + self.flagged.len() + self.velocity.key_count() + self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records;
    use vigil_stream::harness::Harness;

    const T: Millis = 1_700_000_000_000;

    fn paid(id: &str, customer: &str, amount: f64, ts: Millis) -> Arc<EnrichedPayment> {
        test_records::enriched(id, customer, amount, Some(amount), ts)
    }

    fn amounts(out: &[AnomalyOutput]) -> Vec<(StrKey, f64, f64)> {
        out.iter()
            .filter_map(|o| match o {
                AnomalyOutput::Anomaly(PaymentAnomaly::Amount(a)) => {
                    Some((a.payment_id.clone(), a.amount, a.threshold))
                }
                _ => None,
            })
            .collect()
    }

    fn velocities(out: &[AnomalyOutput]) -> Vec<(Millis, u64, f64)> {
        out.iter()
            .filter_map(|o| match o {
                AnomalyOutput::Anomaly(PaymentAnomaly::Velocity(v)) => {
                    Some((v.window_start - T, v.transaction_count, v.total_amount))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn welford_matches_the_two_pass_sample_deviation() {
        let xs = [114.15, 98.94, 104.62, 117.6, 106.68];
        let mut s = RunningStats::default();
        xs.iter().for_each(|&x| s.add(x, 0));
        let mean = xs.iter().sum::<f64>() / 5.0;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 4.0;
        assert!((s.mean() - mean).abs() < 1e-9);
        assert!((s.std_dev() - var.sqrt()).abs() < 1e-9);
    }

    #[test]
    fn with_a_ttl_an_idle_customer_starts_over_and_its_state_is_dropped() {
        let mut config = Config::default();
        config.retention.payment_anomalies_ttl_seconds = 60;
        let mut h = Harness::new(PaymentAnomalies::new(&config));
        for (i, amount) in [114.15, 98.94, 104.62, 117.6, 106.68].into_iter().enumerate() {
            h.record(paid(&format!("p{i}"), "cust-001", amount, T + i as Millis * 1000));
        }
        // A minute of silence is within the TTL: still judged by its history.
        h.record(paid("within", "cust-001", 900.0, T + 64_000));
        assert_eq!(amounts(&h.watermark(T + 65_000)).len(), 1);
        h.record(paid("other", "cust-002", 10.0, T + 200_000));
        let out = h.watermark(T + 200_001);
        assert!(amounts(&out).is_empty());
        assert_eq!(
            h.operator.live_entries(),
            2,
            "cust-001 is swept: only cust-002 is left (statistics, velocity windows)"
        );
        // After the TTL, cust-001 is new again: the cold-start floor applies.
        h.record(paid("after", "cust-001", 900.0, T + 200_500));
        assert!(amounts(&h.finish()).is_empty());
    }

    #[test]
    fn the_static_floor_guards_cold_start_then_the_dynamic_threshold_takes_over() {
        let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
        // Four samples: below MIN_SAMPLES_FOR_DYNAMIC, so only the 5000 floor applies.
        for (i, amount) in [114.15, 98.94, 104.62, 117.6].into_iter().enumerate() {
            h.record(paid(&format!("p{i}"), "cust-001", amount, T + i as Millis * 1000));
        }
        h.record(paid("cold", "cust-001", 4_999.0, T + 4_000));
        h.record(paid("cold-over", "cust-002", 5_000.01, T + 4_000));
        let out = h.watermark(T + 5_000);
        assert_eq!(amounts(&out), vec![("cold-over".into(), 5_000.01, 5_000.0)]);

        // Five samples: mean + 3σ = 130.870 03; just under it is normal, far over is not.
        for (last, expected) in [(130.86, vec![]), (9_800.0, vec![("last".into(), 9_800.0, 130.87)])] {
            let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
            for (i, amount) in [114.15, 98.94, 104.62, 117.6, 106.68].into_iter().enumerate() {
                h.record(paid(&format!("p{i}"), "cust-001", amount, T + i as Millis * 1000));
            }
            h.record(paid("last", "cust-001", last, T + 28_057));
            assert_eq!(amounts(&h.finish()), expected);
        }
    }

    #[test]
    fn payments_are_scored_in_event_time_order_whatever_order_they_arrive_in() {
        let run = |order: &[usize]| {
            let ps = [10.0, 11.0, 12.0, 10.5, 11.5, 30.0];
            let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
            for &i in order {
                h.record(paid(&format!("p{i}"), "c", ps[i], T + i as Millis * 100));
            }
            amounts(&h.finish())
        };
        let forward = run(&[0, 1, 2, 3, 4, 5]);
        assert_eq!(forward.len(), 1);
        assert_eq!(forward, run(&[5, 3, 1, 0, 4, 2]));
    }

    #[test]
    fn more_than_the_maximum_in_a_sliding_window_is_a_velocity_anomaly() {
        let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
        let amounts = [82.10, 91.45, 78.30, 95.12, 83.55];
        for (i, a) in amounts.into_iter().enumerate() {
            h.record(paid(&format!("v{i}"), "cust-004", a, T + 13_100 + i as Millis * 1000));
        }
        let out = h.finish();
        assert_eq!(velocities(&out), vec![(13_000, 5, 430.52)], "only [13 s, 18 s) holds all five");
    }

    #[test]
    fn exactly_the_maximum_is_not_an_anomaly_and_window_ends_are_exclusive() {
        let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
        for i in 0..4 {
            h.record(paid(&format!("v{i}"), "c", 1.0, T + 10_000 + i * 1000));
        }
        // The fifth lands on 15 s: the end of [10 s, 15 s), so outside it.
        h.record(paid("v4", "c", 1.0, T + 15_000));
        assert!(velocities(&h.finish()).is_empty());
    }

    /// (payment, provisional, retracted, revision) of each amount verdict.
    fn verdicts(out: &[AnomalyOutput]) -> Vec<(String, bool, bool, u32)> {
        out.iter()
            .filter_map(|o| match o {
                AnomalyOutput::Anomaly(PaymentAnomaly::Amount(a)) => {
                    Some((a.payment_id.to_string(), a.provisional, a.retracted, a.revision))
                }
                _ => None,
            })
            .collect()
    }

    fn provisional() -> Harness<PaymentAnomalies> {
        let mut config = Config::default();
        config.anomalies.provisional = true;
        let mut h = Harness::new(PaymentAnomalies::new(&config));
        // A history the watermark has scored: five payments near 108, mean + 3σ ≈ 131.
        for (i, amount) in [114.15, 98.94, 104.62, 117.6, 106.68].into_iter().enumerate() {
            h.record(paid(&format!("p{i}"), "c", amount, T + i as Millis * 2_000));
        }
        assert!(h.watermark(T + 10_000).is_empty());
        h
    }

    #[test]
    fn a_provisional_verdict_comes_on_arrival_and_a_confirmation_is_implicit() {
        let mut h = provisional();
        let out = h.record(paid("big", "c", 9_000.0, T + 20_000));
        assert_eq!(verdicts(&out), vec![("big".into(), true, false, 1)], "at once, before any watermark");
        assert!(verdicts(&h.finish()).is_empty(), "the event-time verdict agrees: nothing more");
    }

    #[test]
    fn an_earlier_payment_can_retract_a_provisional_anomaly() {
        let mut h = provisional();
        let mut out = h.record(paid("later", "c", 2_000.0, T + 20_000));
        // Arrives second, happened first: in event-time order it raises the bar for "later".
        out.extend(h.record(paid("earlier", "c", 2_100.0, T + 19_000)));
        assert_eq!(verdicts(&out), vec![("later".into(), true, false, 1), ("earlier".into(), true, false, 1)]);
        assert_eq!(verdicts(&h.finish()), vec![("later".into(), false, true, 2)], "retracted, as revision 2");
    }

    #[test]
    fn an_anomaly_the_provisional_verdict_missed_comes_as_revision_two() {
        let mut config = Config::default();
        config.anomalies.provisional = true;
        let mut h = Harness::new(PaymentAnomalies::new(&config));
        for (i, amount) in [114.15, 98.94, 104.62, 117.6].into_iter().enumerate() {
            h.record(paid(&format!("p{i}"), "c", amount, T + i as Millis * 1000));
        }
        h.watermark(T + 5_000);
        // Four samples: the 5000 floor applies on arrival…
        assert!(verdicts(&h.record(paid("big", "c", 1_000.0, T + 20_000))).is_empty());
        // …but a fifth, earlier in event time, brings the dynamic threshold first.
        assert!(verdicts(&h.record(paid("fifth", "c", 106.68, T + 19_000))).is_empty());
        assert_eq!(verdicts(&h.finish()), vec![("big".into(), false, false, 2)]);
    }

    #[test]
    fn without_the_option_verdicts_are_the_event_time_ones_only() {
        let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
        assert!(h.record(paid("big", "c", 9_000.0, T)).is_empty());
        assert_eq!(verdicts(&h.finish()), vec![("big".into(), false, false, 1)]);
    }

    #[test]
    fn a_state_query_shows_a_customers_statistics_and_velocity_window() {
        let h = provisional();
        let c = h.operator.customer("c").unwrap();
        assert_eq!((c.count, c.threshold), (5, 130.87), "mean + 3σ of the five, as the rule judges the next");
        assert!((c.mean - 108.398).abs() < 1e-9);
        // The watermark (T + 10 s) closed every window of the payments before T + 6 s.
        assert_eq!((c.velocity_open_from, c.velocity_open_to), (Some(T + 6_000), Some(T + 9_000)));
        assert_eq!((c.velocity_open_count, c.velocity_open_amount), (2, 224.28));
        assert!(h.operator.customer("nobody").is_none());
    }

    #[test]
    fn unmatched_payments_are_not_scored() {
        let mut h = Harness::new(PaymentAnomalies::new(&Config::default()));
        h.record(test_records::enriched("p", "c", 99_999.0, None, T));
        assert!(h.finish().is_empty());
    }
}
