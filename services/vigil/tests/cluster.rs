//! The docker-compose cluster as a user meets it: `scripts/compose-test.sh` brings it
//! up (three taskmanagers) and runs this test against its published ports, reading
//! topics from the host as a user's own clients would. Ignored by a plain `cargo
//! test`, and skipped by `scripts/test.sh`'s cargo run: the compose test runs it.
//!
//! In order: the planted scenarios reach the alert topics; the REST API answers in
//! Flink's shapes; Prometheus scrapes every target and loaded the rules; the dashboard,
//! opened in headless Chromium, shows the graph with live rates and the alerts; one
//! taskmanager is killed while input flows, and the committed output still equals
//! the embedded runtime's on the same input (up to where both watermarks are), and
//! the dashboard shows the lost taskmanager. The notifier delivers every alert on the
//! alert topics to the demo webhook receiver, and Prometheus' VigilTaskmanagerLost
//! reaches it through Alertmanager.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vigil_datagen::planted::SEED_LINES;
use vigil_datagen::traffic::Traffic;
use vigil_datagen::Dataset;
use vigil_ingest::MergedInput;
use vigil_model::{Config, Millis};
use vigil_operators::SeedPipeline;
use vigil_stream::Pipeline;

/// The compose file's generator: the planted dataset and 10 000 events, seed 7.
const DEMO_SCALE: u64 = 10;
/// The input the test adds while it kills a taskmanager: 10 000 events of traffic.
const EXTRA_EVENTS: u64 = 10_000;
/// Five times event time's own pace: fast enough for a short test, slow enough that
/// partitions waking from idleness one after another stay within the watermark bound.
const EXTRA_RATE: &str = "200";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run this test through scripts/compose-test.sh"))
}

/// `vigil`, the tools' binary.
fn vigil() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vigil"))
}

struct Cluster {
    jobmanager: String,
    prometheus: String,
    /// The demo webhook receiver (`vigil receive-alerts`).
    receiver: String,
    bootstrap: String,
    registry: String,
    /// A shell command that kills the taskmanager `{taskmanager}` at once (SIGKILL).
    kill_taskmanager: String,
    up_at_ms: i64,
    artifacts: PathBuf,
    taskmanagers: usize,
    http: reqwest::blocking::Client,
}

impl Cluster {
    fn from_env() -> Cluster {
        let artifacts = PathBuf::from(env("VIGIL_CLUSTER_ARTIFACTS"));
        std::fs::create_dir_all(&artifacts).unwrap();
        Cluster {
            jobmanager: env("VIGIL_CLUSTER_JOBMANAGER"),
            prometheus: env("VIGIL_CLUSTER_PROMETHEUS"),
            receiver: env("VIGIL_CLUSTER_RECEIVER"),
            bootstrap: env("VIGIL_BOOTSTRAP_SERVERS"),
            registry: env("VIGIL_SCHEMA_REGISTRY_URL"),
            kill_taskmanager: env("VIGIL_CLUSTER_KILL_TASKMANAGER"),
            up_at_ms: env("VIGIL_CLUSTER_UP_AT_MS").parse().unwrap(),
            artifacts,
            taskmanagers: env("VIGIL_CLUSTER_TASKMANAGERS").parse().unwrap(),
            http: reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
        }
    }

    fn get(&self, url: &str) -> Value {
        let response = self.http.get(url).send().unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert!(response.status().is_success(), "GET {url}: {}", response.status());
        response.json().unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
    }

    fn rest(&self, path: &str) -> Value {
        self.get(&format!("{}{path}", self.jobmanager))
    }

    fn job(&self) -> (String, Value) {
        let id = self.rest("/jobs")["jobs"][0]["id"].as_str().unwrap().to_string();
        let job = self.rest(&format!("/jobs/{id}"));
        (id, job)
    }

    fn alive_taskmanagers(&self) -> Vec<String> {
        self.rest("/taskmanagers")["taskmanagers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["vigil"]["state"] == "alive")
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// Committed records of topics, as tagged lines (read from the host).
    fn tail(&self, topics: &[&str]) -> Vec<String> {
        let out = vigil()
            .env("VIGIL_BOOTSTRAP_SERVERS", &self.bootstrap)
            .env("VIGIL_SCHEMA_REGISTRY_URL", &self.registry)
            .args(["tail", "--idle-exit-secs", "3"])
            .args(topics)
            .output()
            .unwrap();
        assert!(out.status.success(), "vigil tail: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect()
    }

    /// The page after its scripts ran, and a screenshot of it.
    fn dashboard(&self, screenshot: &Path) -> String {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let profile = self.artifacts.join("chromium-profile");
        // The live pane polls instead of streaming here: a headless run with a virtual
        // time budget waits for the network to go quiet, which a stream never does.
        let url = format!("{}/?live=poll", self.jobmanager);
        let flags = |extra: &[&str]| {
            let mut c = Command::new(&chromium);
            c.args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
            ])
            .args(["--disable-component-update", "--disable-sync", "--window-size=1600,1000"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(["--virtual-time-budget=8000"])
            .args(extra)
            .arg(&url)
            .stderr(Stdio::null());
            c
        };
        let shot = flags(&[&format!("--screenshot={}", screenshot.display())]).status().unwrap();
        assert!(shot.success() && screenshot.exists(), "chromium took no screenshot");
        let dom = flags(&["--dump-dom"]).output().unwrap();
        assert!(dom.status.success(), "chromium could not load the dashboard");
        String::from_utf8(dom.stdout).unwrap()
    }
}

fn wait_until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = check() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting until {what}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn step(what: &str) {
    eprintln!("compose test: {what}");
}

#[test]
#[ignore = "needs the compose cluster: run scripts/compose-test.sh"]
fn compose_cluster_behaves_as_its_users_expect() {
    let cluster = Cluster::from_env();
    step("waiting for the cluster");
    wait_until("the jobmanager is healthy and every taskmanager registered", Duration::from_secs(240), || {
        (cluster.alive_taskmanagers().len() == cluster.taskmanagers).then_some(())
    });
    planted_scenarios_reach_the_alert_topics(&cluster);
    the_notifier_delivers_every_alert_to_the_webhook(&cluster);
    the_pipeline_answers_why_a_customer_was_flagged(&cluster);
    rest_answers_in_flinks_shapes(&cluster);
    prometheus_scrapes_every_target_and_loaded_the_rules(&cluster);
    killing_a_taskmanager_mid_stream_loses_and_doubles_nothing(&cluster);
    the_lost_taskmanager_reaches_the_receiver_through_alertmanager(&cluster);
}

fn the_notifier_delivers_every_alert_to_the_webhook(cluster: &Cluster) {
    step("every alert on the alert topics at the webhook receiver, once");
    let on_topics: BTreeMap<String, usize> =
        multiset(cluster.tail(&["payment-anomalies", "device-anomalies", "health-alerts"]).into_iter());
    let received = wait_until("the receiver has every alert", Duration::from_secs(120), || {
        let received = cluster.get(&format!("{}/received", cluster.receiver));
        let lines =
            multiset(received["alerts"].as_array()?.iter().filter_map(|a| Some(a["line"].as_str()?.to_string())));
        on_topics.keys().all(|l| lines.contains_key(l)).then_some((lines, received))
    });
    let (lines, body) = received;
    assert!(lines.values().all(|&n| n == 1), "one delivery per idempotency key: {lines:#?}");
    let keys: Vec<&str> =
        body["alerts"].as_array().unwrap().iter().filter_map(|a| a["idempotency_key"].as_str()).collect();
    assert!(keys.iter().all(|k| k.starts_with("vigil-")), "{keys:?}");
    eprintln!(
        "compose test: {} alerts at the receiver, {} repeats dropped by key",
        lines.len(),
        body["repeats"].as_u64().unwrap_or_default()
    );
}

fn the_pipeline_answers_why_a_customer_was_flagged(cluster: &Cluster) {
    step("a state query: the planted customer's amount statistics, from the member that holds them");
    let (id, _) = cluster.job();
    let url = |customer: &str| format!("{}/jobs/{id}/state/customers/{customer}", cluster.jobmanager);
    let state: Value = wait_until("cust-001's state is answered", Duration::from_secs(60), || {
        let response = cluster.http.get(url("cust-001")).send().ok()?;
        (response.status() == 200).then(|| response.json().ok()).flatten()
    });
    // Its five payments of history and pay-9003, at least (traffic may add more).
    assert!(state["count"].as_u64().unwrap() >= 6, "{state}");
    assert!(state["threshold"].as_f64().unwrap() > 0.0 && state["std_dev"].as_f64().unwrap() > 0.0, "{state}");
    assert!(cluster.alive_taskmanagers().iter().any(|t| state["answered_by"] == t.as_str()), "{state}");
    let unknown = cluster.http.get(url("no-such-customer")).send().unwrap();
    assert_eq!(unknown.status(), 404, "an unknown customer");
    eprintln!("compose test: cust-001: {state}");
}

fn the_lost_taskmanager_reaches_the_receiver_through_alertmanager(cluster: &Cluster) {
    step("VigilTaskmanagerLost, fired by Prometheus, at the receiver through Alertmanager");
    // The rule waits a minute (`for: 1m`), Alertmanager 10 s more to group.
    let alert = wait_until("VigilTaskmanagerLost reaches the receiver", Duration::from_secs(240), || {
        let received = cluster.get(&format!("{}/received", cluster.receiver));
        received["alertmanager"]
            .as_array()?
            .iter()
            .find(|a| a["labels"]["alertname"] == "VigilTaskmanagerLost" && a["status"] == "firing")
            .cloned()
    });
    eprintln!("compose test: Alertmanager delivered {}", alert["annotations"]["summary"]);
}

fn planted_scenarios_reach_the_alert_topics(cluster: &Cluster) {
    step("the planted scenarios on the alert topics");
    let wanted: Vec<&str> = SEED_LINES
        .iter()
        .copied()
        .filter(|l| ["ANOMALY>", "DEVICE_ANOMALY>", "LATE_EVENT>", "HEALTH_ALERT>"].iter().any(|t| l.starts_with(t)))
        .collect();
    assert_eq!(wanted.len(), 10, "the seed's anomalies, late event and four health alerts");
    let topics = ["payment-anomalies", "device-anomalies", "device-events-late", "health-alerts"];
    // Which lines are still missing, said each time that changes: a timeout then
    // points at the stage that fell short.
    let mut reported = None;
    wait_until("the seed's planted alerts are on the topics", Duration::from_secs(300), || {
        let lines = cluster.tail(&topics);
        let missing: Vec<&str> = wanted.iter().copied().filter(|w| !lines.iter().any(|l| l == w)).collect();
        if reported.as_ref() != Some(&missing) {
            eprintln!(
                "compose test: {} alert lines on the topics, {} planted ones missing",
                lines.len(),
                missing.len()
            );
            missing.iter().for_each(|m| eprintln!("  missing: {m}"));
            reported = Some(missing.clone());
        }
        missing.is_empty().then_some(())
    });
    // When the first of them was committed, from the jobmanager's live pane.
    let events = cluster.rest("/events");
    let first = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] != "dead_letter")
        .filter_map(|e| e["timestamp_ms"].as_i64())
        .min()
        .expect("the live pane has the alerts");
    eprintln!("compose test: first alert committed {:.1} s after `up`", (first - cluster.up_at_ms) as f64 / 1000.0);
}

fn rest_answers_in_flinks_shapes(cluster: &Cluster) {
    step("the REST API in Flink's shapes");
    let overview = cluster.rest("/overview");
    for key in ["taskmanagers", "slots-total", "slots-available", "jobs-running", "jobs-finished", "flink-version"] {
        assert!(overview.get(key).is_some(), "/overview has no `{key}`: {overview}");
    }
    assert_eq!(overview["taskmanagers"], cluster.taskmanagers);
    assert_eq!(overview["jobs-running"], 1);
    let (id, job) = cluster.job();
    assert_eq!(id.len(), 32, "a Flink job id is 32 hex digits");
    assert_eq!(job["state"], "RUNNING");
    let vertices = job["vertices"].as_array().unwrap();
    let names: Vec<&str> = vertices.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["join-enrich", "payment-metrics", "payment-anomalies", "device-router", "device-analytics", "health-monitor"]
    );
    for v in vertices {
        for key in ["read-records", "write-records", "read-bytes", "write-bytes"] {
            assert!(v["metrics"][key].is_u64(), "vertex {} has no metrics.{key}", v["name"]);
        }
        assert!(v["tasks"]["RUNNING"].is_u64() && v["parallelism"].is_u64());
        let ledger = &v["vigil"]["ledger"];
        assert_eq!(ledger["balanced"], true, "{}: {ledger}", v["name"]);
        let watermarks = cluster.rest(&format!("/jobs/{id}/vertices/{}/watermarks", v["id"].as_str().unwrap()));
        let first = &watermarks[0];
        assert!(first["id"].as_str().unwrap().ends_with(".currentInputWatermark"), "{watermarks}");
        assert!(first["value"].as_str().unwrap().parse::<i64>().is_ok(), "{watermarks}");
    }
    assert_eq!(job["plan"]["nodes"].as_array().unwrap().len(), 6);
    let dead: u64 = vertices.iter().map(|v| v["vigil"]["ledger"]["dead_letters"].as_u64().unwrap()).sum();
    assert_eq!(dead, 4, "the planted dataset's four bad lines");
    let checkpoints = cluster.rest(&format!("/jobs/{id}/checkpoints"));
    assert!(checkpoints["counts"]["completed"].as_u64().unwrap() > 0, "{checkpoints}");
    assert_eq!(checkpoints["latest"]["completed"]["status"], "COMPLETED");
    let tms = cluster.rest("/taskmanagers");
    for tm in tms["taskmanagers"].as_array().unwrap() {
        for key in ["id", "path", "slotsNumber", "freeSlots", "timeSinceLastHeartbeat", "hardware"] {
            assert!(tm.get(key).is_some(), "a taskmanager without `{key}`: {tm}");
        }
    }
    let missing = cluster.http.get(format!("{}/jobs/{}", cluster.jobmanager, "0".repeat(32))).send().unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.json::<Value>().unwrap()["errors"].is_array(), "Flink's error shape");
}

fn prometheus_scrapes_every_target_and_loaded_the_rules(cluster: &Cluster) {
    step("Prometheus: every target up, the rules loaded");
    wait_until("Prometheus has every target up", Duration::from_secs(90), || {
        let targets = cluster.get(&format!("{}/api/v1/targets", cluster.prometheus));
        let active = targets["data"]["activeTargets"].as_array()?.clone();
        let by_job = |job: &str| active.iter().filter(|t| t["labels"]["job"] == job).count();
        let all_up = active.iter().all(|t| t["health"] == "up");
        (all_up && by_job("vigil-taskmanager") == cluster.taskmanagers && by_job("vigil-jobmanager") == 1).then_some(())
    });
    let rules = cluster.get(&format!("{}/api/v1/rules", cluster.prometheus));
    let loaded: usize =
        rules["data"]["groups"].as_array().unwrap().iter().map(|g| g["rules"].as_array().unwrap().len()).sum();
    assert!(loaded >= 20, "Prometheus loaded {loaded} rules");
    let query = cluster.get(&format!("{}/api/v1/query?query=vigil_ledger_records_total", cluster.prometheus));
    assert!(!query["data"]["result"].as_array().unwrap().is_empty(), "Prometheus has Vigil's series: {query}");
}

/// Normal traffic after the demo dataset (ids and event times of its own), as a
/// dataset folder.
fn extra_dataset(dir: &Path, after_ms: Millis) -> Dataset {
    let traffic = Traffic::new(11, after_ms, 500_000);
    let pairs = 0..Traffic::pairs_for(EXTRA_EVENTS);
    let extra = Dataset {
        orders: pairs.clone().filter_map(|i| traffic.order(i)).map(|o| serde_json::to_string(&o).unwrap()).collect(),
        payments: pairs.filter_map(|i| traffic.payment(i)).map(|p| serde_json::to_string(&p).unwrap()).collect(),
        devices: (0..Traffic::devices_for(EXTRA_EVENTS))
            .map(|k| serde_json::to_string(&traffic.device(k)).unwrap())
            .collect(),
    };
    extra.write_to(dir).unwrap();
    extra
}

/// The latest event time of a dataset.
fn last_event_ms(dataset: &Dataset) -> Millis {
    MergedInput::from_dataset(dataset.clone())
        .filter_map(|l| match l.unwrap() {
            vigil_ingest::Line::Record(r) => Some(r.event_ts()),
            vigil_ingest::Line::Dead(_) => None,
        })
        .max()
        .unwrap()
}

/// An output line's place in event time: its window's end, or its own event time.
fn event_time_of(line: &str) -> Millis {
    let json: Value = serde_json::from_str(line.split_once("> ").unwrap().1).unwrap();
    for field in ["window_end_ms", "event_ts_ms", "payment_ts_ms"] {
        if let Some(ms) = json[field].as_i64() {
            return ms;
        }
    }
    for field in ["window_end", "event_time", "resumed_at"] {
        if let Some(iso) = json[field].as_str() {
            return vigil_model::time::parse_iso_utc(iso).unwrap_or_else(|| panic!("not a time: {iso}"));
        }
    }
    panic!("no event time in {line}")
}

fn killing_a_taskmanager_mid_stream_loses_and_doubles_nothing(cluster: &Cluster) {
    step("a taskmanager killed while input flows");
    let demo = Dataset::planted(DEMO_SCALE, 7);
    let dir = cluster.artifacts.join("extra-input");
    let extra = extra_dataset(&dir, last_event_ms(&demo) + 1_000);
    let mut producing = Producing(
        vigil()
            .env("VIGIL_BOOTSTRAP_SERVERS", &cluster.bootstrap)
            .env("VIGIL_SCHEMA_REGISTRY_URL", &cluster.registry)
            .args(["generate", "--kafka", "--no-finish", "--rate", EXTRA_RATE, "--input"])
            .arg(&dir)
            .spawn()
            .unwrap(),
    );
    // Once the input flows: the dashboard with live rates, then the kill.
    wait_until("records flow through join-enrich", Duration::from_secs(60), || {
        let (_, job) = cluster.job();
        (job["vertices"][0]["vigil"]["records_in_per_second"].as_f64()? > 0.0).then_some(())
    });
    let screenshot = cluster.artifacts.join("dashboard.png");
    let page = cluster.dashboard(&screenshot);
    dashboard_shows_the_graph_rates_and_alerts(&page);
    eprintln!("compose test: dashboard screenshot at {}", screenshot.display());

    // The taskmanager leading a global stage: its keyed partitions move to the others
    // and a standby takes the lead.
    let (_, job) = cluster.job();
    let leader = job["vertices"][1]["vigil"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "active")
        .expect("payment-metrics has a leader")["taskmanager"]
        .as_str()
        .unwrap()
        .to_string();
    let command = cluster.kill_taskmanager.replace("{taskmanager}", &leader);
    let killed_at = Instant::now();
    let status = Command::new("sh").args(["-c", &command]).status().unwrap();
    assert!(status.success(), "cannot kill taskmanager {leader}: {command}");
    step(&format!("killed taskmanager {leader}, the leader of payment-metrics"));
    let failover = wait_until("the survivors own every task again", Duration::from_secs(120), || {
        let (_, job) = cluster.job();
        let lost =
            cluster.rest("/taskmanagers")["taskmanagers"].as_array()?.iter().any(|t| t["vigil"]["state"] == "lost");
        let covered = job["vertices"].as_array()?.iter().all(|v| {
            let tasks: usize = v["vigil"]["members"]
                .as_array()
                .map(|ms| {
                    ms.iter().filter(|m| m["role"] == "active").map(|m| m["tasks"].as_array().map_or(0, Vec::len)).sum()
                })
                .unwrap_or(0);
            tasks == if v["vigil"]["global"] == true { 1 } else { Config::default().runtime.partitions as usize }
        });
        let new_leader = job["vertices"][1]["vigil"]["members"]
            .as_array()?
            .iter()
            .any(|m| m["role"] == "active" && m["taskmanager"] != leader.as_str());
        (lost && covered && new_leader).then(|| killed_at.elapsed())
    });
    eprintln!("compose test: failover (kill to every task owned again) {:.1} s", failover.as_secs_f64());
    let page = cluster.dashboard(&cluster.artifacts.join("dashboard-lost-taskmanager.png"));
    assert!(page.contains(r#"data-state="lost""#), "the dashboard shows the lost taskmanager");

    assert!(producing.0.wait().unwrap().success(), "the generator failed");
    step("input done; comparing with the embedded runtime");
    let mut all = demo;
    all.orders.extend(extra.orders.iter().cloned());
    all.payments.extend(extra.payments.iter().cloned());
    all.devices.extend(extra.devices.iter().cloned());
    // Both runs agree on everything the cluster's watermarks passed: stop a minute
    // of event time before the input's end (the cluster's input stays open).
    let cut = last_event_ms(&extra) - 60_000;
    let expected = reference(all, cut);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let got = multiset(
            cluster
                .tail(&SeedPipeline::default().topology().result_topics().iter().map(|t| t.name).collect::<Vec<_>>())
                .into_iter()
                .filter(|l| event_time_of(l) < cut),
        );
        if got == expected {
            eprintln!("compose test: {} output records equal the embedded runtime's", expected.values().sum::<usize>());
            break;
        }
        if Instant::now() > deadline {
            let missing: Vec<&String> = expected.keys().filter(|l| got.get(*l) < expected.get(*l)).take(5).collect();
            let extra: Vec<&String> = got.keys().filter(|l| got.get(*l) > expected.get(*l)).take(5).collect();
            panic!("the cluster's output differs from the embedded runtime's\nmissing: {missing:#?}\nextra or doubled: {extra:#?}");
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    let (_, job) = cluster.job();
    for v in job["vertices"].as_array().unwrap() {
        assert_eq!(v["vigil"]["ledger"]["balanced"], true, "{}", v["name"]);
    }
}

/// The generator producing input; a failing test stops it.
struct Producing(std::process::Child);

impl Drop for Producing {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn dashboard_shows_the_graph_rates_and_alerts(page: &str) {
    assert!(page.contains("<title>Vigil — dashboard</title>"), "not the dashboard");
    for stage in
        ["join-enrich", "payment-metrics", "payment-anomalies", "device-router", "device-analytics", "health-monitor"]
    {
        assert!(page.contains(&format!(r#"data-stage="{stage}""#)), "the graph has no vertex {stage}");
    }
    assert!(
        page.contains(r#"class="edge""#) && page.contains(r#"data-topic="enriched-payments""#),
        "the graph has no edges"
    );
    let rates: Vec<f64> = page
        .split(r#"rate-in" data-value=""#)
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect();
    assert_eq!(rates.len(), 6, "a records-in rate per vertex: {rates:?}");
    assert!(rates.iter().any(|&r| r > 0.0), "live rates on the graph: {rates:?}");
    assert!(page.contains(r#"class="live-item"#) && page.contains(r#"data-kind="health_alert""#), "the live pane");
    assert!(page.contains("fault_rate_exceeded"), "the planted health alert in the live pane");
    assert!(page.contains(r#"class="li-state""#), "the planted amount anomaly links to its customer's state");
    let notified: u64 = page
        .split(r#"id="live-notifier" class="live-notifier" data-delivered=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next()?.parse().ok())
        .expect("the notifier's deliveries above the live pane");
    assert!(notified > 0, "the notifier delivered the planted alerts");
}

/// The embedded runtime's output on the same input, cut where the cluster's is.
fn reference(dataset: Dataset, cut: Millis) -> BTreeMap<String, usize> {
    let pipeline = SeedPipeline::default();
    let lines =
        vigil_embedded::result_lines(&pipeline, &Config::default(), MergedInput::from_dataset(dataset)).unwrap();
    multiset(lines.into_iter().filter(|l| event_time_of(l) < cut))
}

fn multiset(lines: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for l in lines {
        *counts.entry(l).or_insert(0) += 1;
    }
    counts
}

#[test]
fn every_seed_line_has_an_event_time() {
    for line in SEED_LINES {
        assert!(event_time_of(line) >= 1_700_000_000_000, "{line}");
    }
}
