// Numbers, durations and times as the page shows them.

export const isNum = (n) => typeof n === 'number' && Number.isFinite(n);
const nfInt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const nf1 = new Intl.NumberFormat('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 });

export const int = (n) => (isNum(n) ? nfInt.format(n) : '—');
const nfCompact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });
export const compact = (n) => (isNum(n) ? nfCompact.format(n) : '—');
// The number shown in the graph: plain digits (no grouping) so it reads as a number.
export const rateText = (n) => (isNum(n) ? (Math.round(n * 10) / 10).toFixed(1) : '0.0');
export const rateGrouped = (n) => (isNum(n) ? nf1.format(n) : '—');

// A decoded JSON float such as 9800.0 arrives as 9800; show it as the line does.
export const amount = (n) => (isNum(n) ? (Number.isInteger(n) ? n.toFixed(1) : String(n)) : String(n ?? '—'));

export function trim1(x) {
  return x >= 100 ? String(Math.round(x)) : x.toFixed(1).replace(/\.0$/, '');
}

const DAY = 86400000;
const YEAR = 365 * DAY;

/** Humanized duration: "850 ms", "1.2 s", "3 min 12 s", "4 h 5 min", "6 d 2 h", "3 y 16 d". */
export function dur(ms) {
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

export function uptimeText(ms) {
  if (!isNum(ms)) return '—';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

export function isoParts(ms) {
  if (!isNum(ms) || Math.abs(ms) > 8.64e15) return { date: '—', time: '—', millis: '' };
  const iso = new Date(ms).toISOString(); // 2023-11-14T22:13:59.650Z
  return { date: iso.slice(0, 10), time: iso.slice(11, 19), millis: iso.slice(19, 23) };
}

export function utcTime(ms, millis = true) {
  if (!isNum(ms)) return '—';
  const p = isoParts(ms);
  return millis ? p.time + p.millis : p.time;
}

export function utcFull(ms) {
  if (!isNum(ms)) return '—';
  const p = isoParts(ms);
  return `${p.date} ${p.time}${p.millis} UTC`;
}

/** Event-time strings from the records ("2023-11-14T22:13:48.057000+00:00") or epoch ms. */
export function toMs(value) {
  if (isNum(value)) return value;
  if (typeof value !== 'string') return null;
  const t = Date.parse(value.replace(/(\.\d{3})\d+/, '$1'));
  return Number.isNaN(t) ? null : t;
}

export const ago = (ms) => (isNum(ms) ? `${dur(Math.max(0, ms))} ago` : '—');

export const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
