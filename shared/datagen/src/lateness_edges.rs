//! Device events at the edge of lateness: heartbeats that a watermark one millisecond
//! lower would judge on time, for tests that require the same verdicts however the
//! input is keyed and partitioned.

use std::collections::BTreeSet;

use vigil_model::config::DeviceConfig;
use vigil_model::{DeviceEvent, EventType, Millis};

use crate::dataset::Dataset;

impl Dataset {
    /// The same dataset with, at `blocks` points of the device stream, an event of
    /// every site at one instant E past all the events before it, then a heartbeat
    /// per site a millisecond more than the allowed lateness behind the watermark
    /// E − bound: late. Every key partition's watermark is then E − bound, whatever
    /// the partition count, as long as its events are taken in the order produced;
    /// taken before E, the heartbeat would be on time. (No heartbeat on time at the
    /// edge: it would revise a window already fired, and the Kafka runtime does not
    /// yet fire windows as the embedded one does there: docs/kafka.md.)
    pub fn with_lateness_edges(mut self, devices: &DeviceConfig, blocks: usize) -> Dataset {
        let parsed: Vec<Option<DeviceEvent>> = self.devices.iter().map(|l| serde_json::from_str(l).ok()).collect();
        let sites: BTreeSet<String> = parsed.iter().flatten().map(|e| e.site_id.to_string()).collect();
        let behind = (devices.out_of_order_bound_ms + devices.device_allowed_lateness_ms) as Millis;
        let n = self.devices.len();
        let mut lines = Vec::with_capacity(n + blocks * sites.len() * 2);
        let mut latest = Millis::MIN;
        let mut next_block = 1;
        for (i, (line, event)) in self.devices.drain(..).zip(parsed).enumerate() {
            if next_block <= blocks && i == n * next_block / (blocks + 1) {
                let at = latest + 1;
                let heartbeat = |site: &String, tag: &str, event_ts| {
                    let e = DeviceEvent {
                        device_id: format!("dev-edge-{tag}-{site}").into(),
                        site_id: site.as_str().into(),
                        event_type: EventType::Heartbeat,
                        status: "ok".into(),
                        event_ts,
                    };
                    serde_json::to_string(&e).expect("records serialize")
                };
                lines.extend(sites.iter().map(|s| heartbeat(s, "now", at)));
                lines.extend(sites.iter().map(|s| heartbeat(s, "late", at - behind - 1)));
                latest = at;
                next_block += 1;
            }
            if let Some(e) = event {
                latest = latest.max(e.event_ts);
            }
            lines.push(line);
        }
        self.devices = lines;
        self
    }
}

#[cfg(test)]
mod tests {
    use vigil_model::config::Config;

    use super::*;

    #[test]
    fn each_block_has_an_event_of_every_site_then_a_heartbeat_late_by_a_millisecond_per_site() {
        let config = Config::default();
        let plain = Dataset::planted(1, 7);
        let edged = plain.clone().with_lateness_edges(&config.devices, 3);
        let sites = 6;
        assert_eq!(edged.devices.len(), plain.devices.len() + 3 * 2 * sites);
        let events: Vec<DeviceEvent> = edged.devices.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let now = events.iter().position(|e| e.device_id.starts_with("dev-edge-now")).unwrap();
        let at = events[now].event_ts;
        assert!(events[..now].iter().all(|e| e.event_ts < at), "past every event before it");
        let watermark = at - config.devices.out_of_order_bound_ms as Millis;
        let lag = |e: &DeviceEvent| watermark - e.event_ts;
        let lateness = config.devices.device_allowed_lateness_ms as Millis;
        assert_eq!(lag(&events[now + sites]), lateness + 1, "late by a millisecond");
    }
}
