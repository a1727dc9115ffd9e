//! Stage 5: the pipeline watching itself, from the router's on-time events and its
//! late side output. Four alerts:
//!
//! - `throughput_below_floor` (warning): the gap between consecutive on-time device
//!   events, in event-time order, exceeds `max_event_gap_ms`. Events are released in
//!   order once no on-time event can still come before them (watermark − allowed
//!   lateness), so the gaps are the same whatever the partitions' interleaving;
//! - `late_event_spike` (warning) and `watermark_lag_exceeded` (critical): per
//!   tumbling health window of the late events' own event time, the count of late
//!   events over its ceiling, and their largest lag over its threshold. A late event
//!   belongs to a window that closed long ago, so its window is evaluated as soon as
//!   it arrives, and a later late event of the same window re-emits the alert with a
//!   higher revision;
//! - `fault_rate_exceeded` (critical): faults of all sites in a health window over
//!   the ceiling, fired when the watermark passes the window.

use serde::{Deserialize, Serialize};
use vigil_model::output::{
    FaultRateAlert, HealthAlert, HealthReason, LateDeviceEvent, LateSpikeAlert, RecordType, Severity, ThroughputAlert,
    WatermarkLagAlert,
};
use vigil_model::{Config, DeviceEvent, EventType, Millis};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::state::OrderedState;
use vigil_stream::time_set::TimeSet;
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::window::{Aggregate, KeyedWindows, SlidingWindows, Window, WindowResult};
use vigil_stream::Operator;

#[derive(Debug, Clone, PartialEq)]
pub enum HealthInput {
    OnTime(DeviceEvent),
    Late(LateDeviceEvent),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Faults(u64);

impl Aggregate for Faults {
    fn merge(&mut self, o: &Self) {
        self.0 += o.0;
    }
}

/// Late events of one health window, and the revisions of the alerts they raised.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LateWindow {
    count: u64,
    max_lag_ms: Millis,
    spike_revision: u32,
    lag_revision: u32,
    /// The lag last reported, so an alert is re-emitted only when it grew.
    reported_lag_ms: Millis,
}

pub struct HealthMonitor {
    window_ms: Millis,
    allowed_lateness_ms: Millis,
    max_gap_ms: Millis,
    max_late_events: u64,
    max_lag_ms: Millis,
    max_faults: u64,
    retention_ms: Millis,
    watermark: Millis,
    /// On-time event times not yet released for the gap check (a set).
    unreleased: TimeSet,
    last_released: Option<Millis>,
    faults: KeyedWindows<(), Faults>,
    fired: Vec<WindowResult<(), Faults>>,
    late: OrderedState<Millis, LateWindow>,
    written: Scalar,
}

/// The monitor's scalars, as its changelog holds them.
#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    watermark: Millis,
    last_released: Option<Millis>,
}

impl HealthMonitor {
    pub fn new(config: &Config) -> Self {
        let h = &config.health;
        let window_ms = h.health_window_seconds as Millis * 1000;
        let allowed_lateness_ms = config.devices.device_allowed_lateness_ms as Millis;
        let max_faults = h.max_faults_per_window;
        HealthMonitor {
            window_ms,
            allowed_lateness_ms,
            max_gap_ms: h.max_event_gap_ms as Millis,
            max_late_events: h.max_late_events_per_window,
            max_lag_ms: h.max_watermark_lag_ms as Millis,
            max_faults: h.max_faults_per_window,
            retention_ms: h.late_window_retention_ms as Millis,
            watermark: NO_WATERMARK,
            unreleased: TimeSet::default(),
            last_released: None,
            faults: KeyedWindows::new(SlidingWindows::tumbling(window_ms), allowed_lateness_ms)
                .emitting_only(move |f: &Faults| f.0 > max_faults),
            fired: Vec::new(),
            late: OrderedState::default(),
            written: Scalar::default(),
        }
    }

    fn on_time(&mut self, e: DeviceEvent, out: &mut Vec<HealthAlert>) {
        if self.last_released.is_none_or(|last| e.event_ts > last) {
            // Only gaps wider than `max_gap_ms` matter: a span of one more holds none.
            self.unreleased.insert_keeping_ends(e.event_ts, self.max_gap_ms.saturating_add(1));
        }
        if e.event_type == EventType::Fault {
            // An on-time event is never past the allowed lateness of the router that
            // passed it, and this watermark is never ahead of the router's.
            let _ = self.faults.add(&(), e.event_ts, self.watermark, |f| f.0 += 1, &mut self.fired);
            self.emit_faults(out);
        }
    }

    fn on_late(&mut self, e: LateDeviceEvent, out: &mut Vec<HealthAlert>) {
        let start = e.event_ts_ms - e.event_ts_ms.rem_euclid(self.window_ms);
        let w = self.late.get_or_insert_with(start, LateWindow::default);
        w.count += 1;
        w.max_lag_ms = w.max_lag_ms.max(e.lag_ms);
        if start + self.window_ms <= self.watermark {
            self.evaluate_late(start, out);
        }
    }

    fn evaluate_late(&mut self, start: Millis, out: &mut Vec<HealthAlert>) {
        let window = Window { start, end: start + self.window_ms };
        let (max_late, max_lag) = (self.max_late_events, self.max_lag_ms);
        let Some(w) = self.late.get_mut(&start) else { return };
        if w.count > max_late {
            w.spike_revision += 1;
            out.push(HealthAlert::LateSpike(LateSpikeAlert {
                record_type: RecordType::HealthAlert,
                reason: HealthReason::LateEventSpike,
                severity: Severity::Warning,
                window_start: window.start,
                window_end: window.end,
                late_events: w.count,
                ceiling: max_late,
                revision: w.spike_revision,
            }));
        }
        if w.max_lag_ms > max_lag && w.max_lag_ms > w.reported_lag_ms {
            w.lag_revision += 1;
            w.reported_lag_ms = w.max_lag_ms;
            out.push(HealthAlert::WatermarkLag(WatermarkLagAlert {
                record_type: RecordType::HealthAlert,
                reason: HealthReason::WatermarkLagExceeded,
                severity: Severity::Critical,
                window_start: window.start,
                window_end: window.end,
                max_lag_ms: w.max_lag_ms,
                threshold_ms: max_lag,
                revision: w.lag_revision,
            }));
        }
    }

    fn emit_faults(&mut self, out: &mut Vec<HealthAlert>) {
        let max = self.max_faults;
        out.extend(self.fired.drain(..).map(|r| {
            HealthAlert::FaultRate(FaultRateAlert {
                record_type: RecordType::HealthAlert,
                reason: HealthReason::FaultRateExceeded,
                severity: Severity::Critical,
                window_start: r.window.start,
                window_end: r.window.end,
                fault_count: r.value.0,
                ceiling: max,
                revision: r.revision,
            })
        }));
    }

    fn release_gaps(&mut self, out: &mut Vec<HealthAlert>) {
        let horizon = self.watermark.saturating_sub(self.allowed_lateness_ms);
        while let Some(ts) = self.unreleased.first() {
            if ts >= horizon {
                break;
            }
            self.unreleased.pop_first();
            // A time released already: changelogs written before restores stopped
            // counting as changes (see `TimeSet::restore_entry`) may still hold some.
            // Read as new, it would move the last released time back, and the next
            // time would seem to end a long gap.
            if self.last_released.is_some_and(|last| ts <= last) {
                continue;
            }
            if let Some(last) = self.last_released {
                let gap_ms = ts - last;
                if gap_ms > self.max_gap_ms {
                    out.push(HealthAlert::Throughput(ThroughputAlert {
                        record_type: RecordType::HealthAlert,
                        reason: HealthReason::ThroughputBelowFloor,
                        severity: Severity::Warning,
                        gap_ms,
                        threshold_ms: self.max_gap_ms,
                        resumed_at: ts,
                    }));
                }
            }
            self.last_released = Some(ts);
        }
    }
}

impl Operator for HealthMonitor {
    type In = HealthInput;
    type Out = HealthAlert;

    fn on_record(&mut self, record: HealthInput, out: &mut Vec<HealthAlert>) {
        match record {
            HealthInput::OnTime(e) => self.on_time(e, out),
            HealthInput::Late(e) => self.on_late(e, out),
        }
    }

    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<HealthAlert>) {
        let before = self.watermark;
        self.watermark = self.watermark.max(watermark);
        self.release_gaps(out);
        self.faults.advance(self.watermark, &mut self.fired);
        self.emit_faults(out);
        // Late windows that were still open when their late events came are due now.
        let due: Vec<Millis> = self
            .late
            .keys()
            .copied()
            .filter(|&s| s + self.window_ms > before && s + self.window_ms <= self.watermark)
            .collect();
        for start in due {
            self.evaluate_late(start, out);
        }
        let (window_ms, retention_ms, wm) = (self.window_ms, self.retention_ms, self.watermark);
        self.late.retain(|&s, _| (s + window_ms).saturating_add(retention_ms) > wm);
    }

    fn output_watermark(&self) -> Millis {
        self.watermark
    }
}

/// The scalars; the event times waiting for the gap check; the fault windows; the
/// late-event windows.
const UNRELEASED: u8 = 1;
const FAULTS: u8 = 2;
const LATE: u8 = 3;

impl Stateful for HealthMonitor {
    fn track_changes(&mut self) {
        self.unreleased.track_changes();
        self.faults.track_changes();
        self.late.track_changes();
    }

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        let meta = Meta { watermark: self.watermark, last_released: self.last_released };
        self.written.write_if_changed(meta_key(), &meta, out);
        self.unreleased.drain_changes(UNRELEASED, out);
        self.faults.drain_changes(FAULTS, out);
        self.late.drain_changes(LATE, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?, value) {
            ((META, _), Some(bytes)) => {
                let meta: Meta = decode_value(bytes)?;
                (self.watermark, self.last_released) = (meta.watermark, meta.last_released);
                self.written.restored(bytes);
                Ok(())
            }
            ((UNRELEASED, rest), value) => self.unreleased.restore_entry(rest, value),
            ((FAULTS, rest), value) => self.faults.restore_entry(rest, value),
            ((LATE, rest), value) => self.late.restore_entry(rest, value),
            ((ns, _), _) => Err(StateError::Namespace(ns)),
        }
    }

    fn finish_restore(&mut self) {
        self.faults.finish_restore();
    }

    fn live_entries(&self) -> usize {
        self.unreleased.len() + self.faults.key_count() + self.late.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use vigil_stream::harness::Harness;

    const T: Millis = 1_700_000_000_000;

    fn event(event_type: EventType, at: Millis) -> HealthInput {
        HealthInput::OnTime(DeviceEvent {
            device_id: "dev-200".into(),
            site_id: "site-b".into(),
            event_type,
            status: "ok".into(),
            event_ts: T + at,
        })
    }

    fn late(at: Millis, watermark_at: Millis) -> HealthInput {
        let e = DeviceEvent {
            device_id: "dev-101".into(),
            site_id: "site-a".into(),
            event_type: EventType::Heartbeat,
            status: "ok".into(),
            event_ts: T + at,
        };
        HealthInput::Late(LateDeviceEvent::new(e, T + watermark_at))
    }

    #[test]
    fn a_gap_between_consecutive_events_beyond_the_maximum_raises_a_throughput_alert() {
        let mut h = Harness::new(HealthMonitor::new(&Config::default()));
        h.record(event(EventType::Heartbeat, 14_957));
        h.record(event(EventType::Heartbeat, 18_957));
        // Arrives out of order, inside the gap it would otherwise seem to end.
        h.record(event(EventType::Heartbeat, 31_607));
        h.record(event(EventType::Heartbeat, 22_957));
        let out = h.finish();
        let gaps: Vec<(Millis, Millis)> = out
            .iter()
            .filter_map(|a| if let HealthAlert::Throughput(t) = a { Some((t.gap_ms, t.resumed_at - T)) } else { None })
            .collect();
        assert_eq!(gaps, vec![(8_650, 31_607)], "4 000 ms exactly is not a gap; 8 650 ms is");
    }

    /// Changelogs written before a restore stopped counting as a change could keep
    /// event times released already (their tombstones were never written).
    #[test]
    fn a_restored_time_released_already_ends_no_gap() {
        use vigil_stream::changelog::{encode_key, encode_value};
        let mut monitor = HealthMonitor::new(&Config::default());
        let meta = Meta { watermark: T + 6_000, last_released: Some(T + 2_000) };
        monitor.restore_entry(&meta_key(), Some(&encode_value(&meta))).unwrap();
        for stale_or_new in [T - 10_000, T + 1_500, T + 5_000] {
            monitor.restore_entry(&encode_key(UNRELEASED, &stale_or_new), Some(&encode_value(&()))).unwrap();
        }
        monitor.finish_restore();
        let mut h = Harness::new(monitor);
        assert_eq!(
            h.finish(),
            vec![],
            "3 000 ms from the last released time is no gap; the times before it are dropped"
        );
        assert_eq!(h.operator.last_released, Some(T + 5_000));
    }

    /// Events out of order (partitions read in turns) and watermarks at random: the
    /// same throughput alerts as keeping every event time until it is released, with
    /// a short maximum gap (many gaps near it) and the default one, where the set
    /// stays small.
    #[test]
    fn gap_alerts_are_those_of_keeping_every_time() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut random = |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % below) as Millis
        };
        for (max_gap, most_held) in [(25, usize::MAX), (4_000, 60)] {
            let mut config = Config::default();
            config.health.max_event_gap_ms = max_gap as u64;
            let lateness = config.devices.device_allowed_lateness_ms as Millis;
            for _ in 0..30 {
                let mut h = Harness::new(HealthMonitor::new(&config));
                let (mut every, mut last, mut expected) = (BTreeSet::new(), None::<Millis>, Vec::new());
                let mut release = |horizon: Millis, every: &mut BTreeSet<Millis>, last: &mut Option<Millis>| {
                    while let Some(t) = every.first().copied().filter(|&t| t < horizon) {
                        every.remove(&t);
                        if last.is_some_and(|l| t - l > max_gap) {
                            expected.push((t - last.unwrap(), t));
                        }
                        *last = Some(t);
                    }
                };
                let (mut got, mut clock, mut watermark, mut held) = (Vec::new(), 0, 0, 0);
                let collect = |out: Vec<HealthAlert>, got: &mut Vec<(Millis, Millis)>| {
                    got.extend(out.into_iter().filter_map(|a| match a {
                        HealthAlert::Throughput(t) => Some((t.gap_ms, t.resumed_at - T)),
                        _ => None,
                    }))
                };
                for _ in 0..3_000 {
                    if random(20) == 0 {
                        watermark = watermark.max(clock - random(20_000));
                        collect(h.watermark(T + watermark), &mut got);
                        release(watermark - lateness, &mut every, &mut last);
                    } else {
                        // Mostly a few ms on, at times a long silence; from a partition behind.
                        clock += if random(20) == 0 { random(12_000) } else { random(40) };
                        let at = clock - random(4) * random(3_000);
                        collect(h.record(event(EventType::Heartbeat, at)), &mut got);
                        if last.is_none_or(|l| at > l) {
                            every.insert(at);
                        }
                    }
                    held = held.max(h.operator.unreleased.len());
                }
                collect(h.finish(), &mut got);
                release(Millis::MAX, &mut every, &mut last);
                assert!(expected.len() >= 5, "a test with gaps in it: {expected:?}");
                assert_eq!(got, expected, "maximum gap {max_gap}");
                assert!(held < most_held, "{held} times held");
            }
        }
    }

    #[test]
    fn a_late_event_raises_a_spike_and_a_lag_alert_for_its_own_window() {
        let mut h = Harness::new(HealthMonitor::new(&Config::default()));
        h.watermark(T + 39_650);
        let out = h.record(late(3_507, 39_650));
        match &out[..] {
            [HealthAlert::LateSpike(s), HealthAlert::WatermarkLag(l)] => {
                assert_eq!((s.window_start - T, s.window_end - T, s.late_events, s.revision), (0, 5_000, 1, 1));
                assert_eq!((l.max_lag_ms, l.threshold_ms, l.revision), (36_143, 5_000, 1));
            }
            other => panic!("unexpected alerts {other:?}"),
        }
        // A second late event of the same window revises the spike; its smaller lag does not.
        let out = h.record(late(4_000, 39_700));
        match &out[..] {
            [HealthAlert::LateSpike(s)] => assert_eq!((s.late_events, s.revision), (2, 2)),
            other => panic!("unexpected alerts {other:?}"),
        }
    }

    #[test]
    fn faults_over_the_ceiling_in_a_health_window_are_critical() {
        let mut h = Harness::new(HealthMonitor::new(&Config::default()));
        for at in [31_900, 32_600, 33_400, 34_100] {
            h.record(event(EventType::Fault, at));
        }
        assert!(h.watermark(T + 35_000).is_empty(), "four faults is the ceiling, not over it");
        let mut h = Harness::new(HealthMonitor::new(&Config::default()));
        for at in [31_900, 32_600, 33_400, 34_100, 34_400, 34_700] {
            h.record(event(EventType::Fault, at));
        }
        match &h.watermark(T + 35_000)[..] {
            [HealthAlert::FaultRate(f)] => assert_eq!((f.window_start - T, f.fault_count, f.ceiling), (30_000, 6, 4)),
            other => panic!("unexpected alerts {other:?}"),
        }
    }
}
