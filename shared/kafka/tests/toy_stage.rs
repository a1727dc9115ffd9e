//! A seventh stage, defined here through its definition alone — revenue per country
//! of the enriched payments, in tumbling windows — runs in both runtimes and gives
//! the same records: in the embedded runtime beside the seed's six stages, and on
//! Kafka as one more member reading the seed services' `enriched-payments`.
//!
//! The Kafka test needs a broker and a schema registry (`scripts/test.sh`).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use support::{Stack, ONE_AT_A_TIME, PARTITIONS};
use vigil_datagen::Dataset;
use vigil_ingest::MergedInput;
use vigil_kafka::codec::Codec;
use vigil_kafka::metrics::MetricsRegistry;
use vigil_kafka::observe::Health;
use vigil_kafka::services::services;
use vigil_kafka::status::MemberStatus;
use vigil_kafka::supervise::Supervisor;
use vigil_kafka::{marker_headers, runner, tail, topics};
use vigil_model::output::EnrichedPayment;
use vigil_model::topology::{EventTime, StageTopology, Topic, ENRICHED_PAYMENTS};
use vigil_model::{Config, Millis, Record, Text};
use vigil_operators::stages::{
    DeviceAnalyticsStage, DeviceRouterStage, HealthMonitorStage, JoinEnrichStage, PaymentAnomaliesStage,
    PaymentMetricsStage,
};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::stage::{In, Out};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::window::{Aggregate, KeyedWindows, SlidingWindows, WindowResult};
use vigil_stream::{pipeline, Operator, Pipeline, ReadRecord, Stage, WriteRecord};

/// The seed's six stages and the toy, upstream first.
type WithRevenue = pipeline![
    JoinEnrichStage,
    PaymentMetricsStage,
    PaymentAnomaliesStage,
    DeviceRouterStage,
    DeviceAnalyticsStage,
    HealthMonitorStage,
    RevenueByCountryStage
];

static REVENUE_BY_COUNTRY: Topic = Topic::new("revenue-by-country", "country", Some("REVENUE"), SCHEMA);

const SCHEMA: &str = r#"{"type": "record", "name": "RevenueByCountry", "namespace": "dev.vigil.test", "fields": [
    {"name": "record_type", "type": "string"},
    {"name": "country", "type": "string"},
    {"name": "window_start_ms", "type": "long"},
    {"name": "window_end_ms", "type": "long"},
    {"name": "payments", "type": "long"},
    {"name": "revenue", "type": "double"}]}"#;

/// One country's revenue in one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Revenue {
    record_type: &'static str,
    country: Text,
    window_start_ms: Millis,
    window_end_ms: Millis,
    payments: i64,
    revenue: f64,
}

impl Record for Revenue {}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Totals {
    payments: i64,
    cents: i64,
}

impl Aggregate for Totals {
    fn merge(&mut self, other: &Self) {
        self.payments += other.payments;
        self.cents += other.cents;
    }
}

/// The operator: a tumbling window per country over every matched payment.
struct RevenueByCountry {
    watermark: Millis,
    windows: KeyedWindows<Text, Totals>,
    fired: Vec<WindowResult<Text, Totals>>,
    written: Scalar,
}

impl Operator for RevenueByCountry {
    type In = Arc<EnrichedPayment>;
    type Out = Revenue;

    fn on_record(&mut self, p: Arc<EnrichedPayment>, out: &mut Vec<Revenue>) {
        let Some(country) = &p.country else { return };
        let cents = (p.paid_amount * 100.0).round() as i64;
        let add = |t: &mut Totals| {
            t.payments += 1;
            t.cents += cents;
        };
        // A payment after its window closed counts nowhere here; the seed's stages
        // already send such payments to the late side output.
        let _ = self.windows.add(country, p.payment_ts_ms, self.watermark, add, &mut self.fired);
        self.emit(out);
    }

    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<Revenue>) {
        self.watermark = self.watermark.max(watermark);
        self.windows.advance(self.watermark, &mut self.fired);
        self.emit(out);
    }

    fn output_watermark(&self) -> Millis {
        self.watermark
    }
}

impl RevenueByCountry {
    fn emit(&mut self, out: &mut Vec<Revenue>) {
        out.extend(self.fired.drain(..).map(|r| Revenue {
            record_type: "revenue_by_country",
            country: r.key,
            window_start_ms: r.window.start,
            window_end_ms: r.window.end,
            payments: r.value.payments,
            revenue: r.value.cents as f64 / 100.0,
        }));
    }
}

const WINDOWS: u8 = 1;

impl Stateful for RevenueByCountry {
    fn track_changes(&mut self) {
        self.windows.track_changes();
    }

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        self.written.write_if_changed(meta_key(), &self.watermark, out);
        self.windows.drain_changes(WINDOWS, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?, value) {
            ((META, _), Some(bytes)) => {
                self.watermark = decode_value(bytes)?;
                self.written.restored(bytes);
                Ok(())
            }
            ((WINDOWS, rest), value) => self.windows.restore_entry(rest, value),
            ((ns, _), _) => Err(StateError::Namespace(ns)),
        }
    }

    fn finish_restore(&mut self) {
        self.windows.finish_restore();
    }

    fn live_entries(&self) -> usize {
        self.windows.key_count()
    }
}

/// The toy stage's definition: everything a runtime needs of it.
#[derive(Debug, Clone, Copy, Default)]
struct RevenueByCountryStage;

impl Stage for RevenueByCountryStage {
    type Op = RevenueByCountry;

    fn topology(&self) -> StageTopology {
        const TOPOLOGY: StageTopology = StageTopology {
            name: "revenue-by-country",
            global: true,
            inputs: &[(&ENRICHED_PAYMENTS, EventTime::Upstream)],
            outputs: &[&REVENUE_BY_COUNTRY],
            watermarked: &[],
        };
        TOPOLOGY
    }

    fn operator(&self, config: &Config) -> RevenueByCountry {
        let size = config.payments.metrics_window_seconds as Millis * 1000;
        RevenueByCountry {
            watermark: NO_WATERMARK,
            windows: KeyedWindows::new(SlidingWindows::tumbling(size), 0),
            fired: Vec::new(),
            written: Scalar::default(),
        }
    }

    fn read<R: ReadRecord>(&self, _: usize, record: R) -> Result<In<Self>, R::Error> {
        record.read()
    }

    fn partition_key<'a>(&self, payment: &'a In<Self>) -> &'a str {
        payment.key()
    }

    fn event_time(&self, payment: &In<Self>) -> Millis {
        payment.payment_ts_ms
    }

    fn write<W: WriteRecord>(&self, revenue: Out<Self>, to: W) -> W::Written {
        to.write(&REVENUE_BY_COUNTRY, revenue.country.clone(), revenue)
    }
}

/// The toy's lines the embedded runtime gives on the planted dataset, sorted.
fn embedded_revenue() -> Vec<String> {
    let input = MergedInput::from_dataset(Dataset::planted(3, 7));
    let lines = vigil_embedded::result_lines(&WithRevenue::default(), &Config::default(), input).unwrap();
    let mut revenue: Vec<String> = lines.into_iter().filter(|l| l.starts_with("REVENUE> ")).collect();
    revenue.sort();
    revenue
}

#[test]
fn a_stage_defined_in_a_test_runs_in_the_embedded_runtime_beside_the_seeds() {
    let revenue = embedded_revenue();
    assert!(revenue.len() > 10, "a window per country every ten seconds: {revenue:#?}");
    assert!(
        revenue.iter().any(|l| l.starts_with(r#"REVENUE> {"record_type": "revenue_by_country", "country": "US""#)),
        "{revenue:#?}"
    );
    // The seed's own results are untouched by the stage added beside them.
    let seed = support::reference(Dataset::planted(3, 7));
    let input = MergedInput::from_dataset(Dataset::planted(3, 7));
    let mut with = vigil_embedded::result_lines(&WithRevenue::default(), &Config::default(), input).unwrap();
    with.retain(|l| !l.starts_with("REVENUE> "));
    with.sort();
    assert_eq!(with, seed);
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn a_stage_defined_in_a_test_gives_on_kafka_what_it_gives_embedded() {
    let expected = embedded_revenue();
    assert!(!expected.is_empty(), "the planted dataset gives the toy windows to close");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh("toy-");
    let pipeline = WithRevenue::default();
    // The toy's topics beside the seed's: provisioning is idempotent.
    let plain = std::env::var("VIGIL_BOOTSTRAP_SERVERS").unwrap();
    let admin = ClientConfig::new().set("bootstrap.servers", &plain).create().unwrap();
    let metadata: BaseConsumer = ClientConfig::new().set("bootstrap.servers", &plain).create().unwrap();
    let replication = topics::Replication::for_cluster(&metadata, &Default::default()).unwrap();
    let names = vigil_kafka::names::Names::new(&Default::default(), &pipeline.topology());
    topics::provision(&admin, &metadata, &pipeline.topology(), &names, PARTITIONS as u32, replication).unwrap();
    let seed = stack.spawn_all();

    // The toy runs in this process, as a taskmanager's slot runs a stage's member.
    let toy = services(&pipeline).pop().expect("the toy, last");
    let toy: &'static dyn vigil_kafka::services::Service = Box::leak(toy);
    let shutdown = Arc::new(AtomicBool::new(false));
    let registry = MetricsRegistry::new("service", &[]);
    let health = Health::new();
    let common = runner::Common {
        bootstrap_servers: stack.bootstrap.clone(),
        registry_url: stack.registry.clone(),
        commit_interval: Duration::from_millis(100),
        config: Config::default(),
    };
    let supervisor = Supervisor {
        service: toy,
        member: "0".into(),
        group_id: Some(stack.group(toy.name())),
        common,
        registry,
        status: Arc::new(Mutex::new(MemberStatus::new(toy.name(), "0"))),
        loop_health: health.watch(toy.name()),
        queries: vigil_kafka::queries::StateQueries::new(),
        shutdown: shutdown.clone(),
    };
    let member = std::thread::spawn(move || supervisor.run());

    let producer = stack.producer();
    for line in MergedInput::from_dataset(Dataset::planted(3, 7)) {
        support::send_line(&producer, &line.unwrap());
    }
    producer.finish().unwrap();
    producer.flush().unwrap();

    let got = read_until(&stack.registry, &plain, expected.len(), Duration::from_secs(120));
    shutdown.store(true, Ordering::SeqCst);
    member.join().unwrap();
    drop(seed);
    support::assert_same(&got, &expected, "the toy stage on Kafka differs from the embedded runtime");
}

/// The toy topic's committed records as sorted tagged lines, once `count` are there
/// (or the time is up).
fn read_until(registry: &str, bootstrap: &str, count: usize, within: Duration) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "toy-reader")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(REVENUE_BY_COUNTRY.name, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let codec = Codec::new(registry).unwrap();
    let (deadline, mut lines) = (Instant::now() + within, Vec::new());
    while lines.len() < count && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
        let message = message.unwrap();
        if marker_headers::read(&message).is_none() {
            let value = codec.decode_value(message.payload().unwrap_or_default()).unwrap();
            lines.push(tail::tagged_line(&REVENUE_BY_COUNTRY, &value));
        }
    }
    lines.sort();
    lines
}
