//! `vigil receive-alerts`: a webhook receiver to try the notifier and Alertmanager
//! with (the compose cluster's `alert-receiver`). It keeps one alert per
//! idempotency key, as a receiver should, and counts the repeats; it prints each new
//! alert; `GET /received` shows what came.
//!
//!   POST /alerts         the notifier's generic body (`Idempotency-Key` header)
//!   POST /alertmanager   Alertmanager's webhook payload
//!   GET  /received       {"alerts": […], "repeats": n, "alertmanager": […]}

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Default)]
struct Received {
    /// The first body of each idempotency key, in arrival order.
    alerts: Vec<Value>,
    keys: std::collections::HashSet<String>,
    repeats: u64,
    /// Alertmanager's alerts, one entry per alert of each notification.
    alertmanager: Vec<Value>,
}

type Shared = Arc<Mutex<Received>>;

pub fn run(listen: SocketAddr) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        tracing::info!(addr = %listener.local_addr()?, "receiving alerts: POST /alerts, POST /alertmanager, GET /received");
        let app = Router::new()
            .route("/alerts", post(alert))
            .route("/alertmanager", post(alertmanager))
            .route("/received", get(received))
            .route("/healthz", get(|| async { "ok" }))
            .with_state(Shared::default());
        axum::serve(listener, app).await.context("the receiver stopped")
    })
}

async fn alert(State(shared): State<Shared>, headers: HeaderMap, Json(body): Json<Value>) -> (StatusCode, String) {
    let Some(key) = headers.get("idempotency-key").and_then(|k| k.to_str().ok()).map(str::to_string) else {
        return (StatusCode::BAD_REQUEST, "no Idempotency-Key header".into());
    };
    let mut received = shared.lock().expect("received");
    if received.keys.insert(key) {
        println!("{}", body["line"].as_str().unwrap_or_default());
        received.alerts.push(body);
    } else {
        received.repeats += 1;
    }
    (StatusCode::OK, String::new())
}

async fn alertmanager(State(shared): State<Shared>, Json(body): Json<Value>) -> StatusCode {
    let mut received = shared.lock().expect("received");
    for alert in body["alerts"].as_array().into_iter().flatten() {
        let name = alert["labels"]["alertname"].as_str().unwrap_or_default();
        println!("ALERTMANAGER> {} {name}: {}", alert["status"], alert["annotations"]["summary"]);
        received.alertmanager.push(alert.clone());
    }
    StatusCode::OK
}

async fn received(State(shared): State<Shared>) -> Json<Value> {
    let received = shared.lock().expect("received");
    Json(json!({"alerts": received.alerts, "repeats": received.repeats, "alertmanager": received.alertmanager}))
}
