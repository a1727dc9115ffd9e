//! Normal traffic: quiet, realistic records around which the planted scenarios
//! stand out. Orders and payments come in pairs, ten a second (twenty in the seed's
//! mix), customers in rotation (so no velocity bursts), amounts near each customer's
//! own level, with a few amount mismatches, unpaid orders and payments for unknown
//! orders. Device events come twenty a second from sixty devices on six sites, mostly
//! heartbeats. Every stream is out of order by well under the watermark bounds, so
//! nothing is late.

use vigil_model::{DeviceEvent, EventType, Millis, Order, Payment};

use crate::rng::Draw;

const PAIR_SPACING_MS: Millis = 100;
const DEVICE_SPACING_MS: Millis = 50;
const CUSTOMERS: u64 = 50;
const DEVICES: u64 = 60;
const SITES: [&str; 6] = ["site-a", "site-b", "site-c", "site-d", "site-e", "site-f"];
const COUNTRIES: [&str; 6] = ["US", "CA", "GB", "DE", "FR", "JP"];
const METHODS: [&str; 3] = ["card", "wallet", "bank_transfer"];

/// How a dataset's events divide among the streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mix {
    /// Per 1 000 events 250 orders, 250 payments and 500 device events, spanning 25 s
    /// of event time: pairs ten a second, device events twenty.
    #[default]
    HalfDevices,
    /// The seed's: its streaming generator runs the three streams at one rate
    /// (`generate_stream.py --rate 20` each), so a third each, twenty a second.
    Equal,
}

impl Mix {
    /// Order-payment pairs among `events`.
    pub fn pairs_for(self, events: u64) -> u64 {
        match self {
            Mix::HalfDevices => events / 4,
            Mix::Equal => events / 3,
        }
    }

    /// Device events among `events`.
    pub fn devices_for(self, events: u64) -> u64 {
        match self {
            Mix::HalfDevices => events / 2,
            Mix::Equal => events - 2 * (events / 3),
        }
    }

    fn pair_spacing_ms(self) -> Millis {
        match self {
            Mix::HalfDevices => PAIR_SPACING_MS,
            Mix::Equal => DEVICE_SPACING_MS,
        }
    }
}

impl std::str::FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Mix, String> {
        match s {
            "half-devices" => Ok(Mix::HalfDevices),
            "equal" => Ok(Mix::Equal),
            other => Err(format!("`{other}` is not a mix: say half-devices (the default) or equal (the seed's)")),
        }
    }
}

/// Normal events of one traffic source, in the proportions of its [`Mix`].
#[derive(Debug, Clone, Copy)]
pub struct Traffic {
    draw: Draw,
    start_ms: Millis,
    first_id: u64,
    mix: Mix,
}

mod purpose {
    pub const KIND: u64 = 1;
    pub const AMOUNT: u64 = 2;
    pub const ORDER_DELAY: u64 = 3;
    pub const PAYMENT_JITTER: u64 = 4;
    pub const DEVICE_JITTER: u64 = 5;
    pub const DEVICE_KIND: u64 = 6;
    pub const FIRMWARE: u64 = 7;
}

impl Traffic {
    /// Traffic starting at `start_ms`; ids count from `first_id` so they never meet
    /// the planted ones.
    pub fn new(seed: u64, start_ms: Millis, first_id: u64) -> Self {
        Traffic { draw: Draw::new(seed), start_ms, first_id, mix: Mix::default() }
    }

    /// The same traffic in the proportions of `mix`.
    pub fn with_mix(self, mix: Mix) -> Self {
        Traffic { mix, ..self }
    }

    /// Pairs among `events` in the default mix.
    pub fn pairs_for(events: u64) -> u64 {
        Mix::default().pairs_for(events)
    }

    /// Device events among `events` in the default mix.
    pub fn devices_for(events: u64) -> u64 {
        Mix::default().devices_for(events)
    }

    /// What pair `i` is: a few pairs lack one side or disagree on the amount.
    fn pair_kind(&self, i: u64) -> PairKind {
        match self.draw.unit(i, purpose::KIND) {
            u if u < 0.005 => PairKind::Unpaid,
            u if u < 0.010 => PairKind::UnknownOrder,
            u if u < 0.020 => PairKind::Mismatch,
            _ => PairKind::Normal,
        }
    }

    fn base_ms(&self, i: u64) -> Millis {
        self.start_ms + i as Millis * self.mix.pair_spacing_ms()
    }

    fn customer(&self, i: u64) -> u64 {
        100 + i % CUSTOMERS
    }

    fn amount(&self, i: u64) -> f64 {
        let level = 20.0 + (self.customer(i) * 37 % 180) as f64;
        let spread = 0.9 + 0.2 * self.draw.unit(i, purpose::AMOUNT);
        (level * spread * 100.0).round() / 100.0
    }

    pub fn order(&self, i: u64) -> Option<Order> {
        if self.pair_kind(i) == PairKind::UnknownOrder {
            return None;
        }
        // Ordered shortly before paying, or (one in ten) just after.
        let delay = match self.draw.unit(i, purpose::ORDER_DELAY) {
            u if u < 0.1 => -400,
            u => 100 + (u * 1000.0) as Millis,
        };
        let id = self.first_id + i;
        Some(Order {
            order_id: format!("order-{id:06}").into(),
            customer_id: format!("cust-{:03}", self.customer(i)).into(),
            order_amount: self.amount(i),
            order_ts: self.base_ms(i) - delay,
            country: COUNTRIES[(self.customer(i) % COUNTRIES.len() as u64) as usize].into(),
        })
    }

    pub fn payment(&self, i: u64) -> Option<Payment> {
        let kind = self.pair_kind(i);
        if kind == PairKind::Unpaid {
            return None;
        }
        let id = self.first_id + i;
        let order_id =
            if kind == PairKind::UnknownOrder { format!("order-unknown-{id:06}") } else { format!("order-{id:06}") };
        let amount = self.amount(i);
        let paid = if kind == PairKind::Mismatch { (amount * 80.0).round() / 100.0 } else { amount };
        Some(Payment {
            payment_id: format!("pay-{id:06}").into(),
            order_id: order_id.into(),
            paid_amount: paid,
            payment_ts: self.base_ms(i) + self.draw.range(i, purpose::PAYMENT_JITTER, -300, 300),
            method: METHODS[(i % METHODS.len() as u64) as usize].into(),
        })
    }

    pub fn device(&self, k: u64) -> DeviceEvent {
        let device = k % DEVICES;
        let (event_type, status) = match self.draw.unit(k, purpose::DEVICE_KIND) {
            u if u < 0.003 => (EventType::Fault, "degraded"),
            u if u < 0.005 => (EventType::Reboot, "rebooting"),
            u if u < 0.010 => {
                let failed = self.draw.unit(k, purpose::FIRMWARE) < 0.2;
                (EventType::FirmwareUpdate, if failed { "failed" } else { "ok" })
            }
            _ => (EventType::Heartbeat, "ok"),
        };
        DeviceEvent {
            device_id: format!("dev-{}", 400 + device).into(),
            site_id: SITES[(device / 10) as usize].into(),
            event_type,
            status: status.into(),
            event_ts: self.start_ms
                + k as Millis * DEVICE_SPACING_MS
                + self.draw.range(k, purpose::DEVICE_JITTER, -300, 300),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PairKind {
    Normal,
    Mismatch,
    Unpaid,
    UnknownOrder,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_records_and_payment_i_pays_order_i() {
        let a = Traffic::new(7, 0, 100_000);
        let b = Traffic::new(7, 0, 100_000);
        for i in 0..200 {
            assert_eq!(a.order(i), b.order(i));
            assert_eq!(a.device(i), b.device(i));
            if let (Some(o), Some(p)) = (a.order(i), a.payment(i)) {
                assert_eq!(o.order_id, p.order_id);
                assert!((o.order_ts - p.payment_ts).abs() < 2_000);
            }
        }
        assert_ne!(Traffic::new(8, 0, 100_000).device(3), a.device(3));
    }

    #[test]
    fn the_seeds_mix_runs_the_three_streams_at_one_rate() {
        let t = Traffic::new(7, 0, 100_000).with_mix(Mix::Equal);
        assert_eq!((Mix::Equal.pairs_for(3_000), Mix::Equal.devices_for(3_000)), (1_000, 1_000));
        // A thousand of each span the same 50 s of event time.
        let last_payment = t.payment(999).unwrap().payment_ts;
        assert!((last_payment - t.device(999).event_ts).abs() < 1_000, "{last_payment}");
        assert_eq!("equal".parse(), Ok(Mix::Equal));
        assert!("thirds".parse::<Mix>().is_err());
    }

    #[test]
    fn streams_stay_within_the_watermark_bounds() {
        let t = Traffic::new(1, 0, 0);
        let max_behind = |ts: Vec<Millis>| {
            let mut max = Millis::MIN;
            let mut behind = 0;
            for x in ts {
                behind = behind.max(max.saturating_sub(x));
                max = max.max(x);
            }
            behind
        };
        assert!(max_behind((0..5_000).filter_map(|i| t.order(i)).map(|o| o.order_ts).collect()) < 2_000);
        assert!(max_behind((0..5_000).filter_map(|i| t.payment(i)).map(|p| p.payment_ts).collect()) < 2_000);
        assert!(max_behind((0..5_000).map(|k| t.device(k).event_ts).collect()) < 2_000);
    }
}
