// Vigil jobmanager dashboard.
//
// Reads only this jobmanager's REST API (same origin): the JSON endpoints are polled
// every POLL_MS, the live pane is pushed over server-sent events from /events/stream.
// Plain ES2020, no dependencies, no build step.
'use strict';

(() => {
  const POLL_MS = 2000;
  const FETCH_TIMEOUT_MS = 4000;
  const LIVE_MAX = 200;
  const SPARK_SAMPLES = 60;
  // A stage is "lagging" once its consumers are this far behind the head of their topics.
  const LAG_WARN_SECONDS = 5;
  const LAG_WARN_RECORDS = 50000;
  // ?live=poll reads the live pane from /events on every poll instead of the event
  // stream: for proxies that buffer server-sent events, and for headless runs with
  // --virtual-time-budget (which never ends while a stream is open).
  const LIVE_POLL = new URLSearchParams(window.location.search).get('live') === 'poll';

  // ---------------------------------------------------------------- helpers

  const $ = (sel, root = document) => root.querySelector(sel);
  const SVGNS = 'http://www.w3.org/2000/svg';

  function esc(value) {
    return String(value ?? '').replace(/[&<>"']/g, (c) => ({
      '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
    }[c]));
  }

  function el(tag, attrs, parent, text) {
    const node = document.createElementNS(SVGNS, tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text != null) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function setText(node, text) {
    if (node && node.textContent !== text) node.textContent = text;
  }

  function setHTML(node, html) {
    if (node && node.__html !== html) {
      node.innerHTML = html;
      node.__html = html;
    }
  }

  const isNum = (n) => typeof n === 'number' && Number.isFinite(n);
  const nfInt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
  const nf1 = new Intl.NumberFormat('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 });

  const int = (n) => (isNum(n) ? nfInt.format(n) : '—');
  const nfCompact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });
  const compact = (n) => (isNum(n) ? nfCompact.format(n) : '—');
  // The number shown in the graph: plain digits (no grouping) so it reads as a number.
  const rateText = (n) => (isNum(n) ? (Math.round(n * 10) / 10).toFixed(1) : '0.0');
  const rateGrouped = (n) => (isNum(n) ? nf1.format(n) : '—');

  // A decoded JSON float such as 9800.0 arrives as 9800; show it as the line does.
  const amount = (n) => (isNum(n) ? (Number.isInteger(n) ? n.toFixed(1) : String(n)) : String(n ?? '—'));

  function trim1(x) {
    return x >= 100 ? String(Math.round(x)) : x.toFixed(1).replace(/\.0$/, '');
  }

  const DAY = 86400000;
  const YEAR = 365 * DAY;

  /** Humanized duration: "850 ms", "1.2 s", "3 min 12 s", "4 h 5 min", "6 d 2 h", "3 y 16 d". */
  function dur(ms) {
    if (!isNum(ms)) return '—';
    const neg = ms < 0;
    ms = Math.abs(ms);
    let s;
    if (ms < 1000) s = `${Math.round(ms)} ms`;
    else if (ms < 60000) s = `${trim1(ms / 1000)} s`;
    else if (ms < 3600000) {
      const m = Math.floor(ms / 60000);
      const sec = Math.floor((ms % 60000) / 1000);
      s = sec ? `${m} min ${sec} s` : `${m} min`;
    } else if (ms < DAY) {
      const h = Math.floor(ms / 3600000);
      const m = Math.floor((ms % 3600000) / 60000);
      s = m ? `${h} h ${m} min` : `${h} h`;
    } else if (ms < YEAR) {
      const d = Math.floor(ms / DAY);
      const h = Math.floor((ms % DAY) / 3600000);
      s = h ? `${d} d ${h} h` : `${d} d`;
    } else {
      const y = Math.floor(ms / YEAR);
      const d = Math.floor((ms % YEAR) / DAY);
      s = d ? `${y} y ${d} d` : `${y} y`;
    }
    return neg ? `−${s}` : s;
  }

  function uptimeText(ms) {
    if (!isNum(ms)) return '—';
    const s = Math.floor(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
    const h = Math.floor(m / 60);
    if (h < 24) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }

  function isoParts(ms) {
    if (!isNum(ms) || Math.abs(ms) > 8.64e15) return { date: '—', time: '—', millis: '' };
    const iso = new Date(ms).toISOString(); // 2023-11-14T22:13:59.650Z
    return { date: iso.slice(0, 10), time: iso.slice(11, 19), millis: iso.slice(19, 23) };
  }

  function utcTime(ms, millis = true) {
    if (!isNum(ms)) return '—';
    const p = isoParts(ms);
    return millis ? p.time + p.millis : p.time;
  }

  function utcFull(ms) {
    if (!isNum(ms)) return '—';
    const p = isoParts(ms);
    return `${p.date} ${p.time}${p.millis} UTC`;
  }

  /** Event-time strings from the records ("2023-11-14T22:13:48.057000+00:00") or epoch ms. */
  function toMs(value) {
    if (isNum(value)) return value;
    if (typeof value !== 'string') return null;
    const t = Date.parse(value.replace(/(\.\d{3})\d+/, '$1'));
    return Number.isNaN(t) ? null : t;
  }

  const ago = (ms) => (isNum(ms) ? `${dur(Math.max(0, ms))} ago` : '—');

  // ---------------------------------------------------------------- state

  const state = {
    jobId: null,
    job: null,
    overview: null,
    tms: null,
    checkpoints: null,
    okAt: 0,               // Date.now() of the last successful poll
    everOk: false,
    failing: false,
    failure: '',
    serverOffset: 0,       // server clock − browser clock, from job.now
    uptimeBase: null,      // [uptime-ms, Date.now() when read]
    spark: new Map(),      // stage -> records in/s samples
    graphKey: '',
    graph: null,           // refs into the SVG, rebuilt when the topology changes
    stageOrder: [],
    rows: new Map(),       // stage -> table row refs
    tmRows: new Map(),     // taskmanager id -> row refs
    lostTms: new Set(),
  };

  const serverNow = () => Date.now() + state.serverOffset;

  async function api(path) {
    const ctrl = new AbortController();
    const timer = setTimeout(() => ctrl.abort(), FETCH_TIMEOUT_MS);
    try {
      const res = await fetch(path, { signal: ctrl.signal, cache: 'no-store', headers: { Accept: 'application/json' } });
      if (!res.ok) {
        const err = new Error(`${path} answered HTTP ${res.status}`);
        err.status = res.status;
        throw err;
      }
      return await res.json();
    } catch (e) {
      if (e.name === 'AbortError') throw new Error(`${path} did not answer within ${FETCH_TIMEOUT_MS / 1000} s`);
      if (e instanceof TypeError) throw new Error(`no answer from ${path}`);
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  // ---------------------------------------------------------------- polling

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
    // Without a working stream, keep the live pane filling from /events.
    if (LIVE_POLL || !live.streaming) backfill(true);
    try {
      render();
    } catch (e) {
      // A shape this page does not expect: say so, and keep polling.
      console.error('vigil dashboard: cannot render the API response', e);
    }
    setTimeout(poll, POLL_MS);
  }

  // ---------------------------------------------------------------- stage model

  function stageOf(v) {
    return (v.vigil && v.vigil.stage) || v.name;
  }

  function stageStatus(v) {
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

  const STATUS_LABEL = {
    running: 'running', lagging: 'lagging', 'standby-only': 'standby only', 'no-member': 'no member', failed: 'failed',
  };
  const STATUS_CLASS = {
    running: 'ok', lagging: 'warn', 'standby-only': 'standby', 'no-member': 'bad', failed: 'bad',
  };

  function membersSummary(v) {
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
  function edgesOf(job) {
    const byId = new Map(job.vertices.map((v) => [v.id, v]));
    const name = (id) => (id == null ? null : (byId.has(id) ? stageOf(byId.get(id)) : null));
    const edges = (job.vigil && Array.isArray(job.vigil.edges)) ? job.vigil.edges : [];
    return edges.map((e) => ({ topic: e.topic, from: name(e.from), to: name(e.to), late: !!e.late }));
  }

  /** The job's topics by name: whether users write one, a late side output, alerts. */
  function topicsOf(job) {
    const topics = (job.vigil && Array.isArray(job.vigil.topics)) ? job.vigil.topics : [];
    return new Map(topics.map((t) => [t.name, t]));
  }

  // ---------------------------------------------------------------- job graph

  const VW = 240;
  const VH = 100;
  const COL0 = 214;                 // x of the first stage column
  const COL_STEP = 434;             // from one stage column to the next
  const ROW_GAP = 20;               // between the stages of a column
  const GROUP_GAP = 40;             // between groups
  const TOP = 16;
  const SRC_X = 14;
  const SRC_W = 142;
  const PILL_H = 28;

  /** Spread items (each with .y desired centre) so centres are at least `gap` apart. */
  function spread(items, gap) {
    items.sort((a, b) => a.y - b.y || a.order - b.order);
    for (let pass = 0; pass < 40; pass++) {
      let moved = false;
      for (let i = 1; i < items.length; i++) {
        const overlap = items[i - 1].y + gap - items[i].y;
        if (overlap > 0.5) {
          items[i - 1].y -= overlap / 2;
          items[i].y += overlap / 2;
          moved = true;
        }
      }
      if (!moved) break;
    }
    return items;
  }

  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

  /**
   * Where each stage goes, from the edges alone (nothing here knows a stage by name).
   * A group is a connected component: stages that share a topic; groups come in the
   * order of their first stage, each named after its source topics. A stage's column
   * is its depth: 0 if it reads only source topics, else 1 + the deepest column of
   * the stages whose main outputs it reads. A late side output into another stage is
   * drawn as a side channel out of its writer's bottom, so it sets its reader's
   * column only when the reader reads nothing else from a stage. Within a group,
   * each column is centred on the group's tallest, its stages ordered by the mean
   * height of the stages feeding them, then in pipeline order.
   */
  function place(stages, edges) {
    const index = new Map(stages.map((s, i) => [s, i]));
    const known = (s) => s != null && index.has(s);

    // Groups: union-find over the stages on each topic, the root being the first stage.
    const root = new Map(stages.map((s) => [s, s]));
    const find = (s) => {
      while (root.get(s) !== s) s = root.get(s);
      return s;
    };
    const join = (a, b) => {
      const [ra, rb] = [find(a), find(b)];
      if (ra === rb) return;
      const [first, later] = index.get(ra) < index.get(rb) ? [ra, rb] : [rb, ra];
      root.set(later, first);
    };
    const onTopic = new Map();
    for (const e of edges) {
      for (const s of [e.from, e.to].filter(known)) {
        if (!onTopic.has(e.topic)) onTopic.set(e.topic, []);
        onTopic.get(e.topic).push(s);
      }
    }
    for (const ss of onTopic.values()) for (const s of ss) join(ss[0], s);

    // Columns: depth over the stages that feed each stage.
    const feeds = new Map(stages.map((s) => [s, { main: [], late: [] }]));
    for (const e of edges) if (known(e.from) && known(e.to)) feeds.get(e.to)[e.late ? 'late' : 'main'].push(e.from);
    const upstream = (s) => (feeds.get(s).main.length ? feeds.get(s).main : feeds.get(s).late);
    const depth = new Map();
    const depthOf = (s, path = new Set()) => {
      if (depth.has(s)) return depth.get(s);
      if (path.has(s)) return 0; // a cycle: the topology has none, the page survives one
      path.add(s);
      const ups = upstream(s);
      const d = ups.length ? 1 + Math.max(...ups.map((u) => depthOf(u, path))) : 0;
      path.delete(s);
      depth.set(s, d);
      return d;
    };

    const groups = [];
    const groupOf = new Map();
    for (const s of stages) {
      const r = find(s);
      if (!groupOf.has(r)) {
        const g = { stages: [], sources: [] };
        groupOf.set(r, g);
        groups.push(g);
      }
      groupOf.get(r).stages.push(s);
    }
    for (const e of edges) {
      if (e.from == null && known(e.to)) {
        const g = groupOf.get(find(e.to));
        if (!g.sources.includes(e.topic)) g.sources.push(e.topic);
      }
    }

    const pos = new Map();
    let top = TOP;
    for (const g of groups) {
      g.label = g.sources.length ? g.sources.join(', ') : g.stages[0];
      const cols = [];
      for (const s of g.stages) (cols[depthOf(s)] = cols[depthOf(s)] || []).push(s);
      const tall = (n) => n * VH + (n - 1) * ROW_GAP;
      const height = tall(Math.max(...Array.from(cols, (c) => (c ? c.length : 0))));
      cols.forEach((col, d) => {
        const fedAt = (s) => {
          const ys = upstream(s).filter((u) => pos.has(u)).map((u) => pos.get(u).y);
          return ys.length ? mean(ys) : 0;
        };
        col.sort((a, b) => fedAt(a) - fedAt(b) || index.get(a) - index.get(b));
        const y0 = top + (height - tall(col.length)) / 2;
        col.forEach((s, i) => pos.set(s, { x: COL0 + d * COL_STEP, y: y0 + i * (VH + ROW_GAP) }));
      });
      g.top = top;
      g.bottom = top + height;
      top += height + GROUP_GAP;
    }
    return { pos, groups };
  }

  function layout(stages, edges) {
    const { pos, groups } = place(stages, edges);
    const maxRight = Math.max(...[...pos.values()].map((p) => p.x + VW), COL0 + VW);
    const sinkX = maxRight + 68;
    const sinkW = 206;

    // Topic pills: external inputs on the left, terminal outputs on the right,
    // each at the mean height of the stages it touches.
    const sources = new Map();
    const sinks = new Map();
    edges.forEach((e, i) => {
      if (e.from == null && e.to) {
        const p = pos.get(e.to);
        if (!sources.has(e.topic)) sources.set(e.topic, { topic: e.topic, ys: [], order: i, late: e.late });
        sources.get(e.topic).ys.push(p.y + VH / 2);
      }
      if (e.to == null && e.from) {
        const p = pos.get(e.from);
        if (!sinks.has(e.topic)) sinks.set(e.topic, { topic: e.topic, ys: [], order: i, late: e.late });
        sinks.get(e.topic).ys.push(p.y + VH / 2);
      }
    });
    for (const m of [sources, sinks]) for (const t of m.values()) t.y = t.ys.reduce((a, b) => a + b, 0) / t.ys.length;
    spread([...sources.values()], 46);
    spread([...sinks.values()], 44);

    // Ports: inputs along a vertex's left side ordered by where they come from;
    // outputs along its right side, one port per topic; a late side output to another
    // stage leaves from the bottom so it reads as a side channel.
    const anchorY = (e, end) => {
      if (end === 'from') return e.from == null ? sources.get(e.topic).y : pos.get(e.from).y + VH / 2;
      return e.to == null ? sinks.get(e.topic).y : pos.get(e.to).y + VH / 2;
    };
    const inPorts = new Map();
    const outPorts = new Map();
    for (const s of stages) {
      const p = pos.get(s);
      const ins = edges.filter((e) => e.to === s);
      ins.sort((a, b) => {
        const la = a.late && a.from ? 1 : 0;
        const lb = b.late && b.from ? 1 : 0;
        return la - lb || anchorY(a, 'from') - anchorY(b, 'from');
      });
      ins.forEach((e, i) => inPorts.set(e, { x: p.x, y: p.y + (VH * (i + 1)) / (ins.length + 1) }));
      const outs = edges.filter((e) => e.from === s && !(e.late && e.to));
      const topics = [...new Set(outs.map((e) => e.topic))];
      const meanY = (t) => {
        const ys = outs.filter((e) => e.topic === t).map((e) => anchorY(e, 'to'));
        return ys.reduce((a, b) => a + b, 0) / ys.length;
      };
      topics.sort((a, b) => meanY(a) - meanY(b));
      const topicPort = new Map(topics.map((t, i) => [t, { x: p.x + VW, y: p.y + (VH * (i + 1)) / (topics.length + 1) }]));
      for (const e of outs) outPorts.set(e, topicPort.get(e.topic));
      for (const e of edges) if (e.from === s && e.late && e.to) outPorts.set(e, { x: p.x + VW / 2, y: p.y + VH, bottom: true });
    }
    for (const e of edges) {
      if (e.from == null) outPorts.set(e, { x: SRC_X + SRC_W, y: sources.get(e.topic).y });
      if (e.to == null) inPorts.set(e, { x: sinkX, y: sinks.get(e.topic).y });
    }

    const bottom = Math.max(...[...pos.values()].map((p) => p.y + VH), ...[...sinks.values(), ...sources.values()].map((t) => t.y + PILL_H / 2));
    return { pos, groups, sources, sinks, sinkX, sinkW, inPorts, outPorts, width: sinkX + sinkW + 14, height: bottom + 40 };
  }

  function wirePath(a, b) {
    if (a.bottom) {
      // down out of the vertex, then along to the target's side
      const dy = Math.max(12, b.y - a.y);
      return `M${a.x},${a.y} C${a.x},${a.y + dy * 0.9} ${a.x + 40},${b.y} ${a.x + 110},${b.y} L${b.x - 6},${b.y}`;
    }
    const dx = Math.max(30, (b.x - a.x) / 2);
    return `M${a.x},${a.y} C${a.x + dx},${a.y} ${b.x - dx},${b.y} ${b.x - 6},${b.y}`;
  }

  function bezierMid(a, b) {
    if (a.bottom) return { x: (a.x + b.x) / 2 + 20, y: b.y };
    return { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 };
  }

  function buildGraph(job, stages, edges, topics) {
    const svgRoot = $('#job-graph');
    while (svgRoot.firstChild) svgRoot.removeChild(svgRoot.firstChild);
    const L = layout(stages, edges);
    svgRoot.setAttribute('viewBox', `0 0 ${L.width} ${L.height}`);
    const defs = el('defs', null, svgRoot);
    const grad = el('linearGradient', { id: 'spark-fill', x1: 0, y1: 0, x2: 0, y2: 1 }, defs);
    el('stop', { offset: '0%', 'stop-color': '#4cc9f0', 'stop-opacity': 0.22 }, grad);
    el('stop', { offset: '100%', 'stop-color': '#4cc9f0', 'stop-opacity': 0 }, grad);

    const refs = { vertices: new Map(), edges: [], layout: L };

    // lanes: one per group of connected stages, named after its source topics
    const laneLayer = el('g', { class: 'lanes' }, svgRoot);
    for (const g of L.groups) {
      const y0 = g.top - 12;
      const y1 = g.bottom + 12;
      const lane = el('g', { class: 'lane-group', 'data-stages': g.stages.join(' ') }, laneLayer);
      el('title', null, lane, `${g.stages.join(', ')}${g.sources.length ? ` — reading ${g.sources.join(', ')}` : ''}`);
      el('rect', { class: 'lane', x: 4, y: y0, width: L.width - 8, height: y1 - y0, rx: 12 }, lane);
      el('text', { class: 'lane-label', x: 18, y: y0 + 20 }, lane, g.label);
    }

    const edgeLayer = el('g', { class: 'edges' }, svgRoot);
    const labelled = new Set();
    edges.forEach((e) => {
      const a = L.outPorts.get(e);
      const b = L.inPorts.get(e);
      if (!a || !b) return;
      const g = el('g', {
        class: `edge${e.late ? ' late' : ''}`,
        'data-topic': e.topic,
        'data-from': e.from || '',
        'data-to': e.to || '',
      }, edgeLayer);
      el('title', null, g, `${e.topic}: ${e.from || 'producers'} → ${e.to || 'consumers'}${e.late ? ' (late side output)' : ''}`);
      const d = wirePath(a, b);
      const wire = el('path', { class: 'wire', d, 'stroke-width': 1.6 }, g);
      const flow = el('path', { class: 'flow', d, 'stroke-width': 2 }, g);
      el('polygon', { class: 'arrow', points: `${b.x - 7},${b.y - 4} ${b.x},${b.y} ${b.x - 7},${b.y + 4}` }, g);
      const ref = { e, g, wire, flow, rateText: null };
      // One label per topic leaving a stage for another stage, between the fanned wires.
      if (e.from && e.to) {
        const key = `${e.from}|${e.topic}`;
        if (!labelled.has(key)) {
          labelled.add(key);
          const sibs = edges.filter((x) => x.from === e.from && x.topic === e.topic && x.to);
          const mids = sibs.map((x) => bezierMid(L.outPorts.get(x), L.inPorts.get(x)));
          const mx = mids.reduce((s, m) => s + m.x, 0) / mids.length;
          let my = mids.reduce((s, m) => s + m.y, 0) / mids.length;
          if (e.late && L.outPorts.get(e).bottom) my += 16;
          const lg = el('g', { class: 'edge-label-group' }, g);
          const bg = el('rect', { class: 'label-bg', rx: 4 }, lg);
          const t = el('text', { class: 'edge-label', x: mx, y: my + 4, 'text-anchor': 'middle' }, lg, e.topic);
          const r = el('text', { class: 'edge-rate', x: mx, y: my + 18, 'text-anchor': 'middle' }, lg, '');
          ref.label = { lg, bg, t, r, mx, my, fixed: e.late ? 'late side output' : null };
          if (ref.label.fixed) r.textContent = ref.label.fixed;
        }
      }
      refs.edges.push(ref);
    });

    // Labelled edges last, so no other wire crosses over a label.
    for (const ref of refs.edges) if (ref.label) edgeLayer.appendChild(ref.g);

    // Topic pills (the labels of the edges that enter or leave the job), each inside
    // the first edge of its topic so that edge carries its name.
    const pillParent = (topic, side) => {
      const ref = refs.edges.find((r) => r.e.topic === topic && (side === 'source' ? r.e.from == null : r.e.to == null));
      return ref ? ref.g : edgeLayer;
    };
    const pill = (t, x, w, side) => {
      const alerts = !!(topics.get(t.topic) || {}).alerts;
      const g = el('g', { class: `topic ${side}${t.late ? ' late' : ''}${alerts ? ' alert' : ''}`, 'data-topic-node': t.topic }, pillParent(t.topic, side));
      el('title', null, g, side === 'source' ? `${t.topic}: external input topic` : `${t.topic}: output topic${t.late ? ' (late side output)' : ''}, read by users`);
      el('rect', { x, y: t.y - PILL_H / 2, width: w, height: PILL_H, rx: PILL_H / 2 }, g);
      el('text', { x: x + 14, y: t.y + 4 }, g, t.topic);
      return g;
    };
    for (const t of L.sources.values()) pill(t, SRC_X, SRC_W, 'source');
    for (const t of L.sinks.values()) pill(t, L.sinkX, L.sinkW, 'sink');

    // vertices
    const vLayer = el('g', { class: 'vertices' }, svgRoot);
    for (const s of stages) {
      const p = L.pos.get(s);
      const g = el('g', { class: 'vertex', 'data-stage': s, transform: `translate(${p.x},${p.y})`, tabindex: 0, role: 'button' }, vLayer);
      const title = el('title', null, g, s);
      el('rect', { class: 'box', width: VW, height: VH, rx: 9 }, g);
      const sparkArea = el('path', { class: 'spark-area', d: '' }, g);
      const sparkLine = el('path', { class: 'spark-line', d: '' }, g);
      el('rect', { class: 'stripe', x: 0, y: 8, width: 3.5, height: VH - 16, rx: 1.75 }, g);
      el('text', { class: 'v-name', x: 16, y: 22 }, g, s);
      const stg = el('g', { class: 'v-state', transform: 'translate(14,0)' }, g);
      const stbg = el('rect', { class: 'v-state-bg', x: 0, y: -8, width: 60, height: 16, rx: 8 }, stg);
      const status = el('text', { class: 'v-status', x: 8, y: 3.5 }, stg, '');
      const members = el('text', { class: 'v-members', x: 16, y: 39 }, g, '');
      const dlg = el('g', { class: 'v-dl', transform: `translate(${VW - 14},0)` }, g);
      const dlbg = el('rect', { class: 'v-dl-bg', x: -60, y: -8, width: 60, height: 16, rx: 8 }, dlg);
      const dl = el('text', { class: 'v-dl-text', x: -8, y: 3.5, 'text-anchor': 'end' }, dlg, '');
      el('text', { class: 'v-k', x: 16, y: 64 }, g, 'IN');
      const tin = el('text', { x: 36, y: 64 }, g);
      const rateIn = el('tspan', { class: 'v-rate rate-in' }, tin, '0.0');
      el('tspan', { class: 'v-unit', dx: 3 }, tin, '/s');
      el('text', { class: 'v-k', x: 122, y: 64 }, g, 'OUT');
      const tout = el('text', { x: 150, y: 64 }, g);
      const rateOut = el('tspan', { class: 'v-rate rate-out' }, tout, '0.0');
      el('tspan', { class: 'v-unit', dx: 3 }, tout, '/s');
      const wm = el('text', { class: 'v-meta', x: 16, y: 86 }, g);
      el('tspan', { class: 'k' }, wm, 'wm ');
      const wmVal = el('tspan', null, wm, '—');
      const lag = el('text', { class: 'v-meta', x: VW - 12, y: 86, 'text-anchor': 'end' }, g);
      el('tspan', { class: 'k' }, lag, 'lag ');
      const lagVal = el('tspan', null, lag, '—');
      refs.vertices.set(s, { g, title, status, stg, stbg, members, dl, dlg, dlbg, rateIn, rateOut, wmVal, lagVal, sparkArea, sparkLine });

      g.addEventListener('mouseenter', () => highlight(s));
      g.addEventListener('mouseleave', () => highlight(null));
      g.addEventListener('focus', () => highlight(s));
      g.addEventListener('blur', () => highlight(null));
      const jump = () => {
        const row = state.rows.get(s);
        if (!row) return;
        row.tr.scrollIntoView({ behavior: 'smooth', block: 'center' });
        row.tr.classList.remove('flash');
        void row.tr.offsetWidth;
        row.tr.classList.add('flash');
      };
      g.addEventListener('click', jump);
      g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); jump(); } });
    }

    // Size the label backgrounds now that text is in the document.
    for (const ref of refs.edges) if (ref.label) sizeLabel(ref.label);
    return refs;
  }

  function sizeLabel(label) {
    let w = 0;
    let h = 0;
    try {
      w = Math.max(label.t.getComputedTextLength(), label.r.textContent ? label.r.getComputedTextLength() : 0);
      h = label.r.textContent ? 32 : 18;
    } catch (_) {
      w = label.t.textContent.length * 7;
      h = 18;
    }
    label.bg.setAttribute('x', label.mx - w / 2 - 6);
    label.bg.setAttribute('y', label.my - 9);
    label.bg.setAttribute('width', w + 12);
    label.bg.setAttribute('height', h);
  }

  function highlight(stage) {
    const G = state.graph;
    if (!G) return;
    for (const ref of G.edges) {
      const touches = stage && (ref.e.from === stage || ref.e.to === stage);
      ref.g.classList.toggle('hl', !!touches);
      ref.g.classList.toggle('dim', !!stage && !touches);
    }
    for (const [s, v] of G.vertices) {
      const near = stage && (s === stage || G.edges.some((r) => (r.e.from === stage && r.e.to === s) || (r.e.to === stage && r.e.from === s)));
      v.g.classList.toggle('hl', s === stage);
      v.g.classList.toggle('dim', !!stage && !near);
    }
  }

  function sparkPaths(samples) {
    if (samples.length < 2) return ['', ''];
    const x0 = 8;
    const x1 = VW - 8;
    const top = 48;
    const base = VH - 5;
    const max = Math.max(1, ...samples);
    const lo = Math.min(...samples) * 0.6; // show the movement, not the distance from zero
    const n = samples.length - 1;
    const pts = samples.map((v, i) => {
      const x = x0 + (i / n) * (x1 - x0);
      const y = base - (Math.max(0, v - lo) / Math.max(1e-9, max - lo)) * (base - top);
      return [x.toFixed(1), y.toFixed(1)];
    });
    const line = 'M' + pts.map((p) => p.join(',')).join(' L');
    const area = `${line} L${pts[pts.length - 1][0]},${base} L${pts[0][0]},${base} Z`;
    return [line, area];
  }

  function renderGraph(job) {
    const stages = job.vertices.map(stageOf);
    const edges = edgesOf(job);
    const topics = topicsOf(job);
    const key = JSON.stringify([stages, edges, [...topics.values()]]);
    if (key !== state.graphKey || !state.graph) {
      state.graph = buildGraph(job, stages, edges, topics);
      state.graphKey = key;
      state.stageOrder = stages;
    }
    $('#graph-empty').hidden = true;
    const G = state.graph;
    const byStage = new Map(job.vertices.map((v) => [stageOf(v), v]));

    for (const [s, ref] of G.vertices) {
      const v = byStage.get(s);
      if (!v) continue;
      const g = v.vigil || {};
      const st = stageStatus(v);
      ref.g.setAttribute('data-status', st);
      // Running is the stripe's green; anything else gets a label on the border.
      const stText = st === 'running' ? '' : STATUS_LABEL[st];
      if (ref.status.textContent !== stText) {
        ref.status.textContent = stText;
        let w = stText.length * 7;
        try { w = ref.status.getComputedTextLength(); } catch (_) { /* not rendered yet */ }
        ref.stbg.setAttribute('width', w + 16);
      }
      ref.stg.style.display = stText ? '' : 'none';
      setText(ref.members, membersSummary(v));
      const dead = g.ledger && isNum(g.ledger.dead_letters) ? g.ledger.dead_letters : 0;
      const dlText = dead ? `${int(dead)} dead letter${dead === 1 ? '' : 's'}` : '';
      if (ref.dl.textContent !== dlText) {
        ref.dl.textContent = dlText;
        let w = dlText.length * 6;
        try { w = ref.dl.getComputedTextLength(); } catch (_) { /* not rendered yet */ }
        ref.dlbg.setAttribute('x', -w - 16);
        ref.dlbg.setAttribute('width', w + 16);
      }
      ref.dlg.style.display = dead ? '' : 'none';
      setText(ref.rateIn, rateText(g.records_in_per_second));
      setText(ref.rateOut, rateText(g.records_out_per_second));
      ref.rateIn.setAttribute('data-value', isNum(g.records_in_per_second) ? g.records_in_per_second : 0);
      ref.rateOut.setAttribute('data-value', isNum(g.records_out_per_second) ? g.records_out_per_second : 0);
      setText(ref.wmVal, isNum(g.watermark_lag_ms) ? dur(g.watermark_lag_ms) : 'none yet');
      const lagS = isNum(g.consumer_lag_seconds) ? ` · ${trim1(g.consumer_lag_seconds)} s` : '';
      setText(ref.lagVal, isNum(g.consumer_lag_records) ? `${int(g.consumer_lag_records)} rec${lagS}` : '—');
      ref.lagVal.classList.toggle('lagwarn', st === 'lagging');
      setText(ref.title, [
        `${s} — ${STATUS_LABEL[st]}`,
        membersSummary(v),
        `in ${rateGrouped(g.records_in_per_second)} rec/s, out ${rateGrouped(g.records_out_per_second)} rec/s`,
        `watermark ${isNum(g.watermark_ms) ? utcFull(g.watermark_ms) : 'none yet'}${isNum(g.watermark_lag_ms) ? ` (${dur(g.watermark_lag_ms)} behind the wall clock)` : ''}`,
        `consumer lag ${int(g.consumer_lag_records)} records${isNum(g.consumer_lag_seconds) ? `, ${trim1(g.consumer_lag_seconds)} s` : ''}`,
        `reads ${((g.inputs) || []).join(', ') || '—'}; writes ${((g.outputs) || []).join(', ') || '—'}`,
        'click for details',
      ].join('\n'));

      const samples = state.spark.get(s) || [];
      samples.push(isNum(g.records_in_per_second) ? g.records_in_per_second : 0);
      while (samples.length > SPARK_SAMPLES) samples.shift();
      state.spark.set(s, samples);
      const [line, area] = sparkPaths(samples);
      ref.sparkLine.setAttribute('d', line);
      ref.sparkArea.setAttribute('d', area);
    }

    // Wires: thicker and faster with the rate that feeds them.
    const outTopics = new Map();
    for (const ref of G.edges) {
      if (ref.e.from && !ref.e.late) {
        if (!outTopics.has(ref.e.from)) outTopics.set(ref.e.from, new Set());
        outTopics.get(ref.e.from).add(ref.e.topic);
      }
    }
    const inCount = new Map();
    for (const ref of G.edges) if (ref.e.from == null && ref.e.to) inCount.set(ref.e.to, (inCount.get(ref.e.to) || 0) + 1);
    for (const ref of G.edges) {
      const { e } = ref;
      let r = 0;
      let exact = false;
      if (e.from) {
        const v = byStage.get(e.from);
        r = (v && v.vigil && v.vigil.records_out_per_second) || 0;
        exact = !e.late && (outTopics.get(e.from) || new Set()).size === 1;
        if (e.late) r = Math.min(r, 1); // side outputs are a trickle; keep them thin
      } else if (e.to) {
        const v = byStage.get(e.to);
        r = ((v && v.vigil && v.vigil.records_in_per_second) || 0) / (inCount.get(e.to) || 1);
      }
      const w = 1.4 + Math.min(4, Math.log10(1 + r) * 1.15);
      ref.wire.setAttribute('stroke-width', w.toFixed(2));
      ref.flow.setAttribute('stroke-width', Math.max(1.6, w - 0.6).toFixed(2));
      ref.g.classList.toggle('idle', r < 0.05);
      ref.flow.style.animationDuration = `${Math.max(0.45, 2.2 - Math.log10(1 + r) * 0.45).toFixed(2)}s`;
      if (ref.label) {
        setText(ref.label.r, ref.label.fixed || (exact ? `${rateGrouped(r)} rec/s` : ''));
        sizeLabel(ref.label);
      }
    }

    const running = job.vertices.filter((v) => stageStatus(v) === 'running').length;
    setText($('#graph-sub'), `${job.vertices.length} stages · ${running} running · ${edges.length} topic edges`);
  }

  // ---------------------------------------------------------------- stages table

  /** [0,1,2,3,5] -> "0–3,5" */
  function ranges(list) {
    const xs = [...new Set((list || []).filter(isNum))].sort((a, b) => a - b);
    const out = [];
    for (let i = 0; i < xs.length; i++) {
      let j = i;
      while (j + 1 < xs.length && xs[j + 1] === xs[j] + 1) j++;
      out.push(j - i >= 2 ? `${xs[i]}–${xs[j]}` : (j > i ? `${xs[i]},${xs[j]}` : `${xs[i]}`));
      i = j;
    }
    return out.join(',');
  }

  function memberChip(m, withStage) {
    const lost = state.lostTms.has(m.taskmanager);
    const parts = (m.tasks || []).length ? ranges(m.tasks) : '—';
    const role = m.role === 'active' ? 'active' : 'standby';
    const who = withStage ? `<span>${esc(m.stage)}</span>` : `<span class="tm">${esc(String(m.taskmanager || '?').slice(0, 8))}</span>`;
    const title = `${m.id || ''} on taskmanager ${m.taskmanager || '?'} · ${role} · tasks (partitions) ${parts}${lost ? ' · taskmanager lost' : ''}`;
    return `<span class="member ${role}${lost ? ' lost' : ''}" title="${esc(title)}"><span class="role">${lost ? 'lost' : role}</span>${who}<span class="parts">[${esc(parts)}]</span></span>`;
  }

  function renderStages(job) {
    const tbody = $('#stages tbody');
    for (const p of tbody.querySelectorAll('tr.placeholder')) p.remove();
    const now = serverNow();
    const seen = new Set();
    for (const v of job.vertices) {
      const s = stageOf(v);
      seen.add(s);
      let row = state.rows.get(s);
      if (!row) {
        const tr = document.createElement('tr');
        tr.dataset.stage = s;
        const cls = ['l', '', '', 'l', '', 'c-commits', 'c-last', 'c-restored', 'l', 'l'];
        const tds = cls.map((c) => {
          const td = document.createElement('td');
          if (c) td.className = c;
          tr.appendChild(td);
          return td;
        });
        tbody.appendChild(tr);
        row = { tr, tds };
        state.rows.set(s, row);
      }
      const g = v.vigil || {};
      const st = stageStatus(v);
      const [cStage, cIn, cOut, cWm, cLag, cCommits, cLast, cRestored, cLedger, cMembers] = row.tds;
      const m = v.metrics || {};

      setHTML(cStage, `<div class="stage-cell"><span class="dot dot-${STATUS_CLASS[st]}"></span><div>`
        + `<span class="stage-name">${esc(s)}</span>`
        + `<span class="sub"><span class="status-text ${STATUS_CLASS[st]}">${esc(STATUS_LABEL[st])}</span> · `
        + `${g.global ? '<span title="one active member cluster-wide, standbys elsewhere">global</span>' : esc(`parallelism ${v.parallelism ?? '?'}`)}</span></div></div>`);

      setHTML(cIn, `<span class="big">${rateGrouped(g.records_in_per_second)}</span><span class="sub" title="${int(m['read-records'])} records read">${compact(m['read-records'])} total</span>`);
      setHTML(cOut, `<span class="big">${rateGrouped(g.records_out_per_second)}</span><span class="sub" title="${int(m['write-records'])} records written">${compact(m['write-records'])} total</span>`);

      if (isNum(g.watermark_ms)) {
        const p = isoParts(g.watermark_ms);
        const lagMs = isNum(g.watermark_lag_ms) ? g.watermark_lag_ms : now - g.watermark_ms;
        setHTML(cWm, `<span class="big mono" title="${esc(utcFull(g.watermark_ms))}">${p.time}${p.millis}</span>`
          + `<span class="sub" title="${esc(utcFull(g.watermark_ms))}, ${esc(dur(lagMs))} behind the wall clock">${p.date} · ${esc(dur(lagMs))}</span>`);
      } else {
        setHTML(cWm, '<span class="big zero">—</span><span class="sub">no watermark yet</span>');
      }

      const lagging = st === 'lagging';
      setHTML(cLag, `<span class="big${lagging ? ' warn' : ''}">${int(g.consumer_lag_records)}<span class="muted"> rec</span></span>`
        + `<span class="sub${lagging ? ' warn' : ''}">${isNum(g.consumer_lag_seconds) ? `${trim1(g.consumer_lag_seconds)} s` : '—'}</span>`);

      const aborts = isNum(g.aborts) ? g.aborts : 0;
      setHTML(cCommits, `<span class="big">${int(g.commits)}</span><span class="sub${aborts ? ' bad' : ''}">${int(aborts)} abort${aborts === 1 ? '' : 's'}</span>`);

      if (isNum(g.last_commit_ms)) {
        setHTML(cLast, `<span class="big">${esc(ago(now - g.last_commit_ms))}</span><span class="sub mono">${utcTime(g.last_commit_ms, false)} UTC</span>`);
      } else {
        setHTML(cLast, '<span class="big zero">never</span><span class="sub">no commit yet</span>');
      }

      setHTML(cRestored, `<span class="big${g.restored_records ? '' : ' zero'}" title="records of keyed state restored from the changelog">${int(g.restored_records || 0)}</span>`);

      const L = g.ledger;
      if (L) {
        const bal = L.balanced === true || (L.balanced == null && L.read === L.on_time + L.late + L.dead_letters);
        const sum = (L.on_time || 0) + (L.late || 0) + (L.dead_letters || 0);
        const off = isNum(L.read) ? L.read - sum : null;
        const tip = `read ${int(L.read)} = on time ${int(L.on_time)} + late ${int(L.late)} + dead letters ${int(L.dead_letters)}`
          + (bal ? ': balanced' : `: NOT balanced${off ? ` (${off > 0 ? `${int(off)} unaccounted` : `${int(-off)} counted twice`})` : ''}`);
        setHTML(cLedger, `<span class="ledger" data-stage="${esc(s)}" data-balanced="${bal}" title="${esc(tip)}">`
          + `<span class="mark">${bal ? '✓' : '✗'}</span><span class="big">${int(L.read)}</span></span>`
          + `<span class="sub${bal ? '' : ' bad'}" title="${esc(tip)}">${bal ? '=' : '≠'} ${int(L.on_time)} + ${int(L.late)} + ${int(L.dead_letters)}</span>`);
      } else {
        setHTML(cLedger, `<span class="ledger" data-stage="${esc(s)}" data-balanced="false"><span class="zero">no ledger</span></span>`);
      }

      const members = g.members || [];
      setHTML(cMembers, members.length
        ? `<div class="members">${members.map((mm) => memberChip(mm, false)).join('')}</div>`
        : '<span class="none">no member</span>');
    }
    for (const [s, row] of state.rows) {
      if (!seen.has(s)) {
        row.tr.remove();
        state.rows.delete(s);
      }
    }
  }

  // ---------------------------------------------------------------- taskmanagers

  function renderTaskmanagers(tms) {
    const list = (tms && tms.taskmanagers) || [];
    const tbody = $('#taskmanagers tbody');
    for (const p of tbody.querySelectorAll('tr.placeholder')) p.remove();
    const seen = new Set();
    if (!list.length && !tbody.querySelector('tr.placeholder')) {
      tbody.innerHTML = '<tr class="placeholder"><td colspan="5" class="l muted">No taskmanager has registered.</td></tr>';
    }
    // alive first, then lost; stable by id
    const sorted = [...list].sort((a, b) => {
      const la = (a.vigil && a.vigil.state) === 'lost' ? 1 : 0;
      const lb = (b.vigil && b.vigil.state) === 'lost' ? 1 : 0;
      return la - lb || String(a.id).localeCompare(String(b.id));
    });
    sorted.forEach((tm, index) => {
      const vg = tm.vigil || {};
      const lost = vg.state === 'lost';
      seen.add(tm.id);
      let row = state.tmRows.get(tm.id);
      if (!row) {
        const tr = document.createElement('tr');
        tr.className = 'taskmanager';
        tr.setAttribute('data-id', tm.id);
        const cls = ['l', 'l', '', '', 'l'];
        const tds = cls.map((c) => {
          const td = document.createElement('td');
          if (c) td.className = c;
          tr.appendChild(td);
          return td;
        });
        row = { tr, tds };
        state.tmRows.set(tm.id, row);
      }
      if (tbody.children[index] !== row.tr) tbody.insertBefore(row.tr, tbody.children[index] || null);
      row.tr.setAttribute('data-state', lost ? 'lost' : 'alive');
      const [cState, cId, cSlots, cHb, cMembers] = row.tds;
      const hb = vg.heartbeat_age_ms;
      setHTML(cState, lost
        ? `<span class="state-badge lost"><span class="dot dot-bad"></span>lost</span><span class="sub bad">lost ${esc(ago(hb))}</span>`
        : '<span class="state-badge alive"><span class="dot dot-ok"></span>alive</span>');
      const cores = tm.hardware && isNum(tm.hardware.cpuCores) ? ` · ${tm.hardware.cpuCores} cores` : '';
      setHTML(cId, `<span class="tm-id">${esc(tm.id)}</span><span class="tm-addr">${esc(tm.path || '')}${esc(cores)}</span>`);
      const used = isNum(tm.slotsNumber) && isNum(tm.freeSlots) ? tm.slotsNumber - tm.freeSlots : null;
      setHTML(cSlots, `<span class="big">${int(used)} / ${int(tm.slotsNumber)}</span><span class="sub">${int(tm.freeSlots)} free</span>`);
      setHTML(cHb, `<span class="big${lost ? ' bad' : ''}">${esc(ago(hb))}</span><span class="sub">${isNum(vg.registered_ms) ? `up ${esc(dur(serverNow() - vg.registered_ms))}` : ''}</span>`);
      const members = vg.members || [];
      setHTML(cMembers, members.length
        ? `<div class="tm-members">${members.map((m) => memberChip({ ...m, taskmanager: tm.id }, true)).join('')}</div>`
        : '<span class="muted">no members</span>');
    });
    for (const [id, row] of state.tmRows) {
      if (!seen.has(id)) {
        row.tr.remove();
        state.tmRows.delete(id);
      }
    }
    const alive = list.filter((t) => (t.vigil && t.vigil.state) !== 'lost').length;
    const lostN = list.length - alive;
    setText($('#tm-sub'), list.length ? `${alive} alive${lostN ? ` · ${lostN} lost` : ''} · ${list.reduce((s, t) => s + (t.slotsNumber || 0), 0)} slots` : 'none registered');
  }

  // ---------------------------------------------------------------- checkpoints

  function renderCheckpoints(cp) {
    const box = $('#checkpoints');
    if (!cp) {
      setHTML(box, '<p class="muted pad">No checkpoint statistics yet.</p>');
      return;
    }
    const c = cp.counts || {};
    const e2e = (cp.summary && cp.summary.end_to_end_duration) || {};
    const hist = (cp.history || []).slice(0, 48).reverse();
    const maxD = Math.max(1, ...hist.map((h) => h.end_to_end_duration || 0));
    const bars = hist.map((h) => {
      const d = h.end_to_end_duration || 0;
      const pct = Math.max(6, Math.round((d / maxD) * 100));
      const failed = h.status === 'FAILED';
      const stage = (h.vigil && h.vigil.stage) || '?';
      return `<span class="${failed ? 'failed' : ''}" style="height:${pct}%" title="#${esc(h.id)} ${esc(stage)} · ${esc(h.status)} · ${esc(dur(d))}"></span>`;
    }).join('');
    const per = (cp.vigil && cp.vigil.per_stage) || {};
    const order = state.stageOrder.length ? state.stageOrder.filter((s) => per[s]) : [];
    for (const s of Object.keys(per)) if (!order.includes(s)) order.push(s);
    const now = serverNow();
    const rows = order.map((s) => {
      const p = per[s] || {};
      return `<tr><td class="l">${esc(s)}</td><td>${int(p.commits)}</td><td class="${p.aborts ? 'bad' : 'zero'}">${int(p.aborts || 0)}</td>`
        + `<td>${isNum(p.last_commit_ms) ? esc(ago(now - p.last_commit_ms)) : '<span class="zero">never</span>'}</td>`
        + `<td>${isNum(p.last_commit_duration_ms) ? esc(dur(p.last_commit_duration_ms)) : '—'}</td></tr>`;
    }).join('');
    setHTML(box,
      `<div class="cp-grid"><div class="cp-left"><div class="cp-summary">`
      + `<div><div class="k">Completed</div><div class="v">${int(c.completed)}</div></div>`
      + `<div><div class="k">Failed</div><div class="v${c.failed ? ' bad' : ''}">${int(c.failed || 0)}</div></div>`
      + `<div><div class="k">In progress</div><div class="v">${int(c.in_progress || 0)}</div></div>`
      + `<div><div class="k">End to end</div><div class="v">${esc(dur(e2e.avg))} <small>avg</small></div><div class="k" style="text-transform:none;letter-spacing:0">min ${esc(dur(e2e.min))} · max ${esc(dur(e2e.max))}</div></div>`
      + `</div>`
      + (hist.length ? `<div class="cp-bars" aria-label="recent commits, newest on the right">${bars}</div><div class="cp-bars-caption"><span>${hist.length} recent commits · bar height = end-to-end duration · red = failed</span><span>newest →</span></div>` : '')
      + `</div><div class="cp-right">`
      + (rows ? `<div class="table-wrap"><table class="grid"><thead><tr><th class="l">Stage</th><th>Commits</th><th>Aborts</th><th>Last commit</th><th>Took</th></tr></thead><tbody>${rows}</tbody></table></div>` : '')
      + `</div></div>`);
  }

  // ---------------------------------------------------------------- header

  function setConn(which, st, title) {
    const node = $(which === 'api' ? '#conn-api' : '#conn-live');
    node.setAttribute('data-state', st);
    if (title) node.title = title;
  }

  function renderHeader() {
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

  function tickClock() {
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

  function renderFailure() {
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
    renderTaskmanagers(state.tms);
    renderCheckpoints(state.checkpoints);
    renderHeader();
  }

  // ---------------------------------------------------------------- live pane

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

  function windowText(r) {
    const a = toMs(r.window_start ?? r.window_start_ms);
    const b = toMs(r.window_end ?? r.window_end_ms);
    if (a == null || b == null) return null;
    return `${utcTime(a, false)}–${utcTime(b, false)}`;
  }

  function genericParts(r, skip) {
    const parts = [];
    for (const [k, v] of Object.entries(r || {})) {
      if (skip.includes(k) || k === 'record_type' || k === 'revision' || v == null || typeof v === 'object') continue;
      parts.push(`${k.replace(/_/g, ' ')} ${typeof v === 'number' ? amount(v) : String(v).slice(0, 60)}`);
      if (parts.length >= 4) break;
    }
    return parts;
  }

  const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

  /** [head, ...parts]: a one-line human summary of an event's record. */
  function summarize(ev) {
    const r = ev.record || {};
    const win = windowText(r);
    switch (ev.kind) {
      case 'anomaly': {
        const t = r.anomaly_type;
        if (t === 'amount') return ['amount anomaly', r.customer_id, `${amount(r.amount)} over threshold ${amount(r.threshold)}`, r.payment_id];
        if (t === 'velocity') return ['velocity anomaly', r.customer_id, `${plural(r.transaction_count, 'payment')} totalling ${amount(r.total_amount)}`, win];
        if (t === 'device_fault_spike') return ['fault spike', r.site_id, `${r.fault_count} faults > ${r.threshold}`, win];
        if (t === 'device_reboot_loop') return ['reboot loop', r.device_id, `${r.reboot_count} reboots > ${r.threshold}`, win];
        if (t === 'firmware_update_failure') return ['firmware update failure', r.site_id ? `${r.device_id} @ ${r.site_id}` : r.device_id, plural(r.failure_count, 'failure')];
        return [`${String(t || 'unknown').replace(/_/g, ' ')} anomaly`, r.customer_id || r.device_id || r.site_id, ...genericParts(r, ['anomaly_type', 'customer_id', 'device_id', 'site_id', 'window_start', 'window_end']), win];
      }
      case 'late_event': {
        const behind = isNum(r.lag_ms) ? `${dur(r.lag_ms)} behind watermark` : null;
        if (r.device_id) return ['late event', r.device_id, behind, r.event_type ? `${r.event_type}${r.site_id ? ` @ ${r.site_id}` : ''}` : r.site_id];
        if (r.payment_id || r.record_type === 'enriched_payment') {
          return ['late payment', r.payment_id, r.customer_id, behind, isNum(r.paid_amount) ? `paid ${amount(r.paid_amount)}` : null];
        }
        return ['late event', behind, ...genericParts(r, ['lag_ms', 'watermark_ms'])];
      }
      case 'health_alert': {
        const head = `${String(r.reason || 'health alert')}${r.severity ? ` (${r.severity})` : ''}`;
        switch (r.reason) {
          case 'throughput_below_floor':
            return [head, `gap ${dur(r.gap_ms)} > ${dur(r.threshold_ms)}`, r.resumed_at ? `resumed ${utcTime(toMs(r.resumed_at), false)}` : null];
          case 'late_event_spike':
            return [head, `${plural(r.late_events, 'late event')} > ${r.ceiling}`, win];
          case 'watermark_lag_exceeded':
            return [head, `max lag ${dur(r.max_lag_ms)} > ${dur(r.threshold_ms)}`, win];
          case 'fault_rate_exceeded':
            return [head, `${r.fault_count} faults > ${r.ceiling}`, win];
          default:
            return [head, ...genericParts(r, ['reason', 'severity', 'window_start', 'window_end']), win];
        }
      }
      case 'dead_letter':
        return [`dead letter from ${r.source || ev.topic || '?'}`, r.reason ? `reason ${r.reason}` : null];
      default:
        return [String(ev.kind || 'event').replace(/_/g, ' '), ...genericParts(r, [])];
    }
  }

  // Short parts ("6 faults > 4") wrap as a whole; long ones (a dead letter's reason) may break.
  const keepTogether = (p) => (String(p).length <= 32 ? `<span class="nw">${esc(p)}</span>` : esc(p));

  function eventTimeMs(ev) {
    const r = ev.record || {};
    return toMs(r.event_time) ?? toMs(r.window_end) ?? toMs(r.window_end_ms) ?? toMs(r.event_ts_ms) ?? toMs(r.resumed_at) ?? (isNum(ev.timestamp_ms) ? ev.timestamp_ms : null);
  }

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
      + `<div class="li-meta"><span>${where}</span>${t != null ? `<span title="event date (UTC)">${isoParts(t).date}</span>` : ''}<span class="li-ago" title="when it was committed to Kafka" data-ts="${isNum(ev.timestamp_ms) ? ev.timestamp_ms : ''}"></span></div>`
      + `<pre class="li-raw"></pre>`;
    li.querySelector('.li-raw').textContent = ev.line || JSON.stringify(ev.record);
    updateAgo(li.querySelector('.li-ago'));
    return li;
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

  // ---------------------------------------------------------------- start

  setupLive();
  backfill();
  connectLive();
  poll();
  setInterval(() => {
    tickClock();
    for (const node of document.querySelectorAll('#live .li-ago')) updateAgo(node);
  }, 1000);
})();
