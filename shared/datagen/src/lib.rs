//! Deterministic input for Vigil: the planted dataset (every scenario of the seed's
//! sample output, so every stage fires), normal traffic in any amount, and the
//! dataset folder format (`orders.ndjson`, `payments.ndjson`, `devices.ndjson`).

pub mod dataset;
pub mod distinct;
mod lateness_edges;
pub mod planted;
pub mod rng;
pub mod traffic;

pub use dataset::Dataset;

/// 2023-11-14T22:13:20Z, where the seed's planted dataset starts.
pub const PLANTED_START_MS: vigil_model::Millis = 1_700_000_000_000;
