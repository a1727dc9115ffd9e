//! What a process shows about itself: Prometheus metrics and a health check on an
//! axum server, structured logs with `tracing`, and SIGTERM/SIGINT handling.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::metrics::MetricsRegistry;
use crate::queries::{Reply, StateQueries};

/// A processing loop that has not gone round for this long is stalled.
const STALLED_AFTER_SECS: u64 = 30;

/// The liveness of a process's processing loops: each says when it goes round, and
/// when it is degraded (failed, waiting to start again).
#[derive(Default)]
pub struct Health {
    loops: Mutex<Vec<(String, LoopHealth)>>,
}

/// When one loop last went round, and why it is degraded (if it is).
#[derive(Clone)]
pub struct LoopHealth {
    at: Arc<AtomicU64>,
    degraded: Arc<Mutex<Option<String>>>,
}

impl LoopHealth {
    fn new() -> LoopHealth {
        LoopHealth { at: Arc::new(AtomicU64::new(now_secs())), degraded: Arc::default() }
    }

    pub fn went_round(&self) {
        self.at.store(now_secs(), Ordering::Relaxed);
    }

    pub fn degraded(&self, why: String) {
        *self.degraded.lock().expect("loop health") = Some(why);
    }

    pub fn recovered(&self) {
        self.degraded.lock().expect("loop health").take();
    }
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// A new loop to watch, alive as of now.
    pub fn watch(&self, name: &str) -> LoopHealth {
        let health = LoopHealth::new();
        self.loops.lock().expect("health").push((name.to_string(), health.clone()));
        health
    }

    /// `Err` names the loops that stalled or are degraded, and why.
    pub fn check(&self) -> Result<(), String> {
        let now = now_secs();
        let mut problems = Vec::new();
        for (name, health) in self.loops.lock().expect("health").iter() {
            if let Some(why) = health.degraded.lock().expect("loop health").as_deref() {
                problems.push(format!("{name} degraded: {why}"));
            } else if now.saturating_sub(health.at.load(Ordering::Relaxed)) >= STALLED_AFTER_SECS {
                problems.push(format!("processing loop stalled: {name}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Logs to stderr; `RUST_LOG` filters (default `info`).
pub fn init_tracing() {
    init_tracing_at("info,rdkafka=warn");
}

/// Logging to stderr at `default` unless `RUST_LOG` says otherwise (a command-line
/// tool logs warnings only: a client that cannot authenticate says so).
pub fn init_tracing_at(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Serves `/metrics` and `/healthz` on `addr` and turns SIGTERM or SIGINT into
/// `shutdown`, on a thread of its own so the processing loops stay synchronous.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<MetricsRegistry>,
    health: Arc<Health>,
    queries: Arc<StateQueries>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new().name("observe".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        runtime.block_on(async move {
            let app = Router::new()
                .route("/metrics", get(move || async move { metrics.render() }))
                .route(
                    "/healthz",
                    get(move || async move {
                        match health.check() {
                            Ok(()) => (StatusCode::OK, "ok".to_string()),
                            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                        }
                    }),
                )
                .route(
                    "/state/{stage}/{what}/{key}",
                    get(move |Path((stage, what, key)): Path<(String, String, String)>| async move {
                        let asked = tokio::task::spawn_blocking(move || state_query(&queries, &stage, &what, &key));
                        asked.await.unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
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

/// How long a state query waits for the members' answers.
const QUERY_WAIT: Duration = Duration::from_secs(2);

/// `/state/{stage}/{what}/{key}`: 200 and the state as JSON from the member whose
/// task holds the key's partition; 404 if that task holds nothing for it; 421 if no
/// member here holds that partition (another process does, or it is moving).
fn state_query(queries: &StateQueries, stage: &str, what: &str, key: &str) -> (StatusCode, String) {
    let error = |status: StatusCode, message: String| (status, serde_json::json!({ "error": message }).to_string());
    match queries.ask(stage, what, key, QUERY_WAIT) {
        Some(Reply::Found(value)) => (StatusCode::OK, value.to_string()),
        Some(Reply::Unknown) => error(StatusCode::NOT_FOUND, format!("{stage} holds no state for {what} `{key}`")),
        Some(Reply::NotQueryable) => error(StatusCode::BAD_REQUEST, format!("{stage} answers no query of {what}")),
        Some(Reply::NotHere) | None => {
            error(StatusCode::MISDIRECTED_REQUEST, format!("no member of {stage} here holds the partition of `{key}`"))
        }
    }
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
    fn a_loop_that_stops_going_round_is_named() {
        let health = Health::new();
        let a = health.watch("join-enrich");
        let _b = health.watch("device-router");
        assert_eq!(health.check(), Ok(()));
        a.at.store(now_secs() - STALLED_AFTER_SECS, Ordering::Relaxed);
        assert_eq!(health.check(), Err("processing loop stalled: join-enrich".to_string()));
        a.went_round();
        assert_eq!(health.check(), Ok(()));
    }

    #[test]
    fn a_degraded_loop_says_why_until_it_recovers() {
        let health = Health::new();
        let a = health.watch("device-router");
        a.degraded("cannot reach the broker; retrying".into());
        assert_eq!(health.check(), Err("device-router degraded: cannot reach the broker; retrying".to_string()));
        a.recovered();
        assert_eq!(health.check(), Ok(()));
    }
}
