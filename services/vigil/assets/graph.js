// The job graph: the SVG built from the layout, and the numbers on it updated on every
// poll (status, rates, watermark, lag, sparklines, wire widths).

import { $, el, setText } from './dom.js';
import { dur, int, isNum, rateGrouped, rateText, trim1, utcFull } from './format.js';
import { bezierMid, layout, PILL_H, SRC_W, SRC_X, VH, VW, wirePath } from './layout.js';
import { edgesOf, membersSummary, STATUS_LABEL, stageOf, stageStatus, topicsOf } from './model.js';
import { state } from './state.js';

const SPARK_SAMPLES = 60;

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

export function renderGraph(job) {
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
