//! Operator state as bytes: what a runtime writes to an operator's changelog topic
//! and reads back after a restart or a rebalance. Timers and the watermark are state
//! too, so a restored operator neither forgets a timer nor moves its watermark back.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// An operator whose whole state can be saved and restored.
pub trait Stateful {
    fn snapshot(&self) -> Vec<u8>;
    fn restore(&mut self, snapshot: &[u8]) -> Result<(), SnapshotError>;
}

#[derive(Debug, thiserror::Error)]
#[error("cannot restore operator state ({0}); the changelog holds state of another Vigil version or is corrupt")]
pub struct SnapshotError(#[from] postcard::Error);

/// The compact binary form snapshots use (postcard: serde, any map keys).
pub fn encode<T: Serialize + ?Sized>(state: &T) -> Vec<u8> {
    postcard::to_stdvec(state).expect("in-memory state always serializes")
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, SnapshotError> {
    Ok(postcard::from_bytes(bytes)?)
}
