// Where the job graph's stages, topic pills and wires go, from the edges alone: pure
// geometry, no document.

export const VW = 240;
export const VH = 100;
const COL0 = 214;                 // x of the first stage column
const COL_STEP = 434;             // from one stage column to the next
const ROW_GAP = 20;               // between the stages of a column
const GROUP_GAP = 40;             // between groups
const TOP = 16;
export const SRC_X = 14;
export const SRC_W = 142;
export const PILL_H = 28;

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

export function layout(stages, edges) {
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

export function wirePath(a, b) {
  if (a.bottom) {
    // down out of the vertex, then along to the target's side
    const dy = Math.max(12, b.y - a.y);
    return `M${a.x},${a.y} C${a.x},${a.y + dy * 0.9} ${a.x + 40},${b.y} ${a.x + 110},${b.y} L${b.x - 6},${b.y}`;
  }
  const dx = Math.max(30, (b.x - a.x) / 2);
  return `M${a.x},${a.y} C${a.x + dx},${a.y} ${b.x - dx},${b.y} ${b.x - 6},${b.y}`;
}

export function bezierMid(a, b) {
  if (a.bottom) return { x: (a.x + b.x) / 2 + 20, y: b.y };
  return { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 };
}
