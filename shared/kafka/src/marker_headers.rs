//! Watermark markers on the wire: a record without a value whose headers say which
//! task wrote it, its watermark, whether it is idle, its generation and, on the
//! repartition topics, how far it has read (see `core::markers` for what they
//! mean). And the stamps the merge orders by (`core::merge`): the producer's
//! sequence number on a source record, the origin on a forwarded one.

use rdkafka::message::{Header, Headers, Message, OwnedHeaders};

use crate::core::markers::Marker;
use crate::core::Stamp;

const WATERMARK: &str = "vigil-watermark";
const TASK: &str = "vigil-task";
const IDLE: &str = "vigil-idle";
const GENERATION: &str = "vigil-generation";
const READ_TO: &str = "vigil-read-to";
/// Written by Vigil's input producer: its records' order among those sent in the
/// same millisecond.
pub const SEQ: &str = "vigil-seq";
const ORIGIN: &str = "vigil-origin";

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
    if let Some(read_to) = marker.read_to {
        headers = headers.insert(Header { key: READ_TO, value: Some(stamp_text(read_to).as_bytes()) });
    }
    headers
}

/// A stamp as a header's value: `at_ms,seq,partition,offset`.
pub fn stamp_text(s: Stamp) -> String {
    format!("{},{},{},{}", s.at_ms, s.seq, s.partition, s.offset)
}

pub fn parse_stamp(text: &[u8]) -> Option<Stamp> {
    let mut parts = std::str::from_utf8(text).ok()?.split(',');
    let stamp = Stamp {
        at_ms: parts.next()?.parse().ok()?,
        seq: parts.next()?.parse().ok()?,
        partition: parts.next()?.parse().ok()?,
        offset: parts.next()?.parse().ok()?,
    };
    parts.next().is_none().then_some(stamp)
}

/// The value of a record's header `name`, if it has one.
fn header<'m, M: Message>(message: &'m M, name: &str) -> Option<&'m [u8]> {
    message.headers()?.iter().find(|h| h.key == name)?.value
}

/// A source record's `vigil-seq` (0 without one).
pub fn seq<M: Message>(message: &M) -> u64 {
    header(message, SEQ).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
}

/// A forwarded record's origin: where and when its source record was produced.
pub fn origin<M: Message>(message: &M) -> Option<Stamp> {
    parse_stamp(header(message, ORIGIN)?)
}

/// The headers of a forwarded record.
pub fn origin_headers(origin: Stamp) -> OwnedHeaders {
    OwnedHeaders::new().insert(Header { key: ORIGIN, value: Some(stamp_text(origin).as_bytes()) })
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
    let read_to = headers.iter().find(|h| h.key == READ_TO).and_then(|h| parse_stamp(h.value?));
    Some(Marker { task, watermark, idle: value(IDLE).as_deref() == Some("1"), generation, read_to })
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
            Marker { task: Some(0), watermark: NO_WATERMARK, idle: true, generation: 7, read_to: None },
            Marker {
                task: Some(2),
                watermark: 1_700_000_039_650,
                idle: false,
                generation: 0,
                read_to: Some(Stamp { at_ms: 1_765_000_000_123, seq: 40_511, partition: 2, offset: 9_001 }),
            },
            Marker::END,
        ] {
            assert_eq!(read(&message(headers(marker))), Some(marker));
        }
        let plain = message(OwnedHeaders::new().insert(Header { key: "other", value: Some(b"x") }));
        assert_eq!(read(&plain), None);
    }

    #[test]
    fn stamps_round_trip_through_headers() {
        let sent = Stamp { at_ms: 1_765_000_000_123, seq: 7, partition: 3, offset: 12 };
        assert_eq!(origin(&with_value(Some(b"x"), origin_headers(sent))), Some(sent));
        let numbered = OwnedHeaders::new().insert(Header { key: SEQ, value: Some(b"40511") });
        assert_eq!(seq(&with_value(Some(b"x"), numbered)), 40_511);
        assert_eq!(seq(&with_value(Some(b"x"), OwnedHeaders::new())), 0);
        assert_eq!(parse_stamp(b"1,2,3"), None);
    }

    #[test]
    fn only_a_record_without_a_value_is_a_marker() {
        let end = Marker::END;
        // Another client may write "no value" as an empty one.
        assert_eq!(read(&with_value(Some(b""), headers(end))), Some(end));
        assert_eq!(read(&with_value(Some(b"\0\0\0\0\x01\x02"), headers(end))), None);
    }
}
