//! Input as other teams' producers send it: record batches in every codec Kafka has,
//! values as Confluent-framed Avro or as plain JSON (as the seed's generator writes
//! its streams). Whatever the codec and the encoding, the services must give exactly
//! the embedded runtime's records, as for keyed, uncompressed Avro. Needs the broker
//! and registry `scripts/test.sh` starts.

mod support;

use std::time::Duration;

use support::{assert_same, reference, send_line, Running, Stack, ONE_AT_A_TIME};
use vigil_datagen::Dataset;
use vigil_ingest::{Line, MergedInput};
use vigil_kafka::produce::{Encoding, InputProducer};
use vigil_model::InputRecord;

const RUN_PREFIX: &str = "enc-";

/// How one stream is produced: its values' encoding and its batches' codec.
type Produced = (Encoding, &'static str);

/// Produces the planted dataset with orders, payments and device events each written
/// as `how` says, in the dataset's order, then ends every input.
fn send_planted(stack: &Stack, how: [Produced; 3]) {
    let producer = |(encoding, codec): Produced| stack.producer().encoded(encoding).compressed(codec).unwrap();
    let [orders, payments, devices] = how.map(producer);
    for line in MergedInput::planted(1, 7).map(Result::unwrap) {
        let stream = match &line {
            Line::Record(InputRecord::Order(_)) => &orders,
            Line::Record(InputRecord::Payment(_)) => &payments,
            Line::Record(InputRecord::Device(_)) => &devices,
            Line::Dead(d) if d.source == "orders" => &orders,
            Line::Dead(d) if d.source == "payments" => &payments,
            Line::Dead(_) => &devices,
        };
        send_line(stream, &line);
    }
    let all: [&InputProducer; 3] = [&orders, &payments, &devices];
    all.iter().for_each(|p| p.flush().unwrap());
    orders.finish().unwrap();
    orders.flush().unwrap();
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn input_in_every_codec_as_avro_or_plain_json_gives_the_embedded_result() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let expected = reference(Dataset::planted(1, 7));
    // Every codec on some stream, and each stream once as Avro and once as JSON.
    let runs: [[Produced; 3]; 2] = [
        [(Encoding::Avro, "gzip"), (Encoding::Json, "snappy"), (Encoding::Json, "zstd")],
        [(Encoding::Json, "zstd"), (Encoding::Avro, "lz4"), (Encoding::Avro, "gzip")],
    ];
    for how in runs {
        let stack = Stack::fresh(RUN_PREFIX);
        let services: Vec<Running> = stack.spawn_all();
        send_planted(&stack, how);
        let (got, dead) = stack.wait_for(&expected, Duration::from_secs(90));
        let dead_letters: u64 = services.iter().map(|s| s.metric("vigil_dead_letters_total")).sum();
        drop(services);
        assert_same(&got, &expected, &format!("produced as {how:?}: Kafka output differs from the embedded runtime"));
        assert_eq!(dead.len(), 4, "produced as {how:?}: the four planted bad lines and nothing else: {dead:#?}");
        assert_eq!(dead_letters, 4, "produced as {how:?}");
    }
}
