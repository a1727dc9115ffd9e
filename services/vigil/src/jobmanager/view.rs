//! One consistent picture of the job at a moment, which every endpoint renders: the
//! REST answers, the dashboard and the metrics never disagree.

use std::collections::BTreeMap;
use std::sync::Mutex;

use vigil_kafka::status::Commit;
use vigil_model::topology::StageTopology;

use crate::jobmanager::cluster::{Cluster, StageView, TaskmanagerView};
use crate::jobmanager::lag::StageLag;

pub struct StageEntry {
    pub info: StageTopology,
    pub vertex_id: String,
    pub view: StageView,
    pub lag: Option<StageLag>,
}

pub struct JobView {
    pub job_id: String,
    /// `vigil`, in the pipeline's namespace.
    pub name: String,
    pub now_ms: i64,
    pub start_ms: i64,
    pub stages: Vec<StageEntry>,
    pub taskmanagers: Vec<TaskmanagerView>,
    /// (stage, member, commit), newest first.
    pub commits: Vec<(String, String, Commit)>,
}

impl JobView {
    pub fn build(
        job_id: &str,
        name: String,
        start_ms: i64,
        topology: &[StageTopology],
        cluster: &Mutex<Cluster>,
        lag: &Mutex<BTreeMap<String, StageLag>>,
        now_ms: i64,
    ) -> JobView {
        let cluster = cluster.lock().expect("cluster");
        let lag = lag.lock().expect("lag");
        JobView {
            job_id: job_id.to_string(),
            name,
            now_ms,
            start_ms,
            stages: topology
                .iter()
                .map(|info| StageEntry {
                    info: *info,
                    vertex_id: flink_id(info.name),
                    view: cluster.stage(info.name, now_ms),
                    lag: lag.get(info.name).cloned(),
                })
                .collect(),
            taskmanagers: cluster.taskmanagers(now_ms),
            commits: cluster.recent_commits(),
        }
    }

    pub fn stage_by_vertex(&self, vertex_id: &str) -> Option<&StageEntry> {
        self.stages.iter().find(|s| s.vertex_id == vertex_id)
    }
}

/// A stable 32-hex-digit id for a name, shaped like Flink's job and vertex ids.
pub fn flink_id(name: &str) -> String {
    // FNV-1a, twice with different seeds: stable across builds and platforms.
    let fnv = |seed: u64| name.bytes().fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{:016x}{:016x}", fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(flink_id("join-enrich"), flink_id("join-enrich"));
        assert_ne!(flink_id("join-enrich"), flink_id("device-router"));
        assert_eq!(flink_id("vigil").len(), 32);
    }
}
