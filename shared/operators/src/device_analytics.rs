//! Stages 2 and 3 for devices, on the router's on-time events (a site's devices all
//! live on the site's partition):
//!
//! - sliding per-site metrics: event count, faults, reboots, firmware failures and
//!   the fault rate; a fault spike when a site's faults in a window exceed the maximum;
//! - a reboot loop when a device reboots more than the maximum in a sliding window;
//! - a firmware-update failure surfaced at once, with the device's running count.
//!
//! Windows keep the device stream's allowed lateness: an on-time event that is behind
//! the watermark re-emits the windows it changes with a higher `revision`.

use serde::{Deserialize, Serialize};
use vigil_model::output::{
    AnomalyType, DeviceAnomaly, DeviceMetrics, FaultSpike, FirmwareFailure, LateDeviceEvent, RebootLoop, RecordType,
};
use vigil_model::time::round4;
use vigil_model::{Config, DeviceEvent, EventType, Millis};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::retention::Retention;
use vigil_stream::state::{KeyedState, StrKey};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::window::{Aggregate, KeyedWindows, SlidingWindows, WindowResult};
use vigil_stream::Operator;

#[derive(Debug, Clone, PartialEq)]
pub enum DeviceOutput {
    Metrics(DeviceMetrics),
    Anomaly(DeviceAnomaly),
    Late(LateDeviceEvent),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteCounts {
    events: u64,
    faults: u64,
    reboots: u64,
    firmware_failures: u64,
}

impl Aggregate for SiteCounts {
    fn merge(&mut self, o: &Self) {
        self.events += o.events;
        self.faults += o.faults;
        self.reboots += o.reboots;
        self.firmware_failures += o.firmware_failures;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reboots(u64);

impl Aggregate for Reboots {
    fn merge(&mut self, o: &Self) {
        self.0 += o.0;
    }
}

pub struct DeviceAnalytics {
    max_faults: u64,
    max_reboots: u64,
    watermark: Millis,
    sites: KeyedWindows<StrKey, SiteCounts>,
    reboots: KeyedWindows<StrKey, Reboots>,
    firmware_failures: KeyedState<StrKey, FailureCount>,
    site_results: Vec<WindowResult<StrKey, SiteCounts>>,
    reboot_results: Vec<WindowResult<StrKey, Reboots>>,
    retention: Retention,
    written: Scalar,
}

/// A device's running count of failed firmware updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureCount {
    count: u64,
    /// Event time of the last failure (for the state's time-to-live).
    #[serde(default)]
    last_ms: Millis,
}

impl DeviceAnalytics {
    pub fn new(config: &Config) -> Self {
        let d = &config.devices;
        let windows = SlidingWindows::sliding(
            d.device_window_size_seconds as Millis * 1000,
            d.device_window_slide_seconds as Millis * 1000,
        );
        let lateness = d.device_allowed_lateness_ms as Millis;
        let max_reboots = d.max_reboots_per_window;
        DeviceAnalytics {
            max_faults: d.max_faults_per_window,
            max_reboots: d.max_reboots_per_window,
            watermark: NO_WATERMARK,
            sites: KeyedWindows::new(windows, lateness),
            reboots: KeyedWindows::new(windows, lateness).emitting_only(move |r: &Reboots| r.0 > max_reboots),
            firmware_failures: KeyedState::default(),
            site_results: Vec::new(),
            reboot_results: Vec::new(),
            retention: Retention::new(Config::ttl_ms(config.retention.device_analytics_ttl_seconds)),
            written: Scalar::default(),
        }
    }

    fn emit(&mut self, out: &mut Vec<DeviceOutput>) {
        if self.site_results.is_empty() && self.reboot_results.is_empty() {
            return; // Most records fire no window (draining an empty vector is not free).
        }
        for r in self.site_results.drain(..) {
            let c = &r.value;
            if c.faults > self.max_faults {
                out.push(DeviceOutput::Anomaly(DeviceAnomaly::FaultSpike(FaultSpike {
                    record_type: RecordType::Anomaly,
                    anomaly_type: AnomalyType::DeviceFaultSpike,
                    site_id: r.key.clone(),
                    fault_count: c.faults,
                    threshold: self.max_faults,
                    window_start: r.window.start,
                    window_end: r.window.end,
                    revision: r.revision,
                })));
            }
            out.push(DeviceOutput::Metrics(DeviceMetrics {
                record_type: RecordType::DeviceMetrics,
                site_id: r.key,
                window_start: r.window.start,
                window_end: r.window.end,
                event_count: c.events,
                fault_count: c.faults,
                reboot_count: c.reboots,
                firmware_failures: c.firmware_failures,
                fault_rate: round4(c.faults as f64 / c.events as f64),
                revision: r.revision,
            }));
        }
        let max_reboots = self.max_reboots;
        out.extend(self.reboot_results.drain(..).map(|r| {
            DeviceOutput::Anomaly(DeviceAnomaly::RebootLoop(RebootLoop {
                record_type: RecordType::Anomaly,
                anomaly_type: AnomalyType::DeviceRebootLoop,
                device_id: r.key,
                reboot_count: r.value.0,
                threshold: max_reboots,
                window_start: r.window.start,
                window_end: r.window.end,
                revision: r.revision,
            }))
        }));
    }
}

impl Operator for DeviceAnalytics {
    type In = DeviceEvent;
    type Out = DeviceOutput;

    fn on_record(&mut self, e: DeviceEvent, out: &mut Vec<DeviceOutput>) {
        let failure = e.is_firmware_failure();
        let added = self.sites.add(
            &e.site_id,
            e.event_ts,
            self.watermark,
            |c| {
                c.events += 1;
                c.faults += u64::from(e.event_type == EventType::Fault);
                c.reboots += u64::from(e.event_type == EventType::Reboot);
                c.firmware_failures += u64::from(failure);
            },
            &mut self.site_results,
        );
        if added.is_err() {
            // Only reachable when this operator's watermark runs ahead of the router's.
            out.push(DeviceOutput::Late(LateDeviceEvent::new(e, self.watermark)));
            return;
        }
        if e.event_type == EventType::Reboot {
            let _ = self.reboots.add(&e.device_id, e.event_ts, self.watermark, |r| r.0 += 1, &mut self.reboot_results);
        }
        if failure {
            let retention = self.retention;
            let failures = self.firmware_failures.get_or_insert_with(&e.device_id, FailureCount::default);
            if !retention.alive(failures.last_ms, e.event_ts) {
                *failures = FailureCount::default();
            }
            failures.count += 1;
            failures.last_ms = failures.last_ms.max(e.event_ts);
            let count = failures.count;
            out.push(DeviceOutput::Anomaly(DeviceAnomaly::FirmwareFailure(FirmwareFailure {
                record_type: RecordType::Anomaly,
                anomaly_type: AnomalyType::FirmwareUpdateFailure,
                device_id: e.device_id.clone(),
                site_id: e.site_id.clone(),
                failure_count: count,
                event_time: e.event_ts,
            })));
        }
        self.emit(out);
    }

    fn on_watermark(&mut self, watermark: Millis, out: &mut Vec<DeviceOutput>) {
        self.watermark = self.watermark.max(watermark);
        self.sites.advance(self.watermark, &mut self.site_results);
        self.reboots.advance(self.watermark, &mut self.reboot_results);
        self.emit(out);
        self.retention.sweep(&mut self.firmware_failures, self.watermark, |f| f.last_ms);
    }

    fn output_watermark(&self) -> Millis {
        self.watermark
    }
}

/// The watermark; each site's and device's windows; each device's failure count.
const SITES: u8 = 1;
const REBOOTS: u8 = 2;
const FAILURES: u8 = 3;

impl Stateful for DeviceAnalytics {
    fn track_changes(&mut self) {
        self.sites.track_changes();
        self.reboots.track_changes();
        self.firmware_failures.track_changes();
    }

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        self.written.write_if_changed(meta_key(), &self.watermark, out);
        self.sites.drain_changes(SITES, out);
        self.reboots.drain_changes(REBOOTS, out);
        self.firmware_failures.drain_changes(FAILURES, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?, value) {
            ((META, _), Some(bytes)) => {
                self.watermark = decode_value(bytes)?;
                self.written.restored(bytes);
                Ok(())
            }
            ((SITES, rest), value) => self.sites.restore_entry(rest, value),
            ((REBOOTS, rest), value) => self.reboots.restore_entry(rest, value),
            ((FAILURES, rest), value) => self.firmware_failures.restore_entry(rest, value),
            ((ns, _), _) => Err(StateError::Namespace(ns)),
        }
    }

    fn finish_restore(&mut self) {
        self.sites.finish_restore();
        self.reboots.finish_restore();
    }

    fn live_entries(&self) -> usize {
        self.sites.key_count() + self.reboots.key_count() + self.firmware_failures.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_stream::harness::Harness;

    const T: Millis = 1_700_000_000_000;

    fn event(device: &str, site: &str, event_type: EventType, status: &str, at: Millis) -> DeviceEvent {
        DeviceEvent {
            device_id: device.into(),
            site_id: site.into(),
            event_type,
            status: status.into(),
            event_ts: T + at,
        }
    }

    fn metrics(out: &[DeviceOutput]) -> Vec<(Millis, u64, u64, f64, u32)> {
        out.iter()
            .filter_map(|o| match o {
                DeviceOutput::Metrics(m) => {
                    Some((m.window_start - T, m.event_count, m.fault_count, m.fault_rate, m.revision))
                }
                _ => None,
            })
            .collect()
    }

    fn spikes(out: &[DeviceOutput]) -> Vec<(Millis, u64)> {
        out.iter()
            .filter_map(|o| match o {
                DeviceOutput::Anomaly(DeviceAnomaly::FaultSpike(s)) => Some((s.window_start - T, s.fault_count)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn sliding_site_metrics_and_a_fault_spike_over_the_threshold() {
        let mut h = Harness::new(DeviceAnalytics::new(&Config::default()));
        for at in [31_900, 32_600, 33_400] {
            h.record(event("dev-200", "site-b", EventType::Fault, "degraded", at));
        }
        h.record(event("dev-201", "site-b", EventType::Heartbeat, "ok", 33_000));
        let out = h.watermark(T + 34_000);
        assert_eq!(
            metrics(&out),
            vec![(27_000, 1, 1, 1.0, 1), (28_000, 2, 2, 1.0, 1), (29_000, 4, 3, 0.75, 1)],
            "windows up to [29 s, 34 s) are complete; none has more than 3 faults"
        );
        assert!(spikes(&out).is_empty());
        h.record(event("dev-200", "site-b", EventType::Fault, "degraded", 34_100));
        let out = h.watermark(T + 35_000);
        assert_eq!(spikes(&out), vec![(30_000, 4)]);
    }

    #[test]
    fn an_allowed_late_event_re_emits_the_window_as_a_new_revision() {
        let mut h = Harness::new(DeviceAnalytics::new(&Config::default()));
        h.record(event("d", "s", EventType::Heartbeat, "ok", 1_000));
        h.watermark(T + 5_000);
        let out = h.record(event("d", "s", EventType::Fault, "degraded", 3_500));
        // 3.5 s sits in [-1 s, 4 s) … [3 s, 8 s); of those only the first two had fired.
        assert_eq!(metrics(&out), vec![(-1_000, 2, 1, 0.5, 2), (0, 2, 1, 0.5, 2)]);
        assert!(out.iter().all(|o| !matches!(o, DeviceOutput::Late(_))));
    }

    #[test]
    fn a_reboot_loop_is_more_than_the_maximum_reboots_of_one_device_in_a_window() {
        let mut h = Harness::new(DeviceAnalytics::new(&Config::default()));
        for at in [32_500, 34_000, 35_500, 36_800] {
            h.record(event("dev-300", "site-c", EventType::Reboot, "rebooting", at));
        }
        h.record(event("dev-301", "site-c", EventType::Reboot, "rebooting", 33_000));
        let out = h.finish();
        let loops: Vec<(StrKey, Millis, u64)> = out
            .iter()
            .filter_map(|o| match o {
                DeviceOutput::Anomaly(DeviceAnomaly::RebootLoop(r)) => {
                    Some((r.device_id.clone(), r.window_start - T, r.reboot_count))
                }
                _ => None,
            })
            .collect();
        assert_eq!(loops, vec![("dev-300".into(), 32_000, 4)]);
    }

    #[test]
    fn firmware_failures_surface_at_once_with_a_running_count_per_device() {
        let mut h = Harness::new(DeviceAnalytics::new(&Config::default()));
        let counts = |out: Vec<DeviceOutput>| -> Vec<u64> {
            out.iter()
                .filter_map(|o| match o {
                    DeviceOutput::Anomaly(DeviceAnomaly::FirmwareFailure(f)) => Some(f.failure_count),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(counts(h.record(event("dev-100", "site-a", EventType::FirmwareUpdate, "failed", 37_507))), vec![1]);
        assert!(counts(h.record(event("dev-100", "site-a", EventType::FirmwareUpdate, "ok", 37_800))).is_empty());
        assert_eq!(counts(h.record(event("dev-100", "site-a", EventType::FirmwareUpdate, "failed", 38_207))), vec![2]);
        assert_eq!(counts(h.record(event("dev-101", "site-a", EventType::FirmwareUpdate, "failed", 38_300))), vec![1]);
    }
}
