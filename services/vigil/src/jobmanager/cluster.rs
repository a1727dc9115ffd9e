//! The cluster as the jobmanager knows it: the taskmanagers from their heartbeats, the
//! members they run, and every stage's tasks as last committed. Pure: heartbeats and
//! the clock go in, views come out.
//!
//! A task's ledger and watermark are taken from the newest report of it, whichever
//! member sent it: when a taskmanager dies, its tasks keep their last committed
//! values until the member that takes them over (restoring the same values from the
//! changelog) reports them again. Commits and aborts are counted per process, so a
//! taskmanager's counts are kept when it is lost or restarts.

use std::collections::{BTreeMap, VecDeque};

use vigil_kafka::status::{Commit, Heartbeat, Ledger, MemberStatus, Role};

/// A taskmanager silent this long is lost (five missed heartbeats).
pub const LOST_AFTER_MS: i64 = 10_000;
/// A lost taskmanager stays listed this long.
pub const FORGET_AFTER_MS: i64 = 600_000;
/// Rates are averaged over this much time.
const RATE_WINDOW_MS: i64 = 10_000;

#[derive(Debug, Default)]
pub struct Cluster {
    taskmanagers: BTreeMap<String, Taskmanager>,
    tasks: BTreeMap<(String, i32), ReportedTask>,
    /// Counts of processes that are gone (restarted or forgotten), per stage.
    archived: BTreeMap<String, Counts>,
    /// (time, per stage ledger totals), oldest first, for rates.
    samples: VecDeque<(i64, BTreeMap<String, Ledger>)>,
}

#[derive(Debug)]
struct Taskmanager {
    beat: Heartbeat,
    last_ms: i64,
    registered_ms: i64,
}

#[derive(Debug)]
struct ReportedTask {
    watermark_ms: Option<i64>,
    idle: bool,
    ledger: Ledger,
    at_ms: i64,
}

/// What members of a stage did, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub commits: u64,
    pub aborts: u64,
    pub restored_records: u64,
    pub restored_tasks: u64,
}

impl Counts {
    fn add(&mut self, m: &MemberStatus) {
        self.commits += m.commits;
        self.aborts += m.aborts;
        self.restored_records += m.restored_records;
        self.restored_tasks += m.restored_tasks;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmState {
    Alive,
    Lost,
}

impl TmState {
    pub fn as_str(self) -> &'static str {
        match self {
            TmState::Alive => "alive",
            TmState::Lost => "lost",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TaskmanagerView {
    pub id: String,
    pub address: String,
    pub slots: u32,
    pub cpu_cores: u32,
    pub state: TmState,
    pub last_heartbeat_ms: i64,
    pub heartbeat_age_ms: i64,
    pub registered_ms: i64,
    pub members: Vec<MemberStatus>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemberView {
    pub id: String,
    pub taskmanager: String,
    pub role: Role,
    pub tasks: Vec<i32>,
    pub watermark_ms: Option<i64>,
    pub heartbeat_age_ms: i64,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StageView {
    pub ledger: Ledger,
    /// The lowest watermark over the stage's known tasks.
    pub watermark_ms: Option<i64>,
    pub tasks: Vec<(i32, Option<i64>)>,
    pub counts: Counts,
    pub last_commit_ms: Option<i64>,
    /// Members on live taskmanagers.
    pub members: Vec<MemberView>,
    pub records_in_per_second: f64,
    pub records_out_per_second: f64,
}

impl StageView {
    pub fn active_members(&self) -> usize {
        self.members.iter().filter(|m| m.role == Role::Active).count()
    }
}

impl Cluster {
    pub fn heartbeat(&mut self, beat: Heartbeat, now_ms: i64) {
        for member in &beat.members {
            for task in &member.tasks {
                let key = (member.stage.clone(), task.task);
                let newer = self.tasks.get(&key).is_none_or(|t| t.at_ms <= now_ms);
                if newer {
                    let report = ReportedTask {
                        watermark_ms: task.watermark_ms,
                        idle: task.idle,
                        ledger: task.ledger,
                        at_ms: now_ms,
                    };
                    self.tasks.insert(key, report);
                }
            }
        }
        let registered_ms = match self.taskmanagers.get(&beat.taskmanager) {
            // The same process again; a new one (a restart) starts its counts over.
            Some(tm) if tm.beat.started_ms == beat.started_ms => tm.registered_ms,
            Some(tm) => {
                let old = tm.beat.members.clone();
                self.archive(&old);
                now_ms
            }
            None => now_ms,
        };
        self.taskmanagers.insert(beat.taskmanager.clone(), Taskmanager { beat, last_ms: now_ms, registered_ms });
        self.sample(now_ms);
    }

    fn archive(&mut self, members: &[MemberStatus]) {
        for m in members {
            self.archived.entry(m.stage.clone()).or_default().add(m);
        }
    }

    fn sample(&mut self, now_ms: i64) {
        let mut totals: BTreeMap<String, Ledger> = BTreeMap::new();
        for ((stage, _), t) in &self.tasks {
            totals.entry(stage.clone()).or_default().add(&t.ledger);
        }
        self.samples.push_back((now_ms, totals));
        while self.samples.len() > 2 && self.samples[1].0 <= now_ms - RATE_WINDOW_MS {
            self.samples.pop_front();
        }
    }

    /// Forgets taskmanagers lost long ago (keeping their counts).
    pub fn expire(&mut self, now_ms: i64) {
        let gone: Vec<String> = self
            .taskmanagers
            .iter()
            .filter(|(_, tm)| now_ms - tm.last_ms > FORGET_AFTER_MS)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(tm) = self.taskmanagers.remove(&id) {
                self.archive(&tm.beat.members);
            }
        }
    }

    pub fn taskmanagers(&self, now_ms: i64) -> Vec<TaskmanagerView> {
        self.taskmanagers
            .values()
            .map(|tm| {
                let age = now_ms - tm.last_ms;
                TaskmanagerView {
                    id: tm.beat.taskmanager.clone(),
                    address: tm.beat.address.clone(),
                    slots: tm.beat.slots,
                    cpu_cores: tm.beat.cpu_cores,
                    state: if age > LOST_AFTER_MS { TmState::Lost } else { TmState::Alive },
                    last_heartbeat_ms: tm.last_ms,
                    heartbeat_age_ms: age,
                    registered_ms: tm.registered_ms,
                    members: tm.beat.members.clone(),
                }
            })
            .collect()
    }

    pub fn stage(&self, stage: &str, now_ms: i64) -> StageView {
        let tasks: Vec<(&i32, &ReportedTask)> =
            self.tasks.iter().filter(|((s, _), _)| s == stage).map(|((_, task), t)| (task, t)).collect();
        let mut ledger = Ledger::default();
        tasks.iter().for_each(|(_, t)| ledger.add(&t.ledger));
        // Idle tasks hold nobody back, as in the stages themselves; when every task is
        // idle (no input anywhere), the stage stands where its slowest task stopped.
        let busy: Vec<Option<i64>> = tasks.iter().filter(|(_, t)| !t.idle).map(|(_, t)| t.watermark_ms).collect();
        let watermark_ms = if busy.is_empty() {
            tasks.iter().filter_map(|(_, t)| t.watermark_ms).min()
        } else {
            busy.into_iter().min().flatten()
        };
        let mut counts = self.archived.get(stage).copied().unwrap_or_default();
        let mut members = Vec::new();
        let mut last_commit_ms = None;
        for tm in self.taskmanagers.values() {
            let age = now_ms - tm.last_ms;
            for m in tm.beat.members.iter().filter(|m| m.stage == stage) {
                counts.add(m);
                last_commit_ms =
                    last_commit_ms.max(m.recent_commits.last().map(|c| c.started_ms + c.duration_ms as i64));
                if age <= LOST_AFTER_MS {
                    members.push(MemberView {
                        id: m.member.clone(),
                        taskmanager: tm.beat.taskmanager.clone(),
                        role: m.role,
                        tasks: m.tasks.iter().map(|t| t.task).collect(),
                        watermark_ms: m.tasks.iter().filter_map(|t| t.watermark_ms).min(),
                        heartbeat_age_ms: age,
                        error: m.error.clone(),
                    });
                }
            }
        }
        let (records_in_per_second, records_out_per_second) = self.rates(stage, &ledger, now_ms);
        StageView {
            ledger,
            watermark_ms,
            tasks: tasks.iter().map(|(&task, t)| (task, t.watermark_ms)).collect(),
            counts,
            last_commit_ms,
            members,
            records_in_per_second,
            records_out_per_second,
        }
    }

    /// Records read and written per second over the last samples.
    fn rates(&self, stage: &str, now: &Ledger, now_ms: i64) -> (f64, f64) {
        let Some((then_ms, totals)) = self.samples.iter().find(|(t, _)| *t >= now_ms - RATE_WINDOW_MS) else {
            return (0.0, 0.0);
        };
        let secs = (now_ms - then_ms) as f64 / 1000.0;
        if secs < 1.0 {
            return (0.0, 0.0);
        }
        let then = totals.get(stage).copied().unwrap_or_default();
        let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
        (rate(now.read, then.read), rate(now.written, then.written))
    }

    /// Every member's recent commits, with its stage, newest first.
    pub fn recent_commits(&self) -> Vec<(String, String, Commit)> {
        let mut all: Vec<(String, String, Commit)> = self
            .taskmanagers
            .values()
            .flat_map(|tm| tm.beat.members.iter())
            .flat_map(|m| m.recent_commits.iter().map(|c| (m.stage.clone(), m.member.clone(), c.clone())))
            .collect();
        all.sort_by_key(|(_, _, c)| std::cmp::Reverse(c.started_ms));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_kafka::status::TaskStatus;

    fn member(stage: &str, name: &str, role: Role, tasks: &[(i32, i64, u64)]) -> MemberStatus {
        let mut m = MemberStatus::new(stage, name);
        m.role = role;
        m.tasks = tasks
            .iter()
            .map(|&(task, watermark, read)| TaskStatus {
                task,
                watermark_ms: Some(watermark),
                idle: false,
                ledger: Ledger { read, on_time: read, ..Ledger::default() },
            })
            .collect();
        m
    }

    fn beat(tm: &str, started_ms: i64, members: Vec<MemberStatus>) -> Heartbeat {
        Heartbeat {
            taskmanager: tm.into(),
            address: format!("http://{tm}:9249"),
            slots: 1,
            cpu_cores: 2,
            started_ms,
            members,
        }
    }

    #[test]
    fn a_stage_sums_its_tasks_and_goes_by_its_slowest() {
        let mut c = Cluster::default();
        c.heartbeat(
            beat("a", 0, vec![member("join-enrich", "a-0", Role::Active, &[(0, 5_000, 10), (1, 7_000, 20)])]),
            1_000,
        );
        c.heartbeat(
            beat("b", 0, vec![member("join-enrich", "b-0", Role::Active, &[(2, 6_000, 5), (3, 9_000, 1)])]),
            1_000,
        );
        let s = c.stage("join-enrich", 1_500);
        assert_eq!(s.ledger.read, 36);
        assert!(s.ledger.balanced());
        assert_eq!(s.watermark_ms, Some(5_000));
        assert_eq!(s.members.len(), 2);
        assert_eq!(s.active_members(), 2);
    }

    #[test]
    fn a_silent_taskmanager_is_lost_and_its_tasks_keep_their_last_committed_values() {
        let mut c = Cluster::default();
        c.heartbeat(beat("a", 0, vec![member("device-router", "a-0", Role::Active, &[(0, 5_000, 10)])]), 0);
        c.heartbeat(beat("b", 0, vec![member("device-router", "b-0", Role::Active, &[(1, 5_000, 7)])]), 0);
        c.heartbeat(beat("a", 0, vec![member("device-router", "a-0", Role::Active, &[(0, 6_000, 12)])]), 9_000);
        let lost = c.taskmanagers(LOST_AFTER_MS + 1);
        assert_eq!(
            lost.iter().map(|t| (t.id.as_str(), t.state)).collect::<Vec<_>>(),
            [("a", TmState::Alive), ("b", TmState::Lost)]
        );
        let s = c.stage("device-router", LOST_AFTER_MS + 1);
        assert_eq!(s.ledger.read, 19, "b's task keeps its last count");
        assert_eq!(s.members.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["a-0"]);
        // a takes b's task over, restored from the changelog: the count goes on.
        c.heartbeat(
            beat("a", 0, vec![member("device-router", "a-0", Role::Active, &[(0, 6_000, 12), (1, 6_000, 9)])]),
            12_000,
        );
        assert_eq!(c.stage("device-router", 12_000).ledger.read, 21);
        c.expire(12_000 + FORGET_AFTER_MS);
        assert_eq!(c.taskmanagers(12_000 + FORGET_AFTER_MS).len(), 1);
    }

    #[test]
    fn counts_of_a_restarted_taskmanager_are_kept() {
        let mut c = Cluster::default();
        let mut m = member("health-monitor", "a-0", Role::Active, &[(0, 1, 1)]);
        m.commits = 40;
        m.aborts = 2;
        c.heartbeat(beat("a", 100, vec![m.clone()]), 1_000);
        m.commits = 3;
        m.aborts = 0;
        c.heartbeat(beat("a", 200, vec![m]), 2_000);
        let counts = c.stage("health-monitor", 2_000).counts;
        assert_eq!((counts.commits, counts.aborts), (43, 2));
    }

    #[test]
    fn rates_come_from_the_committed_counts() {
        let mut c = Cluster::default();
        c.heartbeat(beat("a", 0, vec![member("join-enrich", "a-0", Role::Active, &[(0, 1, 100)])]), 0);
        c.heartbeat(beat("a", 0, vec![member("join-enrich", "a-0", Role::Active, &[(0, 1, 300)])]), 2_000);
        let s = c.stage("join-enrich", 2_000);
        assert_eq!(s.records_in_per_second, 100.0);
        assert_eq!(c.stage("payment-metrics", 2_000).records_in_per_second, 0.0);
    }

    #[test]
    fn idle_tasks_hold_the_stage_watermark_back_only_when_all_are_idle() {
        let mut c = Cluster::default();
        let mut m = member("device-router", "a-0", Role::Active, &[(0, 1_000, 0), (1, 9_000, 5), (2, 0, 0)]);
        m.tasks[0].idle = true;
        c.heartbeat(beat("a", 0, vec![m.clone()]), 0);
        assert_eq!(c.stage("device-router", 0).watermark_ms, Some(0));
        m.tasks[2].watermark_ms = None;
        c.heartbeat(beat("a", 0, vec![m.clone()]), 1);
        assert_eq!(c.stage("device-router", 1).watermark_ms, None, "a busy task without a watermark holds it");
        m.tasks[1].idle = true;
        m.tasks[2].idle = true;
        c.heartbeat(beat("a", 0, vec![m]), 2);
        assert_eq!(c.stage("device-router", 2).watermark_ms, Some(1_000), "all idle: the slowest that has one");
    }

    #[test]
    fn a_standby_is_a_member_without_tasks() {
        let mut c = Cluster::default();
        c.heartbeat(beat("a", 0, vec![member("payment-metrics", "a-0", Role::Active, &[(0, 1, 1)])]), 0);
        c.heartbeat(beat("b", 0, vec![member("payment-metrics", "b-0", Role::Standby, &[])]), 0);
        let s = c.stage("payment-metrics", 0);
        assert_eq!((s.members.len(), s.active_members()), (2, 1));
    }
}
