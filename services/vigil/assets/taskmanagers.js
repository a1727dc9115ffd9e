// The taskmanagers table: alive first, then lost, each with its members.

import { $, esc, setHTML, setText } from './dom.js';
import { ago, dur, int, isNum } from './format.js';
import { memberChip } from './stages.js';
import { serverNow, state } from './state.js';

export function renderTaskmanagers(tms) {
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
