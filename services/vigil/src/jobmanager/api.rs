//! The REST answers, in the shapes of Flink's monitoring API so that tools and habits
//! carry over (each with a `vigil` object for what Flink has no field for):
//!
//! | Flink | Vigil |
//! |---|---|
//! | job | the pipeline, one job |
//! | vertex | a stage |
//! | subtask | a task: an input partition (one task over all in a global stage) |
//! | parallelism | the stage's active members |
//! | checkpoint | a transaction commit (output, state and input offsets at once) |
//! | taskmanager | a taskmanager; its slots each run a member of every stage |

use serde_json::{json, Value};
use vigil_kafka::status::{Commit, Deliveries, Role};
use vigil_model::topology::Topology;

use crate::jobmanager::cluster::TmState;
use crate::jobmanager::view::{JobView, StageEntry};

pub const VERSION: &str = concat!("vigil ", env!("CARGO_PKG_VERSION"));

/// Flink's job state: running while every stage has an active member.
fn job_state(view: &JobView) -> &'static str {
    if view.stages.iter().all(|s| s.view.active_members() > 0) {
        "RUNNING"
    } else {
        "RESTARTING"
    }
}

fn alive(view: &JobView) -> impl Iterator<Item = &crate::jobmanager::cluster::TaskmanagerView> {
    view.taskmanagers.iter().filter(|t| t.state == TmState::Alive)
}

pub fn overview(view: &JobView) -> Value {
    let alive_count = alive(view).count();
    let running = usize::from(job_state(view) == "RUNNING");
    json!({
        "taskmanagers": alive_count,
        "slots-total": alive(view).map(|t| t.slots).sum::<u32>(),
        "slots-available": 0,
        "jobs-running": running,
        "jobs-finished": 0,
        "jobs-cancelled": 0,
        "jobs-failed": 0,
        "flink-version": VERSION,
        "flink-commit": "",
        "vigil": {"taskmanagers-lost": view.taskmanagers.len() - alive_count, "uptime-ms": view.now_ms - view.start_ms},
    })
}

pub fn config(view: &JobView) -> Value {
    json!({
        "refresh-interval": 2000,
        "timezone-name": "Coordinated Universal Time",
        "timezone-offset": 0,
        "flink-version": VERSION,
        "flink-revision": "",
        "features": {"web-submit": false, "web-cancel": false, "web-rescale": false, "web-history": false},
        "vigil": {"job": view.job_id},
    })
}

pub fn jobs(view: &JobView) -> Value {
    json!({"jobs": [{"id": view.job_id, "status": job_state(view)}]})
}

pub fn jobs_overview(view: &JobView) -> Value {
    let tasks: usize = view.stages.iter().map(|s| s.view.tasks.len()).sum();
    json!({"jobs": [{
        "jid": view.job_id,
        "name": view.name,
        "state": job_state(view),
        "start-time": view.start_ms,
        "end-time": -1,
        "duration": view.now_ms - view.start_ms,
        "last-modification": view.now_ms,
        "tasks": {"total": tasks, "running": running_tasks_total(view), "created": 0, "scheduled": 0,
                  "deploying": 0, "finished": 0, "canceling": 0, "canceled": 0, "failed": 0,
                  "reconciling": 0, "initializing": 0},
    }]})
}

fn running_tasks(s: &StageEntry) -> usize {
    s.view.members.iter().filter(|m| m.role == Role::Active).map(|m| m.tasks.len()).sum()
}

fn running_tasks_total(view: &JobView) -> usize {
    view.stages.iter().map(running_tasks).sum()
}

fn task_counts(s: &StageEntry) -> Value {
    json!({"RUNNING": running_tasks(s), "CREATED": 0, "SCHEDULED": 0, "DEPLOYING": 0, "FINISHED": 0,
           "CANCELING": 0, "CANCELED": 0, "FAILED": 0, "RECONCILING": 0, "INITIALIZING": 0})
}

fn vertex_status(s: &StageEntry) -> &'static str {
    if s.view.active_members() > 0 {
        "RUNNING"
    } else {
        "CREATED"
    }
}

fn io_metrics(s: &StageEntry) -> Value {
    json!({
        "read-bytes": 0, "read-bytes-complete": false,
        "write-bytes": 0, "write-bytes-complete": false,
        "read-records": s.view.ledger.read, "read-records-complete": true,
        "write-records": s.view.ledger.written, "write-records-complete": true,
        "accumulated-backpressured-time": 0, "accumulated-idle-time": 0, "accumulated-busy-time": 0.0,
    })
}

fn vigil_vertex(view: &JobView, s: &StageEntry) -> Value {
    let l = s.view.ledger;
    let lag = s.lag.clone().unwrap_or_default();
    json!({
        "stage": s.info.name,
        "inputs": s.info.inputs.iter().map(|(t, _)| t.name).collect::<Vec<_>>(),
        "outputs": s.info.outputs.iter().map(|t| t.name).collect::<Vec<_>>(),
        "global": s.info.global,
        "records_in_per_second": s.view.records_in_per_second,
        "records_out_per_second": s.view.records_out_per_second,
        "watermark_ms": s.view.watermark_ms,
        "watermark_lag_ms": s.view.watermark_ms.map(|w| (view.now_ms - w).max(0)),
        "consumer_lag_records": lag.total_records(),
        "consumer_lag_seconds": lag.seconds,
        "commits": s.view.counts.commits,
        "aborts": s.view.counts.aborts,
        "last_commit_ms": s.view.last_commit_ms,
        "restored_records": s.view.counts.restored_records,
        "ledger": {"read": l.read, "on_time": l.on_time, "late": l.late, "dead_letters": l.dead_letters,
                   "balanced": l.balanced()},
        "members": s.view.members.iter().map(|m| json!({
            "id": m.id, "taskmanager": m.taskmanager, "role": m.role, "tasks": m.tasks,
            "watermark_ms": m.watermark_ms, "heartbeat_age_ms": m.heartbeat_age_ms, "error": m.error,
        })).collect::<Vec<_>>(),
    })
}

/// Topics as edges: from the stage that writes a topic to each stage that reads it;
/// `null` ends are external producers and readers.
pub fn edges(view: &JobView) -> Vec<Value> {
    let mut edges = Vec::new();
    for s in &view.stages {
        for (input, _) in s.info.inputs {
            let writers: Vec<&StageEntry> =
                view.stages.iter().filter(|w| w.info.outputs.iter().any(|o| o.name == input.name)).collect();
            if writers.is_empty() {
                edges.push(json!({"topic": input.name, "from": null, "to": s.vertex_id, "late": input.late}));
            }
            for w in writers {
                edges.push(json!({"topic": input.name, "from": w.vertex_id, "to": s.vertex_id, "late": input.late}));
            }
        }
        for output in s.info.outputs {
            let read = view.stages.iter().any(|r| r.info.inputs.iter().any(|(i, _)| i.name == output.name));
            if !read {
                edges.push(json!({"topic": output.name, "from": s.vertex_id, "to": null, "late": output.late}));
            }
        }
    }
    edges
}

/// Every topic of the job with what the dashboard draws from it: who writes it
/// (`external`: users), whether it is a late side output, whether its records are
/// alerts for people. The graph's edges name these topics.
pub fn topics(view: &JobView) -> Vec<Value> {
    let topology = Topology { stages: view.stages.iter().map(|s| s.info).collect() };
    topology
        .topics()
        .into_iter()
        .map(|t| {
            json!({"name": t.name, "key": t.key, "tag": t.tag, "external": t.external, "late": t.late,
                   "alerts": t.alerts})
        })
        .collect()
}

fn plan(view: &JobView) -> Value {
    let nodes: Vec<Value> = view
        .stages
        .iter()
        .map(|s| {
            let inputs: Vec<Value> = s
                .info
                .inputs
                .iter()
                .flat_map(|(i, _)| {
                    view.stages
                        .iter()
                        .filter(|w| w.info.outputs.iter().any(|o| o.name == i.name))
                        .map(|w| w.vertex_id.clone())
                })
                .enumerate()
                .map(
                    |(num, id)| json!({"num": num, "id": id, "ship_strategy": "HASH", "exchange": "pipelined_bounded"}),
                )
                .collect();
            json!({
                "id": s.vertex_id,
                "parallelism": parallelism(s),
                "operator": "",
                "operator_strategy": "",
                "description": s.info.name,
                "inputs": inputs,
                "optimizer_properties": {},
            })
        })
        .collect();
    json!({"jid": view.job_id, "name": view.name, "type": "STREAMING", "nodes": nodes})
}

fn parallelism(s: &StageEntry) -> usize {
    s.view.active_members()
}

pub fn job(view: &JobView) -> Value {
    let vertices: Vec<Value> = view
        .stages
        .iter()
        .map(|s| {
            json!({
                "id": s.vertex_id,
                "name": s.info.name,
                "maxParallelism": if s.info.global { 1 } else { s.view.tasks.len().max(running_tasks(s)) },
                "parallelism": parallelism(s),
                "status": vertex_status(s),
                "start-time": view.start_ms,
                "end-time": -1,
                "duration": view.now_ms - view.start_ms,
                "tasks": task_counts(s),
                "metrics": io_metrics(s),
                "vigil": vigil_vertex(view, s),
            })
        })
        .collect();
    let running = view.stages.iter().filter(|s| vertex_status(s) == "RUNNING").count();
    let state = job_state(view);
    json!({
        "jid": view.job_id,
        "name": view.name,
        "isStoppable": false,
        "state": state,
        "job-type": "STREAMING",
        "start-time": view.start_ms,
        "end-time": -1,
        "duration": view.now_ms - view.start_ms,
        "maxParallelism": -1,
        "now": view.now_ms,
        "timestamps": {state: view.start_ms},
        "vertices": vertices,
        "status-counts": {"RUNNING": running, "CREATED": view.stages.len() - running},
        "plan": plan(view),
        "vigil": {"edges": edges(view), "topics": topics(view), "notifier": notifier(view)},
    })
}

/// The notifier members' deliveries on the live taskmanagers, summed (each since it
/// started); `null` where no notifier runs.
pub fn notifier(view: &JobView) -> Value {
    let members: Vec<Deliveries> = view
        .taskmanagers
        .iter()
        .filter(|t| t.state == TmState::Alive)
        .flat_map(|t| t.members.iter().filter_map(|m| m.deliveries))
        .collect();
    if members.is_empty() {
        return Value::Null;
    }
    let sum = |f: fn(&Deliveries) -> u64| members.iter().map(f).sum::<u64>();
    json!({
        "members": members.len(),
        "read": sum(|d| d.read),
        "delivered": sum(|d| d.delivered),
        "dead_lettered": sum(|d| d.dead_lettered),
        "in_flight": sum(|d| d.in_flight),
        "breakers_open": sum(|d| d.breakers_open),
    })
}

/// A vertex with its subtasks (tasks) and where each runs.
pub fn vertex(view: &JobView, s: &StageEntry) -> Value {
    let subtasks: Vec<Value> = s
        .view
        .tasks
        .iter()
        .map(|&(task, _)| {
            let member = s.view.members.iter().find(|m| m.role == Role::Active && m.tasks.contains(&task));
            let endpoint = member.and_then(|m| view.taskmanagers.iter().find(|t| t.id == m.taskmanager));
            json!({
                "subtask": task,
                "status": if member.is_some() { "RUNNING" } else { "CREATED" },
                "attempt": 0,
                "endpoint": endpoint.map(|t| t.address.clone()),
                "taskmanager-id": member.map(|m| m.taskmanager.clone()),
                "start-time": view.start_ms,
                "end-time": -1,
                "duration": view.now_ms - view.start_ms,
            })
        })
        .collect();
    json!({
        "id": s.vertex_id,
        "name": s.info.name,
        "parallelism": parallelism(s),
        "maxParallelism": s.view.tasks.len(),
        "now": view.now_ms,
        "subtasks": subtasks,
        "vigil": vigil_vertex(view, s),
    })
}

/// Flink's `[{"id": "<subtask>.currentInputWatermark", "value": "<ms>"}]`.
pub fn watermarks(s: &StageEntry) -> Value {
    Value::Array(
        s.view
            .tasks
            .iter()
            .map(|&(task, wm)| {
                json!({"id": format!("{task}.currentInputWatermark"), "value": wm.unwrap_or(i64::MIN).to_string()})
            })
            .collect(),
    )
}

fn commit_json(stage: &str, member: &str, c: &Commit) -> Value {
    json!({
        "className": "completed",
        "id": c.seq,
        "status": "COMPLETED",
        "is_savepoint": false,
        "savepoint_format": null,
        "checkpoint_type": "CHECKPOINT",
        "trigger_timestamp": c.started_ms,
        "latest_ack_timestamp": c.started_ms + c.duration_ms as i64,
        "state_size": c.state_bytes,
        "checkpointed_size": c.state_bytes,
        "end_to_end_duration": c.duration_ms,
        "alignment_buffered": 0,
        "processed_data": 0,
        "persisted_data": 0,
        "num_subtasks": c.tasks,
        "num_acknowledged_subtasks": c.tasks,
        "tasks": {},
        "vigil": {"stage": stage, "member": member},
    })
}

fn stats(values: &[u64]) -> Value {
    if values.is_empty() {
        return json!({"min": 0, "max": 0, "avg": 0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0});
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let pick = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64;
    json!({
        "min": sorted[0],
        "max": sorted[sorted.len() - 1],
        "avg": sorted.iter().sum::<u64>() / sorted.len() as u64,
        "p50": pick(0.5), "p90": pick(0.9), "p95": pick(0.95), "p99": pick(0.99), "p999": pick(0.999),
    })
}

/// Transaction commits as Flink's checkpoint statistics.
pub fn checkpoints(view: &JobView) -> Value {
    let commits: u64 = view.stages.iter().map(|s| s.view.counts.commits).sum();
    let aborts: u64 = view.stages.iter().map(|s| s.view.counts.aborts).sum();
    let restored: u64 = view.stages.iter().map(|s| s.view.counts.restored_tasks).sum();
    let sizes: Vec<u64> = view.commits.iter().map(|(_, _, c)| c.state_bytes).collect();
    let durations: Vec<u64> = view.commits.iter().map(|(_, _, c)| c.duration_ms).collect();
    let history: Vec<Value> = view.commits.iter().take(40).map(|(s, m, c)| commit_json(s, m, c)).collect();
    let per_stage: serde_json::Map<String, Value> = view
        .stages
        .iter()
        .map(|s| {
            let last = view.commits.iter().find(|(stage, _, _)| stage == s.info.name).map(|(_, _, c)| c);
            (
                s.info.name.to_string(),
                json!({
                    "commits": s.view.counts.commits,
                    "aborts": s.view.counts.aborts,
                    "last_commit_ms": s.view.last_commit_ms,
                    "last_commit_duration_ms": last.map(|c| c.duration_ms),
                }),
            )
        })
        .collect();
    json!({
        "counts": {"restored": restored, "total": commits + aborts, "in_progress": 0, "completed": commits,
                   "failed": aborts},
        "summary": {"state_size": stats(&sizes), "checkpointed_size": stats(&sizes),
                    "end_to_end_duration": stats(&durations), "alignment_buffered": stats(&[]),
                    "processed_data": stats(&[]), "persisted_data": stats(&[])},
        "latest": {"completed": history.first().cloned(), "savepoint": null, "failed": null, "restored": null},
        "history": history,
        "vigil": {"per_stage": per_stage},
    })
}

pub fn taskmanagers(view: &JobView) -> Value {
    let tms: Vec<Value> = view
        .taskmanagers
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "path": t.address,
                "dataPort": -1,
                "jmxPort": -1,
                "timeSinceLastHeartbeat": t.last_heartbeat_ms,
                "slotsNumber": t.slots,
                "freeSlots": 0,
                "totalResource": {},
                "freeResource": {},
                "hardware": {"cpuCores": t.cpu_cores, "physicalMemory": 0, "freeMemory": 0, "managedMemory": 0},
                "memoryConfiguration": {},
                "vigil": {
                    "state": t.state.as_str(),
                    "heartbeat_age_ms": t.heartbeat_age_ms,
                    "registered_ms": t.registered_ms,
                    "members": t.members.iter().map(|m| json!({
                        "id": m.member, "stage": m.stage, "role": m.role,
                        "tasks": m.tasks.iter().map(|x| x.task).collect::<Vec<_>>(), "error": m.error,
                    })).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    json!({"taskmanagers": tms})
}

/// Flink's error shape.
pub fn error(message: &str) -> Value {
    json!({"errors": [message]})
}
