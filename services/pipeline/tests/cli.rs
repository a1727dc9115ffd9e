//! The runner as a user meets it: its command line, its files and its messages.

use std::path::Path;
use std::process::{Command, Output};

use tempfile::TempDir;

fn pipeline(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vigil-pipeline"));
    cmd.args(args).env_remove("VIGIL_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("vigil-pipeline runs")
}

/// A folder of the test's own, removed when it is dropped.
fn scratch(name: &str) -> TempDir {
    tempfile::Builder::new().prefix(&format!("vigil-cli-{name}-")).tempdir().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, file: &str, lines: &[&str]) {
    std::fs::write(dir.join(file), lines.join("\n") + "\n").unwrap();
}

#[test]
fn no_arguments_runs_the_planted_dataset_and_prints_every_tagged_kind() {
    let out = pipeline(&[], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for tag in [
        "ENRICHED>",
        "METRICS>",
        "DEVICE_METRICS>",
        "ANOMALY>",
        "DEVICE_ANOMALY>",
        "LATE_EVENT>",
        "HEALTH_ALERT>",
        "DEAD_LETTER>",
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(tag)), "no {tag} line");
    }
    let stderr = text(&out.stderr);
    assert!(stderr.contains("events/s") && stderr.contains("balanced"), "{stderr}");
}

#[test]
fn a_dataset_folder_with_bad_lines_runs_to_the_end_and_counts_them() {
    let tmp = scratch("bad-lines");
    let dir = tmp.path();
    write(
        dir,
        "orders.ndjson",
        &[
            r#"{"order_id":"o1","customer_id":"c1","order_amount":10.0,"order_ts":1000,"country":"US"}"#,
            "not json at all",
        ],
    );
    write(
        dir,
        "payments.ndjson",
        &[
            r#"{"payment_id":"p1","order_id":"o1","paid_amount":10.0,"payment_ts":1500,"method":"card"}"#,
            r#"{"payment_id":"p2","order_id":"o1","paid_amount":-1.0,"payment_ts":1600,"method":"card"}"#,
            r#"{"payment_id":"p3","order_id":"o1","payment_ts":1700,"method":"card"}"#,
        ],
    );
    write(dir, "devices.ndjson", &[r#"{"device_id":"d","site_id":"s","event_type":"boom","status":"x","event_ts":1}"#]);
    let out = pipeline(&["--input", dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let dead: Vec<&str> = stdout.lines().filter(|l| l.starts_with("DEAD_LETTER>")).collect();
    assert_eq!(dead.len(), 4, "{stdout}");
    assert!(dead.iter().any(|l| l.contains("missing field `paid_amount`")));
    assert!(dead.iter().any(|l| l.contains("unknown variant `boom`")));
    assert!(dead.iter().any(|l| l.contains(r#""line": "not json at all""#)));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ENRICHED>")).count(), 1);
    assert!(text(&out.stderr).contains("read: orders 2, payments 3, devices 1"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ledger: read 6 = on time 2 + late 0 + dead letters 4: balanced"));
}

#[test]
fn an_output_folder_gets_one_ndjson_file_per_output_topic() {
    let tmp = scratch("output");
    let dir = tmp.path();
    let out = pipeline(&["--quiet", "--output", dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "--quiet prints no tagged lines");
    let late = std::fs::read_to_string(dir.join("device-events-late.ndjson")).unwrap();
    assert_eq!(late.lines().count(), 1);
    assert!(late.starts_with(r#"{"record_type": "device_event", "device_id": "dev-101""#));
    let alerts = std::fs::read_to_string(dir.join("health-alerts.ndjson")).unwrap();
    assert_eq!(alerts.lines().count(), 4);
}

#[test]
fn parameters_change_without_recompiling_and_print_config_shows_them() {
    let tmp = scratch("config");
    let dir = tmp.path();
    std::fs::write(dir.join("vigil.toml"), "[health]\nmax_event_gap_ms = 20000\n").unwrap();
    let config = dir.join("vigil.toml");
    let out = pipeline(
        &["--config", config.to_str().unwrap(), "--print-config"],
        &[("VIGIL_JOIN_JOIN_WINDOW_SECONDS", "15")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("join_window_seconds = 15"), "{shown}");
    assert!(shown.contains("max_event_gap_ms = 20000"), "{shown}");
    assert!(shown.contains("amount_static_floor = 5000.0"), "{shown}");

    // A 20 s gap ceiling: the planted 12.65 s stall no longer raises an alert.
    let out = pipeline(&["--config", config.to_str().unwrap()], &[]);
    assert!(!text(&out.stdout).contains("throughput_below_floor"));
}

#[test]
fn the_kafka_clients_security_settings_share_the_file_and_never_print() {
    let tmp = scratch("secured-config");
    let dir = tmp.path();
    let config = dir.join("vigil.toml");
    std::fs::write(
        &config,
        "[health]\nmax_event_gap_ms = 20000\n\n[kafka]\n\"sasl.password\" = \"kafka-s3cret\"\n\n\
         [schema_registry]\nusername = \"reader\"\npassword = \"registry-s3cret\"\n",
    )
    .unwrap();
    let out = pipeline(&["--config", config.to_str().unwrap(), "--print-config"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("max_event_gap_ms = 20000"), "{shown}");
    for secret in ["kafka-s3cret", "registry-s3cret", "sasl.password", "reader"] {
        assert!(!shown.contains(secret), "{secret} printed:\n{shown}");
    }
}

#[test]
fn mistakes_get_a_clear_message_and_a_failing_exit_code() {
    let out = pipeline(&["--input", "/nonexistent/vigil-dataset"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("vigil generate --out"), "{}", text(&out.stderr));

    let out = pipeline(&["--print-config"], &[("VIGIL_DEVICES_MAX_REBOOTS_PER_WINDOW", "many")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("VIGIL_DEVICES_MAX_REBOOTS_PER_WINDOW"), "{}", text(&out.stderr));
}

#[test]
fn a_generated_folder_gives_what_the_built_in_dataset_gives() {
    let tmp = scratch("generated");
    let dir = tmp.path();
    vigil_datagen::Dataset::planted(2, 11).write_to(dir).unwrap();
    let from_folder = pipeline(&["--input", dir.to_str().unwrap()], &[]);
    let built_in = pipeline(&["--scale", "2", "--seed", "11"], &[]);
    assert!(from_folder.status.success() && built_in.status.success());
    assert_eq!(text(&from_folder.stdout), text(&built_in.stdout));
}
