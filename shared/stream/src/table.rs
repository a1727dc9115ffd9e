//! The hash table under keyed state, built for millions of keys.
//!
//! - A key is hashed once per call, and a key absent so far is found and inserted in
//!   one probe (a new customer or order is the common case in a busy stream).
//! - A small map is one hashbrown table. Most maps of a run stay small (a window's
//!   keys, the orders waiting for their payments), and one table is denser in the
//!   cache than many.
//! - Once it holds [`SPLIT_AT`] keys, a map spreads them over [`SHARDS`] tables by
//!   bits of their hash. A table doubles when full, moving every entry it holds;
//!   one table of two million keys moves about a hundred megabytes at once, in
//!   random order across memory (tens of milliseconds in which the stream waits, and
//!   old and new table alive together). A shard moves a sixty-fourth of that, within
//!   the processor's cache. The shards keep each entry beside its hash
//!   (`slots`): in a table of hundreds of megabytes, a key not seen before then costs
//!   one cache miss and one page walk, where hashbrown's control bytes, apart from
//!   its entries, cost two of each.
//!
//! Iteration order is the tables', and no caller depends on it.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::slots::SlotTable;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
/// The keys at which a map of one table splits into [`SHARDS`] (a table of this
/// many moves about a megabyte when it doubles).
const SPLIT_AT: usize = 1 << 15;

#[derive(Debug, Clone)]
pub struct ShardedMap<K, V> {
    /// The map until it holds [`SPLIT_AT`] keys; empty after.
    small: HashTable<(K, V)>,
    /// The map once it has held [`SPLIT_AT`] keys; none before.
    shards: Box<[SlotTable<K, V>]>,
    len: usize,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        ShardedMap { small: HashTable::new(), shards: Box::default(), len: 0 }
    }
}

fn hash_of<Q: Hash + ?Sized>(key: &Q) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Middle bits pick the shard: a shard's slot table takes a key's first slot from
/// the low bits, which must still vary among one shard's keys.
fn shard_of(hash: u64) -> usize {
    (hash >> 32) as usize & (SHARDS - 1)
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// Moves a small map that has reached [`SPLIT_AT`] keys into the shards, each
    /// with room to double; called before an insert looks for its place.
    fn split_if_due(&mut self) {
        if !self.shards.is_empty() || self.len < SPLIT_AT {
            return;
        }
        let room = 2 * self.len / SHARDS;
        let mut shards: Box<[SlotTable<K, V>]> = (0..SHARDS).map(|_| SlotTable::with_capacity(room)).collect();
        for (key, value) in std::mem::take(&mut self.small) {
            let hash = hash_of(&key);
            shards[shard_of(hash)].insert_unique(hash, key, value);
        }
        self.shards = shards;
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        if self.shards.is_empty() {
            return self.small.find(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v);
        }
        self.shards[shard_of(hash)].get(hash, |k| k.borrow() == key)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        if self.shards.is_empty() {
            return self.small.find_mut(hash, |(k, _)| k.borrow() == key).map(|(_, v)| v);
        }
        self.shards[shard_of(hash)].get_mut(hash, |k| k.borrow() == key)
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
        let (value, existed) = if self.shards.is_empty() {
            match self.small.entry(hash, |(k, _)| k.borrow() == key, |(k, _)| hash_of(k)) {
                Entry::Occupied(entry) => (&mut entry.into_mut().1, true),
                Entry::Vacant(entry) => (&mut entry.insert((make_key(key), init())).into_mut().1, false),
            }
        } else {
            self.shards[shard_of(hash)].get_or_insert_with(hash, |k| k.borrow() == key, || (make_key(key), init()))
        };
        self.len += usize::from(!existed);
        (value, existed)
    }

    /// Starts loading the memory where `key` is, or would be inserted, in a map of
    /// shards, without waiting for it: in a table of millions of keys each new key
    /// is a miss in every cache, and misses asked for together overlap instead of
    /// following one another. A small map is mostly in cache, and left alone.
    pub fn prefetch<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.shards.is_empty() {
            return;
        }
        let hash = hash_of(key);
        if let Some(slot) = self.shards[shard_of(hash)].first_slot(hash) {
            prefetch(slot);
            prefetch(slot.wrapping_add(SlotTable::<K, V>::SLOT_BYTES - 1));
        }
    }

    /// Sets the key's value, returning the one it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.split_if_due();
        let hash = hash_of(&key);
        if self.shards.is_empty() {
            match self.small.entry(hash, |(k, _)| *k == key, |(k, _)| hash_of(k)) {
                Entry::Occupied(entry) => return Some(std::mem::replace(&mut entry.into_mut().1, value)),
                Entry::Vacant(entry) => _ = entry.insert((key, value)),
            }
        } else {
            let shard = &mut self.shards[shard_of(hash)];
            if let Some(old) = shard.get_mut(hash, |k| *k == key) {
                return Some(std::mem::replace(old, value));
            }
            shard.insert_unique(hash, key, value);
        }
        self.len += 1;
        None
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(key);
        let removed = if self.shards.is_empty() {
            let entry = self.small.find_entry(hash, |(k, _)| k.borrow() == key).ok()?;
            entry.remove().0 .1
        } else {
            self.shards[shard_of(hash)].remove(hash, |k| k.borrow() == key)?.1
        };
        self.len -= 1;
        Some(removed)
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.small.retain(|(k, v)| keep(k, v));
        for shard in self.shards.iter_mut() {
            shard.retain(&mut keep);
        }
        self.len = self.small.len() + self.shards.iter().map(SlotTable::len).sum::<usize>();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.small.iter().map(|(k, v)| (k, v)).chain(self.shards.iter().flat_map(SlotTable::iter))
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
            if i % 9_973 == 9_972 {
                map.retain(|_, v| v % 7 != 0);
                reference.retain(|_, v| *v % 7 != 0);
            }
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
        assert!(agrees_with_std(7_001, 20_000).shards.is_empty());
    }

    #[test]
    fn a_large_map_splits_across_shards_and_grows() {
        let map = agrees_with_std(50_021, 200_000);
        assert!(map.shards.len() == SHARDS && map.shards.iter().all(|s| s.len() > 0), "keys spread over every shard");
    }

    /// The slot a prefetch asks for is where the key is, or a few slots before it
    /// (its probe's run).
    #[test]
    fn a_prefetch_asks_for_where_the_key_is() {
        let mut map = ShardedMap::<String, [u64; 4]>::default();
        let keys: Vec<String> = (0..100_000).map(|i| format!("cust-{i}")).collect();
        for key in &keys {
            map.get_or_insert_with(key.as_str(), str::to_string, || [0; 4]);
        }
        let slot = SlotTable::<String, [u64; 4]>::SLOT_BYTES;
        let near = keys
            .iter()
            .filter(|key| {
                let hash = hash_of(key.as_str());
                let first = map.shards[shard_of(hash)].first_slot(hash).expect("slots") as usize;
                let value = std::ptr::from_ref(map.get(key.as_str()).expect("stored")) as usize;
                (first..first + 4 * slot).contains(&value)
            })
            .count();
        assert!(near * 10 >= keys.len() * 9, "{near} of {} keys within 4 slots of their probe's start", keys.len());
    }
}
