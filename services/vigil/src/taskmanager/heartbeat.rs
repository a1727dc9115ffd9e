//! Telling the jobmanager what this taskmanager runs: a heartbeat every two seconds
//! with every member's status. The jobmanager learns of a taskmanager from its first
//! heartbeat and marks it lost when they stop; a jobmanager that restarts relearns
//! the cluster from the next round.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tracing::{info, warn};
use vigil_kafka::status::{Heartbeat, MemberStatus};

pub struct Reporter {
    client: reqwest::blocking::Client,
    url: String,
    taskmanager: String,
    address: String,
    slots: u32,
    started_ms: i64,
    /// Whether the last heartbeat got through (to log changes, not every failure).
    reachable: AtomicBool,
}

impl Reporter {
    pub fn new(
        jobmanager: &str,
        taskmanager: &str,
        metrics_port: u16,
        slots: u32,
        started_ms: i64,
    ) -> anyhow::Result<Self> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .context("cannot create an HTTP client")?;
        let jobmanager = jobmanager.trim_end_matches('/');
        let host = local_ip(jobmanager).map_or_else(|| taskmanager.to_string(), |ip| ip.to_string());
        Ok(Reporter {
            client,
            url: format!("{jobmanager}/internal/heartbeat"),
            taskmanager: taskmanager.to_string(),
            address: format!("http://{host}:{metrics_port}"),
            slots,
            started_ms,
            reachable: AtomicBool::new(true),
        })
    }

    pub fn send(&self, members: Vec<MemberStatus>) {
        let beat = Heartbeat {
            taskmanager: self.taskmanager.clone(),
            address: self.address.clone(),
            slots: self.slots,
            cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            started_ms: self.started_ms,
            members,
        };
        let body = serde_json::to_vec(&beat).expect("a heartbeat serializes");
        let sent = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .map_err(|e| e.to_string())
            .and_then(|r| if r.status().is_success() { Ok(()) } else { Err(format!("HTTP {}", r.status())) });
        let was = self.reachable.swap(sent.is_ok(), Ordering::Relaxed);
        match (&sent, was) {
            (Err(e), true) => warn!(url = %self.url, "cannot reach the jobmanager ({e}); members keep running"),
            (Ok(()), false) => info!(url = %self.url, "the jobmanager is reachable again"),
            _ => {}
        }
    }
}

/// The address this host reaches the jobmanager from (what others can reach it at).
fn local_ip(jobmanager: &str) -> Option<std::net::IpAddr> {
    let authority = jobmanager.split("://").nth(1)?.split('/').next()?;
    let target: SocketAddr = authority.to_socket_addrs().ok()?.next()?;
    let socket = UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    socket.connect(target).ok()?;
    Some(socket.local_addr().ok()?.ip())
}
