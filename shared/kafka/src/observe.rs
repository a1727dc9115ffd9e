//! What a service shows about itself: Prometheus metrics and a health check on an
//! axum server, structured logs with `tracing`, and SIGTERM/SIGINT handling.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

/// The service's counters and gauges, registered under `vigil_`.
pub struct Metrics {
    registry: Registry,
    pub records_in: IntCounterVec,
    pub records_out: IntCounterVec,
    pub late_records: IntCounter,
    pub dead_letters: IntCounter,
    pub commits: IntCounter,
    pub aborts: IntCounter,
    pub watermark_ms: IntGauge,
    pub tasks: IntGauge,
    pub restored_records: IntCounter,
    /// Seconds since the epoch when the processing loop last went round.
    heartbeat: AtomicU64,
}

impl Metrics {
    pub fn new(service: &str) -> Arc<Metrics> {
        let registry = Registry::new_custom(Some("vigil".into()), None).expect("a valid prefix");
        let opts = |name: &str, help: &str| Opts::new(name, help).const_label("service", service);
        let counter = |name: &str, help: &str| IntCounter::with_opts(opts(name, help)).expect("valid metric");
        let gauge = |name: &str, help: &str| IntGauge::with_opts(opts(name, help)).expect("valid metric");
        let by_topic = |name: &str, help: &str| IntCounterVec::new(opts(name, help), &["topic"]).expect("valid metric");
        let m = Metrics {
            records_in: by_topic("records_in_total", "Records consumed, by input topic (markers excluded)"),
            records_out: by_topic("records_out_total", "Records produced, by output topic (markers excluded)"),
            late_records: counter("late_records_total", "Records sent to a late side output"),
            dead_letters: counter("dead_letters_total", "Input records sent to the dead-letters topic"),
            commits: counter("transaction_commits_total", "Transactions committed"),
            aborts: counter("transaction_aborts_total", "Transactions aborted (work is redone from the last commit)"),
            watermark_ms: gauge("watermark_ms", "Lowest input watermark over this instance's tasks, epoch ms"),
            tasks: gauge("tasks", "Tasks (input partitions) this instance runs"),
            restored_records: counter("restored_records_total", "Changelog records read while restoring state"),
            heartbeat: AtomicU64::new(now_secs()),
            registry,
        };
        for c in [&m.late_records, &m.dead_letters, &m.commits, &m.aborts, &m.restored_records] {
            m.registry.register(Box::new(c.clone())).expect("unique metric");
        }
        for g in [&m.watermark_ms, &m.tasks] {
            m.registry.register(Box::new(g.clone())).expect("unique metric");
        }
        for v in [&m.records_in, &m.records_out] {
            m.registry.register(Box::new(v.clone())).expect("unique metric");
        }
        Arc::new(m)
    }

    /// The processing loop is alive.
    pub fn beat(&self) {
        self.heartbeat.store(now_secs(), Ordering::Relaxed);
    }

    fn healthy(&self) -> bool {
        now_secs().saturating_sub(self.heartbeat.load(Ordering::Relaxed)) < 30
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding");
        String::from_utf8(buf).expect("Prometheus text is UTF-8")
    }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Logs to stderr; `RUST_LOG` filters (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rdkafka=warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Serves `/metrics` and `/healthz` on `addr` and turns SIGTERM or SIGINT into
/// `shutdown`, on a thread of its own so the processing loop stays synchronous.
pub fn serve(addr: SocketAddr, metrics: Arc<Metrics>, shutdown: Arc<AtomicBool>) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("observe".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        runtime.block_on(async move {
            let m = metrics.clone();
            let app = Router::new().route("/metrics", get(move || async move { m.render() })).route(
                "/healthz",
                get(move || async move {
                    if metrics.healthy() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "processing loop stalled")
                    }
                }),
            );
            let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            wait_for_signal().await;
            tracing::info!("shutdown requested");
            shutdown.store(true, Ordering::SeqCst);
            // Keep serving metrics while the loop finishes its last transaction.
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
    })?;
    Ok(bound)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("a SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
