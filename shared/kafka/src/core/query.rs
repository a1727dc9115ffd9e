//! A state query of a task's live state (see `crate::queries`).

use vigil_stream::{Stage, StageAnswer};

use super::{Encode, TaskCore};
use crate::inputs::Parallelism;
use crate::queries::Reply;

impl<S: Stage, E: Encode> TaskCore<S, E> {
    /// What the task of `key`'s partition holds for it under `what`, if this core has
    /// that task.
    pub fn query(&self, what: &str, key: &str) -> Reply {
        let id = match self.parallelism {
            Parallelism::Global => self.tasks.keys().next().copied(),
            Parallelism::PerPartition => Some(self.partitioner.partition(key.as_bytes()) as i32),
        };
        let Some(task) = id.and_then(|id| self.tasks.get(&id)) else { return Reply::NotHere };
        match self.stage.query(&task.task.operator, what, key) {
            None => Reply::NotQueryable,
            Some(StageAnswer::Found(value)) => Reply::Found(value),
            Some(StageAnswer::Unknown) => Reply::Unknown,
        }
    }
}
