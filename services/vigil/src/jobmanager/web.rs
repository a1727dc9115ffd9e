//! The jobmanager's HTTP face on one port: the dashboard (assets built into the
//! binary), the REST API it reads, the live pane's event stream, the taskmanagers'
//! heartbeats, `/metrics` and `/healthz`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use vigil_kafka::status::Heartbeat;

use crate::jobmanager::api;
use crate::jobmanager::cluster::TmState;
use crate::jobmanager::queries;
use crate::jobmanager::state::JobManager;
use crate::jobmanager::view::{JobView, StageEntry};

type Shared = State<Arc<JobManager>>;

/// The dashboard's script: ES modules, one concept each, served as `/assets/{name}`
/// and imported by `app.js` (no bundler: the browser follows the imports).
const MODULES: [(&str, &str); 14] = [
    ("app.js", include_str!("../../assets/app.js")),
    ("api.js", include_str!("../../assets/api.js")),
    ("state.js", include_str!("../../assets/state.js")),
    ("dom.js", include_str!("../../assets/dom.js")),
    ("format.js", include_str!("../../assets/format.js")),
    ("model.js", include_str!("../../assets/model.js")),
    ("layout.js", include_str!("../../assets/layout.js")),
    ("graph.js", include_str!("../../assets/graph.js")),
    ("stages.js", include_str!("../../assets/stages.js")),
    ("taskmanagers.js", include_str!("../../assets/taskmanagers.js")),
    ("checkpoints.js", include_str!("../../assets/checkpoints.js")),
    ("header.js", include_str!("../../assets/header.js")),
    ("summary.js", include_str!("../../assets/summary.js")),
    ("live.js", include_str!("../../assets/live.js")),
];

pub fn router(jm: Arc<JobManager>) -> Router {
    let modules = MODULES.iter().fold(Router::new(), |router, &(name, source)| {
        router.route(&format!("/assets/{name}"), get(move || asset("text/javascript; charset=utf-8", source)))
    });
    modules
        .route("/", get(|| asset("text/html; charset=utf-8", include_str!("../../assets/index.html"))))
        .route("/assets/style.css", get(|| asset("text/css; charset=utf-8", include_str!("../../assets/style.css"))))
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
        .route("/jobs/{job}/state/customers/{customer}", get(customer_state))
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

/// A customer's amount statistics and velocity window, from the member that holds
/// its partition (see `queries`).
async fn customer_state(State(jm): Shared, Path((job, customer)): Path<(String, String)>) -> Response {
    let view = jm.view();
    if job != view.job_id {
        return not_found(&format!("Job {job} not found; the job is {}", view.job_id));
    }
    let alive: Vec<(String, String)> = view
        .taskmanagers
        .iter()
        .filter(|t| t.state == TmState::Alive)
        .map(|t| (t.id.clone(), t.address.clone()))
        .collect();
    let asked = customer.clone();
    let answer =
        tokio::task::spawn_blocking(move || queries::ask(&alive, "payment-anomalies", "customers", &asked)).await;
    match answer {
        Ok(queries::Answer::Found { taskmanager, mut state }) => {
            state["answered_by"] = json!(taskmanager);
            Json(state).into_response()
        }
        Ok(queries::Answer::Unknown) => {
            not_found(&format!("customer {customer} has no amount statistics or velocity window (no payment scored)"))
        }
        Ok(queries::Answer::Moving) | Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(RETRY_AFTER, "2")],
            Json(api::error(&format!(
                "no taskmanager holds the partition of customer {customer} right now (it is moving between \
                 members, or restoring); ask again in a few seconds"
            ))),
        )
            .into_response(),
    }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;

    use vigil_kafka::status::{Deliveries, Heartbeat, MemberStatus, Role};

    use super::*;
    use crate::jobmanager::live::event;

    /// The router on a port of its own, on a runtime of its own thread.
    fn serve() -> (Arc<JobManager>, String) {
        let jm = JobManager::new(
            &vigil_stream::Pipeline::topology(&vigil_operators::SeedPipeline::default()),
            Default::default(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = router(jm.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        (jm, addr)
    }

    fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
        let (status, _, body) = exchange(addr, method, path, body);
        (status, body)
    }

    /// The answer's status, head (status line and headers) and body.
    fn exchange(addr: &str, method: &str, path: &str, body: &str) -> (u16, String, String) {
        let mut conn = TcpStream::connect(addr).unwrap();
        write!(
            conn,
            "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let status = answer.split_whitespace().nth(1).unwrap().parse().unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        (status, head.to_string(), body.to_string())
    }

    /// The page's script is ES modules the browser fetches one by one: the page's module,
    /// every module it imports and every module those import are served as JavaScript,
    /// and every module in assets/ is among them (none left out, none unused).
    #[test]
    fn every_module_the_page_imports_is_served() {
        let (_, addr) = serve();
        let (status, _, page) = exchange(&addr, "GET", "/", "");
        assert_eq!(status, 200);
        let src = |tag: &str| tag.split('"').next().unwrap().to_string();
        let mut todo: Vec<String> = page.split(r#"<script type="module" src=""#).skip(1).map(src).collect();
        assert_eq!(todo, ["/assets/app.js"], "the page loads one module, app.js");
        let mut served = BTreeSet::new();
        while let Some(path) = todo.pop() {
            if !served.insert(path.clone()) {
                continue;
            }
            let (status, head, source) = exchange(&addr, "GET", &path, "");
            assert_eq!(status, 200, "{path}");
            assert!(head.to_ascii_lowercase().contains("content-type: text/javascript"), "{path}: {head}");
            // Imports are `import { … } from './name.js';`, relative to /assets/.
            for import in source.split(" from './").skip(1) {
                todo.push(format!("/assets/{}", import.split('\'').next().unwrap()));
            }
        }
        let on_disk: BTreeSet<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/assets"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".js"))
            .map(|name| format!("/assets/{name}"))
            .collect();
        assert_eq!(served, on_disk);
    }

    #[test]
    fn a_heartbeat_puts_a_taskmanager_and_its_members_on_the_rest_api() {
        let (jm, addr) = serve();
        let mut member = MemberStatus::new("payment-metrics", "tm-a-0");
        member.role = Role::Standby;
        let mut notifier = MemberStatus::new("notifier", "tm-a-0");
        notifier.deliveries =
            Some(Deliveries { read: 5, delivered: 3, dead_lettered: 1, in_flight: 1, breakers_open: 0 });
        let beat = Heartbeat {
            taskmanager: "tm-a".into(),
            address: "http://10.0.0.7:9249".into(),
            slots: 1,
            cpu_cores: 2,
            started_ms: 1,
            members: vec![member, notifier],
        };
        let (status, _) = request(&addr, "POST", "/internal/heartbeat", &serde_json::to_string(&beat).unwrap());
        assert_eq!(status, 204);
        let (_, body) = request(&addr, "GET", "/taskmanagers", "");
        let tms: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(tms["taskmanagers"][0]["id"], "tm-a");
        assert_eq!(tms["taskmanagers"][0]["vigil"]["state"], "alive");
        assert_eq!(tms["taskmanagers"][0]["vigil"]["members"][0]["role"], "standby");
        let (_, body) = request(&addr, "GET", &format!("/jobs/{}", jm.job_id), "");
        let job: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(job["state"], "RESTARTING", "no stage has an active member yet");
        assert_eq!(job["vertices"][1]["vigil"]["members"][0]["id"], "tm-a-0");
        let notified = &job["vigil"]["notifier"];
        assert_eq!((notified["members"].as_u64(), notified["delivered"].as_u64()), (Some(1), Some(3)), "{notified}");
        let (status, body) = request(&addr, "GET", "/jobs/00000000000000000000000000000000", "");
        assert_eq!(status, 404);
        assert!(body.contains("errors"), "{body}");
        assert_eq!(request(&addr, "GET", "/healthz", "").0, 503, "not provisioned yet");
    }

    /// What the dashboard lays its graph out from: vertices, edges between them and the
    /// topics' kinds, all from the topology.
    #[test]
    fn the_job_carries_the_graph_of_the_topology() {
        let (jm, addr) = serve();
        let (_, body) = request(&addr, "GET", &format!("/jobs/{}", jm.job_id), "");
        let job: Value = serde_json::from_str(&body).unwrap();
        let topology = vigil_stream::Pipeline::topology(&vigil_operators::SeedPipeline::default());
        let vertices = job["vertices"].as_array().unwrap();
        let names: Vec<&str> = vertices.iter().map(|v| v["vigil"]["stage"].as_str().unwrap()).collect();
        assert_eq!(names, topology.stages.iter().map(|s| s.name).collect::<Vec<_>>());
        let topics = job["vigil"]["topics"].as_array().unwrap();
        for t in topology.topics() {
            let served = topics.iter().find(|x| x["name"] == t.name).unwrap_or_else(|| panic!("no topic {}", t.name));
            assert_eq!(
                (&served["external"], &served["late"], &served["alerts"]),
                (&Value::from(t.external), &Value::from(t.late), &Value::from(t.alerts)),
                "{}",
                t.name
            );
        }
        let id_of = |stage: &str| vertices.iter().find(|v| v["name"] == stage).unwrap()["id"].clone();
        let edges = job["vigil"]["edges"].as_array().unwrap();
        for s in &topology.stages {
            for (input, _) in s.inputs {
                let to_it = |e: &&Value| e["topic"] == input.name && e["to"] == id_of(s.name);
                let from: Vec<&Value> = edges.iter().filter(to_it).map(|e| &e["from"]).collect();
                let writers: Vec<Value> = topology.writers(input).map(|w| id_of(w.name)).collect();
                if input.external {
                    assert_eq!(from, [&Value::Null], "{} reads {} from users", s.name, input.name);
                } else {
                    assert_eq!(from, writers.iter().collect::<Vec<_>>(), "{} reads {}", s.name, input.name);
                }
            }
        }
        for e in edges {
            assert!(topics.iter().any(|t| t["name"] == e["topic"]), "edge of an unknown topic: {e}");
        }
    }

    #[test]
    fn the_live_pane_streams_events_as_they_come() {
        let (jm, addr) = serve();
        let mut conn = TcpStream::connect(&addr).unwrap();
        write!(conn, "GET /events/stream HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut reader = BufReader::new(conn);
        let mut line = String::new();
        // Headers first; the stream is open once they are through.
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line.to_ascii_lowercase().starts_with("content-type") {
                assert!(line.contains("text/event-stream"), "{line}");
            }
            if line == "\r\n" {
                break;
            }
        }
        let alert = r#"HEALTH_ALERT> {"record_type": "health_alert", "reason": "fault_rate_exceeded"}"#;
        // The subscription may land a moment after the headers: push until one arrives.
        let data = loop {
            jm.live.push(event(&vigil_model::topology::HEALTH_ALERTS, 0, 7, Some(1), alert));
            line.clear();
            reader.read_line(&mut line).unwrap();
            if let Some(data) = line.strip_prefix("data: ") {
                break data.trim().to_string();
            }
        };
        let event: Value = serde_json::from_str(&data).unwrap();
        assert_eq!((event["kind"].clone(), event["line"].clone()), (Value::from("health_alert"), Value::from(alert)));
    }
}
