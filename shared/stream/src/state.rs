//! Keyed state: a map from key to the state of that key, serializable so a runtime
//! can save it with the rest of an operator's state and restore it after a restart.

use std::borrow::Borrow;
use std::hash::Hash;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone)]
pub struct KeyedState<K, V> {
    values: FxHashMap<K, V>,
}

impl<K: Hash + Eq + Clone, V> Default for KeyedState<K, V> {
    fn default() -> Self {
        KeyedState { values: FxHashMap::default() }
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

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.get_mut(key)
    }

    /// The key's value, created with `init` if absent (the key is copied only then).
    pub fn get_or_insert_with<Q>(&mut self, key: &Q, init: impl FnOnce() -> V) -> &mut V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if !self.values.contains_key(key) {
            self.values.insert(key.to_owned(), init());
        }
        self.values.get_mut(key).expect("inserted above")
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.values.remove(key)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl<K: Serialize + Hash + Eq, V: Serialize> Serialize for KeyedState<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.values.serialize(s)
    }
}

impl<'de, K: Deserialize<'de> + Hash + Eq, V: Deserialize<'de>> Deserialize<'de> for KeyedState<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(KeyedState { values: FxHashMap::deserialize(d)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_a_snapshot() {
        let mut state: KeyedState<String, u32> = KeyedState::default();
        *state.get_or_insert_with("a", || 0) += 2;
        *state.get_or_insert_with("b", || 7) += 1;
        state.remove("b");
        let restored: KeyedState<String, u32> =
            crate::snapshot::decode(&crate::snapshot::encode(&state)).expect("a snapshot decodes");
        assert_eq!(restored.get("a"), Some(&2));
        assert_eq!(restored.get("b"), None);
        assert_eq!(restored.len(), 1);
    }
}
