//! The jobmanager's Prometheus metrics: the cluster-wide view per stage (ledger,
//! watermarks, consumer lag, members), the taskmanagers, and the alerts seen on the
//! output topics.

use prometheus::{Gauge, GaugeVec, IntCounterVec, Opts, Registry};
use serde_json::Value;
use vigil_kafka::metrics::now_secs;
use vigil_kafka::status::Role;

use crate::jobmanager::view::JobView;

pub struct JobMetrics {
    registry: Registry,
    /// The process's own metrics (`process_resident_memory_bytes`, …).
    process: Registry,
    ledger: IntCounterVec,
    balanced: GaugeVec,
    watermark: GaugeVec,
    watermark_lag: GaugeVec,
    lag_records: GaugeVec,
    lag_seconds: GaugeVec,
    members: GaugeVec,
    taskmanagers: GaugeVec,
    heartbeat_age: GaugeVec,
    anomalies: IntCounterVec,
    health_alerts: IntCounterVec,
    late_events: IntCounterVec,
    dead_letters: IntCounterVec,
}

const ANOMALY_TYPES: [&str; 5] =
    ["amount", "velocity", "device_fault_spike", "device_reboot_loop", "firmware_update_failure"];
const HEALTH_ALERTS: [(&str, &str); 4] = [
    ("throughput_below_floor", "warning"),
    ("late_event_spike", "warning"),
    ("watermark_lag_exceeded", "critical"),
    ("fault_rate_exceeded", "critical"),
];

impl JobMetrics {
    pub fn new(stages: &[&str], sources: &[&str]) -> JobMetrics {
        let registry = Registry::new_custom(Some("vigil".into()), None).expect("a valid prefix");
        let counters = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(c.clone())).expect("unique metric");
            c
        };
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let start = Gauge::with_opts(
            Opts::new("start_time_seconds", "When this process started, unix seconds")
                .const_label("component", "jobmanager"),
        )
        .expect("valid metric");
        start.set(now_secs());
        registry.register(Box::new(start)).expect("unique metric");
        let m = JobMetrics {
            process: vigil_kafka::metrics::process_registry(Default::default()),
            ledger: counters(
                "ledger_records_total",
                "Committed input records per stage: read = on_time + late + dead_letter",
                &["stage", "outcome"],
            ),
            balanced: gauges("ledger_balanced", "1 if the stage's ledger balances", &["stage"]),
            watermark: gauges(
                "stage_watermark_timestamp_seconds",
                "Lowest watermark over the stage's tasks, unix seconds",
                &["stage"],
            ),
            watermark_lag: gauges(
                "stage_watermark_lag_seconds",
                "Wall clock minus the stage's lowest watermark",
                &["stage"],
            ),
            lag_records: gauges(
                "consumer_lag_records",
                "Input records the stage has not committed yet",
                &["stage", "topic"],
            ),
            lag_seconds: gauges(
                "consumer_lag_seconds",
                "Age of the oldest input record the stage has not committed yet",
                &["stage"],
            ),
            members: gauges("stage_members", "Members of the stage on live taskmanagers", &["stage", "role"]),
            taskmanagers: gauges("taskmanagers", "Taskmanagers by state", &["state"]),
            heartbeat_age: gauges(
                "taskmanager_heartbeat_age_seconds",
                "Time since the taskmanager's last heartbeat",
                &["taskmanager"],
            ),
            anomalies: counters("anomalies_total", "Anomalies committed to the anomaly topics", &["anomaly_type"]),
            health_alerts: counters(
                "health_alerts_total",
                "Health alerts committed to health-alerts",
                &["reason", "severity"],
            ),
            late_events: counters("late_events_total", "Records committed to the late side topics", &["topic"]),
            dead_letters: counters(
                "dead_letter_records_total",
                "Records committed to dead-letters, by the topic they came from",
                &["source"],
            ),
            registry,
        };
        // Every known series from 0, so the first alert is an increase, not a new series.
        for t in ANOMALY_TYPES {
            m.anomalies.with_label_values(&[t]);
        }
        for (reason, severity) in HEALTH_ALERTS {
            m.health_alerts.with_label_values(&[reason, severity]);
        }
        for topic in ["device-events-late", "enriched-payments-late"] {
            m.late_events.with_label_values(&[topic]);
        }
        for source in sources {
            m.dead_letters.with_label_values(&[source]);
        }
        for stage in stages {
            for outcome in ["read", "on_time", "late", "dead_letter"] {
                m.ledger.with_label_values(&[stage, outcome]);
            }
        }
        for state in ["alive", "lost"] {
            m.taskmanagers.with_label_values(&[state]).set(0.0);
        }
        m
    }

    /// Counts an event of the live pane.
    pub fn count_event(&self, kind: &str, topic: &str, record: &Value) {
        let field = |name: &str| record.get(name).and_then(Value::as_str).unwrap_or("unknown");
        match kind {
            "anomaly" => self.anomalies.with_label_values(&[field("anomaly_type")]).inc(),
            "health_alert" => self.health_alerts.with_label_values(&[field("reason"), field("severity")]).inc(),
            "late_event" => self.late_events.with_label_values(&[topic]).inc(),
            "dead_letter" => self.dead_letters.with_label_values(&[field("source")]).inc(),
            _ => {}
        }
    }

    /// The Prometheus text, with the cluster's view as of now.
    pub fn render(&self, view: &JobView) -> String {
        for s in &view.stages {
            let name = s.info.name;
            let l = s.view.ledger;
            for (outcome, total) in
                [("read", l.read), ("on_time", l.on_time), ("late", l.late), ("dead_letter", l.dead_letters)]
            {
                let c = self.ledger.with_label_values(&[name, outcome]);
                // Totals only grow: a task reports its committed counts.
                c.inc_by(total.saturating_sub(c.get()));
            }
            self.balanced.with_label_values(&[name]).set(if l.balanced() { 1.0 } else { 0.0 });
            let (wm, lag) = match s.view.watermark_ms {
                Some(ms) => (ms as f64 / 1000.0, (view.now_ms - ms).max(0) as f64 / 1000.0),
                None => (0.0, 0.0),
            };
            self.watermark.with_label_values(&[name]).set(wm);
            self.watermark_lag.with_label_values(&[name]).set(lag);
            if let Some(lag) = &s.lag {
                for (topic, records) in &lag.records {
                    self.lag_records.with_label_values(&[name, topic]).set(*records as f64);
                }
                self.lag_seconds.with_label_values(&[name]).set(lag.seconds);
            }
            let active = s.view.active_members();
            let standby = s.view.members.iter().filter(|m| m.role == Role::Standby).count();
            self.members.with_label_values(&[name, "active"]).set(active as f64);
            self.members.with_label_values(&[name, "standby"]).set(standby as f64);
        }
        self.heartbeat_age.reset();
        let mut alive = 0;
        for tm in &view.taskmanagers {
            self.heartbeat_age.with_label_values(&[&tm.id]).set(tm.heartbeat_age_ms as f64 / 1000.0);
            alive += usize::from(tm.state == crate::jobmanager::cluster::TmState::Alive);
        }
        self.taskmanagers.with_label_values(&["alive"]).set(alive as f64);
        self.taskmanagers.with_label_values(&["lost"]).set((view.taskmanagers.len() - alive) as f64);
        vigil_kafka::metrics::render(&[&self.registry, &self.process])
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use vigil_kafka::client_stats::ClientKind;
    use vigil_kafka::metrics::MetricsRegistry;
    use vigil_kafka::status::{Heartbeat, MemberStatus};

    use crate::jobmanager::lag::StageLag;
    use crate::jobmanager::state::JobManager;

    /// Metric names in a Prometheus text exposition.
    fn exported(text: &str) -> BTreeSet<String> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
            .collect()
    }

    /// Every series the jobmanager and a taskmanager export.
    fn everything_exported() -> BTreeSet<String> {
        let jm = JobManager::new(
            &vigil_stream::Pipeline::topology(&vigil_operators::SeedPipeline::default()),
            Default::default(),
        );
        let beat = Heartbeat {
            taskmanager: "tm".into(),
            address: String::new(),
            slots: 1,
            cpu_cores: 1,
            started_ms: 0,
            members: vec![MemberStatus::new("join-enrich", "tm-0")],
        };
        jm.heartbeat(beat);
        let lag = StageLag { records: [("orders".to_string(), 1)].into(), seconds: 1.0 };
        jm.lag.lock().unwrap().insert("join-enrich".into(), lag);
        let mut names = exported(&jm.metrics.render(&jm.view()));
        let tm = MetricsRegistry::new("taskmanager", &[("taskmanager", "tm")]);
        let member = tm.member("join-enrich", "tm-0");
        member.records_in("orders").inc();
        member.records_out("enriched-payments").inc();
        member.commit_seconds.observe(0.01);
        tm.restarted("join-enrich");
        tm.gauge("taskmanager_slots", "slots");
        // librdkafka's statistics of the member's clients, as their contexts get them.
        let report = |json: &str| serde_json::from_str(json).expect("librdkafka's statistics JSON");
        let consumer = member.client_stats(ClientKind::Consumer);
        consumer
            .record(&report(include_str!("../../../../shared/kafka/tests/data/librdkafka-statistics-consumer.json")));
        let producer = member.client_stats(ClientKind::Producer);
        producer
            .record(&report(include_str!("../../../../shared/kafka/tests/data/librdkafka-statistics-producer.json")));
        // A notifier member's, once it delivered.
        let notifier = member.notifier();
        notifier.read.inc();
        notifier.delivery("webhook:http://receiver/alerts", 1, true, 0.2);
        notifier.breaker("webhook:http://receiver/alerts", false);
        names.extend(exported(&tm.render()));
        names
    }

    /// `vigil_…` names in a file of PromQL (rules, dashboards).
    fn referenced(path: &str) -> BTreeSet<String> {
        let text = std::fs::read_to_string(format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        text.match_indices("vigil_")
            // Not part of a longer word or a file name (vigil_test.yml).
            .filter(|(at, _)| !text[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || "_/.".contains(c)))
            .map(|(at, _)| {
                let rest = &text[at..];
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                rest[..end].to_string()
            })
            .collect()
    }

    #[test]
    fn every_metric_the_rules_and_the_dashboard_name_is_exported() {
        let exported = everything_exported();
        for file in ["deploy/prometheus/rules/vigil.yml", "deploy/grafana/dashboards/vigil.json"] {
            let names = referenced(file);
            assert!(names.len() > 10, "{file} names only {names:?}");
            for name in names {
                // A histogram's series are its name plus _bucket, _sum and _count.
                let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s));
                let histogram = exported.contains(&format!("{name}_bucket"));
                assert!(
                    exported.contains(&name)
                        || histogram
                        || base.is_some_and(|b| exported.contains(&format!("{b}_bucket"))),
                    "{file} names `{name}`, which Vigil does not export; exported: {exported:#?}"
                );
            }
        }
    }

    #[test]
    fn the_jobmanager_and_the_taskmanagers_serve_the_process_metrics() {
        let jm = JobManager::new(
            &vigil_stream::Pipeline::topology(&vigil_operators::SeedPipeline::default()),
            Default::default(),
        );
        let tm = MetricsRegistry::new("taskmanager", &[("taskmanager", "tm")]);
        for text in [jm.metrics.render(&jm.view()), tm.render()] {
            let names = exported(&text);
            for name in [
                "process_resident_memory_bytes",
                "process_virtual_memory_bytes",
                "process_cpu_seconds_total",
                "process_open_fds",
                "process_max_fds",
                "process_start_time_seconds",
            ] {
                assert!(names.contains(name), "{name} in {names:#?}");
            }
        }
    }
}
