//! A stateless random source: every draw is a pure function of (seed, record index,
//! purpose), so any record of a stream can be made on its own and two streams made
//! in separate processes with one seed agree (payment i pays order i).

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Copy)]
pub struct Draw {
    seed: u64,
}

impl Draw {
    pub fn new(seed: u64) -> Self {
        Draw { seed }
    }

    /// A uniform value in [0, 1) for record `index` and `purpose`.
    pub fn unit(&self, index: u64, purpose: u64) -> f64 {
        let bits = mix(self.seed ^ mix(index.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ purpose));
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform whole number in [lo, hi].
    pub fn range(&self, index: u64, purpose: u64, lo: i64, hi: i64) -> i64 {
        lo + (self.unit(index, purpose) * (hi - lo + 1) as f64) as i64
    }
}
