//! The Confluent wire format's framing of a value: a zero byte, the schema id
//! (big-endian), then the Avro datum.

/// The header's length: the magic byte and the schema id.
pub(super) const HEADER: usize = 5;

/// The schema id of a framed value; none if the payload is not framed.
pub(super) fn schema_id(payload: &[u8]) -> Option<u32> {
    match payload {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_id_is_read_only_behind_the_magic_byte() {
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 9]), Some(258));
        assert_eq!(schema_id(&[1, 0, 0, 1, 2, 9]), None);
        assert_eq!(schema_id(&[0, 0, 0, 1]), None);
    }
}
