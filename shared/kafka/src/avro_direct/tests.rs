//! Agreement with apache-avro: every per-event topic's values written here have its
//! bytes and read back the same on both sides. Also the schema fixtures the other
//! modules' tests share.

use std::fmt::Debug;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use vigil_datagen::rng::Draw;
use vigil_datagen::traffic::Traffic;
use vigil_model::output::{EnrichedPayment, LateDeviceEvent, LatePayment, RecordType};
use vigil_model::topology::{
    Topic, DEVICE_EVENTS, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, ENRICHED_PAYMENTS, ENRICHED_PAYMENTS_LATE, ORDERS,
    PAYMENTS,
};
use vigil_model::{EventType, Millis};

use super::{read, write, Shape};

pub(super) fn schema(topic: &'static Topic) -> Schema {
    Schema::parse_str(topic.schema).unwrap()
}

pub(super) fn shape(topic: &'static Topic) -> Shape {
    Shape::of(&schema(topic)).unwrap_or_else(|| panic!("{} has no shape", topic.name))
}

/// A topic's schema, parsed once, and its shape.
pub(super) struct Both {
    topic: &'static Topic,
    schema: Schema,
    shape: Shape,
}

impl Both {
    pub(super) fn of(topic: &'static Topic) -> Both {
        Both { topic, schema: schema(topic), shape: shape(topic) }
    }

    pub(super) fn theirs<T: Serialize>(&self, value: &T) -> Vec<u8> {
        GenericDatumWriter::builder(&self.schema).build().unwrap().write_ser_to_vec(value).unwrap()
    }

    /// Written here, `value` has apache-avro's bytes, and reads back the same here
    /// and there; cut anywhere short, it is refused.
    fn agree<T: Serialize + DeserializeOwned + PartialEq + Debug>(&self, value: &T) -> Vec<u8> {
        let mut ours = Vec::new();
        write(&self.shape, value, &mut ours).unwrap();
        assert_eq!(ours, self.theirs(value), "{} {value:?}", self.topic.name);
        let reader = GenericDatumReader::builder(&self.schema).build().unwrap();
        assert_eq!(reader.read_deser::<T>(&mut &ours[..]).unwrap(), *value);
        assert_eq!(read::<T>(&self.shape, &ours).unwrap(), *value, "{}", self.topic.name);
        for end in 0..ours.len() {
            assert!(read::<T>(&self.shape, &ours[..end]).is_err(), "{} cut at {end}", self.topic.name);
        }
        ours
    }
}

/// Text that is not always short ASCII: empty, multi-byte, longer than 63 bytes
/// (a two-byte length).
fn text(draw: &Draw, i: u64, purpose: u64, plain: &str) -> vigil_model::input::Text {
    match draw.range(i, purpose, 0, 5) {
        0 => "".into(),
        1 => format!("{plain}-Zürich-東京-🦀").into(),
        2 => plain.repeat(12).into(),
        _ => plain.into(),
    }
}

fn number(draw: &Draw, i: u64, purpose: u64, usual: f64) -> f64 {
    [usual, -0.0, f64::MAX, f64::MIN_POSITIVE, f64::INFINITY, 1e-300][draw.range(i, purpose, 0, 9).min(5) as usize]
}

fn millis(draw: &Draw, i: u64, purpose: u64, usual: Millis) -> Millis {
    [usual, 0, -1, Millis::MIN, Millis::MAX, 63, 64, -65][draw.range(i, purpose, 0, 11).min(7) as usize]
}

#[test]
fn writes_the_bytes_apache_avro_writes_and_reads_them_back() {
    let traffic = Traffic::new(7, 1_700_000_000_000, 0);
    let draw = Draw::new(11);
    let event_types = [EventType::Heartbeat, EventType::Fault, EventType::Reboot, EventType::FirmwareUpdate];
    let [orders, payments, devices, on_time, late_devices, enriched_payments, late_payments] = [
        &ORDERS,
        &PAYMENTS,
        &DEVICE_EVENTS,
        &DEVICE_EVENTS_ONTIME,
        &DEVICE_EVENTS_LATE,
        &ENRICHED_PAYMENTS,
        &ENRICHED_PAYMENTS_LATE,
    ]
    .map(Both::of);
    for i in 0..300 {
        let (Some(mut order), Some(mut payment)) = (traffic.order(i), traffic.payment(i)) else { continue };
        order.customer_id = text(&draw, i, 1, &order.customer_id);
        order.order_amount = number(&draw, i, 2, order.order_amount);
        order.order_ts = millis(&draw, i, 3, order.order_ts);
        orders.agree(&order);
        payment.method = text(&draw, i, 4, &payment.method);
        payment.paid_amount = number(&draw, i, 5, payment.paid_amount);
        payment.payment_ts = millis(&draw, i, 6, payment.payment_ts);
        payments.agree(&payment);

        let mut device = traffic.device(i);
        device.site_id = text(&draw, i, 7, &device.site_id);
        device.event_type = event_types[draw.range(i, 8, 0, 3) as usize];
        device.event_ts = millis(&draw, i, 9, device.event_ts);
        devices.agree(&device);
        on_time.agree(&device);
        let watermark = device.event_ts.saturating_add(draw.range(i, 10, 0, 1 << 40));
        late_devices.agree(&LateDeviceEvent::new(device, watermark));

        let matched = draw.range(i, 11, 0, 1) == 1;
        let enriched = EnrichedPayment {
            record_type: RecordType::EnrichedPayment,
            payment_id: payment.payment_id,
            order_id: payment.order_id,
            paid_amount: payment.paid_amount,
            method: payment.method,
            payment_ts_ms: payment.payment_ts,
            unmatched: !matched,
            customer_id: matched.then_some(order.customer_id),
            order_amount: matched.then_some(order.order_amount),
            country: matched.then(|| text(&draw, i, 12, &order.country)),
            amount_mismatch: draw.range(i, 13, 0, 1) == 1,
        };
        let bytes = enriched_payments.agree(&enriched);
        // The late side output carries two more longs after the same fields.
        let late = LatePayment { payment: enriched.into(), watermark_ms: millis(&draw, i, 14, 5), lag_ms: i as Millis };
        let mut ours = Vec::new();
        write(&late_payments.shape, &late, &mut ours).unwrap();
        assert_eq!(ours, late_payments.theirs(&late));
        assert_eq!(ours[..bytes.len()], bytes);
    }
}
