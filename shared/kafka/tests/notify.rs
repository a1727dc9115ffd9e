//! The notifier's delivery contract against a real HTTP receiver written here,
//! which records every request by its idempotency key: alerts flow while the
//! notifier is killed with SIGKILL twice and the receiver is down for 30 s. Every
//! alert arrives; every repeat carries the key and the body of the alert it repeats;
//! a correction arrives under a key of its own; an alert the receiver refuses for
//! good (400) is a dead letter with the reason, and the rest go on.
//!
//! Needs the local stack (`scripts/local-stack.sh`); ignored by a plain `cargo test`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::{Running, Stack};
use vigil_kafka::codec::Codec;
use vigil_kafka::notify;
use vigil_model::output::{
    AmountAnomaly, AnomalyType, HealthAlert, HealthReason, LateSpikeAlert, RecordType, Severity,
};
use vigil_model::topology::{HEALTH_ALERTS, PAYMENT_ANOMALIES};

/// What the receiver was sent, by idempotency key: each request's body.
type Received = Arc<Mutex<BTreeMap<String, Vec<serde_json::Value>>>>;

/// An HTTP receiver on a port of its own that can go down (connections refused,
/// open ones closed) and come back on the same port.
struct Receiver {
    port: u16,
    received: Received,
    up: Arc<AtomicBool>,
    refused: Arc<Mutex<Vec<String>>>,
}

/// The alert the receiver refuses for good.
const POISON: &str = "P-POISON";

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let receiver = Receiver {
            port,
            received: Received::default(),
            up: Arc::new(AtomicBool::new(true)),
            refused: Arc::default(),
        };
        let (received, up, refused) = (receiver.received.clone(), receiver.up.clone(), receiver.refused.clone());
        std::thread::spawn(move || {
            let mut listener = Some(listener);
            loop {
                match (&listener, up.load(Ordering::SeqCst)) {
                    (Some(l), true) => {
                        l.set_nonblocking(true).unwrap();
                        if let Ok((conn, _)) = l.accept() {
                            let (received, up, refused) = (received.clone(), up.clone(), refused.clone());
                            std::thread::spawn(move || serve(conn, &received, &up, &refused));
                        }
                    }
                    (Some(_), false) => listener = None,
                    (None, true) => listener = Some(TcpListener::bind(("127.0.0.1", port)).unwrap()),
                    (None, false) => {}
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        receiver
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/alerts", self.port)
    }

    fn keys(&self) -> BTreeSet<String> {
        self.received.lock().unwrap().keys().cloned().collect()
    }

    fn wait_for(&self, keys: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.keys().len() < keys {
            assert!(Instant::now() < deadline, "the receiver has {} of {keys} keys", self.keys().len());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Answers the requests of one connection: 200 and the request recorded, or 400 for
/// the poison alert; closes the connection once the receiver is down.
fn serve(conn: TcpStream, received: &Received, up: &AtomicBool, refused: &Mutex<Vec<String>>) {
    conn.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut head = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push(line.trim_end().to_string()),
                Err(_) if up.load(Ordering::SeqCst) => continue,
                Err(_) => return,
            }
        }
        if !up.load(Ordering::SeqCst) {
            return;
        }
        let header = |name: &str| {
            head.iter().find_map(|h| {
                h.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string())
            })
        };
        let length: usize = header("content-length").unwrap().parse().unwrap();
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let key = header("idempotency-key").expect("every delivery has an Idempotency-Key header");
        assert_eq!(body["idempotency_key"], key.as_str(), "the body carries the header's key");
        let status = if body["alert"]["payment_id"] == POISON {
            refused.lock().unwrap().push(key);
            "400 Bad Request"
        } else {
            received.lock().unwrap().entry(key).or_default().push(body);
            "200 OK"
        };
        if write!(conn, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}

fn late_spike(window: i64, late_events: u64, revision: u32) -> HealthAlert {
    HealthAlert::LateSpike(LateSpikeAlert {
        record_type: RecordType::HealthAlert,
        reason: HealthReason::LateEventSpike,
        severity: Severity::Warning,
        window_start: 1_700_000_000_000 + window * 60_000,
        window_end: 1_700_000_000_000 + (window + 1) * 60_000,
        late_events,
        ceiling: 5,
        revision,
    })
}

fn amount(payment: &str) -> AmountAnomaly {
    AmountAnomaly {
        record_type: RecordType::Anomaly,
        anomaly_type: AnomalyType::Amount,
        customer_id: "C1".into(),
        payment_id: payment.into(),
        order_id: format!("O-{payment}").as_str().into(),
        amount: 9_000.0,
        threshold: 700.0,
        event_time: 1_700_000_000_000,
        provisional: false,
        retracted: false,
        revision: 1,
    }
}

/// Alerts as the stages write them (Avro), each batch flushed.
struct Alerts {
    producer: BaseProducer,
    codec: Codec,
    health: String,
    payments: String,
}

impl Alerts {
    fn send_spikes(&self, windows: std::ops::Range<i64>, revision: u32) {
        for w in windows {
            let value = self.codec.encode(&HEALTH_ALERTS, &late_spike(w, 5 + u64::from(revision), revision)).unwrap();
            self.producer.send(BaseRecord::to(&self.health).key("late_event_spike").payload(&value)).unwrap();
        }
        self.producer.flush(Duration::from_secs(30)).unwrap();
    }

    fn send_amount(&self, payment: &str) {
        let value = self.codec.encode(&PAYMENT_ANOMALIES, &amount(payment)).unwrap();
        self.producer.send(BaseRecord::to(&self.payments).key("C1").payload(&value)).unwrap();
        self.producer.flush(Duration::from_secs(30)).unwrap();
    }
}

fn spawn_notifier(stack: &Stack, receiver: &Receiver) -> Running {
    let url = receiver.url();
    let vars = [
        ("VIGIL_NOTIFY_WEBHOOK_URL", url.as_str()),
        ("VIGIL_NOTIFY_WEBHOOK_RATE_PER_SECOND", "500"),
        ("VIGIL_NOTIFY_RETRY_MAX_MS", "1000"),
        ("VIGIL_NOTIFY_RETRY_GIVE_UP_AFTER_MS", "300000"),
    ];
    let notifier = stack.spawn_with("notifier", "0", &vars);
    notifier.wait_ready();
    notifier
}

#[test]
#[ignore = "needs the local Kafka stack: scripts/test.sh starts it"]
fn every_alert_reaches_the_receiver_through_kills_and_an_outage_and_repeats_carry_their_key() {
    let _one = support::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stack = Stack::fresh("notify");
    let names = support::names();
    let receiver = Receiver::start();
    let alerts = Alerts {
        producer: ClientConfig::new().set("bootstrap.servers", &stack.bootstrap).set("acks", "all").create().unwrap(),
        codec: Codec::new(&stack.registry).unwrap().named(names.clone()),
        health: names.of(HEALTH_ALERTS.name),
        payments: names.of(PAYMENT_ANOMALIES.name),
    };

    // Alerts flow; the notifier is killed once part of them are delivered.
    let mut notifier = spawn_notifier(&stack, &receiver);
    alerts.send_spikes(0..150, 1);
    receiver.wait_for(40, Duration::from_secs(60));
    notifier.child.kill().unwrap();
    notifier.child.wait().unwrap();
    notifier = spawn_notifier(&stack, &receiver);
    alerts.send_spikes(150..300, 1);
    receiver.wait_for(200, Duration::from_secs(60));

    // The receiver goes down for 30 s: alerts, corrections and the poison alert
    // arrive meanwhile, and the notifier is killed again while it retries.
    receiver.up.store(false, Ordering::SeqCst);
    let down_at = Instant::now();
    alerts.send_spikes(300..400, 1);
    alerts.send_spikes(0..30, 2);
    alerts.send_amount(POISON);
    alerts.send_amount("P-AFTER");
    std::thread::sleep(Duration::from_secs(10));
    notifier.child.kill().unwrap();
    notifier.child.wait().unwrap();
    notifier = spawn_notifier(&stack, &receiver);
    std::thread::sleep(Duration::from_secs(30).saturating_sub(down_at.elapsed()));
    receiver.up.store(true, Ordering::SeqCst);

    // 400 first revisions, 30 corrections, and the amount anomaly after the poison.
    receiver.wait_for(431, Duration::from_secs(120));
    let received = receiver.received.lock().unwrap().clone();
    let mut repeats = 0;
    let mut ids = BTreeMap::new();
    for (key, bodies) in &received {
        repeats += bodies.len() - 1;
        assert!(bodies.iter().all(|b| b == &bodies[0]), "a repeat of {key} carries the same alert");
        ids.entry(bodies[0]["alert_id"].as_str().unwrap().to_string()).or_insert_with(Vec::new).push(&bodies[0]);
    }
    let corrected = ids.values().filter(|revisions| revisions.len() == 2).count();
    assert_eq!(ids.len(), 401, "every alert arrived: 400 windows and one payment");
    assert_eq!(corrected, 30, "each correction arrived under a key of its own, with the identity of what it corrects");
    assert!(ids.values().flatten().all(|b| b["line"].as_str().unwrap().contains("> {\"record_type\"")));
    let lost = 431 - received.len();
    eprintln!("notifier delivery: {} delivered, {repeats} repeated before dedupe, {lost} lost", received.len());
    assert_eq!(lost, 0);

    // The poison alert is a dead letter with the reason; its offset was committed.
    assert!(!receiver.refused.lock().unwrap().is_empty(), "the receiver refused the poison alert");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &stack.bootstrap)
        .set("group.id", format!("notify-test-{}", std::process::id()))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&names.of(notify::DEAD_LETTERS)]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead: serde_json::Value = loop {
        assert!(Instant::now() < deadline, "no dead letter for the poison alert");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
            break serde_json::from_slice(m.payload().unwrap()).unwrap();
        }
    };
    assert!(dead["reason"].as_str().unwrap().contains("400"), "{dead}");
    assert!(dead["line"].as_str().unwrap().contains(POISON), "{dead}");

    // The ledger balances: everything read was delivered or dead-lettered.
    let metric = |outcome: &str| notifier.metric_where("vigil_notify_alerts_total", &format!("outcome=\"{outcome}\""));
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric("read") != metric("delivered") + metric("dead_lettered") {
        assert!(Instant::now() < deadline, "{}", notifier.metrics_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(metric("dead_lettered") <= 1 && metric("read") > 0);
}
