//! The pipeline's own value schemas, each parsed once per process with what reads and
//! writes values under it the fast way: its compiled shape (`avro_direct`) and
//! apache-avro's serde reader and writer.

use std::sync::{OnceLock, RwLock};

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use schema_registry_converter::avro_common::get_supplied_schema;
use schema_registry_converter::schema_registry_common::SuppliedSchema;
use vigil_model::topology::Topic;

use crate::avro_direct::Shape;

/// A value schema of one of the pipeline's topics, with a reader and a writer kept for
/// it.
pub(super) struct Own {
    pub(super) topic: &'static str,
    pub(super) canonical: String,
    pub(super) supplied: SuppliedSchema,
    pub(super) shape: Option<Shape>,
    pub(super) reader: GenericDatumReader<'static>,
    pub(super) writer: GenericDatumWriter<'static>,
}

/// The pipeline's value schemas met so far in this process: each topic's is parsed
/// once (a topic's schema is compiled in, and a test parses every one).
pub(super) fn known_schemas() -> &'static RwLock<Vec<&'static Own>> {
    static KNOWN: OnceLock<RwLock<Vec<&'static Own>>> = OnceLock::new();
    KNOWN.get_or_init(|| RwLock::new(Vec::new()))
}

/// The schema of `topic`'s values, parsed on first use.
pub(super) fn own(topic: &'static Topic) -> &'static Own {
    if let Some(own) = known_schemas().read().expect("schemas").iter().find(|o| o.topic == topic.name) {
        return own;
    }
    let mut known = known_schemas().write().expect("schemas");
    if let Some(own) = known.iter().find(|o| o.topic == topic.name) {
        return own;
    }
    let schema: &'static Schema = Box::leak(Box::new(
        Schema::parse_str(topic.schema)
            .unwrap_or_else(|e| panic!("the schema of `{}` does not parse: {e}", topic.name)),
    ));
    let own: &'static Own = Box::leak(Box::new(Own {
        topic: topic.name,
        canonical: schema.canonical_form(),
        supplied: get_supplied_schema(schema),
        shape: Shape::of(schema),
        reader: GenericDatumReader::builder(schema).build().expect("a reader of the topic's schema"),
        writer: GenericDatumWriter::builder(schema).build().expect("a writer of the topic's schema"),
    }));
    known.push(own);
    own
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro_direct;
    use crate::codec::unwrap_union;
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use std::fmt::Debug;
    use vigil_model::output::{EnrichedPayment, LateDeviceEvent, RecordType};
    use vigil_model::{DeviceEvent, EventType, Order, Payment};

    use vigil_model::topology::{
        DEVICE_EVENTS, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, ENRICHED_PAYMENTS, ORDERS, PAYMENTS,
    };

    /// Encodes as the registry path does (schema-directed serde), decodes as
    /// `Codec::decode` does (datum → value → serde), without a registry.
    fn round_trip<T: Serialize + DeserializeOwned>(topic: &'static Topic, value: &T) -> T {
        let schema = Schema::parse_str(topic.schema).unwrap();
        let bytes = GenericDatumWriter::builder(&schema).build().unwrap().write_ser_to_vec(value).unwrap();
        let reader = GenericDatumReader::builder(&schema).build().unwrap();
        let decoded = reader.read_value(&mut &bytes[..]).unwrap();
        apache_avro::from_value(&unwrap_union(decoded)).unwrap()
    }

    #[test]
    fn records_other_services_read_survive_avro() {
        let e = matched_payment();
        assert_eq!(round_trip(&ENRICHED_PAYMENTS, &e), e);
        let d = device_event();
        assert_eq!(round_trip(&DEVICE_EVENTS, &d), d);
    }

    fn matched_payment() -> EnrichedPayment {
        EnrichedPayment {
            record_type: RecordType::EnrichedPayment,
            payment_id: "pay-9001".into(),
            order_id: "order-9001".into(),
            paid_amount: 90.0,
            method: "card".into(),
            payment_ts_ms: 1_700_000_026_157,
            unmatched: false,
            customer_id: Some("cust-003".into()),
            order_amount: Some(240.0),
            country: Some("US".into()),
            amount_mismatch: true,
        }
    }

    fn device_event() -> DeviceEvent {
        DeviceEvent {
            device_id: "dev-101".into(),
            site_id: "site-a".into(),
            event_type: EventType::FirmwareUpdate,
            status: "failed".into(),
            event_ts: 1_700_000_003_507,
        }
    }

    /// Written under the topic's own schema, `value` reads back the same the fast ways
    /// (by its shape; serde straight from the datum) and the generic way (datum,
    /// `Value`, serde).
    fn reads_back_both_ways<T: Serialize + DeserializeOwned + PartialEq + Debug>(topic: &'static Topic, value: &T) {
        let own = own(topic);
        let bytes = own.writer.write_ser_to_vec(value).unwrap();
        let generic: T =
            apache_avro::from_value(&unwrap_union(own.reader.read_value(&mut &bytes[..]).unwrap())).unwrap();
        let fast: T = own.reader.read_deser(&mut &bytes[..]).unwrap();
        assert_eq!(generic, *value, "{}", topic.name);
        assert_eq!(fast, *value, "{}", topic.name);
        let shape = own.shape.as_ref().unwrap_or_else(|| panic!("{} has no shape", topic.name));
        assert_eq!(avro_direct::read::<T>(shape, &bytes).unwrap(), *value, "{}", topic.name);
        // Cut short, the fast way fails (and the generic way then names the error).
        assert!(own.reader.read_deser::<T>(&mut &bytes[..bytes.len() - 1]).is_err(), "{}", topic.name);
    }

    #[test]
    fn every_record_a_stage_reads_reads_the_same_both_ways() {
        let order = Order {
            order_id: "order-1".into(),
            customer_id: "cust-001".into(),
            order_amount: 120.5,
            order_ts: 1_700_000_000_000,
            country: "DE".into(),
        };
        reads_back_both_ways(&ORDERS, &order);
        let payment = Payment {
            payment_id: "pay-1".into(),
            order_id: "order-1".into(),
            paid_amount: 120.5,
            payment_ts: 1_700_000_001_000,
            method: "card".into(),
        };
        reads_back_both_ways(&PAYMENTS, &payment);
        reads_back_both_ways(&DEVICE_EVENTS, &device_event());
        reads_back_both_ways(&DEVICE_EVENTS_ONTIME, &device_event());
        reads_back_both_ways(&DEVICE_EVENTS_LATE, &LateDeviceEvent::new(device_event(), 1_700_000_090_000));
        let matched = matched_payment();
        reads_back_both_ways(&ENRICHED_PAYMENTS, &matched);
        let unmatched = EnrichedPayment {
            unmatched: true,
            customer_id: None,
            order_amount: None,
            country: None,
            amount_mismatch: false,
            ..matched
        };
        reads_back_both_ways(&ENRICHED_PAYMENTS, &unmatched);
    }
}
