//! The hash table under keyed state, built for millions of keys.
//!
//! - A key is hashed once per call, and a key absent so far is found and inserted in
//!   one probe (a new customer or order is the common case in a busy stream).
//! - A map of many keys spreads them over [`SHARDS`] tables by bits of their hash. A
//!   table doubles when full, moving every entry it holds; one table of two million
//!   keys moves about a hundred megabytes at once, in random order across memory
//!   (tens of milliseconds in which the stream waits, and old and new table alive
//!   together). A shard moves a sixty-fourth of that, within the processor's cache,
//!   and the allocator reuses the smaller tables it frees.
//! - A map starts as one table and splits into the shards once it holds [`SPLIT_AT`]
//!   keys: most maps of a run stay small (a window's keys, the orders waiting for
//!   their payments), and one small table is denser in the cache than sixty-four
//!   (about 4 % of the embedded pipeline's time on a million events).
//!
//! Iteration order is the shards', and no caller depends on it.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
/// The keys at which a map of one table splits into [`SHARDS`] (a table of this
/// many moves about a megabyte when it doubles).
const SPLIT_AT: usize = 1 << 15;
/// Below this many bytes of entries a map is not prefetched from (a server's cache
/// holds most of it).
const PREFETCH_FROM_BYTES: usize = 8 << 20;

#[derive(Debug, Clone)]
pub struct ShardedMap<K, V> {
    /// One table, or [`SHARDS`] once the map has held [`SPLIT_AT`] keys.
    shards: Vec<HashTable<(K, V)>>,
    len: usize,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap { shards: vec![HashTable::new()], len: 0 }
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
    /// The table a hash belongs in.
    fn shard(&self, hash: u64) -> usize {
        shard_of(hash) & (self.shards.len() - 1)
    }

    /// Splits a map of one table that has reached [`SPLIT_AT`] keys into the shards,
    /// each with room to double; called before an insert looks for its place.
    fn split_if_due(&mut self) {
        if self.shards.len() > 1 || self.len < SPLIT_AT {
            return;
        }
        let room = 2 * self.len / SHARDS;
        let mut shards: Vec<HashTable<(K, V)>> = (0..SHARDS).map(|_| HashTable::with_capacity(room)).collect();
        for (key, value) in std::mem::take(&mut self.shards).into_iter().flatten() {
            let hash = hash_of(&key);
            shards[shard_of(hash)].insert_unique(hash, (key, value), |(k, _)| hash_of(k));
        }
        self.shards = shards;
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        let shard = self.shard(hash);
        self.shards[shard].find(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        let shard = self.shard(hash);
        self.shards[shard].find_mut(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v)
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
        self.split_if_due();
        let hash = hash_of(key);
        let shard = self.shard(hash);
        match self.shards[shard].entry(hash, |(k, _)| k.borrow() == key, |(k, _)| hash_of(k)) {
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
        let shard = &self.shards[self.shard(hash)];
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
        self.split_if_due();
        let hash = hash_of(&key);
        let shard = self.shard(hash);
        match self.shards[shard].entry(hash, |(k, _)| *k == key, |(k, _)| hash_of(k)) {
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
        let shard = self.shard(hash);
        let entry = self.shards[shard].find_entry(hash, |(k, _)| k.borrow() == key).ok()?;
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

    /// The same operations on this map and on std's, over `distinct` keys, give the
    /// same contents; the map is returned for a look at its tables.
    fn agrees_with_std(distinct: u64, operations: u64) -> ShardedMap<String, u64> {
        let (mut map, mut reference) = (ShardedMap::<String, u64>::default(), HashMap::new());
        for i in 0..operations {
            let key = format!("cust-{}", i % distinct);
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
        let mut entries: Vec<_> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut expected: Vec<_> = reference.into_iter().collect();
        entries.sort();
        expected.sort();
        assert_eq!(entries, expected);
        assert_eq!(map.get("cust-1"), expected.iter().find(|(k, _)| k == "cust-1").map(|(_, v)| v));
        map
    }

    #[test]
    fn a_small_map_is_one_table() {
        assert_eq!(agrees_with_std(7_001, 20_000).shards.len(), 1);
    }

    #[test]
    fn a_large_map_splits_across_shards_and_grows() {
        let map = agrees_with_std(50_021, 200_000);
        assert!(map.shards.len() == SHARDS && map.shards.iter().all(|s| !s.is_empty()), "keys spread over every shard");
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
                let shard = &map.shards[map.shard(hash)];
                let index = shard.find_bucket_index(hash, |(k, _)| k == *key).expect("stored");
                let stored = std::ptr::from_ref(shard.get_bucket(index).expect("stored")) as usize;
                (0..16).any(|ahead| stored + ahead * size == bucket as usize)
            })
            .count();
        assert!(found * 10 >= keys.len() * 9, "{found} of {} keys where their probe starts", keys.len());
    }
}
