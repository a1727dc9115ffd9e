//! Consumer lag of every stage as the broker sees it, whether or not any member of the
//! stage is alive: the end offset of each input partition minus the offset the
//! stage's consumer group committed, and how old the oldest record waiting there is.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use vigil_kafka::connection::{self, QuietEof};

use anyhow::{Context as _, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use vigil_kafka::names::Names;
use vigil_model::topology::{EventTime, StageTopology, Topic};

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageLag {
    /// Records not yet committed by the stage, per input topic.
    pub records: BTreeMap<String, i64>,
    /// Age of the oldest of them, seconds (0 when caught up).
    pub seconds: f64,
}

impl StageLag {
    pub fn total_records(&self) -> i64 {
        self.records.values().sum()
    }
}

/// Where a stage reads `topic` on the cluster: an upstream stage's output from its
/// copy between stages, if it has one.
fn read_from(names: &Names, topic: &'static Topic, time: EventTime) -> String {
    match time {
        EventTime::Upstream => names.between_stages(topic.name),
        EventTime::Source(_) => names.of(topic.name),
    }
}

/// One stage's consumer group, as the probe reads its committed offsets.
struct StageGroup {
    stage: String,
    /// The stage's inputs: each by its name in the pipeline and on the cluster.
    inputs: Vec<(String, String)>,
    /// A client holding the stage's group id (it never joins the group).
    client: BaseConsumer<QuietEof>,
}

pub struct LagProbe {
    groups: Vec<StageGroup>,
    /// Reads the first waiting record of a partition, for its timestamp.
    peek: BaseConsumer<QuietEof>,
    partitions: i32,
}

impl LagProbe {
    pub fn new(bootstrap: &str, topology: &[StageTopology], names: &Names, partitions: u32) -> Result<LagProbe> {
        let client = |group: &str, eof: bool| -> Result<BaseConsumer<QuietEof>> {
            connection::client_config(bootstrap)
                .set("group.id", group)
                .set("enable.auto.commit", "false")
                .set("isolation.level", "read_committed")
                .set("enable.partition.eof", if eof { "true" } else { "false" })
                .set("fetch.max.bytes", "1048576")
                .set("max.partition.fetch.bytes", "65536")
                .create_with_context(QuietEof)
                .context("cannot create a Kafka client for consumer lag")
        };
        let groups = topology
            .iter()
            .map(|s| {
                let inputs =
                    s.inputs.iter().map(|&(t, time)| (t.name.to_string(), read_from(names, t, time))).collect();
                let client = client(&names.of(&format!("vigil-{}", s.name)), false)?;
                Ok(StageGroup { stage: s.name.to_string(), inputs, client })
            })
            .collect::<Result<_>>()?;
        Ok(LagProbe { groups, peek: client(&names.of("vigil-jobmanager-lag"), true)?, partitions: partitions as i32 })
    }

    pub fn measure(&self, now_ms: i64) -> Result<BTreeMap<String, StageLag>> {
        let mut ends: HashMap<(String, i32), (i64, i64)> = HashMap::new();
        let mut report = BTreeMap::new();
        for StageGroup { stage, inputs, client: group } in &self.groups {
            let mut tpl = TopicPartitionList::new();
            for (_, topic) in inputs {
                for p in 0..self.partitions {
                    tpl.add_partition(topic, p);
                }
            }
            let committed = group
                .committed_offsets(tpl, TIMEOUT)
                .with_context(|| format!("cannot read the committed offsets of stage {stage}'s group"))?;
            let mut lag = StageLag::default();
            for (shown, topic) in inputs {
                let mut waiting = Vec::new();
                for p in 0..self.partitions {
                    let key = (topic.clone(), p);
                    let (low, high) = match ends.get(&key) {
                        Some(&e) => e,
                        None => {
                            let e = self
                                .peek
                                .fetch_watermarks(topic, p, TIMEOUT)
                                .with_context(|| format!("cannot read the end offsets of `{topic}`"))?;
                            ends.insert(key, e);
                            e
                        }
                    };
                    let at = match committed.find_partition(topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o.max(low),
                        _ => low,
                    };
                    if high > at {
                        waiting.push((p, at, high - at));
                    }
                }
                let (records, oldest_ms) = self.oldest_waiting(topic, &waiting)?;
                lag.records.insert(shown.clone(), records);
                if let Some(ts) = oldest_ms {
                    lag.seconds = lag.seconds.max((now_ms - ts).max(0) as f64 / 1000.0);
                }
            }
            report.insert(stage.clone(), lag);
        }
        Ok(report)
    }

    /// For partitions with offsets past the committed one: how many records really
    /// wait (a transaction's commit marker takes an offset but is no record), and the
    /// timestamp of the oldest waiting record.
    fn oldest_waiting(&self, topic: &str, waiting: &[(i32, i64, i64)]) -> Result<(i64, Option<i64>)> {
        if waiting.is_empty() {
            return Ok((0, None));
        }
        let mut tpl = TopicPartitionList::new();
        for &(p, at, _) in waiting {
            tpl.add_partition_offset(topic, p, Offset::Offset(at))?;
        }
        self.peek.assign(&tpl).context("cannot assign partitions to the lag probe")?;
        let mut pending: HashMap<i32, i64> = waiting.iter().map(|&(p, _, n)| (p, n)).collect();
        let mut records = 0;
        let mut oldest: Option<i64> = None;
        let deadline = Instant::now() + Duration::from_secs(2);
        while !pending.is_empty() && Instant::now() < deadline {
            match self.peek.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    if let Some(n) = pending.remove(&m.partition()) {
                        records += n;
                        if let Some(ts) = m.timestamp().to_millis() {
                            oldest = Some(oldest.map_or(ts, |o| o.min(ts)));
                        }
                    }
                }
                // Only markers of finished transactions were left: nothing waits.
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    pending.remove(&p);
                }
                Some(Err(_)) | None => {}
            }
        }
        // Partitions not heard from in time still count with their offsets.
        records += pending.values().sum::<i64>();
        self.peek.unassign().context("cannot unassign the lag probe")?;
        Ok((records, oldest))
    }
}
