//! Training: annealed robust anchors ([`anneal`]) and, on top of them, the residual codebooks
//! (`quant`). Everything runs through the [`Backend`](crate::backend::Backend) trait.

pub mod anneal;

pub use anneal::{train_anchors, AnchorResult};

pub use crate::progress::{NoProgress, Progress};
