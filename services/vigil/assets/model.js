// The stage model: a vertex's stage, status and members; the job's edges and topics.

import { isNum } from './format.js';
import { state } from './state.js';

// A stage is "lagging" once its consumers are this far behind the head of their topics.
const LAG_WARN_SECONDS = 5;
const LAG_WARN_RECORDS = 50000;

export function stageOf(v) {
  return (v.vigil && v.vigil.stage) || v.name;
}

export function stageStatus(v) {
  const g = v.vigil || {};
  const members = g.members || [];
  if (['FAILED', 'CANCELED', 'CANCELING'].includes(v.status)) return 'failed';
  if (!members.length) return 'no-member';
  const live = members.filter((m) => !state.lostTms.has(m.taskmanager));
  if (!live.length) return 'no-member';
  if (!live.some((m) => m.role === 'active')) return 'standby-only';
  if ((isNum(g.consumer_lag_seconds) && g.consumer_lag_seconds >= LAG_WARN_SECONDS)
    || (isNum(g.consumer_lag_records) && g.consumer_lag_records >= LAG_WARN_RECORDS)) return 'lagging';
  return 'running';
}

export const STATUS_LABEL = {
  running: 'running', lagging: 'lagging', 'standby-only': 'standby only', 'no-member': 'no member', failed: 'failed',
};
export const STATUS_CLASS = {
  running: 'ok', lagging: 'warn', 'standby-only': 'standby', 'no-member': 'bad', failed: 'bad',
};

export function membersSummary(v) {
  const g = v.vigil || {};
  const members = g.members || [];
  const active = members.filter((m) => m.role === 'active').length;
  const standby = members.length - active;
  const head = g.global ? 'global' : `p${v.parallelism ?? '?'}`;
  if (!members.length) return `${head} · no members`;
  return standby ? `${head} · ${active} active + ${standby} standby` : `${head} · ${active} active`;
}

/**
 * The topics between stages, as the API derives them from the topology: one edge
 * from each stage that writes a topic to each stage that reads it, `null` ends for
 * users (source topics in, results out).
 */
export function edgesOf(job) {
  const byId = new Map(job.vertices.map((v) => [v.id, v]));
  const name = (id) => (id == null ? null : (byId.has(id) ? stageOf(byId.get(id)) : null));
  const edges = (job.vigil && Array.isArray(job.vigil.edges)) ? job.vigil.edges : [];
  return edges.map((e) => ({ topic: e.topic, from: name(e.from), to: name(e.to), late: !!e.late }));
}

/** The job's topics by name: whether users write one, a late side output, alerts. */
export function topicsOf(job) {
  const topics = (job.vigil && Array.isArray(job.vigil.topics)) ? job.vigil.topics : [];
  return new Map(topics.map((t) => [t.name, t]));
}
