//! Stage 4: the late-event router. Each device event is judged against the
//! watermark of its partition: an event behind it by more than the allowed lateness
//! goes to the late side output, tagged with the watermark that judged it and its
//! lag; every other event goes on. Late events are counted and kept, never dropped.

use vigil_model::output::LateDeviceEvent;
use vigil_model::{Config, DeviceEvent, Millis};
use vigil_stream::changelog::{decode_value, meta_key, split_key, Scalar, StateError, StateWrite, Stateful, META};
use vigil_stream::watermark::NO_WATERMARK;
use vigil_stream::Operator;

#[derive(Debug, Clone, PartialEq)]
pub enum Routed {
    OnTime(DeviceEvent),
    Late(LateDeviceEvent),
}

pub struct DeviceRouter {
    allowed_lateness_ms: Millis,
    watermark: Millis,
    written: Scalar,
}

impl DeviceRouter {
    pub fn new(config: &Config) -> Self {
        DeviceRouter {
            allowed_lateness_ms: config.devices.device_allowed_lateness_ms as Millis,
            watermark: NO_WATERMARK,
            written: Scalar::default(),
        }
    }
}

impl Operator for DeviceRouter {
    type In = DeviceEvent;
    type Out = Routed;

    fn on_record(&mut self, event: DeviceEvent, out: &mut Vec<Routed>) {
        // Saturating: a watermark at or just past "no watermark" judges nothing late.
        let late = self.watermark.saturating_sub(event.event_ts) > self.allowed_lateness_ms;
        out.push(if late { Routed::Late(LateDeviceEvent::new(event, self.watermark)) } else { Routed::OnTime(event) });
    }

    fn on_watermark(&mut self, watermark: Millis, _out: &mut Vec<Routed>) {
        self.watermark = self.watermark.max(watermark);
    }

    fn output_watermark(&self) -> Millis {
        self.watermark
    }
}

/// The router's only state is its watermark.
impl Stateful for DeviceRouter {
    fn track_changes(&mut self) {}

    fn drain_changes(&mut self, out: &mut Vec<StateWrite>) {
        self.written.write_if_changed(meta_key(), &self.watermark, out);
    }

    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match (split_key(key)?.0, value) {
            (META, Some(bytes)) => {
                self.watermark = decode_value(bytes)?;
                self.written.restored(bytes);
                Ok(())
            }
            (ns, _) => Err(StateError::Namespace(ns)),
        }
    }

    fn live_entries(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_model::EventType;
    use vigil_stream::harness::Harness;

    const T: Millis = 1_700_000_000_000;

    fn heartbeat(ts: Millis) -> DeviceEvent {
        DeviceEvent {
            device_id: "dev-101".into(),
            site_id: "site-a".into(),
            event_type: EventType::Heartbeat,
            status: "ok".into(),
            event_ts: ts,
        }
    }

    #[test]
    fn late_by_exactly_the_allowed_lateness_is_on_time_and_one_millisecond_more_is_late() {
        let mut h = Harness::new(DeviceRouter::new(&Config::default()));
        h.watermark(T + 10_000);
        assert!(matches!(&h.record(heartbeat(T + 8_000))[..], [Routed::OnTime(_)]));
        match &h.record(heartbeat(T + 7_999))[..] {
            [Routed::Late(l)] => {
                assert_eq!((l.watermark_ms, l.lag_ms, l.event_ts_ms), (T + 10_000, 2_001, T + 7_999));
            }
            other => panic!("expected a late event, got {other:?}"),
        }
    }

    #[test]
    fn the_planted_late_heartbeat_carries_the_watermark_that_judged_it() {
        let mut h = Harness::new(DeviceRouter::new(&Config::default()));
        h.watermark(1_700_000_039_650);
        match &h.record(heartbeat(1_700_000_003_507))[..] {
            [Routed::Late(l)] => assert_eq!((l.watermark_ms, l.lag_ms), (1_700_000_039_650, 36_143)),
            other => panic!("expected a late event, got {other:?}"),
        }
    }

    #[test]
    fn nothing_is_late_before_the_first_watermark() {
        let mut h = Harness::new(DeviceRouter::new(&Config::default()));
        assert!(matches!(&h.record(heartbeat(0))[..], [Routed::OnTime(_)]));
        // What a task that has decided but seen nothing says (see the Kafka runtime).
        h.watermark(NO_WATERMARK + 1);
        assert!(matches!(&h.record(heartbeat(T))[..], [Routed::OnTime(_)]));
    }
}
