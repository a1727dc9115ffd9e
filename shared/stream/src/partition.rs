//! Kafka's default partitioner, so the embedded runtime puts every key on the same
//! partition number a Kafka topic of the same size would.

/// `Utils.toPositive(Utils.murmur2(key)) % partitions`, as Kafka's producer does for a
/// record with a non-null key.
pub fn partition_for(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// [`partition_for`] over a fixed partition count, for a runtime that places every
/// record: the remainder by a multiplication with a precomputed inverse (Lemire's
/// "fastmod", exact for every 32-bit value) instead of a division, which costs tens
/// of cycles.
#[derive(Debug, Clone, Copy)]
pub struct Partitioner {
    partitions: u32,
    inverse: u64,
}

impl Partitioner {
    pub fn new(partitions: u32) -> Self {
        assert!(partitions > 0, "a topic has at least one partition");
        // One partition: the inverse wraps to 0, and every key lands on partition 0.
        Partitioner { partitions, inverse: (u64::MAX / u64::from(partitions)).wrapping_add(1) }
    }

    #[inline]
    pub fn partition(&self, key: &[u8]) -> u32 {
        let lowbits = self.inverse.wrapping_mul(u64::from(murmur2(key) & 0x7fff_ffff));
        ((u128::from(lowbits) * u128::from(self.partitions)) >> 64) as u32
    }
}

/// Kafka's `org.apache.kafka.common.utils.Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values from Kafka's own UtilsTest.testMurmur2.
    #[test]
    fn matches_kafkas_murmur2() {
        let cases: [(&[u8], i32); 5] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key) as i32, expected, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn the_partitioner_agrees_with_the_remainder() {
        for partitions in [1, 2, 3, 4, 7, 12, 100, 65_537] {
            let p = Partitioner::new(partitions);
            for i in 0..2_000u32 {
                let key = format!("key-{}", i.wrapping_mul(2_654_435_761));
                assert_eq!(
                    p.partition(key.as_bytes()),
                    partition_for(key.as_bytes(), partitions),
                    "{key} of {partitions}"
                );
            }
        }
    }

    #[test]
    fn partitions_stay_in_range() {
        for p in 1..9 {
            assert!(partition_for(b"site-a", p) < p);
        }
    }
}
