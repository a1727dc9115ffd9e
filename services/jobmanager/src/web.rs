//! The jobmanager's HTTP face on one port: the dashboard (assets built into the
//! binary), the REST API it reads, the live pane's event stream, the taskmanagers'
//! heartbeats, `/metrics` and `/healthz`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use vigil_kafka::status::Heartbeat;

use crate::api;
use crate::state::JobManager;
use crate::view::{JobView, StageEntry};

type Shared = State<Arc<JobManager>>;

pub fn router(jm: Arc<JobManager>) -> Router {
    Router::new()
        .route("/", get(|| asset("text/html; charset=utf-8", include_str!("../assets/index.html"))))
        .route("/assets/app.js", get(|| asset("text/javascript; charset=utf-8", include_str!("../assets/app.js"))))
        .route("/assets/style.css", get(|| asset("text/css; charset=utf-8", include_str!("../assets/style.css"))))
        .route("/overview", get(|State(jm): Shared| async move { Json(api::overview(&jm.view())) }))
        .route("/config", get(|State(jm): Shared| async move { Json(api::config(&jm.view())) }))
        .route("/jobs", get(|State(jm): Shared| async move { Json(api::jobs(&jm.view())) }))
        .route("/jobs/overview", get(|State(jm): Shared| async move { Json(api::jobs_overview(&jm.view())) }))
        .route(
            "/jobs/{job}",
            get(|State(jm): Shared, Path(job): Path<String>| async move { with_job(&jm, &job, api::job) }),
        )
        .route(
            "/jobs/{job}/checkpoints",
            get(|State(jm): Shared, Path(job): Path<String>| async move { with_job(&jm, &job, api::checkpoints) }),
        )
        .route(
            "/jobs/{job}/vertices/{vertex}",
            get(|State(jm): Shared, Path((job, vertex)): Path<(String, String)>| async move {
                with_vertex(&jm, &job, &vertex, api::vertex)
            }),
        )
        .route(
            "/jobs/{job}/vertices/{vertex}/watermarks",
            get(|State(jm): Shared, Path((job, vertex)): Path<(String, String)>| async move {
                with_vertex(&jm, &job, &vertex, |_, s| api::watermarks(s))
            }),
        )
        .route("/taskmanagers", get(|State(jm): Shared| async move { Json(api::taskmanagers(&jm.view())) }))
        .route("/events", get(|State(jm): Shared| async move { Json(json!({"events": jm.live.newest()})) }))
        .route("/events/stream", get(events))
        .route("/internal/heartbeat", post(heartbeat))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(jm)
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(CONTENT_TYPE, content_type)], body).into_response()
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(api::error(what))).into_response()
}

fn with_job(jm: &JobManager, job: &str, render: fn(&JobView) -> Value) -> Response {
    let view = jm.view();
    if job != view.job_id {
        return not_found(&format!("Job {job} not found; the job is {}", view.job_id));
    }
    Json(render(&view)).into_response()
}

fn with_vertex(jm: &JobManager, job: &str, vertex: &str, render: impl Fn(&JobView, &StageEntry) -> Value) -> Response {
    let view = jm.view();
    if job != view.job_id {
        return not_found(&format!("Job {job} not found; the job is {}", view.job_id));
    }
    match view.stage_by_vertex(vertex) {
        Some(s) => Json(render(&view, s)).into_response(),
        None => not_found(&format!("Vertex {vertex} not found in job {job}")),
    }
}

async fn heartbeat(State(jm): Shared, Json(beat): Json<Heartbeat>) -> StatusCode {
    jm.heartbeat(beat);
    StatusCode::NO_CONTENT
}

async fn events(State(jm): Shared) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = futures_util::stream::unfold(jm.live.subscribe(), |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(event) => return Some((Ok(Event::default().data(event.as_str())), receiver)),
                // A page too slow to keep up skips what it missed; /events has the newest.
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn metrics(State(jm): Shared) -> Response {
    let text = jm.metrics.render(&jm.view());
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn healthz(State(jm): Shared) -> Response {
    match &*jm.ready.lock().expect("ready") {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.clone()).into_response(),
    }
}
