//! The hash table under keyed state, built for millions of keys.
//!
//! - A key is hashed once per call, and a key absent so far is found and inserted in
//!   one probe (a new customer or order is the common case in a busy stream).
//! - The keys are spread over [`SHARDS`] tables by bits of their hash. A table
//!   doubles when full, moving every entry it holds; one table of two million keys
//!   moves about a hundred megabytes at once, in random order across memory (tens of
//!   milliseconds in which the stream waits). A shard moves a sixty-fourth of that,
//!   within the processor's cache, and the allocator reuses the smaller tables it
//!   frees. With few keys, the shards cost nothing: an empty one allocates nothing.
//!
//! Iteration order is the shards', and no caller depends on it.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

const SHARD_BITS: u32 = 6;
pub const SHARDS: usize = 1 << SHARD_BITS;
/// Below this many bytes of entries a map is not prefetched from (a server's cache
/// holds most of it).
const PREFETCH_FROM_BYTES: usize = 8 << 20;

#[derive(Debug, Clone)]
pub struct ShardedMap<K, V> {
    shards: Box<[HashTable<(K, V)>]>,
    len: usize,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap { shards: (0..SHARDS).map(|_| HashTable::new()).collect(), len: 0 }
    }
}

fn hash_of<Q: Hash + ?Sized>(key: &Q) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Middle bits pick the shard: a table takes its bucket from the low bits and its
/// tag from the top seven, and both must still vary among one shard's keys.
fn shard_of(hash: u64) -> usize {
    (hash >> 32) as usize & (SHARDS - 1)
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        self.shards[shard_of(hash)].find(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        self.shards[shard_of(hash)].find_mut(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v)
    }

    /// The key's value and whether it was there already; an absent key is made with
    /// `make_key` and its value with `init`.
    pub fn get_or_insert_with<Q>(
        &mut self,
        key: &Q,
        make_key: impl FnOnce(&Q) -> K,
        init: impl FnOnce() -> V,
    ) -> (&mut V, bool)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        match self.shards[shard_of(hash)].entry(hash, |(k, _)| k.borrow() == key, |(k, _)| hash_of(k)) {
            Entry::Occupied(entry) => (&mut entry.into_mut().1, true),
            Entry::Vacant(entry) => {
                self.len += 1;
                (&mut entry.insert((make_key(key), init())).into_mut().1, false)
            }
        }
    }

    /// Starts loading the memory where `key` is, or would be inserted, without waiting
    /// for it: in a table of millions of keys each new key is a miss in every cache,
    /// and misses asked for together overlap instead of following one another. Only
    /// a hint: a wrong address costs nothing but the load.
    pub fn prefetch<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let size = std::mem::size_of::<(K, V)>();
        if self.len * size < PREFETCH_FROM_BYTES {
            return; // mostly in cache: the hint would cost more than it saves
        }
        if let Some((control, bucket)) = self.probe_start(key) {
            for address in [control, bucket, bucket.wrapping_add(size - 1)] {
                prefetch(address);
            }
        }
    }

    /// Where a probe for `key` starts: its first control byte, and the bucket that
    /// goes with it (the key is there, or in one of the next few, or goes there).
    /// `None` for a table less than a quarter full, where finding the addresses could
    /// take a long scan; such a table is small or emptied, and its misses few.
    fn probe_start<Q>(&self, key: &Q) -> Option<(*const u8, *const u8)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        let shard = &self.shards[shard_of(hash)];
        if shard.len() * 4 < shard.num_buckets() {
            return None;
        }
        // hashbrown keeps a table's control bytes (one a bucket) at one address and
        // its buckets just below it, bucket i ending i entries below; any stored
        // entry tells that address. A probe starts at the hash's low bits.
        let index = shard.iter_buckets().next()?;
        let stored = std::ptr::from_ref(shard.get_bucket(index)?).cast::<u8>();
        let size = std::mem::size_of::<(K, V)>();
        let control = stored.wrapping_add((index + 1) * size);
        let start = hash as usize & (shard.num_buckets() - 1);
        Some((control.wrapping_add(start), control.wrapping_sub((start + 1) * size)))
    }

    /// Sets the key's value, returning the one it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let hash = hash_of(&key);
        match self.shards[shard_of(hash)].entry(hash, |(k, _)| *k == key, |(k, _)| hash_of(k)) {
            Entry::Occupied(entry) => Some(std::mem::replace(&mut entry.into_mut().1, value)),
            Entry::Vacant(entry) => {
                self.len += 1;
                entry.insert((key, value));
                None
            }
        }
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        let entry = self.shards[shard_of(hash)].find_entry(hash, |(k, _)| k.borrow() == key).ok()?;
        self.len -= 1;
        Some(entry.remove().0 .1)
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        for shard in self.shards.iter_mut() {
            shard.retain(|(k, v)| keep(k, v));
        }
        self.len = self.shards.iter().map(HashTable::len).sum();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|shard| shard.iter().map(|(k, v)| (k, v)))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(target_arch = "x86_64")]
fn prefetch(address: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch reads nothing the program sees and never faults, whatever
    // the address.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast()) }
}

#[cfg(not(target_arch = "x86_64"))]
fn prefetch(_: *const u8) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The same operations on this map and on std's give the same contents.
    #[test]
    fn behaves_as_a_map_across_shards_and_growth() {
        let (mut map, mut reference) = (ShardedMap::<String, u64>::default(), HashMap::new());
        for i in 0..20_000u64 {
            let key = format!("cust-{}", i % 7_001);
            match i % 5 {
                0 => assert_eq!(map.remove(key.as_str()), reference.remove(&key)),
                1 => assert_eq!(map.insert(key.clone(), i), reference.insert(key, i)),
                _ => {
                    let (value, existed) = map.get_or_insert_with(key.as_str(), str::to_string, || i);
                    assert_eq!(existed, reference.contains_key(&key));
                    *value += 1;
                    *reference.entry(key).or_insert(i) += 1;
                }
            }
        }
        map.retain(|_, v| v % 3 != 0);
        reference.retain(|_, v| *v % 3 != 0);
        assert_eq!(map.len(), reference.len());
        assert!(map.shards.iter().filter(|s| !s.is_empty()).count() == SHARDS, "keys spread over every shard");
        let mut entries: Vec<_> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut expected: Vec<_> = reference.into_iter().collect();
        entries.sort();
        expected.sort();
        assert_eq!(entries, expected);
        assert_eq!(map.get("cust-1"), expected.iter().find(|(k, _)| k == "cust-1").map(|(_, v)| v));
    }

    /// The addresses a prefetch asks for are where the keys are: a key is in the
    /// bucket its probe starts at or in the same group of 16 after it, unless that
    /// group was full (a test of what `probe_start` assumes of hashbrown's layout).
    #[test]
    fn a_prefetch_asks_for_where_the_key_is() {
        let mut map = ShardedMap::<String, [u64; 4]>::default();
        let keys: Vec<String> = (0..100_000).map(|i| format!("cust-{i}")).collect();
        for key in &keys {
            map.get_or_insert_with(key.as_str(), str::to_string, || [0; 4]);
        }
        let size = std::mem::size_of::<(String, [u64; 4])>();
        let found = keys
            .iter()
            .filter(|key| {
                let (_, bucket) = map.probe_start(key.as_str()).expect("tables more than a quarter full");
                let hash = hash_of(key.as_str());
                let shard = &map.shards[shard_of(hash)];
                let index = shard.find_bucket_index(hash, |(k, _)| k == *key).expect("stored");
                let stored = std::ptr::from_ref(shard.get_bucket(index).expect("stored")) as usize;
                (0..16).any(|ahead| stored + ahead * size == bucket as usize)
            })
            .count();
        assert!(found * 10 >= keys.len() * 9, "{found} of {} keys where their probe starts", keys.len());
    }
}
