//! One key's window panes: a handful of slide-sized aggregates, kept as a vector
//! sorted by start (and its windows' revisions, by window start, the same way). A key holds about `size / slide` panes at a time and events come
//! mostly in order, so appending at the end and forgetting from the front beat a
//! tree map's node walks. Serialized as a map from start to aggregate, as the tree
//! map it replaces was, so changelogs written before read back the same.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Millis;

#[derive(Debug, Clone, PartialEq)]
pub struct Panes<A>(Vec<(Millis, A)>);

impl<A> Default for Panes<A> {
    fn default() -> Self {
        Panes(Vec::new())
    }
}

impl<A: Default> Panes<A> {
    /// The pane starting at `start`, created empty if there is none.
    pub fn get_or_default(&mut self, start: Millis) -> &mut A {
        let at = match self.0.last() {
            Some(&(last, _)) if last < start => self.0.len(),
            _ => self.index_of(start),
        };
        if self.0.get(at).is_none_or(|&(s, _)| s != start) {
            self.0.insert(at, (start, A::default()));
        }
        &mut self.0[at].1
    }
}

impl<A> Panes<A> {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The panes starting in `[from, to)`, in order.
    pub fn range(&self, from: Millis, to: Millis) -> impl Iterator<Item = &A> {
        self.0[self.index_of(from)..self.index_of(to)].iter().map(|(_, a)| a)
    }

    /// Start of the first pane starting at or after `from`.
    pub fn first_from(&self, from: Millis) -> Option<Millis> {
        self.0.get(self.index_of(from)).map(|&(s, _)| s)
    }

    pub fn first_start(&self) -> Option<Millis> {
        self.0.first().map(|&(s, _)| s)
    }

    pub fn last_start(&self) -> Option<Millis> {
        self.0.last().map(|&(s, _)| s)
    }

    /// Forgets the first panes while `gone` holds for their start (it must hold for
    /// a prefix of them, as "closed for good" does).
    pub fn forget_while(&mut self, gone: impl Fn(Millis) -> bool) {
        let n = self.0.partition_point(|&(s, _)| gone(s));
        self.0.drain(..n);
    }

    fn index_of(&self, start: Millis) -> usize {
        self.0.partition_point(|&(s, _)| s < start)
    }
}

impl<A: Serialize> Serialize for Panes<A> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (start, pane) in &self.0 {
            map.serialize_entry(start, pane)?;
        }
        map.end()
    }
}

impl<'de, A: Deserialize<'de>> Deserialize<'de> for Panes<A> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PanesVisitor<A>(PhantomData<A>);

        impl<'de, A: Deserialize<'de>> Visitor<'de> for PanesVisitor<A> {
            type Value = Panes<A>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map from pane start to aggregate")
            }

            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Panes<A>, M::Error> {
                let mut panes = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<Millis, A>()? {
                    panes.push(entry);
                }
                // Written in order; sorted anyway, as a map's reader owes nothing to it.
                panes.sort_by_key(|&(start, _)| start);
                Ok(Panes(panes))
            }
        }

        deserializer.deserialize_map(PanesVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::changelog::{decode_value, encode_value};

    #[test]
    fn panes_stay_sorted_whatever_the_order_they_come_in() {
        let mut panes = Panes::<u32>::default();
        for start in [30, 10, 20, 10, 40] {
            *panes.get_or_default(start) += 1;
        }
        assert_eq!(panes.0, vec![(10, 2), (20, 1), (30, 1), (40, 1)]);
        assert_eq!(panes.range(15, 40).copied().collect::<Vec<_>>(), vec![1, 1]);
        assert_eq!(panes.first_from(21), Some(30));
        assert_eq!(panes.first_from(41), None);
        panes.forget_while(|s| s < 30);
        assert_eq!(panes.first_start(), Some(30));
    }

    #[test]
    fn panes_read_back_what_a_tree_map_of_them_wrote() {
        let map: BTreeMap<Millis, u32> = [(-5, 1), (0, 2), (5, 3)].into();
        let panes: Panes<u32> = decode_value(&encode_value(&map)).unwrap();
        assert_eq!(panes.0, vec![(-5, 1), (0, 2), (5, 3)]);
        let back: BTreeMap<Millis, u32> = decode_value(&encode_value(&panes)).unwrap();
        assert_eq!(back, map);
    }
}
