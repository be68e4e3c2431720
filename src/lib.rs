//! vlc_compress: compact codes for float embeddings.
//!
//! Anchors are trained by an annealed, robust k-means ([`train`]); residuals are product
//! quantized ([`quant`]); an inverted-list [`Index`] searches the codes ([`index`]); one file
//! format holds codebooks and indexes ([`format`]). Every algorithm runs through the
//! [`Backend`](backend::Backend) trait, with the CPU as the reference.
//!
//! ```no_run
//! use std::sync::Arc;
//! use vlc_compress::{Context, Compressor, Index, SearchParams, TrainParams, BackendKind};
//! # fn main() -> vlc_compress::Result<()> {
//! let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, 0)?);
//! let (d, data): (usize, Vec<f32>) = (64, vec![0.5; 64 * 10_000]);
//! let mut params = TrainParams::default();
//! params.anchor.anchors = 64;
//! let mut c = Compressor::new(ctx.clone(), params);
//! c.train(&data, d)?;
//! let mut index = c.new_index()?;
//! let ids: Vec<u64> = (0..10_000).collect();
//! index.add(&data[..], &ids)?;
//! let res = index.search(&data[..d], &SearchParams::default(), None)?;
//! # Ok(()) }
//! ```

// Kernels take their buffers as separate slices; bundling them would only hide the data flow.
#![allow(clippy::too_many_arguments)]

pub mod backend;
pub(crate) mod check;
mod compressor;
mod context;
pub mod error;
pub(crate) mod fallbacks;
pub mod ffi;
pub(crate) mod files;
pub mod format;
pub mod index;
pub(crate) mod linalg;
pub mod pages;
pub mod params;
pub mod progress;
pub mod quant;
pub mod report;
pub(crate) mod rng;
pub(crate) mod stage;
pub mod synth;
pub(crate) mod threads;
pub(crate) mod trace;
pub mod train;
pub mod vecio;

// Large buffers on pages of their own, so that memory caps bound what a host sees.
#[cfg(feature = "own-allocator")]
#[global_allocator]
static ALLOCATOR: pages::Pages = pages::Pages;

pub use backend::{Backend, BackendKind, BackendOptions, DeviceRerank};
pub use compressor::Compressor;
pub use context::Context;
pub use error::{Error, Result};
pub use index::{
    recall_at, BoundedResults, DenseRaw, FetchRaw, Filter, Index, IndexStats, Predicate,
    RangeResults, RawVectors, Refine, SearchResults,
};
pub use params::{
    AnchorParams, ErrorCode, Init, Metric, Precision, Rotation, SearchParams, TrainParams,
};
pub use progress::{NoProgress, Phase, Progress, SharedProgress};
pub use quant::estimate::Work;
pub use quant::{Codebook, TrainReport, Vectors};
pub use report::{last_run_report, Fallbacks, RunReport};

/// The crate version (from Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
