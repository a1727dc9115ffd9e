//! Operator state as changelog entries, one per state key, as Kafka Streams' stores
//! write theirs: a runtime that keeps state in a compacted changelog topic writes only
//! the entries that changed since its last commit (an entry that is gone becomes a
//! tombstone), and restores an operator by replaying the entries in order.
//!
//! An entry's key is a namespace byte (which part of the operator's state: a
//! customer's statistics, a key's windows, …) followed by the state key in postcard
//! form. Its value is versioned: a format byte, then MessagePack with field names, so
//! a later version that adds a field (with `#[serde(default)]`) still reads every
//! entry an earlier version wrote, and an earlier version skips fields it does not
//! know.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The value format this version writes (and the only one it reads).
const FORMAT: u8 = 1;

/// The namespace of an operator's own scalars (its watermark, say); its keyed state
/// uses the others.
pub const META: u8 = 0;

/// The key of an operator's scalars.
pub fn meta_key() -> Vec<u8> {
    encode_key(META, &())
}

/// One changed entry: `value: None` means the entry is gone (a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("a state entry has an unknown namespace {0}; the changelog holds state of another Vigil version")]
    Namespace(u8),
    #[error("a state entry is empty")]
    Empty,
    #[error(
        "a state entry's key does not decode ({0}); the changelog holds state of another Vigil version or is corrupt"
    )]
    Key(postcard::Error),
    #[error(
        "a state value is in format {0}, this version reads format {FORMAT}; restore with the version that wrote it"
    )]
    Format(u8),
    #[error("a state value does not decode ({0}); the changelog holds state of another Vigil version or is corrupt")]
    Value(#[from] rmp_serde::decode::Error),
}

/// An operator whose state is kept as changelog entries.
pub trait Stateful {
    /// From now on, remember which entries change (a runtime without a changelog
    /// never asks, and pays nothing for it).
    fn track_changes(&mut self);

    /// Every entry changed since the last call, in the order they are to be written.
    fn drain_changes(&mut self, out: &mut Vec<StateWrite>);

    /// Puts one entry back, as the changelog holds it (`None`: the entry is gone).
    /// Restore replays a task's entries in changelog order, then calls
    /// [`Stateful::finish_restore`].
    fn restore_entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StateError>;

    /// After the last entry: rebuild what is derived from the entries (timers, indexes).
    fn finish_restore(&mut self) {}

    /// Entries of keyed state held now (a gauge for operators to watch).
    fn live_entries(&self) -> usize;
}

pub fn encode_key<K: Serialize + ?Sized>(namespace: u8, key: &K) -> Vec<u8> {
    let mut bytes = vec![namespace];
    postcard::to_io(key, &mut bytes).expect("in-memory keys always serialize");
    bytes
}

/// The namespace of an entry's key, and the rest.
pub fn split_key(key: &[u8]) -> Result<(u8, &[u8]), StateError> {
    key.split_first().map(|(ns, rest)| (*ns, rest)).ok_or(StateError::Empty)
}

pub fn decode_key<K: DeserializeOwned>(rest: &[u8]) -> Result<K, StateError> {
    postcard::from_bytes(rest).map_err(StateError::Key)
}

pub fn encode_value<V: Serialize + ?Sized>(value: &V) -> Vec<u8> {
    let mut bytes = vec![FORMAT];
    rmp_serde::encode::write_named(&mut bytes, value).expect("in-memory state always serializes");
    bytes
}

pub fn decode_value<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, StateError> {
    match bytes.split_first() {
        Some((&FORMAT, rest)) => Ok(rmp_serde::from_slice(rest)?),
        Some((&other, _)) => Err(StateError::Format(other)),
        None => Err(StateError::Empty),
    }
}

/// A small piece of state written whole (an operator's watermark, say), and only when
/// it changed since it was last written.
#[derive(Debug, Default)]
pub struct Scalar {
    written: Vec<u8>,
}

impl Scalar {
    /// Writes `value` under `key` if its encoding differs from the last one written.
    pub fn write_if_changed<V: Serialize>(&mut self, key: Vec<u8>, value: &V, out: &mut Vec<StateWrite>) {
        let bytes = encode_value(value);
        if bytes != self.written {
            self.written.clone_from(&bytes);
            out.push(StateWrite { key, value: Some(bytes) });
        }
    }

    /// What the changelog holds, so an unchanged value is not written again.
    pub fn restored(&mut self, bytes: &[u8]) {
        self.written = bytes.to_vec();
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Before {
        count: u64,
        mean: f64,
    }

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct After {
        count: u64,
        mean: f64,
        #[serde(default)]
        last_ms: i64,
    }

    #[test]
    fn a_field_added_later_reads_old_entries_and_old_versions_skip_it() {
        let old = encode_value(&Before { count: 3, mean: 1.5 });
        assert_eq!(decode_value::<After>(&old).unwrap(), After { count: 3, mean: 1.5, last_ms: 0 });
        let new = encode_value(&After { count: 3, mean: 1.5, last_ms: 9 });
        assert_eq!(decode_value::<Before>(&new).unwrap(), Before { count: 3, mean: 1.5 });
    }

    #[test]
    fn keys_round_trip_and_an_unknown_format_is_refused() {
        let key = encode_key(2, &("cust-1", 17i64));
        let (ns, rest) = split_key(&key).unwrap();
        assert_eq!((ns, decode_key::<(String, i64)>(rest).unwrap()), (2, ("cust-1".to_string(), 17)));
        let mut value = encode_value(&1u8);
        value[0] = 9;
        assert!(matches!(decode_value::<u8>(&value), Err(StateError::Format(9))));
    }

    #[test]
    fn a_scalar_is_written_only_when_it_changes() {
        let mut s = Scalar::default();
        let mut out = Vec::new();
        s.write_if_changed(vec![0], &5i64, &mut out);
        s.write_if_changed(vec![0], &5i64, &mut out);
        s.write_if_changed(vec![0], &6i64, &mut out);
        assert_eq!(out.len(), 2);
    }
}
