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
//! ctx.run(|b| index.add(b, data[..].into(), &ids))?;
//! let res = ctx.run(|_| index.search(&data[..d], &SearchParams::default(), None))?;
//! # Ok(()) }
//! ```

// Kernels take their buffers as separate slices; bundling them would only hide the data flow.
#![allow(clippy::too_many_arguments)]

pub mod backend;
pub mod error;
pub mod ffi;
pub(crate) mod files;
pub mod format;
pub mod index;
pub(crate) mod linalg;
pub mod params;
pub mod quant;
pub(crate) mod rng;
pub(crate) mod stage;
pub mod synth;
pub(crate) mod trace;
pub mod train;
pub mod vecio;

pub use backend::{Backend, BackendKind, BackendOptions, DeviceRerank};
pub use error::{Error, Result};
pub use index::{recall_at, DenseRaw, Index, IndexStats, RawVectors, SearchResults};
pub use params::{AnchorParams, Init, Metric, Precision, Rotation, SearchParams, TrainParams};
pub use quant::{Codebook, TrainReport, Vectors};
pub use train::{NoProgress, Progress};

use std::sync::Arc;

/// The crate version (from Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A backend, its device and a thread pool: shared by everything made from it. All methods take
/// `&self`; the pool and backend synchronize internally.
pub struct Context {
    backend: Box<dyn Backend>,
    pool: rayon::ThreadPool,
    memory_cap: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("backend", &self.backend.describe())
            .finish()
    }
}

impl Context {
    /// Opens `kind` on `device` with `threads` CPU threads (0 = one per core). `Auto` falls back
    /// to the CPU when no GPU backend can start.
    pub fn new(kind: BackendKind, device: usize, threads: usize) -> Result<Context> {
        Context::with_options(kind, device, threads, &BackendOptions::default())
    }

    /// As `new`, with the backend opened with `opts`.
    pub fn with_options(
        kind: BackendKind,
        device: usize,
        threads: usize,
        opts: &BackendOptions,
    ) -> Result<Context> {
        let backend = backend::open(kind, device, opts)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("vlcc-{i}"))
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start {threads} threads: {e}")))?;
        Ok(Context {
            backend,
            pool,
            memory_cap: 0.into(),
        })
    }

    /// Runs `f` on this context's threads with its backend.
    pub fn run<R: Send>(&self, f: impl FnOnce(&dyn Backend) -> R + Send) -> R {
        self.pool.install(|| f(&*self.backend))
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Caps the working memory of one training call, in bytes (0 = no cap).
    pub fn set_memory_cap(&self, bytes: usize) {
        self.memory_cap
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn memory_cap(&self) -> usize {
        self.memory_cap.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Training parameters and, once trained, the Codebook: encodes and decodes without an index.
#[derive(Debug)]
pub struct Compressor {
    ctx: Arc<Context>,
    params: TrainParams,
    codebook: Option<Arc<Codebook>>,
    report: Option<TrainReport>,
}

impl Compressor {
    pub fn new(ctx: Arc<Context>, params: TrainParams) -> Compressor {
        Compressor {
            ctx,
            params,
            codebook: None,
            report: None,
        }
    }

    /// A compressor around an existing codebook (loaded from a file, say).
    pub fn with_codebook(ctx: Arc<Context>, cb: Arc<Codebook>) -> Compressor {
        // The parameters that shaped the codebook read back as they were; the rest (how it
        // was trained) are not stored and keep their defaults.
        let mut params = TrainParams {
            metric: cb.metric(),
            bits: cb.quantizer().bits,
            bytes_per_vector: cb.code_size(),
            rotation: cb.rotation(),
            ..TrainParams::default()
        };
        params.anchor.anchors = cb.anchors();
        Compressor {
            ctx,
            params,
            codebook: Some(cb),
            report: None,
        }
    }

    pub fn params(&self) -> &TrainParams {
        &self.params
    }

    /// Parameters can change until the next `train`.
    pub fn params_mut(&mut self) -> &mut TrainParams {
        &mut self.params
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Trains a codebook on `x` (n x d). On error the previous codebook, if any, is kept.
    pub fn train(&mut self, x: &[f32], d: usize) -> Result<&TrainReport> {
        self.train_with_progress(x, d, &NoProgress)
    }

    pub fn train_with_progress(
        &mut self,
        x: &[f32],
        d: usize,
        progress: &dyn Progress,
    ) -> Result<&TrainReport> {
        let cap = self.ctx.memory_cap();
        if cap > 0 && d > 0 {
            // Points, their norms and assignment, and one GEMM block per thread.
            let n = x.len() / d;
            let need = n * 12
                + self.params.anchor.anchors * d * 8
                + self.ctx.threads() * linalg::BLOCK * self.params.anchor.anchors * 4;
            if need > cap {
                return Err(Error::OutOfMemory(format!(
                    "training needs about {need} bytes, the cap is {cap}"
                )));
            }
        }
        let params = self.params.clone();
        let (cb, report) = self
            .ctx
            .run(|b| Codebook::train(b, x, d, &params, progress))?;
        self.codebook = Some(Arc::new(cb));
        Ok(self.report.insert(report))
    }

    pub fn codebook(&self) -> Result<&Arc<Codebook>> {
        self.codebook
            .as_ref()
            .ok_or_else(|| Error::InvalidState("the compressor is not trained".into()))
    }

    pub fn report(&self) -> Option<&TrainReport> {
        self.report.as_ref()
    }

    /// Codec mode: `codec_size()` bytes per vector.
    pub fn encode(&self, x: Vectors<'_>) -> Result<Vec<u8>> {
        let cb = self.codebook()?;
        self.ctx.run(|b| cb.encode(b, x))
    }

    /// As `encode`, for `n` vectors (n x d f32) in CUDA device memory at address `at` (a
    /// `CUdeviceptr`, or a pointer from `cudaMalloc`, `cudaMallocManaged` or a framework's
    /// tensor on this context's device), read in place: the bytes do not cross to the host.
    /// The range is checked first (device or managed memory of this context's device: else
    /// `InvalidArgument`), then the values (`NonFinite`, naming the position, as `encode`).
    /// Contexts on other backends answer `BackendUnavailable`.
    ///
    /// # Safety
    /// Nothing writes the `n` vectors at `at` while the call runs.
    pub unsafe fn encode_device(&self, at: u64, n: usize) -> Result<Vec<u8>> {
        backend::need_device_memory(self.ctx.backend(), "encoding from device memory")?;
        let cb = self.codebook()?;
        // SAFETY: as the caller vouches.
        self.ctx.run(|b| unsafe { cb.encode_device(b, at, n) })
    }

    /// Codec mode: approximate vectors from `encode`'s bytes.
    pub fn decode(&self, codes: &[u8]) -> Result<Vec<f32>> {
        let cb = self.codebook()?;
        self.ctx.run(|_| cb.decode(codes))
    }

    /// An empty index on this compressor's codebook.
    pub fn new_index(&self) -> Result<Index> {
        Index::new(self.codebook()?.clone())
    }
}
