// The top bar (job, cluster health, uptime, slots, ingest, connection lights), the
// footer's links, and the banner when the API cannot be reached.

import { POLL_MS } from './api.js';
import { $, esc, setHTML, setText } from './dom.js';
import { dur, int, rateGrouped, uptimeText } from './format.js';
import { edgesOf, stageOf, stageStatus } from './model.js';
import { state } from './state.js';

export function setConn(which, st, title) {
  const node = $(which === 'api' ? '#conn-api' : '#conn-live');
  node.setAttribute('data-state', st);
  if (title) node.title = title;
}

export function renderHeader() {
  const { overview, job, tms } = state;
  const list = (tms && tms.taskmanagers) || [];
  const lost = list.filter((t) => t.vigil && t.vigil.state === 'lost').length;
  const alive = list.length - lost;

  const jobState = job ? job.state : 'NO JOB';
  const pill = $('#job-state');
  pill.className = `pill ${jobState === 'RUNNING' ? 'pill-ok' : (['FAILED', 'CANCELED', 'NO JOB'].includes(jobState) ? 'pill-bad' : 'pill-warn')}`;
  setText(pill, jobState.toLowerCase());
  setText($('#job-name'), job ? job.name || 'vigil' : 'no job');
  setText($('#job-id'), job ? job.jid : '');

  const statuses = job ? job.vertices.map(stageStatus) : [];
  let cls = 'ok';
  let text = 'Healthy';
  let why = 'every stage running, every taskmanager alive';
  if (!job || jobState !== 'RUNNING' || statuses.includes('no-member') || statuses.includes('failed')) {
    cls = 'bad';
    text = 'Critical';
    why = !job ? 'no job' : (jobState !== 'RUNNING' ? `job ${jobState.toLowerCase()}` : 'a stage has no live member');
  } else if (lost || statuses.includes('standby-only') || statuses.includes('lagging')) {
    cls = 'warn';
    text = 'Degraded';
    const reasons = [];
    if (lost) reasons.push(`${lost} taskmanager${lost === 1 ? '' : 's'} lost`);
    const so = statuses.filter((s) => s === 'standby-only').length;
    if (so) reasons.push(`${so} stage${so === 1 ? '' : 's'} standby only`);
    const lg = statuses.filter((s) => s === 'lagging').length;
    if (lg) reasons.push(`${lg} stage${lg === 1 ? '' : 's'} lagging`);
    why = reasons.join(', ');
  }
  const cs = $('#cluster-status');
  setHTML(cs, `<span class="dot dot-${cls}"></span>${text}`);
  cs.title = why;

  setHTML($('#tm-summary'), `${alive} alive${lost ? ` <span class="lost">· ${lost} lost</span>` : ''}`);
  if (overview) setHTML($('#slots'), `${int(overview['slots-available'])} <span class="sub">/ ${int(overview['slots-total'])}</span>`);

  if (job) {
    const edges = edgesOf(job);
    const ingestStages = new Set(edges.filter((e) => e.from == null && e.to).map((e) => e.to));
    const total = job.vertices.filter((v) => ingestStages.has(stageOf(v)))
      .reduce((s, v) => s + ((v.vigil && v.vigil.records_in_per_second) || 0), 0);
    setHTML($('#ingest'), `${rateGrouped(total)} <span class="sub">rec/s</span>`);
    $('#foot-job').href = `/jobs/${job.jid}`;
    $('#foot-job').textContent = `/jobs/${job.jid.slice(0, 8)}…`;
  }
  if (overview) setText($('#foot-version'), overview['flink-version'] || 'vigil');
  tickClock();
}

export function tickClock() {
  if (state.uptimeBase) {
    const [base, at] = state.uptimeBase;
    // keep counting between polls, but stop once the API has gone quiet
    const extra = state.failing ? 0 : Date.now() - at;
    setText($('#uptime'), uptimeText(base + extra));
  }
  if (state.everOk) {
    const age = Date.now() - state.okAt;
    setText($('#foot-updated'), age < 1500 ? 'updated just now' : `updated ${dur(age)} ago`);
  }
  if (state.failing) renderBanner();
}

function renderBanner() {
  const banner = $('#banner');
  const origin = window.location.origin;
  const since = state.everOk ? `Showing what it said ${dur(Date.now() - state.okAt)} ago.` : '';
  setHTML(banner, `<span class="dot"></span><span><strong>Can't reach the jobmanager</strong> at ${esc(origin)} — retrying every ${POLL_MS / 1000} s. ${esc(since)} <span class="muted">(${esc(state.failure)})</span></span>`);
  banner.hidden = false;
}

export function renderFailure() {
  setConn('api', 'down', `JSON API unreachable: ${state.failure}`);
  document.body.classList.toggle('stale', state.everOk);
  renderBanner();
  const cs = $('#cluster-status');
  setHTML(cs, '<span class="dot dot-bad"></span>Unreachable');
  cs.title = state.failure;
  if (!state.everOk) {
    setText($('#job-state'), 'no answer');
    $('#job-state').className = 'pill pill-bad';
    const empty = $('#graph-empty');
    empty.hidden = false;
    setHTML(empty, `<div class="spinner"></div><p><strong>Can't reach the jobmanager.</strong></p><p class="muted">Is it running? This page retries every ${POLL_MS / 1000} s and fills in as soon as it answers.</p>`);
  }
}
