//! Vigil on a secured deployment: every process (services, generator, admin) reaches
//! the broker on its SASL_SSL listener (TLS with a certificate of the local stack's
//! own CA, SCRAM-SHA-512, PLAIN or OAUTHBEARER; set by variables) and the schema registry over https with
//! basic auth (set in the configuration file), and gives the embedded runtime's
//! output. A wrong password is an error that says so, the service stays up and keeps
//! trying, and no secret reaches a log or /metrics. Ignored by a plain `cargo test`;
//! `scripts/test.sh` runs them on its local stack.

mod support;

use std::time::{Duration, Instant};

use support::{assert_same, reference, Running, Stack, ONE_AT_A_TIME};
use vigil_datagen::Dataset;

const RUN_PREFIX: &str = "secured-";
/// The broker's other SASL mechanism, for the same user.
const PLAIN: &[(&str, &str)] = &[("VIGIL_KAFKA_SASL_MECHANISM", "PLAIN")];
/// OAUTHBEARER with an unsecured JWT that librdkafka makes itself (no identity
/// provider), which the local stack's broker takes (Kafka's unsecured validator).
const OAUTHBEARER: &[(&str, &str)] = &[
    ("VIGIL_KAFKA_SASL_MECHANISM", "OAUTHBEARER"),
    ("VIGIL_KAFKA_ENABLE_SASL_OAUTHBEARER_UNSECURE_JWT", "true"),
    ("VIGIL_KAFKA_SASL_OAUTHBEARER_CONFIG", "principal=vigil"),
];

fn password() -> String {
    std::env::var("VIGIL_SECURE_PASSWORD").expect("VIGIL_SECURE_PASSWORD: run the Kafka tests through scripts/test.sh")
}

fn assert_no_secret(services: &[Running], secrets: &[&str]) {
    for s in services {
        let (log, metrics) = (s.log_text(), s.metrics_text());
        for secret in secrets {
            assert!(!log.contains(secret), "{}'s log shows a secret:\n{log}", s.name);
            assert!(!metrics.contains(secret), "{}'s /metrics shows a secret:\n{metrics}", s.name);
        }
    }
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn the_planted_dataset_through_a_secured_broker_and_registry_gives_the_embedded_result() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh_secured(RUN_PREFIX);
    // The stack's SCRAM-SHA-512 for some services, PLAIN or OAUTHBEARER for the others.
    let services = stack.spawn_all_with(|s| match s {
        "payment-metrics" | "device-router" | "health-monitor" => PLAIN,
        "payment-anomalies" => OAUTHBEARER,
        _ => &[],
    });
    let dir = std::env::temp_dir().join(format!("vigil-kafka-test-{}", stack.run));
    Dataset::planted(1, 7).write_to(&dir).unwrap();
    let sent = stack.generator(&["--input", dir.to_str().unwrap()]).output().unwrap();
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
    let expected = reference(Dataset::planted(1, 7));
    let (got, dead) = stack.wait_for(&expected, Duration::from_secs(90));
    assert_same(&got, &expected, "Kafka output through SASL_SSL and https differs from the embedded runtime");
    assert_eq!(dead.len(), 4, "the four planted bad lines: {dead:#?}");
    assert_no_secret(&services, &[&password()]);
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn a_wrong_password_is_an_error_that_says_so_and_the_service_keeps_trying() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh_secured(RUN_PREFIX);
    let wrong = "not-the-password-4711";
    // What the broker answers each mechanism's failure (so it also tells which was used).
    let refusals = [
        ("SCRAM-SHA-512", "invalid credentials with SASL mechanism SCRAM-SHA-512"),
        ("PLAIN", "Invalid username or password"),
    ];
    for (mechanism, refusal) in refusals {
        let vars = [("VIGIL_KAFKA_SASL_MECHANISM", mechanism), ("VIGIL_KAFKA_SASL_PASSWORD", wrong)];
        let mut service = stack.spawn_with("join-enrich", "0", &vars);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !service.log_text().contains("member failed") {
            assert!(Instant::now() < deadline, "join-enrich ({mechanism}) never failed:\n{}", service.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = service.log_text();
        assert!(
            log.contains("SASL authentication error: Authentication failed") && log.contains(refusal),
            "the log says why ({mechanism}): {log}"
        );
        assert_eq!(service.metric("vigil_member_degraded"), 1, "degraded while it cannot connect");
        assert!(service.child.try_wait().unwrap().is_none(), "still running, to try again");
        assert_no_secret(&[service], &[wrong, &password()]);
    }
}
