//! Input as other teams' producers send it: record batches in every codec Kafka has,
//! values as Confluent-framed Avro or as plain JSON (as the seed's generator writes
//! its streams). Whatever the codec and the encoding, the services must give exactly
//! the embedded runtime's records, as for keyed, uncompressed Avro; and every topic
//! users read holds those records only (no watermark marker, no empty record). Needs
//! the broker and registry `scripts/test.sh` starts.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use support::{assert_same, reference, result_topics, send_line, Running, Stack, ONE_AT_A_TIME};
use vigil_datagen::Dataset;
use vigil_ingest::{Line, MergedInput};
use vigil_kafka::produce::{Encoding, InputProducer};
use vigil_model::topology::{Topic, DEAD_LETTERS};
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

/// Every topic users read (results, late side topics, dead letters), read raw as a
/// Kafka Connect sink reads it: how many records it holds, and how many of them have
/// no value.
fn records_and_empty_ones() -> BTreeMap<String, (u64, u64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", std::env::var("VIGIL_BOOTSTRAP_SERVERS").unwrap())
        .set("group.id", "vigil-test-raw-reader")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let read: Vec<&Topic> = result_topics().into_iter().chain([&DEAD_LETTERS]).collect();
    let mut tpl = TopicPartitionList::new();
    for topic in &read {
        for p in 0..4 {
            tpl.add_partition_offset(topic.name, p, Offset::Beginning).unwrap();
        }
    }
    consumer.assign(&tpl).unwrap();
    let mut counts: BTreeMap<String, (u64, u64)> = read.iter().map(|t| (t.name.to_string(), (0, 0))).collect();
    let mut ended = 0;
    while ended < tpl.count() {
        match consumer.poll(Duration::from_secs(10)).expect("the topics are read to their end") {
            Ok(m) => {
                let count = counts.get_mut(m.topic()).unwrap();
                count.0 += 1;
                count.1 += u64::from(m.payload().is_none());
            }
            Err(KafkaError::PartitionEOF(_)) => ended += 1,
            Err(e) => panic!("{e}"),
        }
    }
    counts
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
        for (topic, (records, empty)) in records_and_empty_ones() {
            assert!(records > 0 || topic.contains("late"), "{topic} holds records");
            assert_eq!(empty, 0, "{topic}, a topic users read, holds {empty} records without a value (markers?)");
        }
        assert_eq!(dead.len(), 4, "produced as {how:?}: the four planted bad lines and nothing else: {dead:#?}");
        assert_eq!(dead_letters, 4, "produced as {how:?}");
    }
}
