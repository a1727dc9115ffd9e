// The live pane: anomalies, late events, health alerts and dead letters, pushed over
// server-sent events from /events/stream (or polled from /events), newest on top.

import { api, POLL_MS } from './api.js';
import { $, esc, setHTML, setText } from './dom.js';
import { ago, int, isNum, isoParts, utcFull, utcTime } from './format.js';
import { setConn } from './header.js';
import { serverNow, state } from './state.js';
import { eventTimeMs, summarize } from './summary.js';

const LIVE_MAX = 200;
// ?live=poll reads the live pane from /events on every poll instead of the event
// stream: for proxies that buffer server-sent events, and for headless runs with
// --virtual-time-budget (which never ends while a stream is open).
const LIVE_POLL = new URLSearchParams(window.location.search).get('live') === 'poll';

const KIND_LABEL = { anomaly: 'anomaly', late_event: 'late', health_alert: 'health', dead_letter: 'dead letter' };
const live = {
  items: [],          // newest first: { ev, li }
  seen: new Set(),    // seq
  maxSeq: -1,
  hidden: new Set(),  // kinds filtered out
  streaming: false,
  es: null,
  retryMs: 1000,
};

// Short parts ("6 faults > 4") wrap as a whole; long ones (a dead letter's reason) may break.
const keepTogether = (p) => (String(p).length <= 32 ? `<span class="nw">${esc(p)}</span>` : esc(p));

function liveItem(ev, fresh) {
  const r = ev.record || {};
  const li = document.createElement('li');
  li.className = `live-item${fresh ? ' new' : ''}${r.severity === 'critical' ? ' critical' : ''}`;
  li.setAttribute('data-kind', ev.kind || 'unknown');
  li.setAttribute('data-topic', ev.topic || '');
  li.setAttribute('data-line', ev.line || '');
  li.setAttribute('data-seq', ev.seq ?? '');
  li.tabIndex = 0;
  li.title = ev.line || '';

  const [head, ...rest] = summarize(ev).filter((p) => p != null && p !== '');
  const t = eventTimeMs(ev);
  const sevClass = r.severity ? ` sev-${esc(r.severity)}` : '';
  const rev = isNum(r.revision) && r.revision > 1 ? `<span class="badge rev" title="a correction of an earlier result for this window">rev ${esc(r.revision)}</span>` : '';
  const where = `${esc(ev.topic || '?')}${isNum(ev.partition) ? ` · p${ev.partition}` : ''}${isNum(ev.offset) ? ` @${ev.offset}` : ''}`;
  const timeTitle = `event time ${t != null ? utcFull(t) : '—'}${isNum(ev.timestamp_ms) ? `\nKafka timestamp ${utcFull(ev.timestamp_ms)}` : ''}`;
  li.innerHTML = `<div class="li-top"><span class="badge${sevClass}"${r.severity ? ` title="severity ${esc(r.severity)}"` : ''}>${esc(KIND_LABEL[ev.kind] || ev.kind || 'event')}</span>${rev}`
    + `<span class="li-time" title="${esc(timeTitle)}">${t != null ? `${utcTime(t)} UTC` : ''}</span></div>`
    + `<div class="li-summary"><b>${keepTogether(head)}</b>${rest.map((p) => `<span class="sep">·</span>${keepTogether(p)}`).join('')}</div>`
    + `<div class="li-meta"><span>${where}</span>${t != null ? `<span title="event date (UTC)">${isoParts(t).date}</span>` : ''}<span class="li-ago" title="when it was committed to Kafka" data-ts="${isNum(ev.timestamp_ms) ? ev.timestamp_ms : ''}"></span>${customerLink(ev)}</div>`
    + `<pre class="li-raw"></pre>`;
  li.querySelector('.li-raw').textContent = ev.line || JSON.stringify(ev.record);
  updateAgo(li.querySelector('.li-ago'));
  return li;
}

// An amount anomaly links to its customer's statistics, as the member that holds
// them answers now (GET /jobs/{id}/state/customers/{customer_id}). The job's id may
// not be known yet when the item is drawn: the link takes it when it is followed.
function customerLink(ev) {
  const r = ev.record || {};
  if (ev.kind !== 'anomaly' || r.anomaly_type !== 'amount' || !r.customer_id) return '';
  return `<a class="li-state" href="#" data-customer="${esc(r.customer_id)}" target="_blank" rel="noopener" title="the customer's amount statistics and velocity window, now">why?</a>`;
}

function followCustomerLink(a) {
  const customer = a.getAttribute('data-customer');
  a.href = `jobs/${encodeURIComponent(state.jobId || '')}/state/customers/${encodeURIComponent(customer)}`;
}

function updateAgo(node) {
  const ts = Number(node.getAttribute('data-ts'));
  setText(node, node.getAttribute('data-ts') && Number.isFinite(ts) ? ago(serverNow() - ts) : '');
}

function addLive(ev, fresh) {
  if (!ev || typeof ev !== 'object') return;
  const key = ev.seq;
  if (key != null && live.seen.has(key)) return;
  if (key != null) live.seen.add(key);
  const list = $('#live');
  const li = liveItem(ev, fresh);
  const item = { ev, li };
  // Newest on top: streamed events are always newest; backfilled ones go by seq.
  let idx = 0;
  if (!fresh && isNum(key)) {
    while (idx < live.items.length && isNum(live.items[idx].ev.seq) && live.items[idx].ev.seq > key) idx++;
  }
  const before = live.items[idx] ? live.items[idx].li : null;
  const keepScroll = idx === 0 && list.scrollTop > 4;
  const prevHeight = list.scrollHeight;
  list.insertBefore(li, before);
  live.items.splice(idx, 0, item);
  if (keepScroll) list.scrollTop += list.scrollHeight - prevHeight; // don't yank a reader's place
  if (isNum(key)) live.maxSeq = Math.max(live.maxSeq, key);
  while (live.items.length > LIVE_MAX) {
    const old = live.items.pop();
    old.li.remove();
    if (old.ev.seq != null) live.seen.delete(old.ev.seq);
  }
  if (fresh) setTimeout(() => li.classList.remove('new'), 2400);
  liveCounts();
}

function liveCounts() {
  const counts = { anomaly: 0, late_event: 0, health_alert: 0, dead_letter: 0 };
  for (const { ev } of live.items) if (ev.kind in counts) counts[ev.kind]++;
  for (const node of document.querySelectorAll('#live-filters [data-count]')) setText(node, int(counts[node.getAttribute('data-count')] || 0));
  if (live.streaming || LIVE_POLL) {
    setText($('#live-sub'), `${LIVE_POLL ? 'polling' : 'streaming'} · ${live.items.length === 1 ? '1 event' : `${live.items.length} events`}${live.items.length >= LIVE_MAX ? ' (newest kept)' : ''} · newest on top`);
  }
  const visible = live.items.filter(({ ev }) => !live.hidden.has(ev.kind)).length;
  $('#live-empty').hidden = visible > 0;
  if (live.items.length && !visible) {
    setHTML($('#live-empty'), '<p>Nothing of these kinds in the last ' + live.items.length + ' events.</p>');
  } else if (!live.items.length) {
    setHTML($('#live-empty'), '<p>Nothing yet.</p><p class="muted">Anomalies, late events, health alerts and dead letters appear here the moment they are committed.</p>');
  }
}

async function backfill(polled = false) {
  try {
    const data = await api('/events');
    const events = (data && data.events) || [];
    const top = events.reduce((m, e) => (isNum(e.seq) ? Math.max(m, e.seq) : m), -1);
    const known = new Map(live.items.map((it) => [it.ev.seq, it.ev.line]));
    const clash = events.some((e) => known.has(e.seq) && known.get(e.seq) !== e.line);
    const overlap = events.some((e) => known.has(e.seq));
    if (clash || (top >= 0 && top < live.maxSeq && !overlap)) {
      // the jobmanager restarted and numbers its events afresh: start over
      for (const it of live.items) it.li.remove();
      live.items = [];
      live.seen.clear();
      live.maxSeq = -1;
    }
    // oldest first so each one lands in its place; when polling, new ones arrive as new
    const fresh = polled && live.items.length > 0;
    for (const ev of [...events].reverse()) addLive(ev, fresh && isNum(ev.seq) && ev.seq > live.maxSeq);
    liveCounts();
  } catch (_) {
    // the poller reports an unreachable API; the stream indicator reports the stream
  }
}

function connectLive() {
  if (LIVE_POLL) {
    setConn('live', 'ok', `live: polling /events every ${POLL_MS / 1000} s`);
    setText($('#live-sub'), 'polling /events · newest on top');
    return;
  }
  if (typeof EventSource === 'undefined') {
    setConn('live', 'down', 'this browser has no EventSource');
    return;
  }
  setConn('live', 'connecting', 'connecting to /events/stream');
  const es = new EventSource('/events/stream');
  live.es = es;
  es.onopen = () => {
    live.retryMs = 1000;
    setConn('live', 'ok', 'live: streaming from /events/stream');
    live.streaming = true;
    liveCounts();
    backfill();
  };
  es.onmessage = (msg) => {
    let ev;
    try {
      ev = JSON.parse(msg.data);
    } catch (_) {
      return; // a keep-alive or a line we can't read: skip it
    }
    addLive(ev, true);
  };
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) {
      // the browser gave up (HTTP error, wrong type): retry ourselves, backing off
      setConn('live', 'down', `live stream closed; retrying in ${Math.round(live.retryMs / 1000)} s`);
      live.streaming = false;
      setText($('#live-sub'), 'stream disconnected · retrying');
      es.close();
      setTimeout(connectLive, live.retryMs);
      live.retryMs = Math.min(15000, live.retryMs * 2);
    } else {
      live.streaming = false;
      setConn('live', 'connecting', 'live stream interrupted; reconnecting');
      setText($('#live-sub'), 'reconnecting…');
    }
  };
}

function applyFilters() {
  const list = $('#live');
  for (const k of Object.keys(KIND_LABEL)) list.classList.toggle(`hide-${k}`, live.hidden.has(k));
  for (const chip of document.querySelectorAll('#live-filters .chip')) {
    chip.setAttribute('aria-pressed', String(!live.hidden.has(chip.getAttribute('data-filter'))));
  }
  $('#live-all').hidden = live.hidden.size === 0;
  liveCounts();
}

function setupLive() {
  const onFilter = (ev) => {
    const chip = ev.target.closest('[data-filter]');
    if (!chip) return;
    const f = chip.getAttribute('data-filter');
    const kinds = Object.keys(KIND_LABEL);
    if (f === 'all') live.hidden.clear();
    else if (live.hidden.size === 0) {
      // from "everything", a click means "only this"
      for (const k of kinds) if (k !== f) live.hidden.add(k);
    } else if (live.hidden.has(f)) live.hidden.delete(f);
    else {
      live.hidden.add(f);
      if (live.hidden.size === kinds.length) live.hidden.clear();
    }
    applyFilters();
  };
  $('#live-filters').addEventListener('click', onFilter);
  $('#live-all').addEventListener('click', onFilter);
  const list = $('#live');
  const toggle = (li) => {
    if (window.getSelection && String(window.getSelection()).length && li.classList.contains('open')) return;
    li.classList.toggle('open');
  };
  list.addEventListener('click', (ev) => {
    const link = ev.target.closest('.li-state');
    if (link) return followCustomerLink(link); // the browser opens it
    if (ev.target.closest('.li-raw')) return; // let people select the raw line
    const li = ev.target.closest('.live-item');
    if (li) toggle(li);
  });
  list.addEventListener('keydown', (ev) => {
    const li = ev.target.closest('.live-item');
    if (li && (ev.key === 'Enter' || ev.key === ' ')) {
      ev.preventDefault();
      toggle(li);
    }
  });
  liveCounts();
}

/** The notifier's deliveries above the live list (hidden where no notifier runs). */
export function renderNotifier(job) {
  const n = job && job.vigil && job.vigil.notifier;
  const node = $('#live-notifier');
  node.hidden = !n;
  if (!n) return;
  node.setAttribute('data-delivered', n.delivered);
  const breakers = n.breakers_open ? ` · ${int(n.breakers_open)} breaker(s) open` : '';
  setText(node, `notified ${int(n.delivered)} · dead-lettered ${int(n.dead_lettered)} · in flight ${int(n.in_flight)}${breakers}`);
  node.title = `the notifier (${n.members} member(s)), since each started: alerts read ${n.read} = delivered + dead-lettered + in flight`;
}

export function startLive() {
  setupLive();
  backfill();
  connectLive();
}

/** On every poll: without a working stream, keep the live pane filling from /events. */
export function pollLive() {
  if (LIVE_POLL || !live.streaming) backfill(true);
}

/** Every second: each event's "committed … ago". */
export function tickLive() {
  for (const node of document.querySelectorAll('#live .li-ago')) updateAgo(node);
}
