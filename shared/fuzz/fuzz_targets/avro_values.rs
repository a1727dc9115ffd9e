//! Any bytes as a record value on each stage's input topics, decoded as the stage
//! decodes them, against a real schema registry (VIGIL_SCHEMA_REGISTRY_URL, with
//! Vigil's schemas registered; scripts/fuzz.sh sets it up). The first byte picks the
//! framing: raw bytes as they came, or the rest behind a Confluent header carrying the
//! id of one of Vigil's schemas, so the fuzzer reaches the Avro datum decoder at once.
//! A value is a record or a decode error (a dead letter); never a panic, and never a
//! "registry unreachable" error (that would make the service retry it for ever).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vigil_kafka::codec::{Codec, CodecError};
use vigil_kafka::service::Service;
use vigil_kafka::stages::{
    DeviceAnalyticsService, DeviceRouterService, HealthMonitorService, JoinEnrichService, PaymentAnomaliesService,
    PaymentMetricsService,
};

struct Registry {
    codec: Codec,
    schema_ids: Vec<u32>,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let url = std::env::var("VIGIL_SCHEMA_REGISTRY_URL").expect("set VIGIL_SCHEMA_REGISTRY_URL (scripts/fuzz.sh)");
        let codec = Codec::new(&url).expect("a codec");
        let schema_ids = codec.register_all().expect("Vigil's schemas registered").into_iter().map(|(_, id)| id).collect();
        Registry { codec, schema_ids }
    })
}

fn decode_as<S: Service>(service: S, value: &[u8]) {
    for (topic, _) in service.spec().inputs {
        if let Err(CodecError::Registry { reason, .. }) = service.decode(&registry().codec, *topic, value) {
            panic!("bad bytes on {} taken for a registry fault: {reason}", topic.name);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&framing, rest)) = data.split_first() else { return };
    let ids = &registry().schema_ids;
    let framed;
    let value = match usize::from(framing) % (ids.len() + 1) {
        0 => rest,
        i => {
            framed = [&[0u8][..], &ids[i - 1].to_be_bytes(), rest].concat();
            &framed
        }
    };
    decode_as(JoinEnrichService, value);
    decode_as(PaymentMetricsService, value);
    decode_as(PaymentAnomaliesService, value);
    decode_as(DeviceRouterService, value);
    decode_as(DeviceAnalyticsService, value);
    decode_as(HealthMonitorService, value);
});
