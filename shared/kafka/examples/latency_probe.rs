//! End-to-end latency of the Kafka services, for scripts/bench-kafka.sh: reads an
//! input topic and the output topic it feeds (read_committed, from the end), and for
//! each output record computes the time from its input record's production (the
//! input's Kafka timestamp) to the moment the output is readable, i.e. committed.
//! Two hops too: payment → amount anomaly (join-enrich, then payment-anomalies), which
//! also holds the event-time wait of the amount rule (it scores payments in event-time
//! order, once the watermark has passed them); enriched → anomaly shows that hop alone.
//!
//! The wait is measured apart: the probe reads the watermark markers on
//! `enriched-payments` and combines them per partition as payment-anomalies' tasks do
//! (`UpstreamWatermarks`), so it sees when each payment's partition watermark passed
//! its event time, i.e. when the rule could first score it. A payment's wait runs from
//! its enriched record becoming readable to that marker becoming readable; what is
//! left of the two hops is their latency beyond the wait.
//!
//! cargo run --release -p vigil-kafka --example latency_probe -- SECONDS
//! (VIGIL_BOOTSTRAP_SERVERS and VIGIL_SCHEMA_REGISTRY_URL from the environment)

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apache_avro::types::Value;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use vigil_kafka::codec::Codec;
use vigil_kafka::markers::{self, UpstreamWatermarks};
use vigil_model::output::EnrichedPayment;
use vigil_model::{DeviceEvent, Millis, Payment};
use vigil_stream::watermark::NO_WATERMARK;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// When payment-anomalies could first score each enriched payment: the partition
/// watermark its tasks compute from join-enrich's markers, followed as they read them.
struct Releases {
    upstream: UpstreamWatermarks,
    /// Per partition, the payments its watermark has not passed yet: (event time, id).
    waiting: Vec<BTreeSet<(Millis, String)>>,
    /// Payment id → when the marker that released it became readable.
    released: HashMap<String, i64>,
}

impl Releases {
    fn new(partitions: u32) -> Self {
        Releases {
            // One writing task per partition, as in the runtime (`reset_clocks`).
            upstream: UpstreamWatermarks::new(partitions, partitions),
            waiting: vec![BTreeSet::new(); partitions as usize],
            released: HashMap::new(),
        }
    }

    /// Payments read before the probe has heard every writer of their partition are
    /// left out: their wait would be the probe's own start.
    fn payment(&mut self, partition: usize, event_ts: Millis, id: String, seen: i64) {
        if self.upstream.watermark(partition).is_some_and(|w| w != NO_WATERMARK) {
            self.waiting[partition].insert((event_ts, id));
            self.release(partition, seen);
        }
    }

    fn marker(&mut self, partition: usize, marker: markers::Marker, seen: i64) {
        if marker.task.is_some() {
            self.upstream.update(partition, marker);
            self.release(partition, seen);
        }
    }

    /// The rule scores a payment once its partition's watermark is past its event
    /// time (`EventTimeBuffer::pop_before`).
    fn release(&mut self, partition: usize, seen: i64) {
        let Some(watermark) = self.upstream.watermark(partition) else { return };
        let waiting = &mut self.waiting[partition];
        while waiting.first().is_some_and(|(ts, _)| *ts < watermark) {
            let (_, id) = waiting.pop_first().expect("looked at");
            self.released.insert(id, seen);
        }
    }
}

fn partitions(consumer: &BaseConsumer, topic: &str) -> u32 {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("topic metadata");
    metadata.topics().first().map_or(0, |t| t.partitions().len() as u32).max(1)
}

fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let bootstrap = std::env::var("VIGIL_BOOTSTRAP_SERVERS").expect("VIGIL_BOOTSTRAP_SERVERS");
    let codec = Codec::new(&std::env::var("VIGIL_SCHEMA_REGISTRY_URL").expect("VIGIL_SCHEMA_REGISTRY_URL")).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", format!("vigil-latency-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "latest")
        // See records at most 10 ms after they are committed, not up to 500 ms later;
        // and not in a fetch for every few records, which cost the broker more CPU
        // than the six services' fetches together.
        .set("fetch.min.bytes", "65536")
        .set("fetch.wait.max.ms", "10")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer
        .subscribe(&["payments", "enriched-payments", "device-events", "device-events-ontime", "payment-anomalies"])
        .unwrap();
    // Input records by id, with the time they were produced; enriched payments by id,
    // with the time they became readable.
    let mut produced: HashMap<String, i64> = HashMap::new();
    let mut enriched: HashMap<String, i64> = HashMap::new();
    let mut releases = Releases::new(partitions(&consumer, "enriched-payments"));
    let (mut payments, mut devices, mut anomalies, mut second_hop) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut waits, mut beyond_wait, mut second_hop_beyond_wait) = (Vec::new(), Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else { continue };
        let seen = now_ms();
        if let Some(marker) = markers::read(&m) {
            if m.topic() == "enriched-payments" {
                releases.marker(m.partition() as usize, marker, seen);
            }
            continue;
        }
        let created = m.timestamp().to_millis().unwrap_or(seen);
        let payload = m.payload().unwrap_or_default();
        match m.topic() {
            "payments" => {
                if let Ok(p) = codec.decode::<Payment>(payload) {
                    produced.insert(p.payment_id.to_string(), created);
                }
            }
            "device-events" => {
                if let Ok(d) = codec.decode::<DeviceEvent>(payload) {
                    produced.insert(format!("{}@{}", d.device_id, d.event_ts), created);
                }
            }
            "enriched-payments" => {
                if let Ok(e) = codec.decode::<EnrichedPayment>(payload) {
                    // An unmatched payment waits for its join window by design.
                    if let (false, Some(t)) = (e.unmatched, produced.get(e.payment_id.as_str())) {
                        payments.push(seen - t);
                    }
                    enriched.insert(e.payment_id.to_string(), seen);
                    if e.customer_id.is_some() {
                        releases.payment(m.partition() as usize, e.payment_ts_ms, e.payment_id.to_string(), seen);
                    }
                }
            }
            "device-events-ontime" => {
                if let Ok(d) = codec.decode::<DeviceEvent>(payload) {
                    if let Some(t) = produced.get(&format!("{}@{}", d.device_id, d.event_ts)) {
                        devices.push(seen - t);
                    }
                }
            }
            "payment-anomalies" => {
                // Amount anomalies name their payment; velocity ones do not.
                let Ok(Value::Record(fields)) = codec.decode_value(payload) else { continue };
                let Some((_, Value::String(id))) = fields.iter().find(|(name, _)| name == "payment_id") else {
                    continue;
                };
                if let Some(t) = produced.get(id) {
                    anomalies.push(seen - t);
                }
                if let Some(t) = enriched.get(id) {
                    second_hop.push(seen - t);
                }
                if let (Some(p), Some(e), Some(r)) = (produced.get(id), enriched.get(id), releases.released.get(id)) {
                    beyond_wait.push((e - p) + (seen - r));
                    second_hop_beyond_wait.push(seen - r);
                }
            }
            _ => {}
        }
    }
    // The wait of every payment the rule scored, not only the anomalies'.
    for (id, r) in &releases.released {
        if let Some(e) = enriched.get(id) {
            waits.push(r - e);
        }
    }
    for (name, mut v) in [
        ("payment -> enriched payment (join-enrich)", payments),
        ("device event -> on-time event (device-router)", devices),
        ("payment -> amount anomaly (two hops, event-time wait included)", anomalies),
        ("enriched payment -> amount anomaly (payment-anomalies, event-time wait included)", second_hop),
        ("event-time wait of the amount rule (enriched payment readable -> the marker that released it)", waits),
        ("payment -> amount anomaly beyond the event-time wait", beyond_wait),
        ("enriched payment -> amount anomaly beyond the event-time wait", second_hop_beyond_wait),
    ] {
        if v.is_empty() {
            println!("{name}: no samples");
            continue;
        }
        v.sort_unstable();
        println!(
            "{name}: {} samples, latency p50 {} ms, p99 {} ms, max {} ms",
            v.len(),
            percentile(&v, 0.50),
            percentile(&v, 0.99),
            v[v.len() - 1]
        );
    }
}
