//! What librdkafka says about a member's Kafka clients, in Prometheus form: every
//! `statistics.interval.ms` a client hands its context the statistics JSON
//! (librdkafka's STATISTICS.md), parsed, and [`ClientStats::record`] sets the
//! member's series from it. Per broker (round trip, requests queued and in flight,
//! bytes each way), per producer (records queued), per consumer (records fetched
//! and not yet read, the lag librdkafka sees, by topic). Labels: `stage`, `member`,
//! `client` (consumer, producer), `broker` (`host:port/id`), `topic`: bounded by the
//! brokers and the input topics, never a series per partition.
//!
//! `VIGIL_STATISTICS_INTERVAL_MS` sets the interval (0: no statistics, no series).
//! It is not a `VIGIL_KAFKA_…` variable: those are the clients' security settings
//! (`connection`), and nothing else is taken there.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;

/// How often a client reports its statistics, unless `VIGIL_STATISTICS_INTERVAL_MS`
/// says otherwise: as often as Prometheus scrapes the cluster (deploy/prometheus),
/// at a cost too small to measure (docs/decisions.md, 2026-12-07).
pub const DEFAULT_INTERVAL_MS: u64 = 5_000;
pub const INTERVAL_VAR: &str = "VIGIL_STATISTICS_INTERVAL_MS";

/// The statistics interval of this process's clients, in ms (0: off). A value that
/// is not a number is warned about once and the default taken.
pub fn interval_ms() -> u64 {
    static INTERVAL: OnceLock<u64> = OnceLock::new();
    *INTERVAL.get_or_init(|| match std::env::var(INTERVAL_VAR) {
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            tracing::warn!(%value, "{INTERVAL_VAR} is not a number of milliseconds; taking {DEFAULT_INTERVAL_MS}");
            DEFAULT_INTERVAL_MS
        }),
        Err(_) => DEFAULT_INTERVAL_MS,
    })
}

/// Asks a client for its statistics every [`interval_ms`]; `false` if they are off.
pub fn enable(config: &mut ClientConfig) -> bool {
    match interval_ms() {
        0 => false,
        ms => {
            config.set("statistics.interval.ms", ms.to_string());
            true
        }
    }
}

/// Which of a member's clients the statistics are of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientKind {
    Consumer,
    Producer,
}

impl ClientKind {
    pub fn label(self) -> &'static str {
        match self {
            ClientKind::Consumer => "consumer",
            ClientKind::Producer => "producer",
        }
    }
}

/// The metric families of every client of a process, registered once.
pub struct ClientFamilies {
    rtt_avg: GaugeVec,
    rtt_p99: GaugeVec,
    outbuf: IntGaugeVec,
    waitresp: IntGaugeVec,
    connected: IntGaugeVec,
    tx_bytes: IntCounterVec,
    rx_bytes: IntCounterVec,
    produce_queue: IntGaugeVec,
    produce_queue_bytes: IntGaugeVec,
    fetch_queue: IntGaugeVec,
    fetch_queue_bytes: IntGaugeVec,
    lag: IntGaugeVec,
    /// Which client owns a member's series (the newest one made): a client dropped
    /// after its member made a new one leaves the new one's series alone.
    owners: Mutex<HashMap<(String, String, ClientKind), u64>>,
}

const BROKER: [&str; 4] = ["stage", "member", "client", "broker"];
const MEMBER: [&str; 2] = ["stage", "member"];

impl ClientFamilies {
    pub fn register(registry: &Registry) -> Arc<ClientFamilies> {
        let opts = |name: &str, help: &str| Opts::new(name, help);
        let register = |c: Box<dyn prometheus::core::Collector>| registry.register(c).expect("unique metric");
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            let g = GaugeVec::new(opts(name, help), labels).expect("valid metric");
            register(Box::new(g.clone()));
            g
        };
        let int_gauges = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(opts(name, help), labels).expect("valid metric");
            register(Box::new(g.clone()));
            g
        };
        let counters = |name: &str, help: &str| {
            let c = IntCounterVec::new(opts(name, help), &BROKER).expect("valid metric");
            register(Box::new(c.clone()));
            c
        };
        Arc::new(ClientFamilies {
            rtt_avg: gauges(
                "kafka_broker_rtt_avg_seconds",
                "Mean round trip of the client's requests to the broker over the last statistics interval",
                &BROKER,
            ),
            rtt_p99: gauges(
                "kafka_broker_rtt_p99_seconds",
                "99th percentile round trip of the client's requests to the broker over the last statistics interval",
                &BROKER,
            ),
            outbuf: int_gauges(
                "kafka_broker_outbuf_requests",
                "Requests the client has queued for the broker, not sent yet",
                &BROKER,
            ),
            waitresp: int_gauges(
                "kafka_broker_waitresp_requests",
                "Requests the client has sent the broker and waits for an answer to",
                &BROKER,
            ),
            connected: int_gauges(
                "kafka_broker_connected",
                "1 while the client's connection to the broker is up",
                &BROKER,
            ),
            tx_bytes: counters("kafka_broker_tx_bytes_total", "Bytes the client sent to the broker"),
            rx_bytes: counters("kafka_broker_rx_bytes_total", "Bytes the client received from the broker"),
            produce_queue: int_gauges(
                "kafka_producer_queue_records",
                "Records in the member's producer queue, not yet acknowledged by a broker",
                &MEMBER,
            ),
            produce_queue_bytes: int_gauges(
                "kafka_producer_queue_bytes",
                "Bytes of the records in the member's producer queue",
                &MEMBER,
            ),
            fetch_queue: int_gauges(
                "kafka_consumer_fetch_queue_records",
                "Records the member's consumer fetched and the member has not read yet (its queue, all partitions)",
                &MEMBER,
            ),
            fetch_queue_bytes: int_gauges(
                "kafka_consumer_fetch_queue_bytes",
                "Bytes of the records the member's consumer fetched and has not handed out yet",
                &MEMBER,
            ),
            lag: int_gauges(
                "kafka_consumer_lag_records",
                "Records on the broker past the member's read position, by topic, summed over the partitions it \
                 has read from, as librdkafka sees it (consumer_lag_stored)",
                &["stage", "member", "topic"],
            ),
            owners: Mutex::default(),
        })
    }
}

/// The series of one client of a member, and what it must remember between two
/// reports: the byte counters librdkafka keeps since the client started, the brokers
/// and topics it has series for (to drop those that went away).
pub struct ClientStats {
    families: Arc<ClientFamilies>,
    stage: String,
    member: String,
    kind: ClientKind,
    id: u64,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// Broker label → bytes sent and received as last reported.
    brokers: BTreeMap<String, (u64, u64)>,
    topics: BTreeSet<String>,
}

impl ClientStats {
    pub fn new(families: &Arc<ClientFamilies>, stage: &str, member: &str, kind: ClientKind) -> ClientStats {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        families.owners.lock().expect("owners").insert((stage.to_string(), member.to_string(), kind), id);
        ClientStats {
            families: families.clone(),
            stage: stage.to_string(),
            member: member.to_string(),
            kind,
            id,
            seen: Mutex::default(),
        }
    }

    /// Sets the client's series from one statistics report.
    pub fn record(&self, stats: &Statistics) {
        let f = &*self.families;
        let (stage, member, client) = (self.stage.as_str(), self.member.as_str(), self.kind.label());
        let mut seen = self.seen.lock().expect("client stats");
        let mut brokers = BTreeMap::new();
        // Learned brokers only: not the bootstrap servers' entries (node id -1),
        // which the learned ones replace, nor librdkafka's internal one.
        for broker in stats.brokers.values().filter(|b| b.nodeid >= 0) {
            let name = format!("{}/{}", broker.nodename, broker.nodeid);
            let l = [stage, member, client, name.as_str()];
            match broker.rtt.as_ref().filter(|w| w.cnt > 0) {
                Some(rtt) => {
                    f.rtt_avg.with_label_values(&l).set(rtt.avg as f64 / 1e6);
                    f.rtt_p99.with_label_values(&l).set(rtt.p99 as f64 / 1e6);
                }
                // No request in the interval: no round trip to show.
                None => {
                    let _ = f.rtt_avg.remove_label_values(&l);
                    let _ = f.rtt_p99.remove_label_values(&l);
                }
            }
            f.outbuf.with_label_values(&l).set(broker.outbuf_cnt);
            f.waitresp.with_label_values(&l).set(broker.waitresp_cnt);
            f.connected.with_label_values(&l).set(i64::from(broker.state == "UP"));
            // librdkafka counts since the client started; a count lower than the
            // last is a client of the same name that started again.
            let (tx, rx) = seen.brokers.get(&name).copied().unwrap_or_default();
            let grown = |now: u64, before: u64| if now >= before { now - before } else { now };
            f.tx_bytes.with_label_values(&l).inc_by(grown(broker.txbytes, tx));
            f.rx_bytes.with_label_values(&l).inc_by(grown(broker.rxbytes, rx));
            brokers.insert(name, (broker.txbytes, broker.rxbytes));
        }
        for gone in seen.brokers.keys().filter(|b| !brokers.contains_key(*b)) {
            self.remove_broker(gone);
        }
        seen.brokers = brokers;
        let m = [stage, member];
        match self.kind {
            ClientKind::Producer => {
                f.produce_queue.with_label_values(&m).set(stats.msg_cnt as i64);
                f.produce_queue_bytes.with_label_values(&m).set(stats.msg_size as i64);
            }
            ClientKind::Consumer => {
                let (mut records, mut bytes) = (0, 0);
                let mut lag: BTreeMap<&str, i64> = BTreeMap::new();
                for (topic, t) in &stats.topics {
                    // Partition -1 is librdkafka's "unassigned" queue of a topic.
                    for p in t.partitions.values().filter(|p| p.partition >= 0) {
                        // A partition's fetch queue forwards to the consumer's one
                        // queue, and each partition reports that queue's length: the
                        // largest is the consumer's, a sum would count it again for
                        // every partition.
                        records = records.max(p.fetchq_cnt);
                        bytes = bytes.max(p.fetchq_size);
                        // Past the position the member read to (offsets stored
                        // as records are handed out); the group's committed offset
                        // librdkafka does not learn, as Vigil commits in transactions.
                        // -1: not known (nothing read from the partition yet).
                        let behind = if p.consumer_lag_stored >= 0 { p.consumer_lag_stored } else { p.consumer_lag };
                        if behind >= 0 {
                            *lag.entry(topic).or_default() += behind;
                        }
                    }
                }
                f.fetch_queue.with_label_values(&m).set(records);
                f.fetch_queue_bytes.with_label_values(&m).set(bytes as i64);
                for (topic, n) in &lag {
                    f.lag.with_label_values(&[stage, member, topic]).set(*n);
                }
                for gone in seen.topics.iter().filter(|t| !lag.contains_key(t.as_str())) {
                    let _ = f.lag.remove_label_values(&[stage, member, gone]);
                }
                seen.topics = lag.keys().map(|t| t.to_string()).collect();
            }
        }
    }

    fn remove_broker(&self, broker: &str) {
        let f = &*self.families;
        let l = [self.stage.as_str(), self.member.as_str(), self.kind.label(), broker];
        let _ = f.rtt_avg.remove_label_values(&l);
        let _ = f.rtt_p99.remove_label_values(&l);
        let _ = f.outbuf.remove_label_values(&l);
        let _ = f.waitresp.remove_label_values(&l);
        let _ = f.connected.remove_label_values(&l);
        let _ = f.tx_bytes.remove_label_values(&l);
        let _ = f.rx_bytes.remove_label_values(&l);
    }
}

/// A client that goes (its member stopped or started over) takes its series with
/// it, unless its member has made a new client of the same kind since.
impl Drop for ClientStats {
    fn drop(&mut self) {
        let key = (self.stage.clone(), self.member.clone(), self.kind);
        let mut owners = self.families.owners.lock().expect("owners");
        if owners.get(&key) != Some(&self.id) {
            return;
        }
        owners.remove(&key);
        drop(owners);
        let seen = std::mem::take(&mut *self.seen.lock().expect("client stats"));
        for broker in seen.brokers.keys() {
            self.remove_broker(broker);
        }
        let f = &*self.families;
        let m = [self.stage.as_str(), self.member.as_str()];
        match self.kind {
            ClientKind::Producer => {
                let _ = f.produce_queue.remove_label_values(&m);
                let _ = f.produce_queue_bytes.remove_label_values(&m);
            }
            ClientKind::Consumer => {
                let _ = f.fetch_queue.remove_label_values(&m);
                let _ = f.fetch_queue_bytes.remove_label_values(&m);
                for topic in &seen.topics {
                    let _ = f.lag.remove_label_values(&[m[0], m[1], topic]);
                }
            }
        }
    }
}

/// The context of a producer that has nothing to do but report its statistics (its
/// deliveries go unreported, as with rdkafka's `DefaultProducerContext`).
#[derive(Default)]
pub struct StatsContext {
    pub stats: Option<ClientStats>,
}

impl ClientContext for StatsContext {
    fn stats(&self, statistics: Statistics) {
        if let Some(stats) = &self.stats {
            stats.record(&statistics);
        }
    }
}

impl ProducerContext for StatsContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricsRegistry;

    /// Statistics reports recorded against a local Kafka 4 broker, from clients set
    /// up as a join-enrich member's (client id, transactional id, group, isolation,
    /// fetch settings; librdkafka 2.16 through confluent-kafka, the same JSON as
    /// 2.12's plus a few fields). The consumer had read 1,505 of its 18,000 input
    /// records, from one partition (`payments` 3); the producer was mid-way through
    /// a large transaction.
    const CONSUMER: &str = include_str!("../tests/data/librdkafka-statistics-consumer.json");
    const PRODUCER: &str = include_str!("../tests/data/librdkafka-statistics-producer.json");

    fn report(json: &str) -> Statistics {
        serde_json::from_str(json).expect("librdkafka's statistics JSON")
    }

    /// The Prometheus lines of `text` that start with `prefix`.
    fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn a_statistics_report_becomes_the_members_client_series() {
        let registry = MetricsRegistry::new("taskmanager", &[("taskmanager", "tm-1")]);
        let member = registry.member("join-enrich", "tm-1-0");
        let consumer = member.client_stats(ClientKind::Consumer);
        let producer = member.client_stats(ClientKind::Producer);
        consumer.record(&report(CONSUMER));
        producer.record(&report(PRODUCER));
        let text = registry.render();
        let broker = |client: &str| {
            format!(
                r#"{{broker="127.0.0.1:18225/1",client="{client}",member="tm-1-0",stage="join-enrich",taskmanager="tm-1"}}"#
            )
        };
        let m = r#"{member="tm-1-0",stage="join-enrich",taskmanager="tm-1"}"#;
        let expected = [
            format!("vigil_kafka_broker_rtt_avg_seconds{} 0.003351", broker("consumer")),
            format!("vigil_kafka_broker_rtt_p99_seconds{} 0.007135", broker("consumer")),
            format!("vigil_kafka_broker_rtt_avg_seconds{} 0.040456", broker("producer")),
            format!("vigil_kafka_broker_rtt_p99_seconds{} 0.227327", broker("producer")),
            format!("vigil_kafka_broker_outbuf_requests{} 0", broker("producer")),
            format!("vigil_kafka_broker_waitresp_requests{} 5", broker("producer")),
            format!("vigil_kafka_broker_connected{} 1", broker("consumer")),
            format!("vigil_kafka_broker_tx_bytes_total{} 1400", broker("consumer")),
            format!("vigil_kafka_broker_rx_bytes_total{} 729519", broker("consumer")),
            format!("vigil_kafka_broker_tx_bytes_total{} 613194", broker("producer")),
            format!("vigil_kafka_producer_queue_records{m} 21308"),
            format!("vigil_kafka_producer_queue_bytes{m} 2556960"),
            // The consumer's queue, which each of its eight partitions reports.
            format!("vigil_kafka_consumer_fetch_queue_records{m} 16553"),
            format!("vigil_kafka_consumer_fetch_queue_bytes{m} 1979520"),
            // (The registry writes constant labels last.)
            r#"vigil_kafka_consumer_lag_records{member="tm-1-0",stage="join-enrich",topic="payments",taskmanager="tm-1"} 8627"#.to_string(),
        ];
        for line in &expected {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // Learned brokers only: not the coordinators' logical entries (node id -1).
        assert_eq!(lines(&text, "vigil_kafka_broker_rtt_avg_seconds{").len(), 2, "{text}");
        // Nothing read from `orders` yet: its lag is not known, and not shown as 0.
        assert!(!text.contains(r#"topic="orders""#), "{text}");
        // No series per partition.
        assert!(!text.contains("partition="), "{text}");
    }

    #[test]
    fn byte_counters_grow_by_what_librdkafka_added_and_a_client_takes_its_series_when_it_goes() {
        let registry = MetricsRegistry::new("join-enrich", &[]);
        let member = registry.member("join-enrich", "0");
        let consumer = member.client_stats(ClientKind::Consumer);
        let mut stats = report(CONSUMER);
        consumer.record(&stats);
        for broker in stats.brokers.values_mut() {
            broker.txbytes += 100;
        }
        consumer.record(&stats);
        let tx = r#"vigil_kafka_broker_tx_bytes_total{broker="127.0.0.1:18225/1",client="consumer",member="0",stage="join-enrich"}"#;
        assert!(registry.render().contains(&format!("{tx} 1500")), "{}", registry.render());
        // librdkafka's counts start again (a client of the same name made anew).
        for broker in stats.brokers.values_mut() {
            broker.txbytes = 40;
        }
        consumer.record(&stats);
        assert!(registry.render().contains(&format!("{tx} 1540")), "{}", registry.render());
        // A broker that leaves the report leaves the metrics.
        stats.brokers.retain(|_, b| b.nodeid < 0);
        consumer.record(&stats);
        assert!(lines(&registry.render(), "vigil_kafka_broker_").is_empty(), "{}", registry.render());
        drop(consumer);
        assert!(lines(&registry.render(), "vigil_kafka_").is_empty(), "{}", registry.render());
    }

    #[test]
    fn an_old_client_dropped_after_its_replacement_leaves_the_replacements_series() {
        let registry = MetricsRegistry::new("join-enrich", &[]);
        let member = registry.member("join-enrich", "0");
        let old = member.client_stats(ClientKind::Producer);
        old.record(&report(PRODUCER));
        let new = member.client_stats(ClientKind::Producer);
        new.record(&report(PRODUCER));
        drop(old);
        let text = registry.render();
        assert_eq!(lines(&text, "vigil_kafka_producer_queue_records{").len(), 1, "{text}");
        assert_eq!(lines(&text, "vigil_kafka_broker_rtt_avg_seconds{").len(), 1, "{text}");
        drop(new);
        assert!(lines(&registry.render(), "vigil_kafka_").is_empty(), "{}", registry.render());
    }
}
