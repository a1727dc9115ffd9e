// Vigil jobmanager dashboard.
//
// Reads only this jobmanager's REST API (same origin): the JSON endpoints are polled
// every POLL_MS, the live pane is pushed over server-sent events from /events/stream.
// Plain ES2020 modules, no dependencies, no build step.

import { api, POLL_MS } from './api.js';
import { renderCheckpoints } from './checkpoints.js';
import { $, setHTML } from './dom.js';
import { isNum } from './format.js';
import { renderGraph } from './graph.js';
import { renderFailure, renderHeader, setConn, tickClock } from './header.js';
import { pollLive, renderNotifier, startLive, tickLive } from './live.js';
import { renderStages } from './stages.js';
import { state } from './state.js';
import { renderTaskmanagers } from './taskmanagers.js';

async function poll() {
  try {
    // One cheap request first: when the jobmanager is down that is the only one that fails.
    const overview = await api('/overview');
    if (!state.jobId) {
      const jobs = await api('/jobs');
      const list = (jobs && jobs.jobs) || [];
      const pick = list.find((j) => j.status === 'RUNNING') || list[0];
      state.jobId = pick ? pick.id : null;
    }
    const id = state.jobId;
    const [job, tms, checkpoints] = await Promise.all([
      id ? api(`/jobs/${id}`) : Promise.resolve(null),
      api('/taskmanagers'),
      id ? api(`/jobs/${id}/checkpoints`).catch(() => null) : Promise.resolve(null),
    ]);
    state.overview = overview;
    state.job = job;
    state.tms = tms;
    state.checkpoints = checkpoints;
    if (job && isNum(job.now)) state.serverOffset = job.now - Date.now();
    const up = overview && overview.vigil && overview.vigil['uptime-ms'];
    state.uptimeBase = isNum(up) ? [up, Date.now()] : null;
    state.okAt = Date.now();
    state.everOk = true;
    state.failing = false;
  } catch (e) {
    if (e.status === 404 && state.jobId) {
      state.jobId = null; // the job went away (a restart gives a new id): look it up again
    }
    state.failing = true;
    state.failure = e && e.message ? e.message : String(e);
    renderFailure();
    setTimeout(poll, POLL_MS);
    return;
  }
  pollLive();
  try {
    render();
  } catch (e) {
    // A shape this page does not expect: say so, and keep polling.
    console.error('vigil dashboard: cannot render the API response', e);
  }
  setTimeout(poll, POLL_MS);
}

function render() {
  setConn('api', 'ok', `JSON API: updated every ${POLL_MS / 1000} s`);
  document.body.classList.remove('stale');
  $('#banner').hidden = true;
  const list = (state.tms && state.tms.taskmanagers) || [];
  state.lostTms = new Set(list.filter((t) => t.vigil && t.vigil.state === 'lost').map((t) => t.id));
  const { job } = state;
  if (job && Array.isArray(job.vertices)) {
    renderGraph(job);
    renderStages(job);
  } else {
    const empty = $('#graph-empty');
    empty.hidden = false;
    setHTML(empty, '<p><strong>No job is running.</strong></p><p class="muted">The graph appears once the jobmanager has a job.</p>');
  }
  renderNotifier(job);
  renderTaskmanagers(state.tms);
  renderCheckpoints(state.checkpoints);
  renderHeader();
}

startLive();
poll();
setInterval(() => {
  tickClock();
  tickLive();
}, 1000);
