//! Keyed state: maps from key to the state of that key that can remember which keys
//! changed, so a runtime with a changelog writes only those (see `changelog`).
//! [`KeyedState`] is a hash map; [`OrderedState`] keeps its keys in order, for state
//! read by time.
//!
//! Change tracking is off until asked for (the embedded runtime never asks). A key
//! created and dropped again between two drains is never written.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::Hash;

use rustc_hash::FxHashMap;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::changelog::{decode_key, decode_value, encode_key, encode_value, StateError, StateWrite};
use crate::table::ShardedMap;

/// A string key held inline up to 24 bytes (customer and order ids are shorter):
/// no allocation of its own, a third less memory per key than a `String` for state
/// with millions of keys. It is written to the changelog as a `String` is.
pub type StrKey = compact_str::CompactString;

/// How a key is made from the form it is looked up by (`&str` for string keys).
pub trait FromBorrowed<Q: ?Sized> {
    fn from_borrowed(key: &Q) -> Self;
}

impl<T: Clone> FromBorrowed<T> for T {
    fn from_borrowed(key: &T) -> T {
        key.clone()
    }
}

impl FromBorrowed<str> for String {
    fn from_borrowed(key: &str) -> String {
        key.to_string()
    }
}

impl FromBorrowed<str> for StrKey {
    fn from_borrowed(key: &str) -> StrKey {
        StrKey::new(key)
    }
}

#[derive(Debug, Clone)]
pub struct KeyedState<K, V> {
    values: ShardedMap<K, V>,
    /// Keys changed since the last drain, with whether each existed at that drain;
    /// `None` until change tracking is asked for.
    changed: Option<FxHashMap<K, bool>>,
}

impl<K: Hash + Eq + Clone, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        KeyedState { values: ShardedMap::default(), changed: None }
    }
}

impl<K: Hash + Eq + Clone, V> KeyedState<K, V> {
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.get(key)
    }

    /// The key's value, to change (so the key counts as changed).
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        K: FromBorrowed<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let value = self.values.get_mut(key)?;
        if let Some(changed) = &mut self.changed {
            if !changed.contains_key(key) {
                changed.insert(K::from_borrowed(key), true);
            }
        }
        Some(value)
    }

    /// The key's value, created with `init` if absent (the key is copied only then).
    pub fn get_or_insert_with<Q>(&mut self, key: &Q, init: impl FnOnce() -> V) -> &mut V
    where
        K: Borrow<Q>,
        K: FromBorrowed<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (value, existed) = self.values.get_or_insert_with(key, K::from_borrowed, init);
        if let Some(changed) = &mut self.changed {
            if !changed.contains_key(key) {
                changed.insert(K::from_borrowed(key), existed);
            }
        }
        value
    }

    /// Starts loading the key's entry from memory (see [`ShardedMap::prefetch`]).
    pub fn prefetch<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.prefetch(key)
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        K: FromBorrowed<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.values.remove(key)?;
        if let Some(changed) = &mut self.changed {
            changed.entry(K::from_borrowed(key)).or_insert(true);
        }
        Some(removed)
    }

    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let changed = &mut self.changed;
        self.values.retain(|k, v| {
            let kept = keep(k, v);
            if let (false, Some(changed)) = (kept, changed.as_mut()) {
                changed.entry(k.clone()).or_insert(true);
            }
            kept
        });
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.values.iter()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(FxHashMap::default);
    }
}

impl<K: Hash + Eq + Clone + Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> KeyedState<K, V> {
    /// Every key changed since the last drain, as entries of `namespace`.
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        let Some(changed) = &mut self.changed else { return };
        for (key, existed) in changed.drain() {
            let value = self.values.get(&key).map(encode_value);
            if existed || value.is_some() {
                out.push(StateWrite { key: encode_key(namespace, &key), value });
            }
        }
    }

    /// Puts back one entry of this state (`rest` is its key after the namespace).
    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        let key: K = decode_key(rest)?;
        match value {
            Some(bytes) => self.values.insert(key, decode_value(bytes)?),
            None => self.values.remove(&key),
        };
        Ok(())
    }
}

/// Keyed state with its keys in order (a time, say).
#[derive(Debug, Clone)]
pub struct OrderedState<K, V> {
    values: BTreeMap<K, V>,
    changed: Option<BTreeMap<K, bool>>,
}

impl<K: Ord, V> Default for OrderedState<K, V> {
    fn default() -> Self {
        OrderedState { values: BTreeMap::new(), changed: None }
    }
}

impl<K: Ord + Clone, V> OrderedState<K, V> {
    fn note(&mut self, key: &K, existed: bool) {
        if let Some(changed) = &mut self.changed {
            if !changed.contains_key(key) {
                changed.insert(key.clone(), existed);
            }
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.values.get(key)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        if self.changed.is_some() && self.values.contains_key(key) {
            self.note(key, true);
        }
        self.values.get_mut(key)
    }

    pub fn get_or_insert_with(&mut self, key: K, init: impl FnOnce() -> V) -> &mut V {
        if self.changed.is_some() {
            let existed = self.values.contains_key(&key);
            self.note(&key, existed);
        }
        self.values.entry(key).or_insert_with(init)
    }

    pub fn insert(&mut self, key: K, value: V) {
        // Untracked (the embedded runtime), one descent of the tree, not two.
        if self.changed.is_none() {
            self.values.insert(key, value);
            return;
        }
        let existed = self.values.contains_key(&key);
        self.note(&key, existed);
        self.values.insert(key, value);
    }

    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.values.first_key_value()
    }

    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let (key, value) = self.values.pop_first()?;
        self.note(&key, true);
        Some((key, value))
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let changed = &mut self.changed;
        self.values.retain(|k, v| {
            let kept = keep(k, v);
            if let (false, Some(changed)) = (kept, changed.as_mut()) {
                changed.entry(k.clone()).or_insert(true);
            }
            kept
        });
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.values.keys()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(BTreeMap::new);
    }
}

impl<K: Ord + Clone + Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> OrderedState<K, V> {
    /// Every key changed since the last drain, in key order, as entries of `namespace`.
    pub fn drain_changes(&mut self, namespace: u8, out: &mut Vec<StateWrite>) {
        let Some(changed) = &mut self.changed else { return };
        for (key, existed) in std::mem::take(changed) {
            let value = self.values.get(&key).map(encode_value);
            if existed || value.is_some() {
                out.push(StateWrite { key: encode_key(namespace, &key), value });
            }
        }
    }

    pub fn restore_entry(&mut self, rest: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        let key: K = decode_key(rest)?;
        match value {
            Some(bytes) => self.values.insert(key, decode_value(bytes)?),
            None => self.values.remove(&key),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::split_key;
    use crate::test_log::apply;

    #[test]
    fn only_changed_keys_are_written_and_a_removed_key_is_a_tombstone() {
        let mut state: KeyedState<String, u32> = KeyedState::default();
        *state.get_or_insert_with("untracked", || 0) += 1;
        state.track_changes();
        *state.get_or_insert_with("a", || 0) += 2;
        *state.get_or_insert_with("b", || 7) += 1;
        let mut writes = Vec::new();
        state.drain_changes(3, &mut writes);
        assert_eq!(writes.len(), 2, "the key changed before tracking began is not written");
        let mut log = BTreeMap::new();
        apply(&mut log, writes);
        state.remove("b");
        state.get("a");
        let mut writes = Vec::new();
        state.drain_changes(3, &mut writes);
        assert_eq!(writes, vec![StateWrite { key: encode_key(3, "b"), value: None }]);
        apply(&mut log, writes);

        let mut restored: KeyedState<String, u32> = KeyedState::default();
        for (key, value) in &log {
            let (ns, rest) = split_key(key).unwrap();
            assert_eq!(ns, 3);
            restored.restore_entry(rest, Some(value)).unwrap();
        }
        assert_eq!(restored.get("a"), Some(&2));
        assert_eq!((restored.get("b"), restored.len()), (None, 1));
    }

    #[test]
    fn inline_string_keys_read_the_entries_string_keys_wrote() {
        let mut old: KeyedState<String, u32> = KeyedState::default();
        old.track_changes();
        *old.get_or_insert_with("cust-0001234", || 0) += 5;
        let mut writes = Vec::new();
        old.drain_changes(1, &mut writes);
        let mut new: KeyedState<StrKey, u32> = KeyedState::default();
        for w in &writes {
            new.restore_entry(&w.key[1..], w.value.as_deref()).unwrap();
        }
        assert_eq!(new.get("cust-0001234"), Some(&5));
        new.track_changes();
        *new.get_or_insert_with("cust-0001234", || 0) += 1;
        let mut rewritten = Vec::new();
        new.drain_changes(1, &mut rewritten);
        assert_eq!(rewritten[0].key, writes[0].key, "the same changelog key either way");
    }

    #[test]
    fn a_key_born_and_gone_between_drains_is_never_written() {
        let mut state: OrderedState<i64, u8> = OrderedState::default();
        state.track_changes();
        state.insert(1, 1);
        state.insert(2, 2);
        state.pop_first();
        let mut writes = Vec::new();
        state.drain_changes(1, &mut writes);
        assert_eq!(writes, vec![StateWrite { key: encode_key(1, &2i64), value: Some(encode_value(&2u8)) }]);
        state.pop_first();
        let mut writes = Vec::new();
        state.drain_changes(1, &mut writes);
        assert_eq!(writes, vec![StateWrite { key: encode_key(1, &2i64), value: None }], "written before: a tombstone");
    }

    #[test]
    fn retain_counts_what_it_drops_as_changed() {
        let mut state: KeyedState<u32, u32> = KeyedState::default();
        state.track_changes();
        for k in 0..4 {
            state.get_or_insert_with(&k, || k);
        }
        state.drain_changes(1, &mut Vec::new());
        state.retain(|_, v| v % 2 == 0);
        let mut writes = Vec::new();
        state.drain_changes(1, &mut writes);
        assert_eq!(writes.len(), 2);
        assert!(writes.iter().all(|w| w.value.is_none()));
    }
}
