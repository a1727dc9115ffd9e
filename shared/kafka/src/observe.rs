//! What a process shows about itself: Prometheus metrics and a health check on an
//! axum server, structured logs with `tracing`, and SIGTERM/SIGINT handling.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::metrics::MetricsRegistry;

/// A processing loop that has not gone round for this long is stalled.
const STALLED_AFTER_SECS: u64 = 30;

/// The liveness of a process's processing loops: each beats as it goes round.
#[derive(Default)]
pub struct Health {
    loops: Mutex<Vec<(String, Arc<AtomicU64>)>>,
}

/// One loop's heartbeat.
#[derive(Clone)]
pub struct Beat(Arc<AtomicU64>);

impl Beat {
    pub fn beat(&self) {
        self.0.store(now_secs(), Ordering::Relaxed);
    }
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// A new loop to watch, alive as of now.
    pub fn watch(&self, name: &str) -> Beat {
        let beat = Arc::new(AtomicU64::new(now_secs()));
        self.loops.lock().expect("health").push((name.to_string(), beat.clone()));
        Beat(beat)
    }

    /// `Err` names the loops that stalled.
    pub fn check(&self) -> Result<(), String> {
        let now = now_secs();
        let stalled: Vec<String> = self
            .loops
            .lock()
            .expect("health")
            .iter()
            .filter(|(_, b)| now.saturating_sub(b.load(Ordering::Relaxed)) >= STALLED_AFTER_SECS)
            .map(|(name, _)| name.clone())
            .collect();
        if stalled.is_empty() {
            Ok(())
        } else {
            Err(format!("processing loop stalled: {}", stalled.join(", ")))
        }
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
/// `shutdown`, on a thread of its own so the processing loops stay synchronous.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<MetricsRegistry>,
    health: Arc<Health>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("observe".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        runtime.block_on(async move {
            let app = Router::new().route("/metrics", get(move || async move { metrics.render() })).route(
                "/healthz",
                get(move || async move {
                    match health.check() {
                        Ok(()) => (StatusCode::OK, "ok".to_string()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
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
            // Keep serving metrics while the loops finish their last transactions.
            tokio::time::sleep(Duration::from_secs(3600)).await;
        });
    })?;
    Ok(bound)
}

/// Resolves on SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("a SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_beating_is_named() {
        let health = Health::new();
        let a = health.watch("join-enrich");
        let _b = health.watch("device-router");
        assert_eq!(health.check(), Ok(()));
        a.0.store(now_secs() - STALLED_AFTER_SECS, Ordering::Relaxed);
        assert_eq!(health.check(), Err("processing loop stalled: join-enrich".to_string()));
        a.beat();
        assert_eq!(health.check(), Ok(()));
    }
}
