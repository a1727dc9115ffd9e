//! What a stage member reports about itself: its role, its tasks with their committed
//! ledgers and watermarks, and its commits. A taskmanager sends the statuses of its
//! members to the jobmanager in every heartbeat; the jobmanager merges them into the
//! cluster's view.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
pub use vigil_stream::Ledger;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Connecting, checking its topics.
    Starting,
    /// Processing its tasks.
    Active,
    /// A global stage's member waiting to take over from the active one.
    Standby,
    /// Failed; its taskmanager starts it again.
    Failed,
}

/// One task (an input partition, or all of them in a global stage) as last committed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub task: i32,
    /// The task's input watermark, epoch ms; `None` before the first.
    pub watermark_ms: Option<i64>,
    /// Every input of the task is idle: it holds nobody back.
    pub idle: bool,
    pub ledger: Ledger,
}

/// One committed transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    /// Counts the member's commits from 1 (set by [`MemberStatus::committed`]).
    pub seq: u64,
    pub started_ms: i64,
    pub duration_ms: u64,
    /// Bytes of task state written to the changelog in it.
    pub state_bytes: u64,
    pub tasks: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub stage: String,
    pub member: String,
    pub role: Role,
    pub tasks: Vec<TaskStatus>,
    /// Transactions committed since the member first started (restarts included).
    pub commits: u64,
    pub aborts: u64,
    pub restored_records: u64,
    /// Tasks it restored from a changelog that held state for them.
    pub restored_tasks: u64,
    /// The newest commits, newest last (at most [`RECENT_COMMITS`]).
    pub recent_commits: Vec<Commit>,
    /// Why it last failed, while it is `Failed`.
    pub error: Option<String>,
    /// A notifier member's deliveries (see `notify`); `None` for a stage's member.
    #[serde(default)]
    pub deliveries: Option<Deliveries>,
}

/// A notifier member's ledger since it started: alerts read = delivered +
/// dead-lettered + in flight; and its channels whose breaker is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliveries {
    pub read: u64,
    pub delivered: u64,
    pub dead_lettered: u64,
    pub in_flight: u64,
    pub breakers_open: u64,
}

pub const RECENT_COMMITS: usize = 10;

impl MemberStatus {
    pub fn new(stage: &str, member: &str) -> Self {
        MemberStatus {
            stage: stage.to_string(),
            member: member.to_string(),
            role: Role::Starting,
            tasks: Vec::new(),
            commits: 0,
            aborts: 0,
            restored_records: 0,
            restored_tasks: 0,
            recent_commits: Vec::new(),
            error: None,
            deliveries: None,
        }
    }

    /// Counts a commit (its `seq` is set here) and keeps it among the recent ones.
    pub fn committed(&mut self, mut commit: Commit) {
        self.commits += 1;
        commit.seq = self.commits;
        if self.recent_commits.len() == RECENT_COMMITS {
            self.recent_commits.remove(0);
        }
        self.recent_commits.push(commit);
    }
}

/// A member's status, shared between its processing loop and whoever reports it.
pub type SharedStatus = Arc<Mutex<MemberStatus>>;

/// What a taskmanager sends the jobmanager every heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub taskmanager: String,
    /// Where its /metrics are served, e.g. `http://10.89.0.7:9249`.
    pub address: String,
    pub slots: u32,
    pub cpu_cores: u32,
    pub started_ms: i64,
    pub members: Vec<MemberStatus>,
}
