//! Stage 1: orders ⋈ payments by `order_id` within an event-time window.
//!
//! Whichever side arrives first waits in keyed state with an event-time timer. A
//! payment matches an order whose time is within `join_window` of its own, in either
//! direction (inclusive); a payment still unmatched when the watermark passes
//! `payment_ts + join_window` is emitted with `unmatched: true`. An order stays until
//! its own window is over, so a retried payment matches it too. A key's state is
//! dropped as soon as nothing in it can match any more.
//!
//! The output watermark is held at the oldest pending payment: an unmatched payment
//! is emitted `join_window` after its event time, and downstream windows keyed on
//! `payment_ts` must not have closed by then.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use vigil_model::output::{EnrichedPayment, RecordType};
use vigil_model::{Config, Millis, Order, Payment};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::state::{KeyedState, StrKey};
use vigil_stream::timers::TimerQueue;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Operator;

#[derive(Debug, Clone, PartialEq)]
pub enum JoinInput {
    Order(Order),
    Payment(Payment),
}

/// What one `order_id` holds while it waits. An order id is almost always one
/// order's, kept inline in the state entry: no allocation per order, and a payment's
/// lookup finds it in the entry it reads. Serialized as a vector was.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JoinKeyState {
    orders: SmallVec<[Order; 1]>,
    pending_payments: Vec<Payment>,
}

impl JoinKeyState {
    /// Nothing left to join: the key can go.
    fn is_empty(&self) -> bool {
        self.orders.is_empty() && self.pending_payments.is_empty()
    }
}

pub struct JoinEnrich {
    window_ms: Millis,
    tolerance: f64,
    watermark: Millis,
    keys: KeyedState<StrKey, JoinKeyState>,
    timers: TimerQueue<StrKey>,
    /// Event times of the pending payments (a multiset), for the watermark hold.
    pending_ts: BTreeMap<Millis, u32>,
    written: Scalar,
}

impl JoinEnrich {
    pub fn new(config: &Config) -> Self {
        JoinEnrich {
            window_ms: config.join_window_ms(),
            tolerance: config.join.amount_match_tolerance,
            watermark: NO_WATERMARK,
            keys: KeyedState::default(),
            timers: TimerQueue::default(),
            pending_ts: BTreeMap::new(),
            written: Scalar::default(),
        }
    }

    /// Keys holding state: a measure of how much the join is waiting for.
    pub fn waiting_keys(&self) -> usize {
        self.keys.len()
    }

    fn within_window(&self, a: Millis, b: Millis) -> bool {
        (a - b).abs() <= self.window_ms
    }

    /// A window ending at `t` is over once the watermark has passed it.
    fn is_over(&self, t: Millis) -> bool {
        t < self.watermark
    }

    fn on_order(&mut self, order: Order, out: &mut Vec<EnrichedPayment>) {
        let key = order.order_id.clone();
        let (window_ms, tolerance) = (self.window_ms, self.tolerance);
        let expires = order.order_ts + window_ms;
        let over = self.is_over(expires);
        let state = self.keys.get_or_insert_with(&key, JoinKeyState::default);
        let matched = state.pending_payments.extract_if(.., |p| (p.payment_ts - order.order_ts).abs() <= window_ms);
        for payment in matched {
            release(&mut self.pending_ts, payment.payment_ts);
            out.push(enrich(payment, Some(&order), tolerance));
        }
        if !over {
            state.orders.push(order);
            self.timers.register(expires, key);
        } else if state.is_empty() {
            self.keys.remove(&key);
        }
    }

    fn on_payment(&mut self, payment: Payment, out: &mut Vec<EnrichedPayment>) {
        let key = payment.order_id.clone();
        let order = self
            .keys
            .get(&key)
            .and_then(|s| s.orders.iter().find(|o| self.within_window(o.order_ts, payment.payment_ts)));
        if let Some(order) = order {
            out.push(enrich(payment, Some(order), self.tolerance));
            return;
        }
        let expires = payment.payment_ts + self.window_ms;
        if self.is_over(expires) {
            // Its whole window is behind the watermark: no on-time order can match it.
            out.push(enrich(payment, None, self.tolerance));
            return;
        }
        *self.pending_ts.entry(payment.payment_ts).or_default() += 1;
        self.keys.get_or_insert_with(&key, JoinKeyState::default).pending_payments.push(payment);
        self.timers.register(expires, key.clone());
    }

    fn expire(&mut self, key: &str, out: &mut Vec<EnrichedPayment>) {
        let (window_ms, watermark) = (self.window_ms, self.watermark);
        let Some(state) = self.keys.get_mut(key) else { return };
        let mut expired: Vec<Payment> =
            state.pending_payments.extract_if(.., |p| p.payment_ts + window_ms < watermark).collect();
        state.orders.retain(|o| o.order_ts + window_ms >= watermark);
        expired.sort_by(|a, b| (a.payment_ts, &a.payment_id).cmp(&(b.payment_ts, &b.payment_id)));
        let empty = state.is_empty();
        for payment in expired {
            release(&mut self.pending_ts, payment.payment_ts);
            out.push(enrich(payment, None, self.tolerance));
        }
        if empty {
            self.keys.remove(key);
        }
    }
}

impl Operator for JoinEnrich {
    type In = JoinInput;
    type Out = EnrichedPayment;

    fn on_record(&mut self, record: JoinInput, out: &mut Vec<EnrichedPayment>) {
        match record {
            JoinInput::Order(o) => self.on_order(o, out),
            JoinInput::Payment(p) => self.on_payment(p, out),
        }
    }

    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<EnrichedPayment>) {
        self.watermark = self.watermark.max(watermark);
        while let Some((_, key)) = self.timers.pop_due(self.watermark) {
            self.expire(&key, out);
        }
    }

    fn output_watermark(&self) -> Millis {
        match self.pending_ts.keys().next() {
            Some(&oldest) => self.watermark.min(oldest),
            None => self.watermark,
        }
    }
}

/// The watermark, and what each `order_id` waits with; the timers and the watermark
/// hold are derived from the waiting orders and payments.
const KEYS: u8 = 1;

impl Stateful for JoinEnrich {
    fn track_changes(&mut self) {
        self.keys.track_changes();
    }

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        self.written.write_if_changed(meta_key(), &self.watermark, out);
        self.keys.drain_changes(KEYS, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?, value) {
            ((META, _), Some(bytes)) => {
                self.watermark = decode_value(bytes)?;
                self.written.restored(bytes);
                Ok(())
            }
            ((KEYS, rest), value) => self.keys.restore_entry(rest, value),
            ((ns, _), _) => Err(StateError::Namespace(ns)),
        }
    }

    fn finish_restore(&mut self) {
        let window_ms = self.window_ms;
        self.timers = TimerQueue::default();
        self.pending_ts.clear();
        for (key, state) in self.keys.iter() {
            for order in &state.orders {
                self.timers.register(order.order_ts + window_ms, key.clone());
            }
            for payment in &state.pending_payments {
                self.timers.register(payment.payment_ts + window_ms, key.clone());
                *self.pending_ts.entry(payment.payment_ts).or_default() += 1;
            }
        }
    }

    fn live_entries(&self) -> usize {
        self.keys.len()
    }
}

fn release(pending: &mut BTreeMap<Millis, u32>, ts: Millis) {
    if let Some(n) = pending.get_mut(&ts) {
        *n -= 1;
        if *n == 0 {
            pending.remove(&ts);
        }
    }
}

/// The payment's fields plus its order's context. `amount_mismatch` when the paid
/// amount differs from the order amount by more than the tolerance; a difference of
/// exactly the tolerance is a match (compared with a margin for binary fractions).
pub fn enrich(payment: Payment, order: Option<&Order>, tolerance: f64) -> EnrichedPayment {
    const MARGIN: f64 = 1e-9;
    EnrichedPayment {
        record_type: RecordType::EnrichedPayment,
        unmatched: order.is_none(),
        customer_id: order.map(|o| o.customer_id.clone()),
        order_amount: order.map(|o| o.order_amount),
        country: order.map(|o| o.country.clone()),
        amount_mismatch: order.is_some_and(|o| (payment.paid_amount - o.order_amount).abs() - tolerance > MARGIN),
        payment_id: payment.payment_id,
        order_id: payment.order_id,
        paid_amount: payment.paid_amount,
        method: payment.method,
        payment_ts_ms: payment.payment_ts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_stream::changelog::encode_value;
    use vigil_stream::harness::Harness;

    const T: Millis = 1_700_000_000_000;

    fn order(id: &str, amount: f64, ts: Millis) -> JoinInput {
        JoinInput::Order(Order {
            order_id: id.into(),
            customer_id: "cust-003".into(),
            order_amount: amount,
            order_ts: ts,
            country: "US".into(),
        })
    }

    fn payment(id: &str, order_id: &str, amount: f64, ts: Millis) -> JoinInput {
        JoinInput::Payment(Payment {
            payment_id: id.into(),
            order_id: order_id.into(),
            paid_amount: amount,
            payment_ts: ts,
            method: "card".into(),
        })
    }

    fn join() -> Harness<JoinEnrich> {
        Harness::new(JoinEnrich::new(&Config::default()))
    }

    #[test]
    fn order_then_payment_matches_at_once_with_order_context() {
        let mut h = join();
        assert!(h.record(order("o1", 240.0, T)).is_empty());
        let out = h.record(payment("p1", "o1", 90.0, T + 357));
        assert_eq!(out.len(), 1);
        let e = &out[0];
        assert!(!e.unmatched);
        assert!(e.amount_mismatch, "90.0 paid against a 240.0 order");
        assert_eq!(e.customer_id.as_deref(), Some("cust-003"));
        assert_eq!(e.order_amount, Some(240.0));
        assert_eq!(e.payment_ts_ms, T + 357);
        assert!(h.finish().is_empty(), "nothing is left to expire as unmatched");
        assert_eq!(h.operator.waiting_keys(), 0);
    }

    #[test]
    fn payment_then_order_within_the_window_matches() {
        let mut h = join();
        assert!(h.record(payment("p1", "o1", 10.0, T)).is_empty());
        let out = h.record(order("o1", 10.0, T + 9_999));
        assert_eq!(out.len(), 1);
        assert!(!out[0].unmatched && !out[0].amount_mismatch);
        assert!(h.finish().is_empty());
    }

    #[test]
    fn an_order_exactly_at_the_window_edge_matches_and_one_millisecond_past_does_not() {
        let mut h = join();
        h.record(payment("p1", "o1", 10.0, T));
        assert_eq!(h.record(order("o1", 10.0, T + 10_000)).len(), 1);

        let mut h = join();
        h.record(payment("p2", "o2", 10.0, T));
        assert!(h.record(order("o2", 10.0, T + 10_001)).is_empty());
        let out = h.finish();
        assert_eq!(out.len(), 1);
        assert!(out[0].unmatched);
        assert_eq!(out[0].customer_id, None);
    }

    #[test]
    fn a_payment_before_its_order_by_more_than_the_window_is_unmatched() {
        let mut h = join();
        h.record(order("o1", 10.0, T + 10_001));
        assert!(h.record(payment("p1", "o1", 10.0, T)).is_empty());
        assert!(h.finish()[0].unmatched);
    }

    #[test]
    fn an_unmatched_payment_is_emitted_when_the_watermark_passes_its_window() {
        let mut h = join();
        h.record(payment("pay-9002", "order-DOES-NOT-EXIST", 55.0, T));
        assert!(h.watermark(T + 10_000).is_empty(), "an order at exactly +10 s could still match");
        let out = h.watermark(T + 10_001);
        assert_eq!(out.len(), 1);
        assert!(out[0].unmatched && !out[0].amount_mismatch);
        assert_eq!(h.operator.waiting_keys(), 0, "state is cleared when the key is done");
    }

    #[test]
    fn a_difference_exactly_at_the_tolerance_is_not_a_mismatch() {
        let mut h = join();
        h.record(order("o1", 100.00, T));
        assert!(!h.record(payment("p1", "o1", 100.01, T + 1))[0].amount_mismatch);
        let mut h = join();
        h.record(order("o2", 100.00, T));
        assert!(h.record(payment("p2", "o2", 100.02, T + 1))[0].amount_mismatch);
    }

    #[test]
    fn the_output_watermark_is_held_at_the_oldest_pending_payment() {
        let mut h = join();
        h.record(payment("p1", "o1", 10.0, T + 500));
        h.watermark(T + 5_000);
        assert_eq!(h.operator.output_watermark(), T + 500);
        h.record(order("o1", 10.0, T + 4_000));
        assert_eq!(h.operator.output_watermark(), T + 5_000);
    }

    #[test]
    fn a_retried_payment_matches_the_same_order() {
        let mut h = join();
        h.record(order("o1", 10.0, T));
        assert_eq!(h.record(payment("p1", "o1", 10.0, T + 100)).len(), 1);
        assert_eq!(h.record(payment("p2", "o1", 10.0, T + 200)).len(), 1);
        h.watermark(T + 10_001);
        assert_eq!(h.operator.waiting_keys(), 0);
    }

    #[test]
    fn a_payment_whose_window_is_already_over_is_unmatched_at_once() {
        let mut h = join();
        h.watermark(T + 60_000);
        let out = h.record(payment("p1", "o1", 10.0, T));
        assert!(out[0].unmatched);
    }

    /// Changelogs written while a key's orders were a `Vec` read back unchanged: the
    /// state writes the same bytes.
    #[test]
    fn a_keys_state_writes_the_bytes_it_wrote_as_vectors() {
        #[derive(Serialize)]
        struct AsVectors {
            orders: Vec<Order>,
            pending_payments: Vec<Payment>,
        }
        let (JoinInput::Order(o), JoinInput::Payment(p)) = (order("o1", 1.0, T), payment("p1", "o1", 1.0, T)) else {
            unreachable!("the helpers build an order and a payment")
        };
        for orders in [vec![], vec![o.clone()], vec![o.clone(), o]] {
            let state = JoinKeyState { orders: orders.iter().cloned().collect(), pending_payments: vec![p.clone()] };
            let before = AsVectors { orders, pending_payments: vec![p.clone()] };
            assert_eq!(encode_value(&state), encode_value(&before));
        }
    }
}
