//! A value per input partition, found by index: the merge's state is looked up
//! several times for every record, where a tree map's search showed in the keyed
//! path's throughput.

use super::Slot;

#[derive(Debug, Clone)]
pub(super) struct PerSlot<T> {
    partitions: usize,
    items: Vec<Option<T>>,
}

impl<T> PerSlot<T> {
    pub(super) fn new(inputs: usize, partitions: usize) -> Self {
        PerSlot { partitions, items: (0..inputs * partitions).map(|_| None).collect() }
    }

    fn at(&self, (input, p): Slot) -> usize {
        input * self.partitions + p as usize
    }

    pub(super) fn get(&self, slot: Slot) -> Option<&T> {
        self.items.get(self.at(slot))?.as_ref()
    }

    pub(super) fn get_mut(&mut self, slot: Slot) -> Option<&mut T> {
        let at = self.at(slot);
        self.items.get_mut(at)?.as_mut()
    }

    pub(super) fn get_or_insert_with(&mut self, slot: Slot, new: impl FnOnce() -> T) -> &mut T {
        let at = self.at(slot);
        self.items[at].get_or_insert_with(new)
    }

    pub(super) fn insert(&mut self, slot: Slot, value: T) {
        let at = self.at(slot);
        self.items[at] = Some(value);
    }

    pub(super) fn remove(&mut self, slot: Slot) {
        let at = self.at(slot);
        self.items[at] = None;
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.items.iter().flatten()
    }
}
