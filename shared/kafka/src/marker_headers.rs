//! Watermark markers on the wire: a record without a value whose headers say which
//! task wrote it, its watermark, whether it is idle, and its generation (see
//! `core::markers` for what they mean).

use rdkafka::message::{Header, Headers, Message, OwnedHeaders};

use crate::core::markers::Marker;

const WATERMARK: &str = "vigil-watermark";
const TASK: &str = "vigil-task";
const IDLE: &str = "vigil-idle";
const GENERATION: &str = "vigil-generation";

pub fn headers(marker: Marker) -> OwnedHeaders {
    let wm = marker.watermark.to_string();
    let mut headers = OwnedHeaders::new().insert(Header { key: WATERMARK, value: Some(wm.as_bytes()) });
    if let Some(task) = marker.task {
        headers = headers.insert(Header { key: TASK, value: Some(task.to_string().as_bytes()) });
    }
    if marker.idle {
        headers = headers.insert(Header { key: IDLE, value: Some(b"1") });
    }
    if marker.generation > 0 {
        headers = headers.insert(Header { key: GENERATION, value: Some(marker.generation.to_string().as_bytes()) });
    }
    headers
}

/// The marker a message carries, if it is one: a marker has no value, so a record
/// with one is not asked for its headers (librdkafka parses them into a new buffer at
/// every ask, even when there are none).
pub fn read<M: Message>(message: &M) -> Option<Marker> {
    if message.payload().is_some_and(|value| !value.is_empty()) {
        return None;
    }
    let headers = message.headers()?;
    let value = |name: &str| -> Option<String> {
        headers.iter().find(|h| h.key == name).and_then(|h| h.value).map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let watermark = value(WATERMARK)?.parse().ok()?;
    let task = value(TASK).and_then(|t| t.parse().ok());
    let generation = value(GENERATION).and_then(|g| g.parse().ok()).unwrap_or(0);
    Some(Marker { task, watermark, idle: value(IDLE).as_deref() == Some("1"), generation })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::OwnedMessage;
    use rdkafka::Timestamp;
    use vigil_stream::watermark::NO_WATERMARK;

    fn message(headers: OwnedHeaders) -> OwnedMessage {
        with_value(None, headers)
    }

    fn with_value(value: Option<&[u8]>, headers: OwnedHeaders) -> OwnedMessage {
        OwnedMessage::new(value.map(<[u8]>::to_vec), None, "t".into(), Timestamp::NotAvailable, 0, 0, Some(headers))
    }

    #[test]
    fn a_marker_round_trips_through_headers() {
        for marker in [
            Marker::of(3, 1_700_000_039_650, false),
            Marker { task: Some(0), watermark: NO_WATERMARK, idle: true, generation: 7 },
            Marker::END,
        ] {
            assert_eq!(read(&message(headers(marker))), Some(marker));
        }
        let plain = message(OwnedHeaders::new().insert(Header { key: "other", value: Some(b"x") }));
        assert_eq!(read(&plain), None);
    }

    #[test]
    fn only_a_record_without_a_value_is_a_marker() {
        let end = Marker::END;
        // Another client may write "no value" as an empty one.
        assert_eq!(read(&with_value(Some(b""), headers(end))), Some(end));
        assert_eq!(read(&with_value(Some(b"\0\0\0\0\x01\x02"), headers(end))), None);
    }
}
