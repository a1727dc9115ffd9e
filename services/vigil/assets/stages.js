// The stages table: a row per stage, updated in place on every poll.

import { $, esc, setHTML } from './dom.js';
import { ago, compact, dur, int, isNum, isoParts, rateGrouped, trim1, utcFull, utcTime } from './format.js';
import { STATUS_CLASS, STATUS_LABEL, stageOf, stageStatus } from './model.js';
import { serverNow, state } from './state.js';

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

export function memberChip(m, withStage) {
  const lost = state.lostTms.has(m.taskmanager);
  const parts = (m.tasks || []).length ? ranges(m.tasks) : '—';
  const role = m.role === 'active' ? 'active' : 'standby';
  const who = withStage ? `<span>${esc(m.stage)}</span>` : `<span class="tm">${esc(String(m.taskmanager || '?').slice(0, 8))}</span>`;
  const title = `${m.id || ''} on taskmanager ${m.taskmanager || '?'} · ${role} · tasks (partitions) ${parts}${lost ? ' · taskmanager lost' : ''}`;
  return `<span class="member ${role}${lost ? ' lost' : ''}" title="${esc(title)}"><span class="role">${lost ? 'lost' : role}</span>${who}<span class="parts">[${esc(parts)}]</span></span>`;
}

export function renderStages(job) {
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
