//! Training: annealed robust anchors ([`anneal`]) and, on top of them, the residual codebooks
//! (`quant`). Everything runs through the [`Backend`](crate::backend::Backend) trait.

pub mod anneal;

pub use anneal::{train_anchors, AnchorResult};

/// Progress reports from long steps: `(stage, done, total)`. The library draws nothing itself.
pub trait Progress: Sync {
    fn report(&self, stage: &str, done: usize, total: usize);
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn report(&self, _: &str, _: usize, _: usize) {}
}
