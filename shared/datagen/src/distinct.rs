//! A dataset for state at scale: `n` orders from `n` distinct customers, each paid
//! once and in full shortly after, one pair every 10 ms of event time, and no device
//! events. Every customer leaves running statistics behind in the amount rule, so the
//! state holds `n` keys at the end.

use vigil_model::{Millis, Order, Payment, Source};

use crate::rng::Draw;
use crate::PLANTED_START_MS;

const SPACING_MS: Millis = 10;

/// One stream of the dataset, line by line (device events: none).
pub fn distinct_customer_lines(source: Source, customers: u64, seed: u64) -> Box<dyn Iterator<Item = String>> {
    let draw = Draw::new(seed);
    let amount = move |i: u64| ((20.0 + 480.0 * draw.unit(i, 1)) * 100.0).round() / 100.0;
    match source {
        Source::Orders => Box::new((0..customers).map(move |i| {
            json(&Order {
                order_id: format!("order-{i}").into(),
                customer_id: format!("cust-{i}").into(),
                order_amount: amount(i),
                order_ts: PLANTED_START_MS + i as Millis * SPACING_MS,
                country: "US".into(),
            })
        })),
        Source::Payments => Box::new((0..customers).map(move |i| {
            json(&Payment {
                payment_id: format!("pay-{i}").into(),
                order_id: format!("order-{i}").into(),
                paid_amount: amount(i),
                payment_ts: PLANTED_START_MS + i as Millis * SPACING_MS + draw.range(i, 2, 1, 900),
                method: "card".into(),
            })
        })),
        Source::Devices => Box::new(std::iter::empty()),
    }
}

fn json<T: serde::Serialize>(record: &T) -> String {
    serde_json::to_string(record).expect("records serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_customer_orders_once_and_pays_in_full() {
        let orders: Vec<Order> =
            distinct_customer_lines(Source::Orders, 100, 7).map(|l| serde_json::from_str(&l).unwrap()).collect();
        let payments: Vec<Payment> =
            distinct_customer_lines(Source::Payments, 100, 7).map(|l| serde_json::from_str(&l).unwrap()).collect();
        assert_eq!(orders.len(), 100);
        let customers: std::collections::BTreeSet<&str> = orders.iter().map(|o| o.customer_id.as_str()).collect();
        assert_eq!(customers.len(), 100);
        for (o, p) in orders.iter().zip(&payments) {
            assert_eq!((&o.order_id, o.order_amount), (&p.order_id, p.paid_amount));
            assert!(p.payment_ts > o.order_ts && p.payment_ts - o.order_ts < 1000);
        }
        assert_eq!(distinct_customer_lines(Source::Devices, 100, 7).count(), 0);
    }
}
