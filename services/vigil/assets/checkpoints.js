// The checkpoints card: commit counts, recent end-to-end durations, and per stage.

import { $, esc, setHTML } from './dom.js';
import { ago, dur, int, isNum } from './format.js';
import { serverNow, state } from './state.js';

export function renderCheckpoints(cp) {
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
