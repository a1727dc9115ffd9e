//! Stage 2 for payments: one tumbling event-time window over every enriched payment
//! (all partitions combined), keyed by `payment_ts`: joined count, unmatched payments,
//! amount mismatches and total revenue (everything paid in the window).
//!
//! Payment windows have no allowed lateness (the seed gives none); a payment that
//! reaches a window after it closed goes to the late side output instead.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vigil_model::output::{EnrichedPayment, LatePayment, RecordType, WindowMetrics};
use vigil_model::{Config, Millis};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::window::{Aggregate, KeyedWindows, SlidingWindows, WindowResult};
use vigil_stream::Operator;

use crate::money::{from_cents, to_cents};

#[derive(Debug, Clone, PartialEq)]
pub enum MetricsOutput {
    Metrics(WindowMetrics),
    Late(LatePayment),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PaymentTotals {
    joined: u64,
    unmatched: u64,
    mismatches: u64,
    revenue_cents: i64,
}

impl Aggregate for PaymentTotals {
    fn merge(&mut self, o: &Self) {
        self.joined += o.joined;
        self.unmatched += o.unmatched;
        self.mismatches += o.mismatches;
        self.revenue_cents += o.revenue_cents;
    }
}

pub struct PaymentMetrics {
    watermark: Millis,
    windows: KeyedWindows<(), PaymentTotals>,
    fired: Vec<WindowResult<(), PaymentTotals>>,
    written: Scalar,
}

impl PaymentMetrics {
    pub fn new(config: &Config) -> Self {
        let size = config.payments.metrics_window_seconds as Millis * 1000;
        PaymentMetrics {
            watermark: NO_WATERMARK,
            windows: KeyedWindows::new(SlidingWindows::tumbling(size), 0),
            fired: Vec::new(),
            written: Scalar::default(),
        }
    }

    fn emit(&mut self, out: &mut Vec<MetricsOutput>) {
        out.extend(self.fired.drain(..).map(|r| {
            MetricsOutput::Metrics(WindowMetrics {
                record_type: RecordType::WindowMetrics,
                window_start_ms: r.window.start,
                window_end_ms: r.window.end,
                joined_count: r.value.joined,
                unmatched_payments: r.value.unmatched,
                amount_mismatches: r.value.mismatches,
                total_revenue: from_cents(r.value.revenue_cents),
                revision: r.revision,
            })
        }));
    }
}

impl Operator for PaymentMetrics {
    type In = Arc<EnrichedPayment>;
    type Out = MetricsOutput;

    fn on_record(&mut self, p: Arc<EnrichedPayment>, out: &mut Vec<MetricsOutput>) {
        let (unmatched, mismatch, cents) = (p.unmatched, p.amount_mismatch, to_cents(p.paid_amount));
        let added = self.windows.add(
            &(),
            p.payment_ts_ms,
            self.watermark,
            |t| {
                t.joined += u64::from(!unmatched);
                t.unmatched += u64::from(unmatched);
                t.mismatches += u64::from(mismatch);
                t.revenue_cents += cents;
            },
            &mut self.fired,
        );
        if added.is_err() {
            let lag_ms = self.watermark - p.payment_ts_ms;
            out.push(MetricsOutput::Late(LatePayment { payment: p, watermark_ms: self.watermark, lag_ms }));
        }
        self.emit(out);
    }

    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<MetricsOutput>) {
        self.watermark = self.watermark.max(watermark);
        self.windows.advance(self.watermark, &mut self.fired);
        self.emit(out);
    }

    fn output_watermark(&self) -> Millis {
        self.watermark
    }
}

/// The watermark, and the one key's windows (the metrics are global).
const WINDOWS: u8 = 1;

impl Stateful for PaymentMetrics {
    fn track_changes(&mut self) {
        self.windows.track_changes();
    }

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        self.written.write_if_changed(meta_key(), &self.watermark, out);
        self.windows.drain_changes(WINDOWS, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?, value) {
            ((META, _), Some(bytes)) => {
                self.watermark = decode_value(bytes)?;
                self.written.restored(bytes);
                Ok(())
            }
            ((WINDOWS, rest), value) => self.windows.restore_entry(rest, value),
            ((ns, _), _) => Err(StateError::Namespace(ns)),
        }
    }

    fn finish_restore(&mut self) {
        self.windows.finish_restore();
    }

    fn live_entries(&self) -> usize {
        self.windows.key_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_records;
    use vigil_stream::harness::Harness;

    const T: Millis = 1_700_000_000_000;

    fn enriched(id: &str, paid: f64, ordered: Option<f64>, ts: Millis) -> Arc<EnrichedPayment> {
        test_records::enriched(id, "c", paid, ordered, ts)
    }

    fn metrics(out: &[MetricsOutput]) -> Vec<&WindowMetrics> {
        out.iter().filter_map(|o| if let MetricsOutput::Metrics(m) = o { Some(m) } else { None }).collect()
    }

    #[test]
    fn a_tumbling_window_counts_joined_unmatched_mismatched_and_revenue() {
        let mut h = Harness::new(PaymentMetrics::new(&Config::default()));
        h.record(enriched("a", 100.10, Some(100.10), T + 10_000));
        h.record(enriched("b", 90.0, Some(240.0), T + 12_000));
        h.record(enriched("c", 55.0, None, T + 19_999));
        h.record(enriched("d", 1.0, Some(1.0), T + 20_000));
        assert!(h.watermark(T + 19_999).is_empty());
        let out = h.watermark(T + 20_000);
        let m = metrics(&out);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].window_start_ms, m[0].window_end_ms), (T + 10_000, T + 20_000));
        assert_eq!((m[0].joined_count, m[0].unmatched_payments, m[0].amount_mismatches), (2, 1, 1));
        assert_eq!(m[0].total_revenue, 245.1);
        assert_eq!(m[0].revision, 1);
        assert_eq!(metrics(&h.finish())[0].joined_count, 1);
    }

    #[test]
    fn a_payment_for_a_closed_window_goes_to_the_late_output() {
        let mut h = Harness::new(PaymentMetrics::new(&Config::default()));
        h.record(enriched("a", 1.0, Some(1.0), T + 1_000));
        h.watermark(T + 10_000);
        let out = h.record(enriched("b", 2.0, Some(2.0), T + 9_000));
        assert!(matches!(&out[..], [MetricsOutput::Late(l)] if l.lag_ms == 1_000 && l.watermark_ms == T + 10_000));
    }
}
