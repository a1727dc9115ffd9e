// A live event in words: the one-line summary of its record, and the time it is about.

import { amount, dur, isNum, plural, toMs, utcTime } from './format.js';

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


/** [head, ...parts]: a one-line human summary of an event's record. */
export function summarize(ev) {
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

export function eventTimeMs(ev) {
  const r = ev.record || {};
  return toMs(r.event_time) ?? toMs(r.window_end) ?? toMs(r.window_end_ms) ?? toMs(r.event_ts_ms) ?? toMs(r.resumed_at) ?? (isNum(ev.timestamp_ms) ? ev.timestamp_ms : null);
}
