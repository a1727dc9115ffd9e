//! Keyed state: a map whose changes can be drained, so a runtime can write them to a
//! compacted changelog topic, and restored from such a changelog after a restart.

use std::borrow::Borrow;
use std::hash::Hash;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone)]
pub struct KeyedState<K, V> {
    values: FxHashMap<K, V>,
    /// Keys changed since the last drain; `None` when no runtime asked for a changelog,
    /// so the embedded runtime pays nothing for it.
    changed: Option<FxHashSet<K>>,
}

impl<K: Hash + Eq + Clone, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        KeyedState { values: FxHashMap::default(), changed: None }
    }
}

impl<K: Hash + Eq + Clone, V> KeyedState<K, V> {
    /// State whose changes are tracked for a changelog.
    pub fn with_changelog() -> Self {
        KeyedState { values: FxHashMap::default(), changed: Some(FxHashSet::default()) }
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.get(key)
    }

    /// Mutable access; the key counts as changed.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let value = self.values.get_mut(key)?;
        if let Some(changed) = &mut self.changed {
            changed.insert(key.to_owned());
        }
        Some(value)
    }

    /// The key's value, created with `init` if absent; the key counts as changed.
    pub fn get_or_insert_with<Q>(&mut self, key: &Q, init: impl FnOnce() -> V) -> &mut V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(changed) = &mut self.changed {
            changed.insert(key.to_owned());
        }
        if !self.values.contains_key(key) {
            self.values.insert(key.to_owned(), init());
        }
        self.values.get_mut(key).expect("inserted above")
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let removed = self.values.remove(key);
        if let (Some(changed), Some(_)) = (&mut self.changed, &removed) {
            changed.insert(key.to_owned());
        }
        removed
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.values.iter()
    }

    /// The changes since the last drain, as changelog records: the current value, or
    /// `None` (a tombstone) for a removed key.
    pub fn drain_changes(&mut self) -> Vec<(K, Option<&V>)> {
        let Some(changed) = &mut self.changed else { return Vec::new() };
        let values = &self.values;
        changed
            .drain()
            .map(|k| {
                let v = values.get(&k);
                (k, v)
            })
            .collect()
    }

    /// Applies one changelog record while restoring; restoring is not a change.
    pub fn restore(&mut self, key: K, value: Option<V>) {
        match value {
            Some(v) => {
                self.values.insert(key, v);
            }
            None => {
                self.values.remove(&key);
            }
        }
    }
}

/// The values alone: a restored state starts with no pending changes.
impl<K: Serialize + Hash + Eq, V: Serialize> Serialize for KeyedState<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.values.serialize(s)
    }
}

impl<'de, K: Deserialize<'de> + Hash + Eq, V: Deserialize<'de>> Deserialize<'de> for KeyedState<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(KeyedState { values: FxHashMap::deserialize(d)?, changed: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_drain_as_values_and_tombstones_and_restore_elsewhere() {
        let mut state: KeyedState<String, u32> = KeyedState::with_changelog();
        *state.get_or_insert_with("a", || 0) += 2;
        *state.get_or_insert_with("b", || 7) += 1;
        state.remove("b");
        let mut changes: Vec<(String, Option<u32>)> =
            state.drain_changes().into_iter().map(|(k, v)| (k, v.copied())).collect();
        changes.sort();
        assert_eq!(changes, vec![("a".to_string(), Some(2)), ("b".to_string(), None)]);
        assert!(state.drain_changes().is_empty(), "a drain empties the change set");

        let mut restored: KeyedState<String, u32> = KeyedState::default();
        restored.restore("b".into(), Some(9));
        for (k, v) in changes {
            restored.restore(k, v);
        }
        assert_eq!(restored.get("a"), Some(&2));
        assert_eq!(restored.get("b"), None);
    }

    #[test]
    fn state_without_a_changelog_records_nothing() {
        let mut state: KeyedState<String, u32> = KeyedState::default();
        state.get_or_insert_with("a", || 1);
        assert!(state.drain_changes().is_empty());
        assert_eq!(state.len(), 1);
    }
}
