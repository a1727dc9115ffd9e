//! What the jobmanager holds: the job's topology, the cluster's view from heartbeats,
//! the consumer lag from the broker, the live pane, and whether provisioning is done.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use vigil_kafka::names::Names;

use vigil_kafka::metrics::now_ms;
use vigil_kafka::status::Heartbeat;
use vigil_model::topology::Topology;

use crate::jobmanager::cluster::Cluster;
use crate::jobmanager::lag::StageLag;
use crate::jobmanager::live::Live;
use crate::jobmanager::metrics::JobMetrics;
use crate::jobmanager::view::{flink_id, JobView};

pub struct JobManager {
    pub job_id: String,
    /// The pipeline's names on the cluster; the job is named in its namespace.
    pub names: Names,
    pub start_ms: i64,
    pub topology: Topology,
    pub cluster: Mutex<Cluster>,
    pub lag: Mutex<BTreeMap<String, StageLag>>,
    pub live: Arc<Live>,
    pub metrics: JobMetrics,
    /// `Err(why)` until every topic and schema is provisioned.
    pub ready: Mutex<Result<(), String>>,
}

impl JobManager {
    pub fn new(topology: &Topology, names: Names) -> Arc<JobManager> {
        let stages: Vec<&str> = topology.stages.iter().map(|s| s.name).collect();
        let sources: Vec<&str> = topology.topics().iter().filter(|t| t.external).map(|t| t.name).collect();
        Arc::new(JobManager {
            job_id: flink_id(&names.of("vigil")),
            names,
            start_ms: now_ms(),
            metrics: JobMetrics::new(&stages, &sources),
            topology: topology.clone(),
            cluster: Mutex::new(Cluster::default()),
            lag: Mutex::new(BTreeMap::new()),
            live: Live::new(),
            ready: Mutex::new(Err("provisioning topics and schemas".into())),
        })
    }

    pub fn view(&self) -> JobView {
        let name = self.names.of("vigil");
        JobView::build(&self.job_id, name, self.start_ms, &self.topology.stages, &self.cluster, &self.lag, now_ms())
    }

    pub fn heartbeat(&self, beat: Heartbeat) {
        self.cluster.lock().expect("cluster").heartbeat(beat, now_ms());
    }
}
