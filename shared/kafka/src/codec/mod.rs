//! Record values as Avro in the Confluent wire format (magic byte, schema id, datum),
//! through `schema_registry_converter` and a Confluent-compatible schema registry.
//! Each topic's value schema is the file in `schemas/`, registered under the subject
//! `<topic>-value` (in the pipeline's namespace) on first use (or by `vigil provision`).
//!
//! Values written under one of Vigil's own schemas (the common case: whoever wrote
//! them registered the same schema) are read and written straight through serde: by
//! the schema's compiled shape (`avro_direct`) where it has one and the value fits,
//! else by apache-avro's reader and writer kept per schema. Any other schema goes the
//! generic way, through the converter and apache-avro's `Value` tree.
//!
//! Here the codec itself; beside it the pipeline's own schemas (`schemas`), the wire
//! format's framing (`wire`), the registry client and whose fault a failure is
//! (`registry`), and a value read as a stage reads it ([`Decoding`]).

mod decoding;
mod registry;
mod schemas;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use apache_avro::types::Value;
use schema_registry_converter::blocking::avro::{AvroDecoder, AvroEncoder};
use schema_registry_converter::blocking::schema_registry::{post_schema, SrSettings};
use schema_registry_converter::schema_registry_common::SubjectNameStrategy;
use serde::de::DeserializeOwned;
use serde::Serialize;
use vigil_model::topology::Topic;

use crate::avro_direct;
use crate::core::Encode;
use crate::names::Names;
use registry::registry_fault;
use schemas::{known_schemas, own, Own};
use wire::{schema_id, HEADER};

pub use decoding::Decoding;

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
    /// Lookups that failed since the decoder's error cache was last cleared.
    failed_lookups: AtomicUsize,
    /// Schema ids met in payloads: which of the pipeline's schemas each is, if any.
    read_ids: RwLock<HashMap<u32, Option<&'static Own>>>,
    /// The registry's id of each topic's own schema, and that schema, once a value was
    /// written under it.
    write_ids: RwLock<HashMap<&'static str, (u32, &'static Own)>>,
    /// Whose subjects it registers and writes under: `<topic>-value` in the namespace.
    names: Names,
}

impl Codec {
    pub fn new(registry_url: &str) -> Result<Codec, CodecError> {
        apache_avro::util::max_allocation_bytes(MAX_DECODE_ALLOCATION);
        // As errors show it: credentials in the URL stay out of logs.
        let shown = crate::connection::redacted_url(registry_url);
        let settings = registry::settings(registry_url, &shown)?;
        Ok(Codec {
            url: shown,
            encoder: AvroEncoder::new(settings.clone()),
            decoder: AvroDecoder::new(settings.clone()),
            settings,
            failed_lookups: AtomicUsize::new(0),
            read_ids: RwLock::new(HashMap::new()),
            write_ids: RwLock::new(HashMap::new()),
            names: Names::default(),
        })
    }

    /// The codec writing under the subjects of the pipeline `names` names (its
    /// namespace's).
    pub fn named(self, names: Names) -> Codec {
        Codec { names, ..self }
    }

    /// Registers the value schema of each of `topics`; returns (subject, schema id).
    pub fn register(&self, topics: &[&'static Topic]) -> Result<Vec<(String, u32)>, CodecError> {
        let mut ids = Vec::new();
        for &topic in topics {
            let subject = self.names.subject(topic);
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
            SubjectNameStrategy::TopicNameStrategyWithSchema(self.names.of(topic.name), false, own.supplied.clone());
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

    /// A value of `topic`'s records as `T`: a plain JSON object with the seed's field
    /// names (as the seed's generator writes its streams), or Avro in the Confluent
    /// wire format, told apart by their first byte. Of Avro, the first value under
    /// each schema id goes the generic way, which also learns whether the id is
    /// `topic`'s own schema; the rest of that id's values are then read straight
    /// through serde.
    pub fn decode<T: DeserializeOwned>(&self, topic: &'static Topic, payload: &[u8]) -> Result<T, CodecError> {
        if is_json_object(payload) {
            return serde_json::from_slice(payload)
                .map_err(|e| CodecError::Decode(format!("not a valid {} record (JSON): {e}", topic.name)));
        }
        if let Some(id) = schema_id(payload) {
            match self.read_ids.read().expect("read ids").get(&id) {
                Some(Some(own)) => {
                    // What fails here fails the generic way too, which names it precisely.
                    let datum = &payload[HEADER..];
                    if let Some(Ok(value)) = own.shape.as_ref().map(|shape| avro_direct::read(shape, datum)) {
                        return Ok(value);
                    }
                    if let Ok(value) = own.reader.read_deser(&mut &datum[..]) {
                        return Ok(value);
                    }
                }
                Some(None) => {}
                // A new id: `decode_value` compares its schema with the ones known.
                None => {
                    own(topic);
                }
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

/// Whether a value is a JSON object rather than Confluent-framed Avro (whose first
/// byte is 0): its first byte other than white space is `{`.
pub fn is_json_object(payload: &[u8]) -> bool {
    payload.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// A value of a top-level union schema comes back wrapped in its branch.
fn unwrap_union(value: Value) -> Value {
    match value {
        Value::Union(_, inner) => unwrap_union(*inner),
        other => other,
    }
}
