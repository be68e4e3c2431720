//! The one seam between algorithms and devices. Training, encoding and search see only this
//! trait; the CPU implementation is the reference every other backend is tested against.
//!
//! The trait is shaped around device-resident sessions: a training set is uploaded once into a
//! [`KmeansSession`], every iteration runs where the data lives, and only O(anchors) statistics
//! (counts, energy, spreads) come back per iteration.

mod cpu;
pub mod cuda;
pub(crate) mod filter;
pub(crate) mod host;
pub(crate) mod layout;
mod options;
pub(crate) mod session;
mod shape;
#[cfg(not(feature = "wgpu"))]
mod unavailable;
mod view;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use crate::fallbacks::Fallbacks;
pub use crate::linalg::{Poll, RowsView};
pub(crate) use cpu::search as host_scan;
pub use cpu::CpuBackend;
pub use options::{BackendOptions, Cooperative, ShaderChecks, TraceSink, WgpuOptions};
pub use session::{declines, SearchJob, Searcher, Session};
pub use shape::{KmeansShape, PqAssignShape, SearchShape, Shape};
pub use view::{Caps, CodebookView, ListsView, Probes};

use crate::error::Result;

/// Which backend a context runs on. Every build has every variant; a backend that is not
/// compiled in answers `Error::BackendUnavailable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The best available: CUDA, then WGPU, then the CPU.
    Auto,
    Cpu,
    Cuda,
    Wgpu,
}

impl std::str::FromStr for BackendKind {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendKind::Auto),
            "cpu" => Ok(BackendKind::Cpu),
            "cuda" => Ok(BackendKind::Cuda),
            "wgpu" => Ok(BackendKind::Wgpu),
            _ => Err(crate::error::Error::InvalidArgument(format!(
                "unknown backend {s:?} (auto, cpu, cuda, wgpu)"
            ))),
        }
    }
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
            BackendKind::Wgpu => "wgpu",
        }
    }
}

/// Raw vectors in CUDA device memory for [`Searcher::top_k_reranked`] and
/// [`Backend::rerank_device`]: `n` rows of the index's
/// dimension at address `at` (row i holds the vector of id i), and the results kept per query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRerank {
    pub at: u64,
    pub n: usize,
    pub k: usize,
}

/// Bytes moved between host and device, for reports (`h2d_bytes`, `d2h_bytes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Transfers {
    pub h2d_bytes: u64,
    pub d2h_bytes: u64,
}

/// What one assignment pass reports: O(anchors) values.
#[derive(Clone, Debug, PartialEq)]
pub struct AssignStats {
    /// Points per centroid.
    pub counts: Vec<u32>,
    /// Sum over points of the squared distance to the assigned centroid (bias excluded).
    pub energy: f64,
}

/// A training set resident on a device, with centroids that live there too.
pub trait KmeansSession {
    /// Number of resident points.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Replace the centroids (k x d).
    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()>;
    /// Assign every point to `argmin_c |x - c|^2 + bias[c]` (ties to the smaller index).
    fn assign(&mut self, bias: Option<&[f32]>) -> Result<AssignStats>;

    /// `assign`, asking `poll` between pieces of the work; an error from it stops the work
    /// and is returned (a caller's cancel). Device sessions do one batch and ask nothing.
    fn assign_polled(&mut self, bias: Option<&[f32]>, poll: Poll) -> Result<AssignStats> {
        let _ = poll;
        self.assign(bias)
    }
    /// While `rough`, a session that computes distances in reduced precision (CUDA's TF32)
    /// may skip its fp32 re-check: a point within rounding of a tie may go to either anchor.
    /// Training allows it while the balancing bias moves assignments by far more than that.
    /// Sessions without such a mode ignore it.
    fn allow_rough(&mut self, _rough: bool) {}
    /// Move every non-empty centroid to the trimmed mean of its points: the `trim` fraction
    /// farthest from it is dropped. Uses the last assignment. A device may return before the
    /// step is done: nothing comes back, so the next assignment follows without a round trip.
    fn update(&mut self, trim: f32) -> Result<()>;

    /// `update`, asking `poll` between pieces of the work (as `assign_polled`).
    fn update_polled(&mut self, trim: f32, poll: Poll) -> Result<()> {
        let _ = poll;
        self.update(trim)
    }
    /// The centroids (k x d) and each one's spread after the last update (mean squared
    /// distance of its kept points; 0 for empty ones): maintenance's inputs, not read every
    /// iteration.
    fn centroids_and_spread(&mut self) -> Result<(Vec<f32>, Vec<f32>)>;
    /// Download the centroids (k x d): used by maintenance, not every iteration.
    fn centroids(&mut self) -> Result<Vec<f32>>;
    /// Download the last assignment (n values): once, at the end, when the caller needs it.
    fn assignment(&mut self) -> Result<Vec<u32>>;
    /// Download the last assignment and its distances (bias excluded): `nearest`'s answer.
    fn assignment_with_distances(&mut self) -> Result<(Vec<u32>, Vec<f32>)>;
}

/// A device range search's answer (`Searcher::range`): hits per query, then their ids and scores.
pub type RangeHits = (Vec<usize>, Vec<u64>, Vec<f32>);

/// A compute device.
///
/// Device backends hold their device through each call and copy data on rayon's global pool
/// meanwhile, so they must not be called from inside that pool's tasks: a task that the
/// copying thread picks up while it waits could need the same device.
///
/// Each backend answers for its own memory: the device bytes a piece of work takes, from
/// its plain shape (`shape`), before the work starts; the host's figures are the callers'.
pub trait Backend: Send + Sync {
    fn kind(&self) -> BackendKind;
    /// Human-readable device description.
    fn describe(&self) -> String;
    /// What this device takes; callers ask here before handing it work.
    fn caps(&self) -> Caps;
    /// What it was opened with.
    fn options(&self) -> &BackendOptions;
    /// Caps the device memory this backend's buffers take, in bytes (0 = none): the sizes it
    /// chooses from free memory (GEMM tiles) then fit under the cap. Backends without device
    /// memory of their own ignore it.
    fn set_memory_cap(&self, _bytes: usize) {}
    /// Device bytes free for this backend's next buffers (under its cap), where it knows.
    fn memory_free(&self) -> Option<usize> {
        None
    }
    /// Device bytes this backend's buffers take now and the most they took since the last
    /// call with `reset` (which starts that count again from now), where the device reports
    /// them: how tests and examples measure a call's device peak. CUDA answers
    /// `cuda::pool_usage` for its device; WGPU keeps its high-water mark from the first
    /// call on; the CPU answers `None`.
    fn memory_usage(&self, _reset: bool) -> Option<(usize, usize)> {
        None
    }
    /// Values of a session's rows the host gathers at once when `threads` threads hand them
    /// to the device where they lie (0: the host's own blocks, counted by the caller).
    fn gathered_values(&self, _threads: usize) -> usize {
        0
    }
    /// Device bytes a k-means session of this shape holds at its peak, with what is free
    /// under the cap now; where not even its least form fits, that least (more than free).
    fn kmeans_device_bytes(&self, _s: KmeansShape) -> usize {
        0
    }
    /// Device bytes a product-quantizer assignment of this shape holds at its peak.
    fn pq_assign_device_bytes(&self, _s: PqAssignShape) -> usize {
        0
    }
    /// Device bytes encoding (or adding) `n` vectors of this shape takes at its peak, the
    /// codebook's copy, which stays for later calls, included.
    fn encode_device_bytes(&self, _s: &Shape, _n: usize) -> usize {
        0
    }
    /// Device bytes a search of the lists of this shape takes at its peak.
    fn search_device_bytes(&self, _s: &SearchShape) -> usize {
        0
    }
    /// A session that runs k-means steps on `x` (n x d), computing distances at `precision`
    /// where the device offers a choice.
    fn kmeans_session<'a>(
        &'a self,
        x: &'a [f32],
        d: usize,
        precision: crate::params::Precision,
    ) -> Result<Box<dyn KmeansSession + 'a>> {
        crate::check::whole_rows(x.len(), d, "values")?;
        self.kmeans_session_in_place(RowsView::plain(x, d), precision)
    }
    /// `kmeans_session` on `rows` read where they lie (a sample, or rows made unit length,
    /// with no prepared copy of them).
    fn kmeans_session_in_place<'a>(
        &'a self,
        rows: RowsView<'a>,
        precision: crate::params::Precision,
    ) -> Result<Box<dyn KmeansSession + 'a>>;
    /// For each row of `x`, the nearest row of `centroids` (squared L2) and its distance: one
    /// exact assignment pass of a session.
    fn nearest(&self, x: &[f32], d: usize, centroids: &[f32]) -> Result<(Vec<u32>, Vec<f32>)> {
        if x.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut s = self.kmeans_session(x, d, crate::params::Precision::Exact)?;
        s.set_centroids(centroids)?;
        s.assign(None)?;
        s.assignment_with_distances()
    }
    /// Product-quantizer assignment: for each row of `y` (n x nsub*dsub), the index of the
    /// nearest of the `ksub` codewords of every subspace (`codebooks`: nsub x ksub x dsub, ksub
    /// at most 256). Returns n x nsub indices, row-major.
    fn pq_assign(&self, y: &[f32], nsub: usize, dsub: usize, codebooks: &[f32]) -> Result<Vec<u8>> {
        host::pq_assign(self, y, nsub, dsub, codebooks)
    }
    /// Residual codes of `x` (n x d, already prepared for the metric) under `cb`: each row's
    /// nearest anchor and the PQ indices (n x nsub, as `pq_assign`) of its residual, padded
    /// and rotated as the codebook says.
    fn encode_residuals(&self, cb: &CodebookView, x: &[f32]) -> Result<(Vec<u32>, Vec<u8>)> {
        host::encode_in_steps(self, cb, x)
    }
    /// `encode_residuals` for `n` rows (prepared for the metric, except for cosine's unit
    /// length, which the backend applies) read from device memory at address `at`, as CUDA
    /// addresses it. The backend checks that the range is device memory it can read, and the
    /// values for NaN and infinities. Backends without `Caps::device_pointers` answer
    /// `BackendUnavailable`.
    ///
    /// # Safety
    /// Nothing writes the `n` rows at `at` while the call runs.
    unsafe fn encode_device(
        &self,
        _cb: &CodebookView,
        _at: u64,
        _n: usize,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        Err(crate::error::Error::BackendUnavailable(format!(
            "encoding from device memory needs the CUDA backend; this context runs on {}",
            self.kind().name()
        )))
    }
    /// Whether `encode_residuals` and `kmeans_session` check what they are given for NaN and
    /// infinities themselves, on its way to the device (failing with `Error::NonFinite`, as
    /// `check_finite` does on the whole input), and `encode_residuals` takes inputs of any
    /// length: callers then hand the input over unscanned (encoding: whole, for the backend
    /// to pipeline). Otherwise callers check it first, and encode in blocks.
    fn checks_input(&self) -> bool {
        false
    }
    /// The searcher of one search over these lists (`session`): a device's, with the
    /// codebook and lists made resident (uploaded where their keys changed) before it is
    /// returned, or the host scan with the reasons a device leaves `job` there (`declines`,
    /// and `DEVICE_DECLINED` where they do not fit its memory, its cap or a binding limit).
    /// Backends without a device scan answer the host, with no reasons.
    fn searcher<'a>(
        &'a self,
        _cb: &CodebookView<'a>,
        _lists: &ListsView,
        _job: SearchJob,
    ) -> Result<Session<'a>> {
        Ok(Session::Host(crate::fallbacks::Fallbacks::NONE))
    }
    /// Exact re-rank on the device of candidates the host found: for each query of `q`
    /// (prepared), its `want` candidates in `cands` (nq x want ids, missing ones `u64::MAX`)
    /// re-scored against their rows in `raw` and cut to the `raw.k` best, in
    /// `Searcher::top_k`'s order and form. Backends without `Caps::device_pointers` answer
    /// `BackendUnavailable`. `poll` as for a searcher.
    ///
    /// # Safety
    /// Nothing writes the rows at `raw.at` while the call runs.
    unsafe fn rerank_device(
        &self,
        _cb: &CodebookView,
        _q: &[f32],
        _cands: &[u64],
        _want: usize,
        _raw: DeviceRerank,
        _poll: Poll,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        Err(crate::error::Error::BackendUnavailable(format!(
            "re-ranking against device memory needs the CUDA backend; this context runs on {}",
            self.kind().name()
        )))
    }
    /// Host<->device traffic so far.
    fn transfers(&self) -> Transfers {
        Transfers::default()
    }
}

/// `BackendUnavailable` unless `b` reads device memory in place: checked first by every call
/// that takes a device pointer, even with no work.
pub(crate) fn need_device_memory(b: &dyn Backend, what: &str) -> Result<()> {
    if b.caps().device_pointers {
        return Ok(());
    }
    Err(crate::error::Error::BackendUnavailable(format!(
        "{what} needs the CUDA backend; this context runs on {}",
        b.kind().name()
    )))
}

/// A device copy of something the host owns (a codebook, an index's lists), kept while its key
/// (the codebook's fingerprint, the index's stamp) still names what the host holds.
pub(crate) struct Resident<T>(Option<(u64, T)>);

impl<T> Resident<T> {
    pub const fn new() -> Self {
        Resident(None)
    }

    /// The copy for `key`: the one held, or a new one from `upload` (the old one is freed
    /// first, so two never share the device).
    pub fn get(&mut self, key: u64, upload: impl FnOnce() -> Result<T>) -> Result<&T> {
        if self.0.as_ref().is_none_or(|(k, _)| *k != key) {
            self.0 = None;
            self.0 = Some((key, upload()?));
        }
        Ok(&self.0.as_ref().expect("the copy was just uploaded").1)
    }

    /// The copy held for `key`, if any.
    pub fn held(&self, key: u64) -> Option<&T> {
        self.0.as_ref().filter(|(k, _)| *k == key).map(|(_, t)| t)
    }

    /// As `get`, with `None` where the device has no room for the copy: the caller does the
    /// work on the host instead.
    pub fn get_or_host(
        &mut self,
        key: u64,
        upload: impl FnOnce() -> Result<T>,
    ) -> Result<Option<&T>> {
        crate::error::none_if_out_of_memory(self.get(key, upload))
    }
}

/// Opens a backend. `Auto` falls back to the CPU when no GPU backend can start.
pub fn open(kind: BackendKind, device: usize, opts: &BackendOptions) -> Result<Box<dyn Backend>> {
    let cpu = || Box::new(CpuBackend::new(opts.clone())) as Box<dyn Backend>;
    match kind {
        BackendKind::Cpu => Ok(cpu()),
        BackendKind::Cuda => open_cuda(device, opts),
        BackendKind::Wgpu => open_wgpu(device, opts, false),
        BackendKind::Auto => open_cuda(device, opts)
            .or_else(|_| open_wgpu(device, opts, true))
            .or_else(|_| Ok(cpu())),
    }
}

/// As `open_cuda`, for WGPU. For AUTO (`gpu_only`), a software adapter does not count: the
/// CPU backend is faster than a CPU emulating a GPU.
#[cfg(feature = "wgpu")]
fn open_wgpu(device: usize, opts: &BackendOptions, gpu_only: bool) -> Result<Box<dyn Backend>> {
    // The options are only read while opening.
    let opening = std::panic::AssertUnwindSafe(|| self::wgpu::open(device, opts));
    let b = std::panic::catch_unwind(opening).unwrap_or_else(|_| {
        Err(crate::error::Error::BackendUnavailable(
            "WGPU failed while starting".into(),
        ))
    })?;
    if gpu_only && b.is_cpu_adapter() {
        return Err(crate::error::Error::BackendUnavailable(
            "the only WGPU adapter is a software one".into(),
        ));
    }
    Ok(Box::new(b))
}

#[cfg(not(feature = "wgpu"))]
fn open_wgpu(device: usize, _opts: &BackendOptions, _gpu_only: bool) -> Result<Box<dyn Backend>> {
    unavailable::wgpu(device)
}

/// A driver or library that misbehaves while starting must not take the caller down: a panic
/// here becomes `BackendUnavailable`, so AUTO still falls back.
fn open_cuda(device: usize, opts: &BackendOptions) -> Result<Box<dyn Backend>> {
    // The options are only read while opening.
    let opening = std::panic::AssertUnwindSafe(|| cuda::open(device, opts));
    std::panic::catch_unwind(opening).unwrap_or_else(|_| {
        Err(crate::error::Error::BackendUnavailable(
            "CUDA failed while starting".into(),
        ))
    })
}
