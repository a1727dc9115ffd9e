//! Record values as Avro in the Confluent wire format (magic byte, schema id, datum),
//! through `schema_registry_converter` and a Confluent-compatible schema registry.
//! Each topic's value schema is the file in `schemas/`, registered under the subject
//! `<topic>-value` on first use (or by `vigil-admin provision`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use apache_avro::types::Value;
use apache_avro::Schema;
use schema_registry_converter::avro_common::get_supplied_schema;
use schema_registry_converter::blocking::avro::{AvroDecoder, AvroEncoder};
use schema_registry_converter::blocking::schema_registry::{post_schema, SrSettings};
use schema_registry_converter::schema_registry_common::{SubjectNameStrategy, SuppliedSchema};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::topics::{Topic, DATA_TOPICS};

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

pub struct Codec {
    url: String,
    settings: SrSettings,
    encoder: AvroEncoder,
    decoder: AvroDecoder,
    subjects: HashMap<&'static str, SuppliedSchema>,
    /// Lookups that failed since the decoder's error cache was last cleared.
    failed_lookups: AtomicUsize,
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
        let subjects = DATA_TOPICS
            .iter()
            .map(|t| (t.name, t.schema))
            .map(|(name, raw)| {
                let schema = Schema::parse_str(raw).map_err(|e| registry(format!("schemas/{name}.avsc: {e}")))?;
                Ok((name, get_supplied_schema(&schema)))
            })
            .collect::<Result<_, CodecError>>()?;
        Ok(Codec {
            url: shown,
            encoder: AvroEncoder::new(settings.clone()),
            decoder: AvroDecoder::new(settings.clone()),
            settings,
            subjects,
            failed_lookups: AtomicUsize::new(0),
        })
    }

    fn supplied(&self, topic: &str) -> SuppliedSchema {
        self.subjects.get(topic).cloned().unwrap_or_else(|| panic!("topic `{topic}` has no value schema"))
    }

    /// Registers every topic's value schema; returns (subject, schema id).
    pub fn register_all(&self) -> Result<Vec<(String, u32)>, CodecError> {
        let mut ids = Vec::new();
        for topic in DATA_TOPICS {
            let subject = format!("{}-value", topic.name);
            let registered = post_schema(&self.settings, subject.clone(), self.supplied(topic.name))
                .map_err(|e| CodecError::Registry { url: self.url.clone(), reason: format!("{subject}: {e}") })?;
            ids.push((subject, registered.id));
        }
        Ok(ids)
    }

    pub fn encode<T: Serialize>(&self, topic: Topic, value: &T) -> Result<Vec<u8>, CodecError> {
        let strategy =
            SubjectNameStrategy::TopicNameStrategyWithSchema(topic.name.to_string(), false, self.supplied(topic.name));
        self.encoder.encode_struct(value, &strategy).map_err(|e| match e.retriable {
            // Registering or looking up the schema failed: the registry, not the value.
            true => CodecError::Registry { url: self.url.clone(), reason: e.to_string() },
            false => CodecError::Encode { topic: topic.name.to_string(), reason: e.to_string() },
        })
    }

    /// The Avro value in a payload, whatever its schema.
    pub fn decode_value(&self, payload: &[u8]) -> Result<Value, CodecError> {
        let decoded = self.decoder.decode(Some(payload)).map_err(|e| {
            // A registry that is down is not the record's fault; a schema id it does
            // not know (404, reported as retriable) is.
            let unknown_schema = e.error.contains("404");
            if e.retriable && !unknown_schema {
                CodecError::Registry { url: self.url.clone(), reason: e.to_string() }
            } else {
                if e.cached && self.failed_lookups.fetch_add(1, Ordering::Relaxed) >= MAX_REMEMBERED_ERRORS {
                    self.decoder.remove_errors_from_cache();
                    self.failed_lookups.store(0, Ordering::Relaxed);
                }
                CodecError::Decode(format!("not an Avro value in the Confluent wire format: {}", e.error))
            }
        })?;
        Ok(unwrap_union(decoded.value))
    }

    pub fn decode<T: DeserializeOwned>(&self, payload: &[u8]) -> Result<T, CodecError> {
        let value = self.decode_value(payload)?;
        apache_avro::from_value(&value).map_err(|e| CodecError::Decode(format!("a value of the wrong shape: {e}")))
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
    use vigil_model::output::{EnrichedPayment, RecordType};
    use vigil_model::{DeviceEvent, EventType};

    use crate::topics::{DEVICE_EVENTS, ENRICHED_PAYMENTS};

    /// Encodes as the registry path does (schema-directed serde), decodes as
    /// `Codec::decode` does (datum → value → serde), without a registry.
    fn round_trip<T: Serialize + DeserializeOwned>(topic: Topic, value: &T) -> T {
        let schema = Schema::parse_str(topic.schema).unwrap();
        let bytes = GenericDatumWriter::builder(&schema).build().unwrap().write_ser_to_vec(value).unwrap();
        let reader = GenericDatumReader::builder(&schema).build().unwrap();
        let decoded = reader.read_value(&mut &bytes[..]).unwrap();
        apache_avro::from_value(&unwrap_union(decoded)).unwrap()
    }

    #[test]
    fn records_other_services_read_survive_avro() {
        let e = EnrichedPayment {
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
        };
        assert_eq!(round_trip(ENRICHED_PAYMENTS, &e), e);
        let d = DeviceEvent {
            device_id: "dev-101".into(),
            site_id: "site-a".into(),
            event_type: EventType::FirmwareUpdate,
            status: "failed".into(),
            event_ts: 1_700_000_003_507,
        };
        assert_eq!(round_trip(DEVICE_EVENTS, &d), d);
    }
}
