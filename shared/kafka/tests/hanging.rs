//! A hanging transaction on `__consumer_offsets`: an offset commit of a stage's
//! producer that reached the broker after its transaction ended (or, here, outside any
//! transaction), so no marker will ever end it. Without KIP-890, which librdkafka
//! lacks, a delayed commit request can leave one behind in a broker outage; the
//! group's offsets then stay "unstable" for good and a `read_committed` member cannot
//! learn where to resume. The member clears it itself (an aborted transaction of its
//! own producer ends every open one of that producer id) and the output is still the
//! embedded runtime's. Ignored by a plain `cargo test`; `scripts/test.sh` runs it.
//!
//! The test leaves the hanging commit with two raw Kafka requests (no client library
//! sends an offset commit outside a transaction): InitProducerId for the stage's
//! transactional id, then TxnOffsetCommit without AddOffsetsToTxn. The broker's
//! transaction verification (KIP-890's server half) would refuse the second, so it
//! is switched off for the test's duration.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use support::{assert_same, reference, send_lines, start, wait_for_commits};
use vigil_datagen::Dataset;
use vigil_kafka::topics::ENRICHED_PAYMENTS;
use vigil_pipeline::ingest::{Line, MergedInput};

const VERIFICATION: &str = "transaction.partition.verification.enable";
/// Kafka's error code for a transactional id whose transaction is still ending.
const CONCURRENT_TRANSACTIONS: i16 = 51;

/// A Kafka request of the classic (non-flexible) encoding, written field by field.
#[derive(Default)]
struct Request(Vec<u8>);

impl Request {
    fn new(api_key: i16, api_version: i16) -> Request {
        let mut r = Request::default();
        r.i16(api_key).i16(api_version).i32(1).string("vigil-hanging-test");
        r
    }
    fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn string(&mut self, s: &str) -> &mut Self {
        self.i16(s.len() as i16);
        self.0.extend_from_slice(s.as_bytes());
        self
    }

    /// Sends it and returns the response body (after the correlation id).
    fn send(&self, broker: &str) -> Vec<u8> {
        let mut conn = TcpStream::connect(broker).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        conn.write_all(&(self.0.len() as i32).to_be_bytes()).unwrap();
        conn.write_all(&self.0).unwrap();
        let mut size = [0u8; 4];
        conn.read_exact(&mut size).expect("the broker answers (or it refused the request version)");
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        conn.read_exact(&mut body).unwrap();
        body.split_off(4)
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().unwrap())
}

/// Restores the broker's transaction verification even when the test fails.
struct VerificationOff<'a>(&'a AdminClient<DefaultClientContext>);

impl<'a> VerificationOff<'a> {
    fn new(admin: &'a AdminClient<DefaultClientContext>) -> Self {
        set_verification(admin, "false");
        VerificationOff(admin)
    }
}

impl Drop for VerificationOff<'_> {
    fn drop(&mut self) {
        set_verification(self.0, "true");
    }
}

fn set_verification(admin: &AdminClient<DefaultClientContext>, value: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let broker = AlterConfig::new(ResourceSpecifier::Broker(1)).set(VERIFICATION, value);
    let results = runtime.block_on(admin.alter_configs([&broker], &AdminOptions::new())).unwrap();
    assert!(results.iter().all(Result::is_ok), "cannot set {VERIFICATION}={value}: {results:?}");
    // The broker applies a dynamic setting a moment after it answers.
    std::thread::sleep(Duration::from_secs(2));
}

#[test]
#[ignore = "needs Kafka and a schema registry: run scripts/test.sh"]
fn a_hanging_offset_commit_of_its_own_producer_does_not_stop_a_stage() {
    let (_one, stack, services) = start("hanging-");
    let input: Vec<Line> = MergedInput::planted(20, 13).map(Result::unwrap).collect();
    let (first, rest) = input.split_at(input.len() / 2);
    let producer = stack.producer();
    send_lines(&producer, first);
    wait_for_commits(&services, &["payment-anomalies"], 100);

    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", &stack.bootstrap).create().unwrap();
    let verification_off = VerificationOff::new(&admin);
    // InitProducerId (v1) for payment-anomalies' transactional id: the producer id and
    // a new epoch, which fences the running member.
    let transactional_id = "vigil-payment-anomalies-0";
    let mut init = Request::new(22, 1);
    init.string(transactional_id).i32(60_000);
    // The member may be committing: the coordinator answers CONCURRENT_TRANSACTIONS
    // (51) until that transaction has ended.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let answer = init.send(&stack.bootstrap);
        if i16_at(&answer, 4) != CONCURRENT_TRANSACTIONS || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(i16_at(&answer, 4), 0, "InitProducerId error code");
    let producer_id = i64::from_be_bytes(answer[6..14].try_into().unwrap());
    let epoch = i16_at(&answer, 14);
    // TxnOffsetCommit (v2) outside any transaction: a pending offset commit that no
    // marker will end.
    let mut commit = Request::new(28, 2);
    commit.string(transactional_id).string(&stack.group("payment-anomalies")).i64(producer_id).i16(epoch);
    commit.i32(1).string(ENRICHED_PAYMENTS.name).i32(1).i32(0).i64(0).i32(-1).i16(-1);
    let answer = commit.send(&stack.bootstrap);
    // throttle, 1 topic, its name, 1 partition, index, error code
    let at = 4 + 4 + 2 + ENRICHED_PAYMENTS.name.len() + 4 + 4;
    assert_eq!(i16_at(&answer, at), 0, "TxnOffsetCommit error code");
    drop(verification_off);

    send_lines(&producer, rest);
    producer.finish().unwrap();
    producer.flush().unwrap();
    let expected = reference(Dataset::planted(20, 13));
    // Every enriched payment read (on time) by payment-anomalies: it got past its
    // group's offsets. (Its output alone could be complete before the fault.)
    let enriched = expected.iter().filter(|l| l.starts_with("ENRICHED>")).count() as u64;
    let anomalies = services.iter().find(|s| s.name == "payment-anomalies").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while anomalies.metric_where("vigil_member_ledger_records", r#"outcome="read""#) < enriched {
        assert!(Instant::now() < deadline, "payment-anomalies is stuck:\n{}", anomalies.log_text());
        std::thread::sleep(Duration::from_millis(500));
    }
    let (got, _) = stack.wait_for(&expected, Duration::from_secs(180));
    assert_same(&got, &expected, "Kafka output after a hanging offset commit differs from the embedded runtime");
    assert!(
        anomalies.log_text().contains("ended what this member left open"),
        "payment-anomalies met the hanging commit and ended it:\n{}",
        anomalies.log_text()
    );
}
