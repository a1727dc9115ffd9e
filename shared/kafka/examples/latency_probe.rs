//! End-to-end latency of the Kafka services, for scripts/bench-kafka.sh: reads an
//! input topic and the output topic it feeds (read_committed, from the end), and for
//! each output record computes the time from its input record's production (the
//! input's Kafka timestamp) to the moment the output is readable, i.e. committed: its
//! reader of the outputs has each fetch answered as soon as records become readable.
//! Two hops too: payment → amount anomaly (join-enrich, then payment-anomalies), which
//! also holds the event-time wait of the amount rule (it scores payments in event-time
//! order, once the watermark has passed them); enriched → anomaly shows that hop alone.
//! Provisional anomalies (`[anomalies] provisional`) are measured apart: they do not wait.
//!
//! The wait is measured apart: the probe reads the watermark markers on
//! `enriched-payments` and combines them per partition as payment-anomalies' tasks do
//! (`UpstreamWatermarks`), so it sees when each payment's partition watermark passed
//! its event time, i.e. when the rule could first score it. A payment's wait runs from
//! its enriched record becoming readable to that marker becoming readable; what is
//! left of the two hops is their latency beyond the wait.
//!
//! Given the broker's GC log, the probe also lines each one-hop sample up with the
//! broker's collector pauses: how much of a hop's tail was produced just before a
//! pause, against how much of all its samples.
//!
//! cargo run --release -p vigil-kafka --example latency_probe -- SECONDS [BROKER_GC_LOG]
//! (the log written with `-Xlog:gc:file=BROKER_GC_LOG:timemillis`;
//! VIGIL_BOOTSTRAP_SERVERS and VIGIL_SCHEMA_REGISTRY_URL from the environment)

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apache_avro::types::Value;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use vigil_kafka::codec::Codec;
use vigil_kafka::core::markers::{self, UpstreamWatermarks};
use vigil_kafka::marker_headers;
use vigil_model::output::EnrichedPayment;
use vigil_model::topology::{DEVICE_EVENTS, DEVICE_EVENTS_ONTIME, ENRICHED_PAYMENTS, PAYMENTS};
use vigil_model::{DeviceEvent, Millis, Payment};
use vigil_stream::watermark::NO_WATERMARK;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The broker's stop-the-world pauses from its GC log (`-Xlog:gc:...:timemillis`
/// lines such as `[1796507132908ms] GC(0) Pause Young (Normal) ... 23.354ms`):
/// when each ended, epoch ms, and how long it took, ms.
fn broker_pauses(log: &str) -> Vec<(i64, f64)> {
    let pause = |line: &str| {
        let (stamp, rest) = line.strip_prefix('[')?.split_once("ms]")?;
        let took = rest.contains(" Pause ").then(|| rest.trim_end().rsplit_once(' '))??.1;
        Some((stamp.parse().ok()?, took.strip_suffix("ms")?.parse().ok()?))
    };
    let mut pauses: Vec<(i64, f64)> = log.lines().filter_map(pause).collect();
    pauses.sort_by_key(|&(end, _)| end);
    pauses
}

/// A record is behind a pause if one ended from 50 ms before it was produced to
/// 150 ms after: the pause stopped the broker while the record was on its way
/// (150 ms is about the longest a hop's p99 has been at this rate).
const BEHIND_PAUSE_MS: (i64, i64) = (50, 150);

/// How much of a hop's tail (its samples over the p99) is behind a broker pause,
/// against how much of all its samples; `samples`: (produced, latency), ms.
fn tail_behind_pauses(name: &str, samples: &[(i64, i64)], pauses: &[(i64, f64)]) {
    if samples.is_empty() {
        return println!("{name}: no samples");
    }
    let behind = |produced: i64| {
        let first = pauses.partition_point(|&(end, _)| end < produced - BEHIND_PAUSE_MS.0);
        pauses.get(first).is_some_and(|&(end, _)| end <= produced + BEHIND_PAUSE_MS.1)
    };
    let mut latencies: Vec<i64> = samples.iter().map(|&(_, l)| l).collect();
    latencies.sort_unstable();
    let p99 = percentile(&latencies, 0.99);
    // Each sample judged once: (samples over the p99, of them behind a pause, all behind).
    let (mut tail, mut tail_behind, mut all_behind) = (0usize, 0usize, 0usize);
    let mut away = Vec::new();
    for &(produced, latency) in samples {
        let is_behind = behind(produced);
        all_behind += usize::from(is_behind);
        if latency > p99 {
            tail += 1;
            tail_behind += usize::from(is_behind);
        }
        if !is_behind {
            away.push(latency);
        }
    }
    away.sort_unstable();
    let percent = |part: usize, whole: usize| 100.0 * part as f64 / whole.max(1) as f64;
    println!(
        "{name}: {:.0} % of the samples over its p99 ({p99} ms) were behind a broker pause, {:.0} % of all; \
         p99 of those not behind one {} ms",
        percent(tail_behind, tail),
        percent(all_behind, samples.len()),
        away.last().map_or(0, |_| percentile(&away, 0.99)),
    );
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

/// A read_committed reader of `topics` from their end, whose fetches the broker
/// answers once `min_bytes` are readable or after `wait_ms`.
fn reader(bootstrap: &str, topics: &[&str], min_bytes: &str, wait_ms: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("vigil-latency-{}-{}", std::process::id(), topics[0]))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "latest")
        .set("fetch.min.bytes", min_bytes)
        .set("fetch.wait.max.ms", wait_ms)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(topics).unwrap();
    consumer
}

/// Input record id → when it was produced (its Kafka timestamp). Only the timestamps
/// count, not when the probe reads them: its fetches wait for 64 KiB or 10 ms, since a
/// fetch for every few records of the generator's steady stream cost the broker more
/// CPU than the six services' fetches together.
fn read_inputs(bootstrap: &str, codec: &Codec, end: Instant) -> HashMap<String, i64> {
    let consumer = reader(bootstrap, &["payments", "device-events"], "65536", "10");
    let mut produced = HashMap::new();
    while Instant::now() < end {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else { continue };
        let Some(created) = m.timestamp().to_millis() else { continue };
        let payload = m.payload().unwrap_or_default();
        let id = match m.topic() {
            "payments" => codec.decode::<Payment>(&PAYMENTS, payload).map(|p| p.payment_id.to_string()),
            _ => codec.decode::<DeviceEvent>(&DEVICE_EVENTS, payload).map(|d| device_key(&d)),
        };
        if let Ok(id) = id {
            produced.insert(id, created);
        }
    }
    produced
}

fn device_key(d: &DeviceEvent) -> String {
    format!("{}@{}", d.device_id, d.event_ts)
}

/// When each output record became readable, as the probe saw it.
#[derive(Default)]
struct Outputs {
    /// Matched enriched payments: (payment id, seen).
    payments: Vec<(String, i64)>,
    /// Payment id → when its enriched record was seen.
    enriched: HashMap<String, i64>,
    /// On-time device events: (device key, seen).
    devices: Vec<(String, i64)>,
    /// Amount anomalies in event-time order (and their corrections): (payment id, seen).
    anomalies: Vec<(String, i64)>,
    /// Provisional amount anomalies (`[anomalies] provisional`): (payment id, seen).
    provisional: Vec<(String, i64)>,
    /// Payment id → when the marker that released it to the amount rule was seen.
    released: HashMap<String, i64>,
}

/// The outputs, read as a consumer with librdkafka's default `fetch.min.bytes` (1)
/// reads them: the broker answers a read_committed fetch once a commit makes records
/// readable (their last stable offset moves), so what is seen is when they became
/// readable, not when a fetch wait ran out. Transactional topics move only at their
/// writers' commits, a few dozen times a second, so these fetches cost little.
fn read_outputs(bootstrap: &str, codec: &Codec, end: Instant) -> Outputs {
    let consumer = reader(bootstrap, &["enriched-payments", "device-events-ontime", "payment-anomalies"], "1", "100");
    let mut releases = Releases::new(partitions(&consumer, "enriched-payments"));
    let mut out = Outputs::default();
    while Instant::now() < end {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else { continue };
        let seen = now_ms();
        if let Some(marker) = marker_headers::read(&m) {
            if m.topic() == "enriched-payments" {
                releases.marker(m.partition() as usize, marker, seen);
            }
            continue;
        }
        let payload = m.payload().unwrap_or_default();
        match m.topic() {
            "enriched-payments" => {
                if let Ok(e) = codec.decode::<EnrichedPayment>(&ENRICHED_PAYMENTS, payload) {
                    // An unmatched payment waits for its join window by design.
                    if !e.unmatched {
                        out.payments.push((e.payment_id.to_string(), seen));
                    }
                    out.enriched.insert(e.payment_id.to_string(), seen);
                    if e.customer_id.is_some() {
                        releases.payment(m.partition() as usize, e.payment_ts_ms, e.payment_id.to_string(), seen);
                    }
                }
            }
            "device-events-ontime" => {
                if let Ok(d) = codec.decode::<DeviceEvent>(&DEVICE_EVENTS_ONTIME, payload) {
                    out.devices.push((device_key(&d), seen));
                }
            }
            _ => {
                // Amount anomalies name their payment; velocity ones do not.
                let Ok(Value::Record(fields)) = codec.decode_value(payload) else { continue };
                let provisional = fields.iter().any(|(name, v)| name == "provisional" && *v == Value::Boolean(true));
                if let Some((_, Value::String(id))) = fields.iter().find(|(name, _)| name == "payment_id") {
                    let list = if provisional { &mut out.provisional } else { &mut out.anomalies };
                    list.push((id.clone(), seen));
                }
            }
        }
    }
    out.released = releases.released;
    out
}

fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let bootstrap = std::env::var("VIGIL_BOOTSTRAP_SERVERS").expect("VIGIL_BOOTSTRAP_SERVERS");
    let registry = std::env::var("VIGIL_SCHEMA_REGISTRY_URL").expect("VIGIL_SCHEMA_REGISTRY_URL");
    let end = Instant::now() + Duration::from_secs(seconds);
    // Two readers, so that the inputs' fetches do not hold back the outputs'; the
    // latencies are computed once both are done, whichever read a record first.
    let inputs = {
        let (bootstrap, registry) = (bootstrap.clone(), registry.clone());
        std::thread::spawn(move || read_inputs(&bootstrap, &Codec::new(&registry).unwrap(), end))
    };
    let out = read_outputs(&bootstrap, &Codec::new(&registry).unwrap(), end);
    let produced = inputs.join().expect("the input reader");
    // (produced, latency) of each output whose input the probe saw.
    let since_produced = |seen: &[(String, i64)]| -> Vec<(i64, i64)> {
        seen.iter().filter_map(|(id, s)| produced.get(id).map(|t| (*t, s - t))).collect()
    };
    let latencies = |samples: &[(i64, i64)]| samples.iter().map(|&(_, l)| l).collect();
    let one_hops = [
        ("payment -> enriched payment (join-enrich)", since_produced(&out.payments)),
        ("device event -> on-time event (device-router)", since_produced(&out.devices)),
    ];
    let (mut second_hop, mut beyond_wait, mut second_hop_beyond_wait) = (Vec::new(), Vec::new(), Vec::new());
    for (id, seen) in &out.anomalies {
        if let Some(e) = out.enriched.get(id) {
            second_hop.push(seen - e);
        }
        if let (Some(p), Some(e), Some(r)) = (produced.get(id), out.enriched.get(id), out.released.get(id)) {
            beyond_wait.push((e - p) + (seen - r));
            second_hop_beyond_wait.push(seen - r);
        }
    }
    let provisional_hop: Vec<i64> =
        out.provisional.iter().filter_map(|(id, seen)| out.enriched.get(id).map(|e| seen - e)).collect();
    // The wait of every payment the rule scored, not only the anomalies'.
    let waits = out.released.iter().filter_map(|(id, r)| out.enriched.get(id).map(|e| r - e)).collect();
    for (name, mut v) in [
        (one_hops[0].0, latencies(&one_hops[0].1)),
        (one_hops[1].0, latencies(&one_hops[1].1)),
        ("payment -> amount anomaly (two hops, event-time wait included)", latencies(&since_produced(&out.anomalies))),
        ("enriched payment -> amount anomaly (payment-anomalies, event-time wait included)", second_hop),
        ("event-time wait of the amount rule (enriched payment readable -> the marker that released it)", waits),
        ("payment -> provisional amount anomaly (two hops)", latencies(&since_produced(&out.provisional))),
        ("enriched payment -> provisional amount anomaly (payment-anomalies)", provisional_hop),
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
    if let Some(path) = std::env::args().nth(2) {
        let log =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read the broker's GC log {path}: {e}"));
        let pauses = broker_pauses(&log);
        let produced = one_hops.iter().flat_map(|(_, s)| s.iter().map(|&(t, _)| t));
        let (from, to) = produced.fold((i64::MAX, i64::MIN), |(a, b), t| (a.min(t), b.max(t)));
        let within: Vec<f64> =
            pauses.iter().filter(|&&(end, _)| (from..=to).contains(&end)).map(|&(_, ms)| ms).collect();
        println!(
            "the broker's pauses while the samples were produced ({:.0} s): {}, mean {:.1} ms, longest {:.1} ms",
            (to - from) as f64 / 1000.0,
            within.len(),
            within.iter().sum::<f64>() / within.len().max(1) as f64,
            within.iter().copied().fold(0.0, f64::max),
        );
        for (name, samples) in &one_hops {
            tail_behind_pauses(&format!("{name}, behind the broker's pauses"), samples, &pauses);
        }
    }
}
