//! Vigil on three brokers: the leader of an input partition killed (SIGKILL) mid-run
//! and started again on its data, and the output still equals the embedded
//! runtime's, nothing lost and nothing doubled. Runs on a local stack of three KRaft
//! nodes (`VIGIL_BROKERS=3`), which `scripts/test.sh` starts for this file alone;
//! `vigil provision` gives the topics three replicas and min.insync.replicas 2. The
//! order of events is driven: a third of the input, the kill, a third read and
//! committed on the two brokers left, the restart, the rest.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{assert_same, keep_metrics, ledgers, reference, send_lines, start, wait_for_commits, Running};
use vigil_datagen::Dataset;
use vigil_ingest::{Line, MergedInput};
use vigil_model::topology::PAYMENTS;

const RUN_PREFIX: &str = "brokers-";

/// `scripts/local-stack.sh` with `args`, on the stack of VIGIL_STACK_STATE; its stdout.
fn local_stack(args: &[&str]) -> String {
    assert!(
        std::env::var("VIGIL_STACK_STATE").is_ok(),
        "VIGIL_STACK_STATE: run the Kafka tests through scripts/test.sh"
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/local-stack.sh");
    let out = Command::new(script).args(args).output().unwrap();
    assert!(out.status.success(), "local-stack.sh {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A node killed with SIGKILL; started again by [`Killed::start`], or when the test
/// fails half-way, so that nothing after it finds a broker missing.
struct Killed {
    node: String,
    started: bool,
}

impl Killed {
    fn kill(node: &str) -> Killed {
        local_stack(&["node-kill", node]);
        Killed { node: node.to_string(), started: false }
    }

    /// Starts the node on its data; returns once it answers.
    fn start(mut self) {
        local_stack(&["node-start", &self.node]);
        self.started = true;
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if !self.started {
            let _ = std::panic::catch_unwind(|| local_stack(&["node-start", &self.node]));
        }
    }
}

/// Waits until the stages in `names` have committed, together, at least `records`
/// input records (their committed ledgers' `read`).
fn wait_for_read(services: &[Running], names: &[&str], records: u64) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let read: u64 = services
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
            .map(|s| s.metric_where("vigil_member_ledger_records", r#"outcome="read""#))
            .sum();
        if read >= records {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{names:?} committed {read} of {records} input records:\n{}",
            ledgers(services)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs three Kafka brokers and a schema registry: run scripts/test.sh"]
fn three_brokers_the_leader_of_an_input_partition_killed_mid_run_loses_and_doubles_nothing() {
    assert_eq!(
        support::brokers(),
        3,
        "a test for a stack of three brokers (VIGIL_BROKERS=3, as scripts/test.sh starts it)"
    );
    let (_one, stack, mut services) = start(RUN_PREFIX);
    // What `vigil provision` gives a topic on three brokers.
    let payments = local_stack(&[
        "kafka-class",
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        &stack.bootstrap,
        "--describe",
        "--topic",
        PAYMENTS.name,
    ]);
    assert!(
        payments.contains("ReplicationFactor: 3") && payments.contains("min.insync.replicas=2"),
        "payments has three replicas, two in sync for a write:\n{payments}"
    );
    let input: Vec<Line> = MergedInput::planted(20, 7).map(Result::unwrap).collect();
    let total = input.len();
    let mut thirds = input.chunks(total.div_ceil(3));
    let producer = stack.producer();
    let inputs = ["join-enrich", "device-router"];

    let first = thirds.next().unwrap();
    send_lines(&producer, first);
    let stateful = ["join-enrich", "payment-anomalies", "device-analytics", "health-monitor"];
    wait_for_commits(&services, &stateful, 300);

    // The leader of payments' partition 0 dies with the stages' transactions in
    // flight; the next third is produced and committed on the two brokers left.
    let leader = local_stack(&["leader", PAYMENTS.name, "0"]);
    let killed = Killed::kill(&leader);
    let second = thirds.next().unwrap();
    send_lines(&producer, second);
    wait_for_read(&services, &inputs, (first.len() + second.len()) as u64);
    assert_ne!(local_stack(&["leader", PAYMENTS.name, "0"]), leader, "another broker leads the partition");

    // Back on its data, it catches up; the rest of the input follows.
    killed.start();
    for rest in thirds {
        send_lines(&producer, rest);
    }
    producer.finish().unwrap();
    producer.flush().unwrap();
    // Every line sent is in the input topics once, beside one end marker per
    // partition: what the output lacks, the stages lost.
    let markers = 3 * support::PARTITIONS as i64;
    assert_eq!(
        stack.producer().records_in_inputs().unwrap(),
        total as i64 + markers,
        "the input topics hold the input"
    );

    let expected = reference(Dataset::planted(20, 7));
    let (got, _) = stack.wait_for(&expected, Duration::from_secs(180));
    let exited: Vec<String> =
        services.iter_mut().filter_map(|s| s.child.try_wait().unwrap().map(|_| s.name.clone())).collect();
    if got != expected {
        keep_metrics(&services);
        assert_same(
            &got,
            &expected,
            &format!(
                "Kafka output after node {leader} was killed differs from the embedded runtime (metrics kept next to \
                 the logs)\n{}",
                ledgers(&services)
            ),
        );
    }
    assert!(exited.is_empty(), "services exited: {exited:?}");
}
