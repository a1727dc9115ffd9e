//! `vigil reset` against a real broker and registry (started by
//! `scripts/test.sh`, which exports VIGIL_BOOTSTRAP_SERVERS and
//! VIGIL_SCHEMA_REGISTRY_URL), with the six services as processes, as in
//! `services.rs`. Ignored by a plain `cargo test`. Each test resets every topic, so
//! they run one at a time.
//!
//! A dataset that ends (the generator's end-of-input markers) leaves every stage's
//! watermark at the end of time, in its committed state. The tests show what a reset
//! does about it: `reset --all` replays the input from the start, giving the embedded
//! runtime's records once more after the old ones; `reset --all --to-latest` lets a
//! new dataset follow the finished one, which without a reset comes out unmatched.

mod support;

use std::collections::HashMap;
use std::process::Output;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use support::{assert_same, reference, send_line, start, Running, Stack, PARTITIONS};
use vigil_datagen::traffic::Traffic;
use vigil_datagen::{Dataset, PLANTED_START_MS};
use vigil_ingest::MergedInput;
use vigil_kafka::codec::Codec;
use vigil_kafka::marker_headers;
use vigil_kafka::tail::tagged_line;
use vigil_model::topology::{Topic, DEAD_LETTERS};

/// This file's runs (their groups and logs) are told from `services.rs`'s by this.
const RUN_PREFIX: &str = "reset-";

/// Where each partition of the output topics ends: what a run wrote before.
type Ends = HashMap<(String, i32), i64>;

impl Stack {
    /// A client that reads committed records and joins no group (`group` is only
    /// where it looks up committed offsets).
    fn consumer(&self, group: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .unwrap()
    }

    fn client(&self) -> BaseConsumer {
        self.consumer(&format!("vigil-reset-test-{}", self.run))
    }

    /// `vigil reset` on this run's groups.
    fn reset(&self, args: &[&str]) -> Output {
        let pattern = self.group("{stage}");
        self.admin(&["reset", "--group-id", &pattern]).args(args).output().unwrap()
    }

    /// `reset` once the stopped services' members have left their groups: a static
    /// member (the keyed stages') stays listed until its session expires.
    fn reset_stopped(&self, args: &[&str]) -> Output {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.reset(args);
            if !text(&out.stderr).contains("cannot reset a running stage") || Instant::now() > deadline {
                eprintln!("$ vigil reset {}\n{}{}", args.join(" "), text(&out.stdout), text(&out.stderr));
                return out;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn output_topics() -> Vec<&'static Topic> {
        support::result_topics().into_iter().chain([&DEAD_LETTERS]).collect()
    }

    /// Where every output partition ends now.
    fn ends(&self) -> Ends {
        let client = self.client();
        let mut ends = Ends::new();
        for topic in Self::output_topics() {
            for p in 0..PARTITIONS {
                let (_, high) = client.fetch_watermarks(topic.name, p, Duration::from_secs(10)).unwrap();
                ends.insert((topic.name.to_string(), p), high);
            }
        }
        ends
    }

    /// The committed output records after `since` (from the beginning where it says
    /// nothing), as sorted tagged lines, and the dead letters.
    fn outputs_since(&self, since: &Ends) -> (Vec<String>, Vec<String>) {
        let consumer = self.client();
        let mut tpl = TopicPartitionList::new();
        for topic in Self::output_topics() {
            for p in 0..PARTITIONS {
                let offset = since.get(&(topic.name.to_string(), p)).map_or(Offset::Beginning, |&o| Offset::Offset(o));
                tpl.add_partition_offset(topic.name, p, offset).unwrap();
            }
        }
        consumer.assign(&tpl).unwrap();
        let codec = Codec::new(&self.registry).unwrap();
        let mut lines = Vec::new();
        let mut last = Instant::now();
        while last.elapsed() < Duration::from_secs(3) {
            let Some(message) = consumer.poll(Duration::from_millis(200)) else { continue };
            let message = message.unwrap();
            last = Instant::now();
            if marker_headers::read(&message).is_none() {
                let value = codec.decode_value(message.payload().unwrap_or_default()).unwrap();
                lines.push(tagged_line(support::topology().topic(message.topic()).unwrap(), &value));
            }
        }
        let (dead, mut lines): (Vec<String>, Vec<String>) =
            lines.into_iter().partition(|l| l.starts_with("DEAD_LETTER>"));
        lines.sort();
        (lines, dead)
    }

    /// Waits until the outputs after `since` equal `expected` (or the time is up).
    fn wait_since(&self, since: &Ends, expected: &[String], within: Duration) -> (Vec<String>, Vec<String>) {
        let deadline = Instant::now() + within;
        loop {
            let got = self.outputs_since(since);
            if got.0 == expected || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// The sum of the offsets `group` committed on `topic` (0 if none).
    fn committed(&self, group: &str, topic: &str) -> i64 {
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(topic, p);
        }
        let committed = self.consumer(group).committed_offsets(tpl, Duration::from_secs(10)).unwrap();
        committed
            .elements()
            .iter()
            .filter_map(|e| if let Offset::Offset(o) = e.offset() { Some(o) } else { None })
            .sum()
    }

    /// Sets `group`'s committed offsets of every partition of `topics` to 0, once
    /// the stopped stage's static member has left (its session expires in 10 s).
    fn commit_beginning(&self, group: &str, topics: &[&str]) {
        let mut tpl = TopicPartitionList::new();
        for topic in topics {
            for p in 0..PARTITIONS {
                tpl.add_partition_offset(topic, p, Offset::Offset(0)).unwrap();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = self.consumer(group).commit(&tpl, CommitMode::Sync) {
            assert!(Instant::now() < deadline, "cannot commit the offsets of {group}: {e}");
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The planted dataset (scale 1) through the running services, generated to its
    /// end-of-input markers: what they wrote (once it is all there or the time is up),
    /// and the embedded runtime's records for it.
    fn finish_planted(&self) -> (Vec<String>, Vec<String>) {
        let generated = self.generator(&["--scale", "1"]).status().unwrap();
        assert!(generated.success());
        let expected = reference(Dataset::planted(1, 7));
        let (got, _) = self.wait_since(&Ends::new(), &expected, Duration::from_secs(90));
        (got, expected)
    }

    /// A dataset to the input topics, as the generator sends it, then end-of-input.
    fn produce(&self, dataset: Dataset) {
        let producer = self.producer();
        for line in MergedInput::from_dataset(dataset) {
            send_line(&producer, &line.unwrap());
        }
        producer.finish().unwrap();
        producer.flush().unwrap();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Normal traffic with ids and event times of its own: another day's dataset.
fn traffic(seed: u64, start_ms: i64, first_id: u64, events: u64) -> Dataset {
    let t = Traffic::new(seed, start_ms, first_id);
    let pairs = 0..Traffic::pairs_for(events);
    Dataset {
        orders: pairs.clone().filter_map(|i| t.order(i)).map(|o| json(&o)).collect(),
        payments: pairs.filter_map(|i| t.payment(i)).map(|p| json(&p)).collect(),
        devices: (0..Traffic::devices_for(events)).map(|k| json(&t.device(k))).collect(),
    }
}

fn json<T: serde::Serialize>(record: &T) -> String {
    serde_json::to_string(record).unwrap()
}

/// SIGTERM to every service: each commits what it has done and leaves its groups.
fn stop(services: Vec<Running>) {
    services.iter().for_each(Running::sigterm);
    for mut s in services {
        let status = s.child.wait().unwrap();
        assert!(status.success(), "{} did not stop cleanly:\n{}", s.name, s.log_text());
    }
}

const NOT_EMBEDDED: &str = "the Kafka services' output differs from the embedded runtime's";

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn reset_all_replays_a_finished_dataset_and_refuses_while_a_stage_runs() {
    let (_one, stack, services) = start(RUN_PREFIX);
    let (first, expected) = stack.finish_planted();

    let refused = stack.reset(&["--all"]);
    assert_eq!(refused.status.code(), Some(2));
    let why = text(&refused.stderr);
    assert!(why.contains("cannot reset a running stage"), "{why}");
    assert!(why.contains(&format!("join-enrich has 1 member in group {}", stack.group("join-enrich"))), "{why}");
    assert!(why.contains(&format!("in group {}-leader", stack.group("health-monitor"))), "{why}");
    assert!(why.contains("Stop every instance of join-enrich, payment-metrics"), "{why}");

    stop(services);
    let before = stack.ends();
    let join_group = stack.group("join-enrich");
    assert!(stack.committed(&join_group, "orders") > 0, "join-enrich committed its input offsets");
    let dry = stack.reset_stopped(&["--all", "--dry-run"]);
    assert!(dry.status.success());
    assert_eq!(text(&dry.stdout).lines().filter(|l| l.ends_with(": not done (dry run)")).count(), 23);
    assert!(stack.committed(&join_group, "orders") > 0, "a dry run changes nothing");

    let reset = stack.reset_stopped(&["--all"]);
    assert!(reset.status.success());
    let said = text(&reset.stdout);
    for line in [
        format!("join-enrich: delete consumer group {join_group} (its committed offsets; reads orders, payments from the beginning): deleted"),
        "join-enrich: delete topic join-enrich-changelog (its state): deleted".to_string(),
        format!("health-monitor: delete election group {}-leader: deleted", stack.group("health-monitor")),
    ] {
        assert!(said.lines().any(|l| l == line), "missing `{line}` in\n{said}");
    }
    assert!(said.lines().last().unwrap().ends_with(": created (4 partitions, replication 1)"), "{said}");
    assert_eq!(stack.committed(&join_group, "orders"), 0, "the offsets are gone");
    let read_from = "enriched-payments-between-stages";
    assert!(stack.committed(&stack.group("payment-metrics"), read_from) > 0, "skips the old run's output");

    // The same records once more after the old ones: the whole input, processed
    // from the start with empty state. (The first run is checked against the embedded
    // runtime last, so that a difference there is not taken for the reset's.)
    let services = stack.spawn_all();
    let (replay, dead) = stack.wait_since(&before, &first, Duration::from_secs(90));
    stop(services);
    assert_same(&replay, &first, "the replay after the reset differs from the first run");
    assert_eq!(dead.len(), 4, "the four planted bad lines, once more: {dead:#?}");
    assert_same(&first, &expected, NOT_EMBEDDED);
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn reset_to_latest_lets_a_new_dataset_follow_a_finished_one() {
    let (_one, stack, services) = start(RUN_PREFIX);
    let (got_first, first) = stack.finish_planted();

    // Without a reset, the stages go on with the watermarks the ended dataset left at
    // the end of time: the next day's payments all come out unmatched.
    let day = 86_400_000;
    let after_first = stack.ends();
    let second = traffic(11, PLANTED_START_MS + day, 500_000, 400);
    let payments = second.payments.len();
    stack.produce(second);
    let deadline = Instant::now() + Duration::from_secs(60);
    let enriched = loop {
        let (lines, _) = stack.outputs_since(&after_first);
        let enriched: Vec<String> = lines.into_iter().filter(|l| l.starts_with("ENRICHED>")).collect();
        if enriched.len() >= payments || Instant::now() > deadline {
            break enriched;
        }
    };
    assert_eq!(enriched.len(), payments, "every payment of the second dataset comes out");
    assert!(enriched.iter().all(|l| l.contains(r#""unmatched": true"#)), "all unmatched: {:#?}", &enriched[..3]);
    stop(services);

    // Forget the past and start at the end of every input: the third dataset comes
    // out as the embedded runtime gives it on its own.
    let reset = stack.reset_stopped(&["--all", "--to-latest"]);
    assert!(reset.status.success());
    assert!(text(&reset.stdout).contains(&format!(
        "join-enrich: commit group {} at the end of orders (--to-latest): done",
        stack.group("join-enrich")
    )));
    let before = stack.ends();
    let services = stack.spawn_all();
    let third = traffic(13, PLANTED_START_MS + 2 * day, 900_000, 1_000);
    let expected = reference(third.clone());
    assert!(expected.iter().any(|l| l.starts_with("ENRICHED>") && l.contains(r#""unmatched": false"#)));
    stack.produce(third);
    let (got, dead) = stack.wait_since(&before, &expected, Duration::from_secs(90));
    stop(services);
    assert_same(&got, &expected, "the dataset after the reset differs from the embedded runtime's output on it alone");
    assert!(dead.is_empty(), "{dead:#?}");
    assert_same(&got_first, &first, NOT_EMBEDDED);
}

/// An offset commit of an aborted transaction can reach the broker after a later
/// transaction's (librdkafka lacks KIP-890), leaving a group's offsets behind the
/// state committed with them. Here join-enrich's offsets are set back to the
/// beginning by hand after a finished run: started again, it reads from where its
/// state was committed, says so, and writes nothing twice.
#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn group_offsets_set_back_behind_the_state_are_read_from_the_states() {
    let (_one, stack, services) = start(RUN_PREFIX);
    let (first, expected) = stack.finish_planted();
    stop(services);
    let before = stack.ends();
    let group = stack.group("join-enrich");
    let inputs = ["orders", "payments", "join-enrich-repartition-orders", "join-enrich-repartition-payments"];
    let committed = |stack: &Stack| -> Vec<i64> { inputs.iter().map(|t| stack.committed(&group, t)).collect() };
    let at_end = committed(&stack);
    assert!(at_end.iter().all(|&o| o > 0), "{at_end:?}");
    stack.commit_beginning(&group, &inputs);
    assert_eq!(committed(&stack), vec![0; inputs.len()]);

    let join = stack.spawn("join-enrich", "0");
    join.wait_ready();
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed(&stack) != at_end {
        assert!(Instant::now() < deadline, "join-enrich did not commit its offsets again:\n{}", join.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(join.metric("vigil_offset_corrections_total") > 0);
    assert!(join.log_text().contains("reading from the state's"));
    let (again, dead) = stack.outputs_since(&before);
    stop(vec![join]);
    assert!(again.is_empty(), "written again: {:#?}", &again[..again.len().min(5)]);
    assert!(dead.is_empty(), "{dead:#?}");
    assert_same(&first, &expected, NOT_EMBEDDED);
}
