//! Helpers the modules' tests share: input lines of each kind, a merge of two
//! streams, and the event times (or dead letters' line numbers) of what came out.

use vigil_model::Source;

use crate::{Line, MergedInput, StreamReader};

pub(crate) fn order(id: &str, ts: i64) -> String {
    format!(r#"{{"order_id":"{id}","customer_id":"c","order_amount":1.0,"order_ts":{ts},"country":"US"}}"#)
}

pub(crate) fn device(ts: i64) -> String {
    format!(r#"{{"device_id":"d","site_id":"s","event_type":"heartbeat","status":"ok","event_ts":{ts}}}"#)
}

pub(crate) fn merged(orders: Vec<String>, devices: Vec<String>) -> Vec<Line> {
    MergedInput::new(vec![
        StreamReader::from_lines(Source::Orders, orders),
        StreamReader::from_lines(Source::Devices, devices),
    ])
    .map(Result::unwrap)
    .collect()
}

pub(crate) fn times(lines: &[Line]) -> Vec<i64> {
    lines
        .iter()
        .map(|l| match l {
            Line::Record(r) => r.event_ts(),
            Line::Dead(d) => -(d.line_number as i64),
        })
        .collect()
}
