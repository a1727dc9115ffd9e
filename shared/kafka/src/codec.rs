//! Record values as Avro in the Confluent wire format (magic byte, schema id, datum),
//! through `schema_registry_converter` and a Confluent-compatible schema registry.
//! Each topic's value schema is the file in `schemas/`, registered under the subject
//! `<topic>-value` on first use (or by `vigil provision`).
//!
//! Values written under one of Vigil's own schemas (the common case: whoever wrote
//! them registered the same schema) are read and written straight through serde: by
//! the schema's compiled shape (`avro_direct`) where it has one and the value fits,
//! else by apache-avro's reader and writer kept per schema. Any other schema goes the
//! generic way, through the converter and apache-avro's `Value` tree.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use schema_registry_converter::avro_common::get_supplied_schema;
use schema_registry_converter::blocking::avro::{AvroDecoder, AvroEncoder};
use schema_registry_converter::blocking::schema_registry::{post_schema, SrSettings};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{SubjectNameStrategy, SuppliedSchema};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::avro_direct::{self, Shape};
use vigil_model::topology::Topic;

use crate::core::Encode;

const REGISTRY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a decoded value may claim for one string, array or map. A record is at
/// most a Kafka message (1 MiB by default), so a larger length prefix is a lie; the
/// Avro library's own default (512 MiB) would let one hostile record allocate that much.
pub const MAX_DECODE_ALLOCATION: usize = 16 << 20;

/// Schema ids the registry did not know are remembered (so each costs one lookup), but
/// only this many: a stream of random ids must not grow the cache without bound.
const MAX_REMEMBERED_ERRORS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("schema registry at {url} is not usable: {reason}")]
    Registry { url: String, reason: String },
    #[error("cannot encode a `{topic}` value as Avro: {reason}")]
    Encode { topic: String, reason: String },
    /// Bytes that are not a valid value: the record goes to the dead letters.
    #[error("{0}")]
    Decode(String),
}

/// The Confluent wire format's header: a zero byte and the schema id (big-endian).
const HEADER: usize = 5;

fn schema_id(payload: &[u8]) -> Option<u32> {
    match payload {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// A value schema of one of the pipeline's topics, with a reader and a writer kept for
/// it.
struct Own {
    topic: &'static str,
    canonical: String,
    supplied: SuppliedSchema,
    shape: Option<Shape>,
    reader: GenericDatumReader<'static>,
    writer: GenericDatumWriter<'static>,
}

/// The pipeline's value schemas met so far in this process: each topic's is parsed
/// once (a topic's schema is compiled in, and a test parses every one).
fn known_schemas() -> &'static RwLock<Vec<&'static Own>> {
    static KNOWN: OnceLock<RwLock<Vec<&'static Own>>> = OnceLock::new();
    KNOWN.get_or_init(|| RwLock::new(Vec::new()))
}

/// The schema of `topic`'s values, parsed on first use.
fn own(topic: &'static Topic) -> &'static Own {
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

pub struct Codec {
    url: String,
    settings: SrSettings,
    encoder: AvroEncoder,
    decoder: AvroDecoder,
    /// Lookups that failed since the decoder's error cache was last cleared.
    failed_lookups: AtomicUsize,
    /// Schema ids met in payloads: which of the pipeline's schemas each is, if any.
    read_ids: RwLock<HashMap<u32, Option<&'static Own>>>,
    /// The registry's id of each topic's own schema, and that schema, once a value was
    /// written under it.
    write_ids: RwLock<HashMap<&'static str, (u32, &'static Own)>>,
}

impl Codec {
    pub fn new(registry_url: &str) -> Result<Codec, CodecError> {
        apache_avro::util::max_allocation_bytes(MAX_DECODE_ALLOCATION);
        // As errors show it: credentials in the URL stay out of logs.
        let shown = crate::connection::redacted_url(registry_url);
        let registry = |reason: String| CodecError::Registry { url: shown.clone(), reason };
        // A registry that does not answer in time counts as down (the member retries);
        // the client's default of 30 s would stall the processing loop.
        let security = crate::connection::security();
        let mut settings = SrSettings::new_builder(registry_url.to_string());
        settings.set_timeout(REGISTRY_TIMEOUT);
        if let Some((username, password)) = &security.registry_credentials {
            settings.set_basic_authorization(username, Some(password));
        }
        let mut client = reqwest::blocking::ClientBuilder::new();
        if let Some(ca) = &security.registry_ca {
            let pem =
                std::fs::read(ca).map_err(|e| registry(format!("cannot read the CA file {}: {e}", ca.display())))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| registry(format!("{} is not a PEM file of certificates: {e}", ca.display())))?;
            for certificate in certificates {
                client = client.add_root_certificate(certificate);
            }
        }
        let settings = settings.build_with(client).map_err(|e| registry(e.to_string()))?;
        Ok(Codec {
            url: shown,
            encoder: AvroEncoder::new(settings.clone()),
            decoder: AvroDecoder::new(settings.clone()),
            settings,
            failed_lookups: AtomicUsize::new(0),
            read_ids: RwLock::new(HashMap::new()),
            write_ids: RwLock::new(HashMap::new()),
        })
    }

    /// Reads values of `topics` the fast way from the start (their schemas are parsed
    /// now rather than at their first value).
    pub fn reads(&self, topics: &[&'static Topic]) {
        topics.iter().for_each(|&t| {
            own(t);
        });
    }

    /// Registers the value schema of each of `topics`; returns (subject, schema id).
    pub fn register(&self, topics: &[&'static Topic]) -> Result<Vec<(String, u32)>, CodecError> {
        let mut ids = Vec::new();
        for &topic in topics {
            let subject = format!("{}-value", topic.name);
            let registered = post_schema(&self.settings, subject.clone(), own(topic).supplied.clone())
                .map_err(|e| CodecError::Registry { url: self.url.clone(), reason: format!("{subject}: {e}") })?;
            ids.push((subject, registered.id));
        }
        Ok(ids)
    }

    pub fn encode<T: Serialize>(&self, topic: &'static Topic, value: &T) -> Result<Vec<u8>, CodecError> {
        let encode_error = |reason: String| CodecError::Encode { topic: topic.name.to_string(), reason };
        if let Some(&(id, own)) = self.write_ids.read().expect("write ids").get(topic.name) {
            let mut bytes = Vec::with_capacity(128);
            bytes.push(0);
            bytes.extend_from_slice(&id.to_be_bytes());
            if let Some(shape) = &own.shape {
                if avro_direct::write(shape, value, &mut bytes).is_ok() {
                    return Ok(bytes);
                }
                bytes.truncate(HEADER);
            }
            own.writer.write_ser(&mut bytes, value).map_err(|e| encode_error(e.to_string()))?;
            return Ok(bytes);
        }
        let own = own(topic);
        let strategy =
            SubjectNameStrategy::TopicNameStrategyWithSchema(topic.name.to_string(), false, own.supplied.clone());
        let bytes = self.encoder.encode_struct(value, &strategy).map_err(|e| match registry_fault(&e) {
            // Registering or looking up the schema failed: the registry, not the value.
            true => {
                self.encoder.remove_errors_from_cache();
                CodecError::Registry { url: self.url.clone(), reason: e.to_string() }
            }
            false => encode_error(e.to_string()),
        })?;
        if let Some(id) = schema_id(&bytes) {
            self.write_ids.write().expect("write ids").insert(topic.name, (id, own));
        }
        Ok(bytes)
    }

    /// The Avro value in a payload, whatever its schema.
    pub fn decode_value(&self, payload: &[u8]) -> Result<Value, CodecError> {
        let decoded = self.decoder.decode_with_schema(Some(payload)).map_err(|e| {
            if registry_fault(&e) {
                // Not the record's fault: the member retries it. The decoder keeps
                // some such errors (a body cut short, a 500) as it keeps unknown ids;
                // the retry must ask the registry again.
                self.decoder.remove_errors_from_cache();
                CodecError::Registry { url: self.url.clone(), reason: e.to_string() }
            } else {
                if e.cached && self.failed_lookups.fetch_add(1, Ordering::Relaxed) >= MAX_REMEMBERED_ERRORS {
                    self.decoder.remove_errors_from_cache();
                    self.failed_lookups.store(0, Ordering::Relaxed);
                }
                CodecError::Decode(format!("not an Avro value in the Confluent wire format: {}", e.error))
            }
        })?;
        let Some(decoded) = decoded else { return Ok(Value::Null) };
        let mut read_ids = self.read_ids.write().expect("read ids");
        read_ids.entry(decoded.schema.id).or_insert_with(|| {
            let canonical = decoded.schema.parsed.canonical_form();
            known_schemas().read().expect("schemas").iter().copied().find(|o| o.canonical == canonical)
        });
        Ok(unwrap_union(decoded.value))
    }

    pub fn decode<T: DeserializeOwned>(&self, payload: &[u8]) -> Result<T, CodecError> {
        if let Some(own) = schema_id(payload).and_then(|id| *self.read_ids.read().expect("read ids").get(&id)?) {
            // What fails here fails the generic way too, which names it precisely.
            let datum = &payload[HEADER..];
            if let Some(Ok(value)) = own.shape.as_ref().map(|shape| avro_direct::read(shape, datum)) {
                return Ok(value);
            }
            if let Ok(value) = own.reader.read_deser(&mut &datum[..]) {
                return Ok(value);
            }
        }
        let value = self.decode_value(payload)?;
        apache_avro::from_value(&value).map_err(|e| CodecError::Decode(format!("a value of the wrong shape: {e}")))
    }
}

impl Encode for Codec {
    type Error = CodecError;

    fn encode<T: vigil_model::Record>(&self, topic: &'static Topic, record: &T) -> Result<Vec<u8>, CodecError> {
        Codec::encode(self, topic, record)
    }
}

/// Whether a registry client error says the registry could not be used (down, slow,
/// refusing the credentials, failing, not at that address, answering something that
/// is not a schema) rather than that it has no schema of that id (404 with error
/// code 40403, as Confluent's and Apicurio's registries answer) or the schema it has
/// is unusable. Only the latter is the record's fault and makes it a dead letter.
/// The client calls some of the former not retriable (a 500, a body cut short by the
/// timeout); taken for the record's fault, a valid record would go to the dead
/// letters for a moment's trouble of the registry, and every record to them for a
/// wrong registry path.
fn registry_fault(e: &SRCError) -> bool {
    let transport = std::error::Error::source(e).is_some_and(|s| s.is::<reqwest::Error>());
    let status = e.error.strip_prefix("HTTP request to schema registry failed with status ");
    match status.and_then(|s| s.get(..3)).and_then(|code| code.parse::<u16>().ok()) {
        Some(404) => !e.cause.as_deref().is_some_and(|c| c.contains("40403")),
        Some(_) => true,
        None => e.retriable || transport,
    }
}

/// A value of a top-level union schema comes back wrapped in its branch.
fn unwrap_union(value: Value) -> Value {
    match value {
        Value::Union(_, inner) => unwrap_union(*inner),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::reader::datum::GenericDatumReader;
    use apache_avro::writer::datum::GenericDatumWriter;
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

    /// A registry stand-in that answers each connection with the next of `responses`
    /// (raw HTTP), the last one for good: the registry's failures on demand, which a
    /// real registry gives only by chance.
    fn registry_answering(responses: Vec<String>) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut responses = responses.into_iter().peekable();
            for conn in listener.incoming() {
                let mut conn = conn.unwrap();
                let mut request = Vec::new();
                let mut buf = [0; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = conn.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let response = match responses.len() {
                    1 => responses.peek().unwrap().clone(),
                    _ => responses.next().unwrap(),
                };
                let _ = conn.write_all(response.as_bytes());
            }
        });
        url
    }

    fn answer(status: &str, body: &str) -> String {
        format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
    }

    /// The payments schema as the registry returns it for an id.
    fn payments_schema() -> String {
        let schema = Schema::parse_str(PAYMENTS.schema).unwrap().canonical_form();
        answer("200 OK", &serde_json::json!({ "schema": schema }).to_string())
    }

    fn a_payment_under_schema_id(id: u32) -> Vec<u8> {
        let payment = Payment {
            payment_id: "pay-1".into(),
            order_id: "order-1".into(),
            paid_amount: 12.5,
            payment_ts: 1_700_000_000_000,
            method: "card".into(),
        };
        let schema = Schema::parse_str(PAYMENTS.schema).unwrap();
        let mut bytes = vec![0];
        bytes.extend_from_slice(&id.to_be_bytes());
        bytes.extend(GenericDatumWriter::builder(&schema).build().unwrap().write_ser_to_vec(&payment).unwrap());
        bytes
    }

    #[test]
    fn a_registry_that_fails_is_the_registrys_fault_and_an_unknown_id_the_records() {
        let record = a_payment_under_schema_id(7);
        let cut_short = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\nConnection: close\r\n\r\n{\"sch".to_string();
        let failing = [
            answer("500 Internal Server Error", r#"{"error_code":50001,"message":"storage"}"#),
            answer("401 Unauthorized", r#"{"error_code":40101,"message":"who"}"#),
            cut_short,
            answer("200 OK", "<html>a proxy's page</html>"),
            answer("404 Not Found", r#"{"error_code":404,"message":"HTTP 404 Not Found"}"#),
        ];
        for response in failing {
            let codec = Codec::new(&registry_answering(vec![response.clone()])).unwrap();
            let got = codec.decode::<Payment>(&record);
            assert!(matches!(got, Err(CodecError::Registry { .. })), "{response:?} gave {got:?}");
        }
        let unknown = answer("404 Not Found", r#"{"message":"No content with ID '7' was found.","error_code":40403}"#);
        let codec = Codec::new(&registry_answering(vec![unknown])).unwrap();
        assert!(matches!(codec.decode::<Payment>(&record), Err(CodecError::Decode(_))));
    }

    #[test]
    fn a_record_read_while_the_registry_fails_is_read_once_it_answers_again() {
        let record = a_payment_under_schema_id(7);
        let failure = answer("500 Internal Server Error", r#"{"error_code":50001,"message":"storage"}"#);
        let codec = Codec::new(&registry_answering(vec![failure.clone(), failure, payments_schema()])).unwrap();
        for _ in 0..2 {
            assert!(matches!(codec.decode::<Payment>(&record), Err(CodecError::Registry { .. })));
        }
        assert_eq!(codec.decode::<Payment>(&record).unwrap().payment_id, "pay-1");
    }

    #[test]
    fn a_schema_id_is_read_only_behind_the_magic_byte() {
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 9]), Some(258));
        assert_eq!(schema_id(&[1, 0, 0, 1, 2, 9]), None);
        assert_eq!(schema_id(&[0, 0, 0, 1]), None);
    }
}
