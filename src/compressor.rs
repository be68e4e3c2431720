//! The compressor: training parameters and, once trained, the codebook; encodes and decodes
//! without an index, and makes indexes on its codebook.

use crate::backend;
use crate::context::watching;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::index::memory as index_memory;
use crate::index::Index;
use crate::params::TrainParams;
use crate::progress::{Control, Listener, Progress, SharedProgress, Watch};
use crate::quant::estimate::{self, Shape, Work};
use crate::quant::Codebook;
use crate::quant::TrainReport;
use crate::quant::Vectors;
use std::sync::Arc;

/// Training parameters and, once trained, the Codebook: encodes and decodes without an index.
#[derive(Debug)]
pub struct Compressor {
    ctx: Arc<Context>,
    params: TrainParams,
    codebook: Option<Arc<Codebook>>,
    report: Option<TrainReport>,
    progress: Listener,
}

impl Compressor {
    pub fn new(ctx: Arc<Context>, params: TrainParams) -> Compressor {
        Compressor {
            ctx,
            params,
            codebook: None,
            report: None,
            progress: Listener::default(),
        }
    }

    /// A compressor around an existing codebook (loaded from a file, say).
    pub fn with_codebook(ctx: Arc<Context>, cb: Arc<Codebook>) -> Compressor {
        // The parameters that shaped the codebook read back as they were; the rest (how it
        // was trained) are not stored and keep their defaults.
        let mut params = TrainParams {
            metric: cb.metric(),
            bits: cb.quantizer().bits,
            bytes_per_vector: cb.residual_code_size(),
            rotation: cb.rotation(),
            error_code: if cb.quantizer().levels.is_empty() {
                crate::params::ErrorCode::Off
            } else {
                crate::params::ErrorCode::On
            },
            ..TrainParams::default()
        };
        params.anchor.anchors = cb.anchors();
        Compressor {
            ctx,
            params,
            codebook: Some(cb),
            report: None,
            progress: Listener::default(),
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

    /// The working memory (host bytes, device bytes) training `n` x `d` vectors with these
    /// parameters on this context takes at its peak, the input excluded: what the context's
    /// memory caps are checked against (docs/memory.md gives both against measured peaks).
    pub fn estimate_training_memory(&self, n: usize, d: usize) -> Result<(usize, usize)> {
        self.estimate_memory(Work::Train, n, d)
    }

    /// The memory (host bytes, device bytes) `work` takes at its peak with these parameters
    /// on this context, for `n` vectors of `d` dimensions:
    /// - `Train`: training on `n` vectors (`estimate_training_memory`);
    /// - `Build`: adding `n` vectors to an empty index in one call (f32 input, no
    ///   refinement rows; `Index::estimate_add_memory` counts those);
    /// - `Search`: the first search of an index of `n` vectors: the search tables and
    ///   fast-scan blocks it builds, and one block of queries per thread. A call's results
    ///   add 12 bytes per result (k per query), and its queries d x 4 bytes each under cosine
    ///   (`Index::estimate_search_memory` counts both). On the device: the lists uploaded and
    ///   a batch of 4,096 queries at the default k and nprobe.
    ///
    /// The shape is the trained codebook's where there is one (`Build` and `Search`), else the
    /// parameters'. Device figures are 0 on the CPU; on CUDA and WGPU they model the
    /// backend's buffers (WGPU's search takes CUDA's figure). Sizes past what any machine
    /// holds are an error, never a figure that wrapped: `OutOfMemory` past
    /// `estimate::MOST_VALUES` values, `InvalidArgument` past `estimate::MOST_DIMS`
    /// dimensions.
    pub fn estimate_memory(&self, work: Work, n: usize, d: usize) -> Result<(usize, usize)> {
        // What training would refuse is refused here too.
        self.params.validate()?;
        estimate::rows_within_reach(n, d, "estimating memory")?;
        let threads = self.ctx.threads();
        let shape = match (&self.codebook, work) {
            (Some(cb), Work::Build | Work::Search) if cb.dim() == d => cb.shape(),
            (_, Work::Train) => Shape::of_params(&self.params, n, d),
            _ => Shape::of_params(&self.params, usize::MAX, d),
        };
        let cosine = shape.metric == crate::params::Metric::Cosine;
        match work {
            Work::Train => {
                let host = self.training_fit(n, d).host_bytes;
                let device =
                    estimate::training_device_bytes(self.ctx.backend(), &self.params, n, d);
                Ok((host, device))
            }
            Work::Build => Ok((
                index_memory::add_bytes(&shape, n, 0, threads, cosine),
                self.ctx.backend().encode_device_bytes(&shape, n),
            )),
            Work::Search => Ok(index_memory::first_search_bytes(
                self.ctx.backend(),
                &shape,
                n,
                threads,
            )),
        }
    }

    /// How training `n` x `d` vectors fits under the context's host cap.
    fn training_fit(&self, n: usize, d: usize) -> estimate::TrainingFit {
        let (b, cap, threads) = (
            self.ctx.backend(),
            self.ctx.memory_cap(),
            self.ctx.threads(),
        );
        estimate::training_fit(b, &self.params, n, d, threads, cap)
    }

    /// `OutOfMemory` where encoding `n` vectors (`converted` from f16) with `cb` needs more
    /// than the context's caps: its working memory and the records it returns.
    fn fit_encode(&self, cb: &Codebook, n: usize, converted: bool) -> Result<()> {
        let s = cb.shape();
        let converted = converted || s.metric == crate::params::Metric::Cosine;
        let records = n.saturating_mul(cb.codec_size());
        let host = estimate::encode_bytes(&s, n, self.ctx.threads(), converted, records);
        let device = self.ctx.backend().encode_device_bytes(&s, n);
        self.ctx
            .check_caps((host, device), || format!("encoding {n} vectors"))
    }

    /// Reports of this compressor's long calls (train, encode) go to `progress`, which may
    /// cancel them; `None` leaves them to the context's (`Context::set_progress`).
    pub fn set_progress(&mut self, progress: Option<SharedProgress>) {
        self.progress = Listener(progress);
    }

    /// Trains a codebook on `x` (n x d). On error the previous codebook, if any, is kept.
    /// Reports go to the compressor's progress callback, else the context's; a cancel
    /// (`Error::Cancelled`) keeps the codebook there was.
    pub fn train(&mut self, x: &[f32], d: usize) -> Result<&TrainReport> {
        let p = self.progress.or_context(&self.ctx);
        let ctx = self.ctx.clone();
        watching(&ctx, &Control::default(), p.as_ref(), |w| {
            self.train_watched(x, d, w)
        })
    }

    /// As `train`, reporting to `progress` for this call.
    pub fn train_with_progress(
        &mut self,
        x: &[f32],
        d: usize,
        progress: &dyn Progress,
    ) -> Result<&TrainReport> {
        let ctx = self.ctx.clone();
        watching(&ctx, &Control::progress(progress), None, |w| {
            self.train_watched(x, d, w)
        })
    }

    fn train_watched(&mut self, x: &[f32], d: usize, watch: &Watch) -> Result<&TrainReport> {
        let (mut at_once, mut held) = (usize::MAX, true);
        if let Some(n) = x.len().checked_div(d) {
            // Refused before anything is allocated. On a device, training streams its points
            // where they do not fit; on the host, fewer sub-quantizers train at once, and
            // then the codebooks' residuals are rebuilt where read rather than held.
            let (host, device) = self.estimate_training_memory(n, d)?;
            self.ctx
                .check_caps((host, device), || format!("training {n} x {d} vectors"))?;
            let fit = self.training_fit(n, d);
            (at_once, held) = (fit.at_once, fit.held);
        }
        let params = self.params.clone();
        let (cb, report) = self
            .ctx
            .run(|b| Codebook::train_watched(b, x, d, &params, watch, at_once, held))?;
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
        self.fit_encode(cb, x.len() / cb.dim().max(1), matches!(x, Vectors::F16(_)))?;
        let p = self.progress.or_context(&self.ctx);
        watching(&self.ctx, &Control::default(), p.as_ref(), |w| {
            self.ctx.run(|b| cb.encode_watched(b, x, w))
        })
    }

    /// As `encode`, reporting rows done to `progress` for this call.
    pub fn encode_with_progress(&self, x: Vectors<'_>, progress: &dyn Progress) -> Result<Vec<u8>> {
        let cb = self.codebook()?;
        self.fit_encode(cb, x.len() / cb.dim().max(1), matches!(x, Vectors::F16(_)))?;
        watching(&self.ctx, &Control::progress(progress), None, |w| {
            self.ctx.run(|b| cb.encode_watched(b, x, w))
        })
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
        self.fit_encode(cb, n, false)?;
        let p = self.progress.or_context(&self.ctx);
        // SAFETY: as the caller vouches.
        watching(&self.ctx, &Control::default(), p.as_ref(), |w| {
            self.ctx
                .run(|b| unsafe { cb.encode_device_watched(b, at, n, w) })
        })
    }

    /// Codec mode: approximate vectors from `encode`'s bytes.
    pub fn decode(&self, codes: &[u8]) -> Result<Vec<f32>> {
        let cb = self.codebook()?;
        let n = codes.len() / cb.codec_size().max(1);
        let need = estimate::decode_bytes(&cb.shape(), n, n * (4 + cb.residual_code_size()));
        self.ctx
            .check_cap(need, || format!("decoding {n} vectors"))?;
        self.ctx.run(|_| cb.decode(codes))
    }

    /// An empty index on this compressor's codebook.
    pub fn new_index(&self) -> Result<Index> {
        Index::new(self.ctx.clone(), self.codebook()?.clone())
    }

    /// As `new_index`, keeping refinement vectors of kind `refine` (`Index::with_refine`).
    pub fn new_index_with_refine(&self, refine: crate::params::Refine) -> Result<Index> {
        Index::with_refine(self.ctx.clone(), self.codebook()?.clone(), refine)
    }
}
