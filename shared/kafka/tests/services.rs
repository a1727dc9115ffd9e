//! The six services as separate OS processes on a real Kafka broker and schema
//! registry (started by `scripts/test.sh`, which exports VIGIL_BOOTSTRAP_SERVERS and
//! VIGIL_SCHEMA_REGISTRY_URL). Ignored by a plain `cargo test`; the README's test
//! command runs them. Each test resets every topic, so they run one at a time.
//!
//! The reference is the embedded runtime on the same input: the services must
//! produce exactly its records (as multisets: none lost, none doubled).

mod support;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::{assert_same, reference, send_line, send_lines, start, wait_for_commits, Running, Stack, ONE_AT_A_TIME};
use vigil_datagen::Dataset;
use vigil_ingest::{Line, MergedInput};
use vigil_kafka::codec::Codec;
use vigil_kafka::produce::{InputProducer, Keying};
use vigil_model::topology::ORDERS;
use vigil_model::{Order, Payment, Source};

/// This file's runs (their groups and logs) start with the process id.
const RUN_PREFIX: &str = "";

const NOT_EMBEDDED: &str = "Kafka output differs from the embedded runtime";

/// Kills every service (SIGKILL, as their `Drop` does).
fn stop(services: Vec<Running>) {
    drop(services);
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn the_planted_dataset_through_six_services_gives_the_embedded_result() {
    let (_one, stack, services) = start(RUN_PREFIX);
    // A dataset folder, replayed onto the topics; a second replay with --if-empty
    // must add nothing.
    let dir = std::env::temp_dir().join(format!("vigil-kafka-test-{}", stack.run));
    Dataset::planted(1, 7).write_to(&dir).unwrap();
    let folder = dir.to_str().unwrap();
    assert!(stack.generator(&["--input", folder]).status().unwrap().success());
    let again = stack.generator(&["--input", folder, "--if-empty"]).output().unwrap();
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already hold"), "{again:?}");
    std::fs::remove_dir_all(&dir).unwrap();
    let expected = reference(Dataset::planted(1, 7));
    let (got, dead) = stack.wait_for(&expected, Duration::from_secs(90));
    assert_finished_and_accounted(&services);
    assert_process_and_client_metrics(&services);
    assert_state_query_answers(&services);
    stop(services);
    assert_same(&got, &expected, NOT_EMBEDDED);
    assert_eq!(dead.len(), 4, "the four planted bad lines: {dead:#?}");
    for line in [
        r#"ANOMALY> {"record_type": "anomaly", "anomaly_type": "amount", "customer_id": "cust-001", "payment_id": "pay-9003", "order_id": "order-9003", "amount": 9800.0, "threshold": 130.87, "event_time": "2023-11-14T22:13:48.057000+00:00"}"#,
        r#"LATE_EVENT> {"record_type": "device_event", "device_id": "dev-101", "site_id": "site-a", "event_type": "heartbeat", "status": "ok", "event_ts_ms": 1700000003507, "watermark_ms": 1700000039650, "lag_ms": 36143}"#,
    ] {
        assert!(got.iter().any(|l| l == line), "missing {line}");
    }
}

/// Every service says it has read the end of its input, and every input record it read
/// shows in its latency breakdown: how long it was queued in Kafka, processed, and
/// (once its transaction committed) how long it waited for that.
fn assert_finished_and_accounted(services: &[Running]) {
    let hops = |s: &Running, part: &str| s.metric_where("vigil_record_hop_seconds_count", &format!("part=\"{part}\""));
    for s in services {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let read = s.metric("vigil_records_in_total");
            let (queued, processed, waited) = (hops(s, "queued"), hops(s, "processing"), hops(s, "commit_wait"));
            let ended = s.metric("vigil_input_ended") == 1;
            if ended && read > 0 && queued == read && processed == read && waited == read {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: input ended {ended}, {read} records read, {queued} queued, {processed} processed, {waited} \
                 committed",
                s.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// payment-anomalies answers a state query from its live state: the planted
/// customer's amount statistics (five payments of history and pay-9003 at least), and
/// 404 for a customer it never scored.
fn assert_state_query_answers(services: &[Running]) {
    let anomalies = services.iter().find(|s| s.name == "payment-anomalies").unwrap();
    let (status, body) = anomalies.get("/state/payment-anomalies/customers/cust-001");
    assert_eq!(status, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["customer_id"], "cust-001", "{state}");
    assert!(state["count"].as_u64().unwrap() >= 6 && state["std_dev"].as_f64().unwrap() > 0.0, "{state}");
    assert_eq!(anomalies.get("/state/payment-anomalies/customers/no-such-customer").0, 404);
    assert_eq!(anomalies.get("/state/join-enrich/customers/cust-001").0, 421, "no member of join-enrich there");
}

/// Every service shows its process's metrics and, from librdkafka's statistics (every
/// 5 s by default), its consumer's round trip to the broker.
fn assert_process_and_client_metrics(services: &[Running]) {
    for s in services {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = s.metrics_text();
            let positive = |series: &str, label: &str| {
                text.lines()
                    .filter(|l| l.starts_with(series) && l.contains(label))
                    .any(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.0))
            };
            let memory = positive("process_resident_memory_bytes", "");
            let rtt = positive("vigil_kafka_broker_rtt_avg_seconds{", r#"client="consumer""#);
            if memory && rtt {
                break;
            }
            assert!(Instant::now() < deadline, "{}: resident memory {memory}, broker rtt {rtt} in\n{text}", s.name);
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// A payment of 50 000 for cust-001 after the dataset: its threshold comes from
/// cust-001's history, which lives only in restored state if a crash came between.
fn late_whale(after_ms: i64) -> (String, String) {
    let order = Order {
        order_id: "order-whale".into(),
        customer_id: "cust-001".into(),
        order_amount: 50_000.0,
        order_ts: after_ms,
        country: "US".into(),
    };
    let payment = Payment {
        payment_id: "pay-whale".into(),
        order_id: "order-whale".into(),
        paid_amount: 50_000.0,
        payment_ts: after_ms + 500,
        method: "card".into(),
    };
    (serde_json::to_string(&order).unwrap(), serde_json::to_string(&payment).unwrap())
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn kill_9_mid_stream_and_restart_loses_and_doubles_nothing() {
    let (_one, stack, mut services) = start(RUN_PREFIX);
    let scale = 40;
    // The test decides when input flows: half of it, the crash, then the rest.
    let input: Vec<Line> = MergedInput::planted(scale, 7).map(Result::unwrap).collect();
    let (first, second) = input.split_at(input.len() / 2);
    let producer = stack.producer();
    send_lines(&producer, first);
    let stateful = ["join-enrich", "payment-anomalies", "device-analytics", "health-monitor"];
    wait_for_commits(&services, &stateful, 500);
    for s in services.iter_mut().filter(|s| stateful.contains(&s.name.as_str())) {
        s.child.kill().unwrap(); // SIGKILL: no commit, no goodbye
        s.child.wait().unwrap();
    }
    send_lines(&producer, &second[..second.len() / 2]);
    for s in services.iter_mut().filter(|s| stateful.contains(&s.name.as_str())) {
        *s = stack.spawn(&s.name.clone(), "0");
    }
    for s in services.iter().filter(|s| stateful.contains(&s.name.as_str())) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !s.log_text().contains("restored=true") {
            assert!(Instant::now() < deadline, "{} restored no task from its changelog:\n{}", s.name, s.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    send_lines(&producer, &second[second.len() / 2..]);

    let end_ms = vigil_datagen::PLANTED_START_MS + 45_000 + scale as i64 * 25_000 + 10_000;
    let (order, payment) = late_whale(end_ms);
    producer.send_line(Source::Orders, &order).unwrap();
    producer.send_line(Source::Payments, &payment).unwrap();
    producer.finish().unwrap();
    producer.flush().unwrap();

    let mut dataset = Dataset::planted(scale, 7);
    dataset.orders.push(order);
    dataset.payments.push(payment);
    let expected = reference(dataset);
    let (got, _) = stack.wait_for(&expected, Duration::from_secs(120));
    stop(services);
    assert_same(&got, &expected, NOT_EMBEDDED);
    let whale =
        got.iter().find(|l| l.contains("pay-whale") && l.starts_with("ANOMALY>")).expect("the whale is flagged");
    assert!(!whale.contains(r#""threshold": 5000.0"#), "the threshold comes from restored history: {whale}");
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn two_instances_one_stopped_mid_stream_still_give_the_embedded_result() {
    let (_one, stack, mut services) = start(RUN_PREFIX);
    let seconds = [stack.spawn("device-analytics", "1"), stack.spawn("join-enrich", "1")];
    seconds.iter().for_each(Running::wait_ready);
    let deadline = Instant::now() + Duration::from_secs(60);
    while seconds.iter().any(|s| s.metric("vigil_tasks") == 0) {
        assert!(Instant::now() < deadline, "the second instances got no partitions");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Half the input, the second instances stopped once they have done part of the
    // work, then the rest.
    let input: Vec<Line> = MergedInput::planted(40, 7).map(Result::unwrap).collect();
    let (first, second) = input.split_at(input.len() / 2);
    let producer = stack.producer();
    send_lines(&producer, first);
    wait_for_commits(&seconds, &["device-analytics", "join-enrich"], 100);
    seconds.iter().for_each(Running::sigterm);
    send_lines(&producer, second);
    producer.finish().unwrap();
    producer.flush().unwrap();
    let expected = reference(Dataset::planted(40, 7));
    let (got, _) = stack.wait_for(&expected, Duration::from_secs(120));
    for mut s in seconds {
        assert!(s.child.wait().unwrap().success(), "{} stops cleanly on SIGTERM", s.name);
        assert!(s.log_text().contains("stopped cleanly"));
        services.push(s);
    }
    stop(services);
    assert_same(&got, &expected, NOT_EMBEDDED);
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn lateness_does_not_depend_on_keying() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let expected = reference(Dataset::planted(1, 7));
    let late: Vec<&String> = expected.iter().filter(|l| l.starts_with("LATE_EVENT>")).collect();
    assert!(!late.is_empty(), "the planted late heartbeat is late in the embedded run");
    // Unkeyed; keyed by other fields; keyed by the join's keys but placed by CRC32
    // (librdkafka's default partitioner) rather than murmur2.
    let runs =
        [(Keying::None, "murmur2_random"), (Keying::Other, "murmur2_random"), (Keying::Join, "consistent_random")];
    for (keys, partitioner) in runs {
        let run = format!("keyed by {keys:?}, placed by {partitioner}");
        let stack = Stack::fresh(RUN_PREFIX);
        let services = stack.spawn_all();
        send_planted(&stack, keys, partitioner);
        let (got, dead) = stack.wait_for(&expected, Duration::from_secs(90));
        let rerouted = services.iter().map(|s| s.metric("vigil_rerouted_records_total")).sum::<u64>();
        let behind = services.iter().map(|s| s.metric("vigil_records_out_of_order_total")).sum::<u64>();
        stop(services);
        assert_same(&got, &expected, &format!("{run}: {NOT_EMBEDDED}"));
        for line in &late {
            assert!(got.contains(line), "{run}: {line} is missing");
        }
        assert_eq!(dead.len(), 4, "{run}: the four planted bad lines");
        assert!(rerouted > 100, "{run}: most records went through the repartition topics ({rerouted})");
        assert_eq!(behind, 0, "{run}: every forwarded record came out in the order produced");
    }
}

/// The planted dataset, every stream (device events too) keyed as `keys` says and
/// placed by `partitioner`, by one producer in the dataset's order; every input
/// ended.
fn send_planted(stack: &Stack, keys: Keying, partitioner: &str) {
    let producer = stack.producer().keyed(keys).partitioned(partitioner).unwrap();
    for line in MergedInput::planted(1, 7).map(Result::unwrap) {
        send_line(&producer, &line);
    }
    producer.finish().unwrap();
    producer.flush().unwrap();
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn unkeyed_or_otherwise_keyed_input_produced_after_every_partition_went_idle_gives_the_same_output() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let expected = reference(Dataset::planted(1, 7));
    // Unkeyed, the producer's sticky partitioner often leaves a partition without
    // records: its task gets its keys only through the repartition topics, and the
    // end markers reach it first.
    for keys in [Keying::None, Keying::Other] {
        let stack = Stack::fresh(RUN_PREFIX);
        // As a user produces a while after `docker compose up`: every source partition
        // is judged idle first (sooner than by default, for the test's sake), and every
        // task decides, on nothing, that its input is keyed.
        let quick: &[(&str, &str)] = &[("VIGIL_RUNTIME_IDLE_WALL_CLOCK_MS", "3000")];
        let services = stack.spawn_all_with(|_| quick);
        for (stage, source_partitions) in [("join-enrich", 8), ("device-router", 4)] {
            let service = services.iter().find(|s| s.name == stage).unwrap();
            service.wait_for_log("partition idle:", source_partitions, Duration::from_secs(60));
        }
        send_planted(&stack, keys, "murmur2_random");
        let (got, dead) = stack.wait_for(&expected, Duration::from_secs(90));
        stop(services);
        assert_same(&got, &expected, NOT_EMBEDDED);
        assert_eq!(dead.len(), 4, "keyed by {keys:?}: the four planted bad lines");
    }
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn garbage_and_wrong_schemas_go_to_dead_letters_and_the_service_goes_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh(RUN_PREFIX);
    let router = stack.spawn("device-router", "0");
    router.wait_ready();
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &stack.bootstrap).create().unwrap();
    let codec = Codec::new(&stack.registry).unwrap();
    let order = Order {
        order_id: "o".into(),
        customer_id: "c".into(),
        order_amount: 1.0,
        order_ts: 1_700_000_000_000,
        country: "US".into(),
    };
    let wrong_schema = codec.encode(&ORDERS, &order).unwrap();
    producer.send(BaseRecord::<str, [u8]>::to("device-events").key("site-a").payload(b"\x00garbage")).unwrap();
    producer.send(BaseRecord::<str, [u8]>::to("device-events").key("site-a").payload(&wrong_schema)).unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
    let valid =
        r#"{"device_id":"dev-1","site_id":"site-a","event_type":"heartbeat","status":"ok","event_ts":1700000000000}"#;
    let inputs = stack.producer();
    inputs.send_line(Source::Devices, valid).unwrap();
    inputs.flush().unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let (dead, ontime) = loop {
        let out =
            stack.admin(&["tail", "--idle-exit-secs", "3", "dead-letters", "device-events-ontime"]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let dead: Vec<String> = text.lines().filter(|l| l.starts_with("DEAD_LETTER>")).map(String::from).collect();
        let ontime: Vec<String> = text.lines().filter(|l| l.contains("dev-1")).map(String::from).collect();
        if (dead.len() >= 2 && !ontime.is_empty()) || Instant::now() > deadline {
            break (dead, ontime);
        }
    };
    stop(vec![router]);
    assert_eq!(dead.len(), 2, "{dead:#?}");
    assert!(dead.iter().all(|d| d.contains(r#""source": "device-events""#)));
    assert!(dead.iter().any(|d| d.contains("not an Avro value")), "{dead:#?}");
    assert!(dead.iter().any(|d| d.contains("wrong shape")), "{dead:#?}");
    assert_eq!(ontime.len(), 1, "the valid event after them is processed");
}

/// `vigil tail … | head`: the reader goes away in the middle of a backlog, and
/// tail stops quietly, with success: no panic, and no following on for nobody.
#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn tail_stops_quietly_when_its_reader_goes_away() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh(RUN_PREFIX);
    // Some 2 500 lines, far more than a pipe holds: tail still has some to write
    // once its reader is gone.
    assert!(stack.generator(&["--scale", "5"]).status().unwrap().success());
    let mut tail =
        stack.admin(&["tail", "orders", "payments"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(tail.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("ORDERS> ") || first.starts_with("PAYMENTS> "), "{first}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = tail.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            tail.kill().unwrap();
            panic!("tail went on with no one reading its output");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    tail.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success() && !stderr.contains("panicked"), "{status}: {stderr}");
}

/// librdkafka reports a record it gives up on only in its delivery report: a producer
/// of input that ignored those would lose records without a word.
#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn an_input_record_the_broker_never_takes_fails_the_producer_when_it_flushes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh(RUN_PREFIX);
    let partitions = vigil_model::Config::default().runtime.partitions;
    // End markers for one partition more than the input topics have. Sent before the
    // producer knows the topics, they wait for its metadata and are dropped then, which
    // only the delivery reports tell. Whether the producer already knows them when it
    // sends is librdkafka's timing: if it does, the send itself is refused, also aloud.
    let producer = InputProducer::new(&stack.bootstrap, &stack.registry, partitions + 1).unwrap();
    let error = match producer.finish() {
        Ok(()) => {
            let error = format!("{:#}", producer.flush().expect_err("records were dropped, and flush said nothing"));
            assert!(error.contains("records were not delivered") && error.contains("produce them again"), "{error}");
            error
        }
        Err(refused) => format!("{refused:#}"),
    };
    assert!(error.contains("partition"), "the error names what was wrong: {error}");
}

/// A producer's Kafka client replaced mid-stream, as one that stalls is (librdkafka
/// can lose a partition's leader over a broker restart), sends every record once:
/// those the old client had not sent yet go with the new one, in their order.
#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn an_input_producer_whose_client_is_replaced_mid_stream_sends_every_record_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let expected = reference(Dataset::planted(1, 7));
    let stack = Stack::fresh(RUN_PREFIX);
    let services = stack.spawn_all();
    let producer = stack.producer();
    let lines: Vec<Line> = MergedInput::planted(1, 7).map(Result::unwrap).collect();
    let mut carried = 0;
    for chunk in lines.chunks(lines.len() / 3 + 1) {
        chunk.iter().for_each(|line| send_line(&producer, line));
        carried += producer.restart().unwrap();
    }
    producer.finish().unwrap();
    producer.flush().unwrap();
    let end_markers = 3 * vigil_model::Config::default().runtime.partitions as i64;
    let records = producer.records_in_inputs().unwrap();
    assert_eq!(records, lines.len() as i64 + end_markers, "every record once ({carried} carried over)");
    let (got, dead) = stack.wait_for(&expected, Duration::from_secs(90));
    stop(services);
    assert_same(&got, &expected, NOT_EMBEDDED);
    assert_eq!(dead.len(), 4, "the four planted bad lines");
}
