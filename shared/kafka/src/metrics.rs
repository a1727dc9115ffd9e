//! What a stage member counts, in Prometheus form. One registry per process (a
//! standalone service, or a taskmanager running many members); every series of a
//! member carries its `stage` and `member` labels, so one scrape of a taskmanager
//! shows all of its members side by side. Next to them: the process's own metrics
//! (`process_…`, Prometheus' standard names) and what librdkafka says about each
//! member's clients (`client_stats`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::client_stats::{ClientFamilies, ClientKind, ClientStats};
use crate::status::Ledger;

/// A process's metric families; members take their labelled children from it.
pub struct MetricsRegistry {
    registry: Registry,
    /// The process's metrics, under their standard names (no `vigil_` prefix).
    process: Registry,
    clients: Arc<ClientFamilies>,
    records_in: IntCounterVec,
    records_out: IntCounterVec,
    late_records: IntCounterVec,
    dead_letters: IntCounterVec,
    commits: IntCounterVec,
    aborts: IntCounterVec,
    offset_corrections: IntCounterVec,
    redelivered: IntCounterVec,
    unreadable_batches: IntCounterVec,
    commit_seconds: HistogramVec,
    hop_seconds: HistogramVec,
    last_commit: GaugeVec,
    restored_records: IntCounterVec,
    watermark: GaugeVec,
    watermark_lag: GaugeVec,
    tasks: IntGaugeVec,
    active: IntGaugeVec,
    restarts: IntCounterVec,
    state_entries: IntGaugeVec,
    changelog_records: IntCounterVec,
    changelog_bytes: IntCounterVec,
    restore_seconds: GaugeVec,
    rerouted: IntCounterVec,
    out_of_order: IntCounterVec,
    held_for_order: IntGaugeVec,
    paused: IntGaugeVec,
    degraded: IntGaugeVec,
    input_ended: IntGaugeVec,
    ledger: IntGaugeVec,
    /// The notifier's families, registered when a notifier member first starts.
    notify: std::sync::OnceLock<crate::notify::metrics::NotifyFamilies>,
}

impl MetricsRegistry {
    /// `labels` are constant labels of every series (a taskmanager's id, say).
    pub fn new(component: &str, labels: &[(&str, &str)]) -> Arc<MetricsRegistry> {
        let constant: HashMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let process = process_registry(constant.clone());
        let registry = Registry::new_custom(Some("vigil".into()), Some(constant)).expect("a valid prefix");
        let member = ["stage", "member"];
        let opts = |name: &str, help: &str| Opts::new(name, help);
        let counters = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(opts(name, help), labels).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique metric");
            c
        };
        let gauges = |name: &str, help: &str| {
            let g = GaugeVec::new(opts(name, help), &member).expect("valid metric");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let int_gauges = |name: &str, help: &str| {
            let g = IntGaugeVec::new(opts(name, help), &member).expect("valid metric");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let commit_seconds = HistogramVec::new(
            HistogramOpts::new("transaction_commit_seconds", "Duration of a transaction commit")
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &member,
        )
        .expect("valid metric");
        registry.register(Box::new(commit_seconds.clone())).expect("unique metric");
        let hop_seconds = HistogramVec::new(
            HistogramOpts::new(
                "record_hop_seconds",
                "Where an input record's time goes in this member, by part: queued (from its Kafka timestamp \
                 to the read), processing (from the read until the operators are done with its batch of up to \
                 64 records and their outputs go to the producer), commit_wait (from the read until its \
                 transaction committed, when its outputs become readable)",
            )
            // Finer between 5 and 250 ms: the parts of a hop lie between 5 and 50 ms
            // (a fetch wait of 20 against a commit of 10 must be told apart), its
            // p99 between 50 and 250, where a 100 ms goal must be told from twice it.
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
                0.2, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["stage", "member", "part"],
        )
        .expect("valid metric");
        registry.register(Box::new(hop_seconds.clone())).expect("unique metric");
        let start = Gauge::with_opts(
            opts("start_time_seconds", "When this process started, unix seconds").const_label("component", component),
        )
        .expect("valid metric");
        start.set(now_secs());
        registry.register(Box::new(start)).expect("unique metric");
        let by_topic = ["stage", "member", "topic"];
        Arc::new(MetricsRegistry {
            records_in: counters("records_in_total", "Input records processed, by input topic", &by_topic),
            records_out: counters("records_out_total", "Records produced, by output topic", &by_topic),
            late_records: counters("late_records_total", "Records sent to a late side output", &member),
            dead_letters: counters("dead_letters_total", "Input records sent to the dead-letters topic", &member),
            commits: counters("transaction_commits_total", "Transactions committed", &member),
            aborts: counters(
                "transaction_aborts_total",
                "Transactions aborted (the work is redone from the last commit)",
                &member,
            ),
            offset_corrections: counters(
                "offset_corrections_total",
                "Input partitions read from the offset committed with their task's state, because the group's \
                 committed offset (or the commit the member believed) said otherwise",
                &member,
            ),
            redelivered: counters(
                "redelivered_records_total",
                "Input records delivered again after they had been counted (skipped, not counted twice)",
                &member,
            ),
            unreadable_batches: counters(
                "unreadable_batches_total",
                "Record batches of an input the consumer could not read (a codec it lacks, or corrupt): their \
                 partition makes no progress",
                &member,
            ),
            commit_seconds,
            hop_seconds,
            last_commit: gauges("last_commit_timestamp_seconds", "When the member last committed, unix seconds"),
            restored_records: counters(
                "restored_records_total",
                "Changelog records read while restoring state",
                &member,
            ),
            watermark: gauges(
                "watermark_timestamp_seconds",
                "Lowest input watermark of the member's tasks, unix seconds (0 before the first)",
            ),
            watermark_lag: gauges(
                "watermark_lag_seconds",
                "Wall clock minus the member's lowest input watermark (0 before the first)",
            ),
            tasks: int_gauges("tasks", "Tasks (input partitions) the member runs"),
            active: int_gauges("member_active", "1 while the member processes, 0 while it stands by"),
            restarts: counters("member_restarts_total", "Stage members restarted after they failed", &["stage"]),
            state_entries: int_gauges("state_entries", "Entries of keyed state the member's tasks hold"),
            changelog_records: counters(
                "changelog_records_total",
                "State entries written to the changelog (tombstones included)",
                &member,
            ),
            changelog_bytes: counters(
                "changelog_bytes_total",
                "Bytes of state entries written to the changelog",
                &member,
            ),
            restore_seconds: gauges("restore_seconds", "How long the member's last task restore took"),
            paused: int_gauges("paused_partitions", "Input partitions paused for running ahead of their task"),
            out_of_order: counters(
                "records_out_of_order_total",
                "Forwarded records released below the last one released: their producer's clock stepped back, \
                 or a writer came back from idleness with older records (docs/design-keying-lateness.md)",
                &member,
            ),
            held_for_order: int_gauges(
                "records_held_for_order",
                "Forwarded records waiting in their task's merge until every writer has read past them",
            ),
            input_ended: int_gauges(
                "input_ended",
                "1 once every task of the member has read the end of its input (end-of-input markers): all its \
                 windows have fired",
            ),
            degraded: int_gauges(
                "member_degraded",
                "1 from a member's failure (broker, registry or transaction fault) until its first commit after the restart",
            ),
            ledger: {
                let g = IntGaugeVec::new(
                    opts(
                        "member_ledger_records",
                        "Input records of the member's tasks by outcome, as last committed \
                         (read = on_time + late + dead_letters; rerouted ones are read again downstream)",
                    ),
                    &["stage", "member", "outcome"],
                )
                .expect("valid metric");
                registry.register(Box::new(g.clone())).expect("unique metric");
                g
            },
            rerouted: counters(
                "rerouted_records_total",
                "Source records off their key's partition, sent through the stage's repartition topic",
                &member,
            ),
            clients: ClientFamilies::register(&registry),
            notify: std::sync::OnceLock::new(),
            registry,
            process,
        })
    }

    /// The series of one member of a stage.
    pub fn member(self: &Arc<Self>, stage: &str, member: &str) -> MemberMetrics {
        let l = [stage, member];
        MemberMetrics {
            registry: self.clone(),
            stage: stage.to_string(),
            member: member.to_string(),
            late_records: self.late_records.with_label_values(&l),
            dead_letters: self.dead_letters.with_label_values(&l),
            commits: self.commits.with_label_values(&l),
            aborts: self.aborts.with_label_values(&l),
            offset_corrections: self.offset_corrections.with_label_values(&l),
            redelivered: self.redelivered.with_label_values(&l),
            unreadable_batches: self.unreadable_batches.with_label_values(&l),
            commit_seconds: self.commit_seconds.with_label_values(&l),
            queued: self.hop_seconds.with_label_values(&[stage, member, "queued"]),
            processing: self.hop_seconds.with_label_values(&[stage, member, "processing"]),
            commit_wait: self.hop_seconds.with_label_values(&[stage, member, "commit_wait"]),
            last_commit: self.last_commit.with_label_values(&l),
            restored_records: self.restored_records.with_label_values(&l),
            watermark: self.watermark.with_label_values(&l),
            watermark_lag: self.watermark_lag.with_label_values(&l),
            tasks: self.tasks.with_label_values(&l),
            active: self.active.with_label_values(&l),
            state_entries: self.state_entries.with_label_values(&l),
            changelog_records: self.changelog_records.with_label_values(&l),
            changelog_bytes: self.changelog_bytes.with_label_values(&l),
            restore_seconds: self.restore_seconds.with_label_values(&l),
            rerouted: self.rerouted.with_label_values(&l),
            out_of_order: self.out_of_order.with_label_values(&l),
            held_for_order: self.held_for_order.with_label_values(&l),
            paused: self.paused.with_label_values(&l),
            degraded: self.degraded.with_label_values(&l),
            input_ended: self.input_ended.with_label_values(&l),
        }
    }

    /// The series of one notifier member.
    pub fn notifier(&self, member: &str) -> crate::notify::metrics::NotifyMetrics {
        self.notify.get_or_init(|| crate::notify::metrics::NotifyFamilies::register(&self.registry)).member(member)
    }

    /// A member of `stage` failed and was started again.
    pub fn restarted(&self, stage: &str) {
        self.restarts.with_label_values(&[stage]).inc();
    }

    /// A gauge of the process, next to the members' series.
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        let gauge = Gauge::with_opts(Opts::new(name, help)).expect("valid metric");
        self.registry.register(Box::new(gauge.clone())).expect("unique metric");
        gauge
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        render(&[&self.registry, &self.process])
    }
}

/// A registry of the process's standard metrics (`process_resident_memory_bytes`,
/// `process_cpu_seconds_total`, `process_open_fds`, …, read from /proc at each
/// scrape), with `labels` on each.
pub fn process_registry(labels: HashMap<String, String>) -> Registry {
    let registry = Registry::new_custom(None, Some(labels)).expect("valid labels");
    #[cfg(target_os = "linux")]
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())).expect("unique metric");
    registry
}

/// The Prometheus text exposition of every series of `registries`.
pub fn render(registries: &[&Registry]) -> String {
    let families: Vec<_> = registries.iter().flat_map(|r| r.gather()).collect();
    let mut buf = Vec::new();
    TextEncoder::new().encode(&families, &mut buf).expect("text encoding");
    String::from_utf8(buf).expect("Prometheus text is UTF-8")
}

/// One member's series.
#[derive(Clone)]
pub struct MemberMetrics {
    registry: Arc<MetricsRegistry>,
    stage: String,
    member: String,
    pub late_records: IntCounter,
    pub dead_letters: IntCounter,
    pub commits: IntCounter,
    pub aborts: IntCounter,
    pub offset_corrections: IntCounter,
    pub redelivered: IntCounter,
    pub unreadable_batches: IntCounter,
    pub commit_seconds: Histogram,
    /// The parts of `vigil_record_hop_seconds`.
    pub queued: Histogram,
    pub processing: Histogram,
    pub commit_wait: Histogram,
    last_commit: Gauge,
    pub restored_records: IntCounter,
    watermark: Gauge,
    watermark_lag: Gauge,
    pub tasks: IntGauge,
    pub active: IntGauge,
    pub state_entries: IntGauge,
    pub changelog_records: IntCounter,
    pub changelog_bytes: IntCounter,
    pub restore_seconds: Gauge,
    pub rerouted: IntCounter,
    pub out_of_order: IntCounter,
    pub held_for_order: IntGauge,
    pub paused: IntGauge,
    pub degraded: IntGauge,
    pub input_ended: IntGauge,
}

impl MemberMetrics {
    pub fn records_in(&self, topic: &str) -> IntCounter {
        self.registry.records_in.with_label_values(&[&self.stage, &self.member, topic])
    }

    pub fn records_out(&self, topic: &str) -> IntCounter {
        self.registry.records_out.with_label_values(&[&self.stage, &self.member, topic])
    }

    /// The series of the member's notifier.
    pub fn notifier(&self) -> crate::notify::metrics::NotifyMetrics {
        self.registry.notifier(&self.member)
    }

    /// The series of one of the member's Kafka clients, for its context to set from
    /// librdkafka's statistics.
    pub fn client_stats(&self, kind: ClientKind) -> ClientStats {
        ClientStats::new(&self.registry.clients, &self.stage, &self.member, kind)
    }

    /// The committed ledger of the member's tasks, summed.
    pub fn set_ledger(&self, ledger: &Ledger) {
        let outcomes = [
            ("read", ledger.read),
            ("on_time", ledger.on_time),
            ("late", ledger.late),
            ("dead_letters", ledger.dead_letters),
            ("rerouted", ledger.rerouted),
            ("written", ledger.written),
        ];
        for (outcome, n) in outcomes {
            self.registry.ledger.with_label_values(&[&self.stage, &self.member, outcome]).set(n as i64);
        }
    }

    pub fn committed_now(&self) {
        self.last_commit.set(now_secs());
    }

    /// The lowest input watermark of the member's tasks, epoch ms (`None`: none yet).
    pub fn set_watermark(&self, watermark_ms: Option<i64>) {
        match watermark_ms {
            Some(ms) => {
                let secs = ms as f64 / 1000.0;
                self.watermark.set(secs);
                self.watermark_lag.set((now_secs() - secs).max(0.0));
            }
            None => {
                self.watermark.set(0.0);
                self.watermark_lag.set(0.0);
            }
        }
    }
}

pub fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_share_one_family_per_metric() {
        let registry = MetricsRegistry::new("taskmanager", &[("taskmanager", "tm-1")]);
        let a = registry.member("join-enrich", "tm-1-0");
        let b = registry.member("device-router", "tm-1-0");
        a.commits.inc();
        b.commits.inc_by(2);
        a.records_in("orders").inc();
        let text = registry.render();
        assert_eq!(text.matches("# TYPE vigil_transaction_commits_total counter").count(), 1, "{text}");
        assert!(text.contains(
            r#"vigil_transaction_commits_total{member="tm-1-0",stage="device-router",taskmanager="tm-1"} 2"#
        ));
        assert!(text.contains(
            r#"vigil_records_in_total{member="tm-1-0",stage="join-enrich",topic="orders",taskmanager="tm-1"} 1"#
        ));
        assert!(text.contains(r#"vigil_start_time_seconds{component="taskmanager",taskmanager="tm-1"}"#));
        assert!(text.contains(r#"process_resident_memory_bytes{taskmanager="tm-1"}"#), "{text}");
    }

    #[test]
    fn the_committed_ledger_is_a_series_per_outcome() {
        let registry = MetricsRegistry::new("join-enrich", &[]);
        let ledger = Ledger { read: 7, on_time: 5, late: 1, dead_letters: 1, rerouted: 2, written: 9 };
        registry.member("join-enrich", "0").set_ledger(&ledger);
        let text = registry.render();
        for (outcome, n) in [("read", 7), ("on_time", 5), ("late", 1), ("dead_letters", 1), ("rerouted", 2)] {
            let series =
                format!(r#"vigil_member_ledger_records{{member="0",outcome="{outcome}",stage="join-enrich"}} {n}"#);
            assert!(text.contains(&series), "{series} in\n{text}");
        }
    }
}
