//! Records for the operators' harness tests.

use std::sync::Arc;

use vigil_model::output::EnrichedPayment;
use vigil_model::{Millis, Order, Payment};

use crate::join_enrich::enrich;

/// Payment `id` of `paid` at `ts`, joined to an order of `ordered` by `customer`, or
/// unmatched when `ordered` is `None`.
pub fn enriched(id: &str, customer: &str, paid: f64, ordered: Option<f64>, ts: Millis) -> Arc<EnrichedPayment> {
    let payment = Payment {
        payment_id: id.into(),
        order_id: id.into(),
        paid_amount: paid,
        payment_ts: ts,
        method: "card".into(),
    };
    let order = ordered.map(|amount| Order {
        order_id: id.into(),
        customer_id: customer.into(),
        order_amount: amount,
        order_ts: ts,
        country: "US".into(),
    });
    Arc::new(enrich(payment, order.as_ref(), 0.01))
}
