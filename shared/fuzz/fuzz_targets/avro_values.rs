//! Any bytes as a record value on every input topic of every stage of the seed
//! pipeline, read as the Kafka runtime reads a message (`codec::Decoding`: decoded as
//! the record type the stage asks for, then checked against its rules), against a
//! real schema registry (VIGIL_SCHEMA_REGISTRY_URL; scripts/fuzz.sh sets it up, and
//! the pipeline's schemas are registered here). The first byte picks the framing: raw
//! bytes as they came, or the rest behind a Confluent header carrying the id of one
//! of the pipeline's schemas, so the fuzzer reaches the Avro datum decoder at once.
//! A value is a record or a decode error (a dead letter); never a panic, and never a
//! "registry unreachable" error (that would make the member retry it for ever).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vigil_kafka::codec::{Codec, CodecError, Decoding};
use vigil_operators::SeedPipeline;
use vigil_stream::{Pipeline, Stage, StageVisitor};

struct Registry {
    codec: Codec,
    schema_ids: Vec<u32>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let url = std::env::var("VIGIL_SCHEMA_REGISTRY_URL").expect("set VIGIL_SCHEMA_REGISTRY_URL (scripts/fuzz.sh)");
        let codec = Codec::new(&url).expect("a codec");
        let topics = SeedPipeline::default().topology().topics();
        let registered = codec.register(&topics).expect("the pipeline's schemas registered");
        let schema_ids = registered.into_iter().map(|(_, id)| id).collect();
        Registry { codec, schema_ids }
    })
}

/// Reads one value on each input of each stage it visits.
struct ReadEverywhere<'a> {
    codec: &'a Codec,
    value: &'a [u8],
}

impl StageVisitor for ReadEverywhere<'_> {
    fn visit<S: Stage + Clone>(&mut self, stage: &S) {
        let topology = stage.topology();
        for (input, (topic, _)) in topology.inputs.iter().enumerate() {
            if let Err(CodecError::Registry { reason, .. }) = stage.read(input, Decoding::new(self.codec, topic, self.value)) {
                panic!("bad bytes on `{}` (stage {}) taken for a registry fault: {reason}", topic.name, topology.name);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&framing, rest)) = data.split_first() else { return };
    let Registry { codec, schema_ids } = registry();
    let framed;
    let value = match usize::from(framing) % (schema_ids.len() + 1) {
        0 => rest,
        i => {
            framed = [&[0u8][..], &schema_ids[i - 1].to_be_bytes(), rest].concat();
            &framed
        }
    };
    SeedPipeline::default().visit_stages(&mut ReadEverywhere { codec, value });
});
