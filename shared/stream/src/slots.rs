//! One shard of a large [`crate::table::ShardedMap`]: open addressing with linear
//! probing, each slot holding its key's hash beside the key and value.
//!
//! A lookup starts at the slot the hash's low bits name and reads on through the
//! next ones, so it touches one place in memory: with millions of keys, a key not
//! seen before costs one cache miss and one page walk, where a table with its
//! control bytes apart from its entries (hashbrown's) costs two of each. A removal
//! shifts the entries after it back, so no tombstones pile up.

/// A table is at most this full (in quarters): the runs a probe reads stay short.
const MAX_LOAD_QUARTERS: usize = 3;
const MIN_SLOTS: usize = 8;

#[derive(Debug, Clone)]
struct Slot<K, V> {
    hash: u64,
    key: K,
    value: V,
}

#[derive(Debug, Clone)]
pub struct SlotTable<K, V> {
    /// A power of two of them, or none before the first insert.
    slots: Vec<Option<Slot<K, V>>>,
    len: usize,
}

impl<K, V> Default for SlotTable<K, V> {
    fn default() -> Self {
        SlotTable { slots: Vec::new(), len: 0 }
    }
}

impl<K, V> SlotTable<K, V> {
    /// The size of one slot, in bytes.
    pub const SLOT_BYTES: usize = std::mem::size_of::<Option<Slot<K, V>>>();

    /// A table that takes `keys` keys without growing.
    pub fn with_capacity(keys: usize) -> Self {
        let mut table = SlotTable::default();
        table.resize(slots_for(keys));
        table
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding the key `eq` accepts, or the empty slot where it would go;
    /// the table must have slots.
    fn probe(&self, hash: u64, mut eq: impl FnMut(&K) -> bool) -> Result<usize, usize> {
        let mask = self.mask();
        let mut at = hash as usize & mask;
        loop {
            match &self.slots[at] {
                None => return Err(at),
                Some(slot) if slot.hash == hash && eq(&slot.key) => return Ok(at),
                Some(_) => at = (at + 1) & mask,
            }
        }
    }

    fn find(&self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        self.probe(hash, eq).ok()
    }

    pub fn get(&self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<&V> {
        let at = self.find(hash, eq)?;
        self.slots[at].as_ref().map(|slot| &slot.value)
    }

    pub fn get_mut(&mut self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<&mut V> {
        let at = self.find(hash, eq)?;
        self.slots[at].as_mut().map(|slot| &mut slot.value)
    }

    /// The value of the key `eq` accepts and whether it was there; an absent key
    /// and its value are made by `make`.
    pub fn get_or_insert_with(
        &mut self,
        hash: u64,
        eq: impl FnMut(&K) -> bool,
        make: impl FnOnce() -> (K, V),
    ) -> (&mut V, bool) {
        self.reserve_one();
        let (at, existed) = match self.probe(hash, eq) {
            Ok(at) => (at, true),
            Err(at) => {
                let (key, value) = make();
                self.slots[at] = Some(Slot { hash, key, value });
                self.len += 1;
                (at, false)
            }
        };
        match &mut self.slots[at] {
            Some(slot) => (&mut slot.value, existed),
            None => unreachable!("slot {at} was just found or filled"),
        }
    }

    /// Adds a key known to be absent.
    pub fn insert_unique(&mut self, hash: u64, key: K, value: V) {
        self.reserve_one();
        self.place(Slot { hash, key, value });
        self.len += 1;
    }

    pub fn remove(&mut self, hash: u64, eq: impl FnMut(&K) -> bool) -> Option<(K, V)> {
        let at = self.find(hash, eq)?;
        self.remove_at(at).map(|slot| (slot.key, slot.value))
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let Some(start) = self.slots.iter().position(Option::is_none) else { return };
        // From an empty slot on, each run of entries is read from its first slot to
        // its last, and a removal only moves later entries of the run back: every
        // entry is looked at once.
        let mask = self.mask();
        let mut at = (start + 1) & mask;
        while at != start {
            match &self.slots[at] {
                Some(slot) if !keep(&slot.key, &slot.value) => {
                    self.remove_at(at); // an entry may have moved into `at`
                }
                _ => at = (at + 1) & mask,
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().flatten().map(|slot| (&slot.key, &slot.value))
    }

    /// Where the probe for `hash` starts, to prefetch; `None` while the table has no
    /// slots.
    pub fn first_slot(&self, hash: u64) -> Option<*const u8> {
        (!self.slots.is_empty()).then(|| self.slots.as_ptr().wrapping_add(hash as usize & self.mask()).cast())
    }

    fn remove_at(&mut self, hole: usize) -> Option<Slot<K, V>> {
        let removed = self.slots[hole].take()?;
        self.len -= 1;
        // Move back each entry after the hole whose probe would pass the hole, until
        // the run ends, so no probe stops short at the empty slot.
        let mask = self.mask();
        let (mut hole, mut at) = (hole, hole);
        loop {
            at = (at + 1) & mask;
            let Some(slot) = &self.slots[at] else { break };
            let home = slot.hash as usize & mask;
            if at.wrapping_sub(home) & mask >= at.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[at].take();
                hole = at;
            }
        }
        Some(removed)
    }

    /// Room for one more key.
    fn reserve_one(&mut self) {
        if (self.len + 1) * 4 > self.slots.len() * MAX_LOAD_QUARTERS {
            self.resize((self.slots.len() * 2).max(MIN_SLOTS));
        }
    }

    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, std::iter::repeat_with(|| None).take(slots).collect());
        for slot in old.into_iter().flatten() {
            self.place(slot);
        }
    }

    /// Puts an entry into the first empty slot of its probe.
    fn place(&mut self, slot: Slot<K, V>) {
        let mask = self.mask();
        let mut at = slot.hash as usize & mask;
        while self.slots[at].is_some() {
            at = (at + 1) & mask;
        }
        self.slots[at] = Some(slot);
    }
}

/// The slots, a power of two, for `keys` keys at most the table's load.
fn slots_for(keys: usize) -> usize {
    (keys * 4).div_ceil(MAX_LOAD_QUARTERS).next_power_of_two().max(MIN_SLOTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys chosen to land in one run of slots across the table's end, so removals
    /// shift entries back over the wrap.
    #[test]
    fn removals_keep_every_other_key_findable_across_the_wrap() {
        let mut table = SlotTable::with_capacity(5);
        assert_eq!(table.slots.len(), 8);
        let hashes = [6u64, 7, 6, 7, 0, 14];
        for (key, &hash) in hashes.iter().enumerate() {
            table.insert_unique(hash, key, key * 10);
        }
        let mut present = [true; 6];
        for gone in [0, 3, 4] {
            assert_eq!(table.remove(hashes[gone], |&k| k == gone), Some((gone, gone * 10)));
            present[gone] = false;
            for (key, &hash) in hashes.iter().enumerate() {
                assert_eq!(table.get(hash, |&k| k == key).is_some(), present[key], "key {key} after removing {gone}");
            }
        }
        table.retain(|&k, _| k != 5);
        let mut left: Vec<_> = table.iter().map(|(&k, &v)| (k, v)).collect();
        left.sort();
        assert_eq!(left, [(1, 10), (2, 20)]);
        assert_eq!(table.len(), 2);
    }
}
