//! The CUDA backend: cudarc with the driver, NVRTC and cuBLAS loaded at run time, so one
//! binary runs with or without a GPU. Kernels are `kernels/cuda/*.cu`, compiled once per context.
//!
//! A k-means session keeps points, centroids, assignments and distances on the device. Per
//! iteration only O(k) values cross: the bias and group offsets up, counts, energy and
//! spreads down. Encoding runs anchor assignment, residual, rotation and PQ in one device
//! pass per block; search keeps the last searched index's lists on the device.

use super::{AssignStats, Backend, BackendKind, DeviceRerank, KmeansSession, Resident, Transfers};
use crate::error::{Error, Result};
use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr,
    DevicePtrMut, DeviceRepr, DriverError, LaunchConfig, PinnedHostSlice, PushKernelArg,
    ValidAsZeroBits,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Every kernel source, by file name: compiled together at context creation and by the tests.
pub const KERNELS: &[(&str, &str)] = &[
    ("kmeans.cu", include_str!("../../kernels/cuda/kmeans.cu")),
    ("encode.cu", include_str!("../../kernels/cuda/encode.cu")),
    ("search.cu", include_str!("../../kernels/cuda/search.cu")),
];

/// Most candidates per query the device scan keeps (`MAX_WANT` in search.cu).
const MAX_WANT: usize = 128;

/// Queries per device search batch: bounds the coarse scores and candidate buffers.
const QUERY_BATCH: usize = 4096;

/// Largest sub-vector the PQ kernel keeps in registers; wider ones go through `nearest`.
const MAX_DSUB: usize = 32;

/// PTX target: Ampere and newer JIT it; fixed so that CI compiles exactly what runs.
const ARCH: &str = "compute_80";

/// Rows of the dots matrix per GEMM: about 16 MB, so the argmin reads it from L2 (on an H100,
/// 16 MB chunks train 1M x 128-d, 1024 anchors, 10% faster than 64 MB ones).
const DOTS_BYTES: usize = 16 << 20;

/// Rows of the dots matrix per tensor-core GEMM (TF32 or split): up to 1 GB, an eighth of the
/// free memory at most. Those GEMMs need tall blocks to run near their rate: on an H100, 1M x
/// 384-d with 4096 anchors trains in 0.49-0.51 s with 1 GB blocks, 0.54 s with 256 MB, 0.85 s
/// with 16 MB.
const TC_DOTS_BYTES: usize = 1 << 30;

/// Compiles one kernel file to PTX through NVRTC.
pub fn compile(name: &str, src: &str) -> Result<cudarc::nvrtc::Ptx> {
    nvrtc_present()?;
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(ARCH),
        name: Some(name.into()),
        // No a*b+c contraction: the kernels round like the CPU reference does.
        fmad: Some(false),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts)
        .map_err(|e| Error::Device(format!("NVRTC could not compile {name}: {e}")))
}

fn nvrtc_present() -> Result<()> {
    // SAFETY: only probes whether the shared library can be opened.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::BackendUnavailable(
            "the NVRTC library (libnvrtc) was not found".into(),
        ))
    }
}

/// A launch's result as ours (the optional timing events are not used).
fn ran<T>(r: std::result::Result<T, DriverError>, what: &str) -> Result<()> {
    r.map(|_| ()).map_err(|e| dev_err(what, e))
}

fn dev_err(what: &str, e: DriverError) -> Error {
    if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        Error::OutOfMemory(format!("CUDA: {what}: {e}"))
    } else {
        Error::Device(format!("CUDA: {what}: {e}"))
    }
}

struct Kernels {
    row_norms: CudaFunction,
    offsets: CudaFunction,
    argmin_rows: CudaFunction,
    split_f16: CudaFunction,
    count_energy: CudaFunction,
    scatter: CudaFunction,
    update_means: CudaFunction,
    /// PQ assignment for sub-vectors of up to 8, 16 and 32 dimensions (widths without a
    /// kernel of their own in `pq_exact`).
    pq_assign: [CudaFunction; 3],
    /// One per width of `PQ_EXACT`.
    pq_exact: Vec<CudaFunction>,
    residuals: CudaFunction,
    first_non_finite: CudaFunction,
    unit_rows: CudaFunction,
    coarse_probe: CudaFunction,
    query_tables: CudaFunction,
    scan_lists: CudaFunction,
    merge_candidates: CudaFunction,
    /// Exact re-rank: any rows, and rows of whole float4s.
    rerank_rows: [CudaFunction; 2],
}

/// What one context owns on the device. One lock: cuBLAS handles and launches are not
/// meant to be shared across threads without it.
struct Device {
    stream: Arc<CudaStream>,
    /// Uploads that overlap the kernels of `stream` (encoding).
    copy: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
    /// Page-locked buffers for large uploads, made on first use.
    staging: Option<Staging>,
}

/// Floats per staging buffer (32 MB).
const STAGE: usize = 8 << 20;
/// Blocks in flight in a staged upload or an encoding: with two, one slow fill or kernel
/// stalled the other side (notes/perf-cuda.md, encoding version 11).
const BUFS: usize = 3;

/// `BUFS` page-locked buffers: the host fills one while others are copied to the device.
/// Pageable uploads run at about a third of the bus speed.
struct Staging {
    bufs: [PinnedHostSlice<f32>; BUFS],
    /// The copies out of `bufs`: each must end before the host refills its buffer.
    sent: [Option<CudaEvent>; BUFS],
    /// The copies into `back` (encoding), with the kernels before them.
    done: [Option<CudaEvent>; BUFS],
    /// Page-locked buffers for what comes back per block (encoding), grown on demand: copies
    /// into pageable memory fault its pages in one by one, at a fraction of the bus speed.
    back: Option<[PinnedHostSlice<u8>; BUFS]>,
}

/// `BUFS` page-locked buffers of `len` values. `flags`: write-combined for memory the host only
/// writes (the device reads it without snooping the host's caches); 0 (cached) for memory
/// the host reads, which write-combined memory would serve uncached.
fn pinned_bufs<T: DeviceRepr>(
    ctx: &Arc<CudaContext>,
    len: usize,
    flags: u32,
) -> Result<[PinnedHostSlice<T>; BUFS]> {
    per_buf(|| {
        // SAFETY: page-locked host memory, written (by the host or a copy) before every read.
        unsafe { ctx.alloc_pinned_with_flags(len, flags) }
            .map_err(|e| dev_err("allocate page-locked memory", e))
    })
}

/// One `make()` per buffer in flight.
fn per_buf<T>(mut make: impl FnMut() -> Result<T>) -> Result<[T; BUFS]> {
    let all = (0..BUFS).map(|_| make()).collect::<Result<Vec<_>>>()?;
    Ok(all
        .try_into()
        .unwrap_or_else(|_| unreachable!("BUFS values")))
}

impl Device {
    /// Makes the context current on this thread (`CudaBackend::bind` says when that matters).
    fn bind(&self) -> Result<()> {
        let ctx = self.stream.context();
        ctx.bind_to_thread().map_err(|e| dev_err("bind context", e))
    }

    /// The staging buffers, made on first use; `None` where page-locked memory cannot be had.
    fn staging(&mut self) -> Option<&mut Staging> {
        if self.staging.is_none() {
            self.staging = Staging::new(self.stream.context());
        }
        self.staging.as_mut()
    }
}

impl Staging {
    /// `None` where page-locked memory cannot be had.
    fn new(ctx: &Arc<CudaContext>) -> Option<Staging> {
        Some(Staging {
            bufs: pinned_bufs(
                ctx,
                STAGE,
                cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            )
            .ok()?,
            sent: Default::default(),
            done: Default::default(),
            back: None,
        })
    }

    /// `src` copied into buffer `b` once the buffer's last copy out has ended, every value
    /// checked on the way (the caller's input needs no pass of its own): the filled part, or
    /// `None` where a value is NaN or infinite.
    fn fill(&mut self, b: usize, src: &[f32]) -> Result<Option<&[f32]>> {
        Staging::fill_buf(&mut self.sent[b], &mut self.bufs[b], src)
    }

    /// `fill` on one buffer and the event of its last copy out.
    fn fill_buf<'a>(
        sent: &mut Option<CudaEvent>,
        buf: &'a mut PinnedHostSlice<f32>,
        src: &[f32],
    ) -> Result<Option<&'a [f32]>> {
        if let Some(e) = sent.take() {
            e.synchronize().map_err(|e| dev_err("upload", e))?;
        }
        let host = buf.as_mut_slice().map_err(|e| dev_err("upload", e))?;
        let host = &mut host[..src.len()];
        Ok(crate::stage::stage(host, src).then_some(&*host))
    }

    /// `take_back` of return buffer `b`.
    fn take_back(
        &mut self,
        b: usize,
        span: (usize, usize),
        ids: &mut [u32],
        idx: &mut [u8],
    ) -> Result<()> {
        let back = &self.back.as_ref().expect("made before the blocks")[b];
        take_back(&mut self.done[b], back, span, ids, idx)
    }

    /// The return buffers, at least `len` bytes each. Callers wait on `done` first.
    fn back(
        &mut self,
        ctx: &Arc<CudaContext>,
        len: usize,
    ) -> Result<&mut [PinnedHostSlice<u8>; BUFS]> {
        if self.back.as_ref().is_none_or(|b| b[0].len() < len) {
            self.back = None;
            self.back = Some(pinned_bufs(ctx, len, 0)?);
        }
        Ok(self.back.as_mut().expect("the buffers were just made"))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Copies still reading the buffers must end before the memory is released.
        for e in self.sent.iter().chain(&self.done).flatten() {
            let _ = e.synchronize();
        }
    }
}

pub struct CudaBackend {
    dev: Mutex<Device>,
    /// The lists of the index searched last, resident until another index (or a changed
    /// one) is searched. Locked before `dev` when both are held.
    lists: Mutex<Resident<DeviceLists>>,
    /// The codebook used last (encoding or search), resident until another one is used.
    /// Locked after `lists` and before `dev`.
    codebook: Mutex<Resident<DeviceCodebook>>,
    name: String,
    sms: u32,
    h2d: AtomicU64,
    d2h: AtomicU64,
}

/// Opens device `ordinal`: checks the libraries, creates the context, compiles the kernels.
pub fn open(ordinal: usize) -> Result<Box<dyn Backend>> {
    // SAFETY: probes for the shared libraries without calling into them; cudarc panics on a
    // missing library otherwise.
    let (driver, blas) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !driver {
        return Err(Error::BackendUnavailable(
            "no CUDA driver (libcuda) on this machine".into(),
        ));
    }
    if !blas {
        return Err(Error::BackendUnavailable(
            "the cuBLAS library (libcublas) was not found".into(),
        ));
    }
    nvrtc_present()?;
    let count =
        CudaContext::device_count().map_err(|e| Error::BackendUnavailable(format!("CUDA: {e}")))?;
    if ordinal >= count.max(0) as usize {
        return Err(Error::BackendUnavailable(format!(
            "CUDA device {ordinal} requested, {count} present"
        )));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| dev_err("create context", e))?;
    // SAFETY: this context's work all goes through one stream, in order, so cudarc's
    // per-buffer events (several driver calls per launch) add nothing but overhead.
    unsafe { ctx.disable_event_tracking() };
    let name = ctx.name().unwrap_or_else(|_| "unknown".into());
    let sms = ctx
        .attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .map_err(|e| dev_err("query device", e))? as u32;
    let stream = ctx.default_stream();
    let copy = ctx.new_stream().map_err(|e| dev_err("create stream", e))?;
    keep_freed_memory(&ctx)?;
    let blas = CudaBlas::new(stream.clone())
        .map_err(|e| Error::Device(format!("cuBLAS: create handle: {e}")))?;
    let mut modules = Vec::new();
    for (name, src) in KERNELS {
        let m = ctx
            .load_module(compile(name, src)?)
            .map_err(|e| dev_err(&format!("load {name}"), e))?;
        modules.push(m);
    }
    let f = |i: usize, n: &str| {
        modules[i]
            .load_function(n)
            .map_err(|e| dev_err(&format!("load kernel {n}"), e))
    };
    let k = Kernels {
        row_norms: f(0, "row_norms")?,
        offsets: f(0, "offsets")?,
        argmin_rows: f(0, "argmin_rows")?,
        split_f16: f(0, "split_f16")?,
        count_energy: f(0, "count_energy")?,
        scatter: f(0, "scatter")?,
        update_means: f(0, "update_means")?,
        pq_assign: [
            f(1, "pq_assign_8")?,
            f(1, "pq_assign_16")?,
            f(1, "pq_assign_32")?,
        ],
        pq_exact: PQ_EXACT
            .iter()
            .map(|&(w, _)| f(1, &format!("pq_exact_{w}")))
            .collect::<Result<_>>()?,
        residuals: f(1, "residuals")?,
        first_non_finite: f(1, "first_non_finite")?,
        unit_rows: f(1, "unit_rows")?,
        coarse_probe: f(2, "coarse_probe")?,
        query_tables: f(2, "query_tables")?,
        scan_lists: f(2, "scan_lists")?,
        merge_candidates: f(2, "merge_candidates")?,
        rerank_rows: [f(2, "rerank_rows")?, f(2, "rerank_rows4")?],
    };
    Ok(Box::new(CudaBackend {
        dev: Mutex::new(Device {
            stream,
            copy,
            blas,
            k,
            staging: None,
        }),
        lists: Mutex::new(Resident::new()),
        codebook: Mutex::new(Resident::new()),
        name,
        sms,
        h2d: 0.into(),
        d2h: 0.into(),
    }))
}

/// Grid for a grid-stride loop over `n` items: enough blocks to fill every SM a few times.
fn strided(n: usize, sms: u32) -> LaunchConfig {
    let blocks = (n.div_ceil(256) as u32).clamp(1, sms * 8);
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One warp per row, eight rows per block.
fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.div_ceil(8) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn as_i32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what} {v} exceeds 2^31 - 1")))
}

impl CudaBackend {
    fn lock(&self) -> MutexGuard<'_, Device> {
        // A panic while holding the lock leaves nothing half-updated on the host side.
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the context current on this thread. Calls that may free device buffers before
    /// any other CUDA call (a resident codebook or index replaced) start here: the free needs
    /// the context current, and on a thread without it the driver's error surfaced at the
    /// next upload instead.
    fn bind(&self) -> Result<()> {
        self.lock().bind()
    }

    fn up<T: DeviceRepr>(&self, s: &Arc<CudaStream>, v: &[T]) -> Result<CudaSlice<T>> {
        self.h2d
            .fetch_add(std::mem::size_of_val(v) as u64, Ordering::Relaxed);
        s.clone_htod(v).map_err(|e| dev_err("upload", e))
    }

    /// Uploads a large array through the staging buffers (the plain path for small ones, or
    /// when page-locked memory cannot be had), checking every value: `Error::NonFinite`, with
    /// the position within `v`, where one is NaN or infinite.
    fn up_staged(&self, dev: &mut Device, v: &[f32]) -> Result<CudaSlice<f32>> {
        let s = dev.stream.clone();
        let Some(st) = (v.len() >= 2 * STAGE).then(|| dev.staging()).flatten() else {
            crate::error::check_finite(v, "training vectors")?;
            return self.up(&s, v);
        };
        // SAFETY: every element is written by the copies below before any kernel reads it.
        let mut out = unsafe { CudaBackend::filled_later::<f32>(&s, v.len())? };
        for (i, chunk) in v.chunks(STAGE).enumerate() {
            let b = i % BUFS;
            let Some(host) = st.fill(b, chunk)? else {
                return Err(crate::error::non_finite_in(v, "training vectors"));
            };
            let mut dst = out.slice_mut(i * STAGE..i * STAGE + chunk.len());
            // From page-locked memory the copy is asynchronous: the event says when the
            // buffer may be refilled.
            s.memcpy_htod(host, &mut dst)
                .map_err(|e| dev_err("upload", e))?;
            st.sent[b] = Some(s.record_event(None).map_err(|e| dev_err("upload", e))?);
        }
        self.h2d
            .fetch_add(std::mem::size_of_val(v) as u64, Ordering::Relaxed);
        Ok(out)
    }

    fn up_into<T: DeviceRepr>(
        &self,
        s: &Arc<CudaStream>,
        v: &[T],
        d: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.h2d
            .fetch_add(std::mem::size_of_val(v) as u64, Ordering::Relaxed);
        s.memcpy_htod(v, d).map_err(|e| dev_err("upload", e))
    }

    fn down<T: DeviceRepr>(&self, s: &Arc<CudaStream>, d: &impl DevicePtr<T>) -> Result<Vec<T>> {
        self.d2h.fetch_add(d.num_bytes() as u64, Ordering::Relaxed);
        s.clone_dtoh(d).map_err(|e| dev_err("download", e))
    }

    fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        s: &Arc<CudaStream>,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        s.alloc_zeros(n.max(1)).map_err(|e| dev_err("allocate", e))
    }

    /// `n` values (at least one) without the zero fill of `zeros`.
    ///
    /// # Safety
    /// Every element read later is written first (by a kernel, a GEMM or a copy).
    unsafe fn filled_later<T: DeviceRepr>(s: &Arc<CudaStream>, n: usize) -> Result<CudaSlice<T>> {
        // SAFETY: as the caller vouches.
        unsafe { s.alloc(n.max(1)) }.map_err(|e| dev_err("allocate", e))
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }
    fn describe(&self) -> String {
        format!("cuda ({}, {} SMs)", self.name, self.sms)
    }
    fn kmeans_session<'a>(
        &'a self,
        x: &'a [f32],
        d: usize,
        precision: crate::Precision,
    ) -> Result<Box<dyn KmeansSession + 'a>> {
        let mut s = CudaSession::new(self, x, d)?;
        s.tf32 = precision == crate::Precision::Tf32;
        if !s.tf32 {
            s.split = s.split_points()?;
        }
        Ok(Box::new(s))
    }
    fn pq_assign(&self, y: &[f32], nsub: usize, dsub: usize, books: &[f32]) -> Result<Vec<u8>> {
        let dp = nsub * dsub;
        if !pq_kernel_fits(dsub, books.len() / dp.max(1)) || y.len() % dp != 0 {
            return crate::quant::pq::assign_by_nearest(self, y, nsub, dsub, books);
        }
        if y.is_empty() {
            return Ok(Vec::new());
        }
        let dev = self.lock();
        let s = &dev.stream;
        let yd = self.up(s, y)?;
        let bd = self.up(s, books)?;
        let (n, ksub) = (y.len() / dp, books.len() / dp);
        // SAFETY: the PQ kernel writes every index.
        let mut idx = unsafe { CudaBackend::filled_later::<u8>(s, n * nsub)? };
        let rows = PqRows::Padded(&yd);
        pq_assign_into(&dev, rows, n, nsub, dsub, &bd, ksub, &mut idx.slice_mut(..))?;
        self.down(s, &idx)
    }

    fn checks_input(&self) -> bool {
        true
    }

    fn encode_residuals(&self, cb: &crate::Codebook, x: &[f32]) -> Result<(Vec<u32>, Vec<u8>)> {
        let n = crate::error::whole_rows(x.len(), cb.d, "values")?;
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        if let Some(r) = self.encode_resident(cb, Source::Host(x))? {
            return Ok(r);
        }
        // Shapes the kernels do not take, or no page-locked memory: step by step.
        crate::error::check_finite(x, "vectors")?;
        crate::quant::encode_residuals_in_steps(self, cb, x)
    }

    unsafe fn encode_device(
        &self,
        cb: &crate::Codebook,
        at: u64,
        n: usize,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let bytes = self.device_rows(at, n, cb.d, "device vectors")?;
        if let Some(r) = self.encode_resident(cb, Source::Device { at, n })? {
            return Ok(r);
        }
        // Shapes the kernels do not take, or no page-locked memory: the rows come to the host
        // and take the host's path.
        let mut x = crate::error::try_vec(n * cb.d, 0f32, "vectors")?;
        {
            let dev = self.lock();
            dev.bind()?;
            // SAFETY: `device_rows` accepted the `bytes` bytes at `at`.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut x, at) }
                .map_err(|e| dev_err("download", e))?;
        }
        self.d2h.fetch_add(bytes as u64, Ordering::Relaxed);
        crate::error::check_finite(&x, "vectors")?;
        let x = crate::quant::prepare(x, cb.d, cb.metric);
        crate::quant::encode_residuals_in_steps(self, cb, &x)
    }

    fn search_lists(
        &self,
        ix: &crate::Index,
        q: &[f32],
        nprobe: usize,
        want: usize,
    ) -> Result<Option<(Vec<u64>, Vec<f32>)>> {
        self.scan(ix, q, nprobe, want, None)
    }

    unsafe fn rerank_device(
        &self,
        ix: &crate::Index,
        q: &[f32],
        nprobe: usize,
        want: usize,
        cands: Option<&[u64]>,
        raw: DeviceRerank,
    ) -> Result<Option<(Vec<u64>, Vec<f32>)>> {
        let d = ix.cb.dim();
        if want > MAX_WANT {
            return Err(Error::InvalidArgument(format!(
                "re-ranking on the device takes up to {MAX_WANT} candidates per query, not {want}"
            )));
        }
        if raw.k == 0 || raw.k > want {
            return Err(Error::InvalidArgument(format!(
                "{} results per query from {want} candidates",
                raw.k
            )));
        }
        // No rows: any candidate fails as an id without a row, and there is no range to check.
        if raw.n > 0 {
            self.device_rows(raw.at, raw.n, d, "raw vectors")?;
        }
        let Some(cands) = cands else {
            return self.scan(ix, q, nprobe, want, Some(raw));
        };
        self.bind()?;
        let dev = self.lock();
        let s = &dev.stream;
        let mut bad = self.rerank_flags(s)?;
        let (mut ids, mut dist) = (Vec::new(), Vec::new());
        for (qb, cb) in q
            .chunks(QUERY_BATCH * d)
            .zip(cands.chunks(QUERY_BATCH * want))
        {
            let (qd, cd) = (self.up(s, qb)?, self.up(s, cb)?);
            let (i, v) = self.rerank_batch(&dev, ix, &qd, &cd, want, raw, &mut bad)?;
            ids.extend(i);
            dist.extend(v);
        }
        self.rerank_errors(s, &bad)?;
        Ok(Some((ids, dist)))
    }

    fn transfers(&self) -> Transfers {
        Transfers {
            h2d_bytes: self.h2d.load(Ordering::Relaxed),
            d2h_bytes: self.d2h.load(Ordering::Relaxed),
        }
    }
}

/// The memory pool `CudaStream::alloc` takes from (stream-ordered allocation), where the
/// device has one.
fn device_pool(ctx: &CudaContext) -> Option<cudarc::driver::sys::CUmemoryPool> {
    if !ctx.has_async_alloc() {
        return None;
    }
    // SAFETY: the context's own device.
    unsafe { cudarc::driver::result::device::get_mem_pool(ctx.cu_device()) }.ok()
}

/// Lets the device's memory pool keep what is freed instead of handing it back at every
/// synchronization: a session's large buffers (points, their split, dots blocks) then come
/// from the pool in the next session instead of being mapped again, at several ms per GB.
/// `CudaBackend`'s drop hands back what the pool holds.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::{result, sys::CUmemPool_attribute};
    let Some(pool) = device_pool(ctx) else {
        return Ok(());
    };
    let mut keep = u64::MAX;
    // SAFETY: a live pool; the attribute is a u64.
    unsafe {
        result::mem_pool::set_attribute(
            pool,
            CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep as *mut u64).cast(),
        )
    }
    .map_err(|e| dev_err("memory pool", e))
}

/// Free device memory, counting what the pool holds unused (it serves our next allocations
/// first).
fn free_bytes(ctx: &CudaContext) -> usize {
    use cudarc::driver::{result, sys::CUmemPool_attribute as A};
    let free = ctx.mem_get_info().map_or(0, |(f, _)| f);
    let Some(pool) = device_pool(ctx) else {
        return free;
    };
    let get = |a| {
        let mut v = 0u64;
        // SAFETY: a live pool; both attributes read here are u64.
        unsafe { result::mem_pool::get_attribute(pool, a, (&mut v as *mut u64).cast()) }
            .map_or(0, |_| v)
    };
    let idle = get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        .saturating_sub(get(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
    free + idle as usize
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let _ = self.bind();
        // Our buffers go first, then what the pool kept of them goes back to the device.
        *self.lists.get_mut().unwrap_or_else(|e| e.into_inner()) = Resident::new();
        *self.codebook.get_mut().unwrap_or_else(|e| e.into_inner()) = Resident::new();
        let dev = self.dev.get_mut().unwrap_or_else(|e| e.into_inner());
        dev.staging = None;
        if dev.stream.synchronize().is_ok() {
            if let Some(pool) = device_pool(dev.stream.context()) {
                // SAFETY: a live pool; nothing of ours is in flight.
                let _ = unsafe { cudarc::driver::result::mem_pool::trim_to(pool, 0) };
            }
        }
    }
}

/// What `argmin_rows` (kmeans.cu) reads for one block of dots: `rows` rows of scores against
/// `k` centroids, for the points from `row0` on.
struct Argmin<'a> {
    dots: &'a CudaSlice<f32>,
    rows: usize,
    k: usize,
    /// |c|^2 + bias per centroid.
    off: &'a CudaSlice<f32>,
    bias: &'a CudaSlice<f32>,
    use_bias: bool,
    x: &'a CudaSlice<f32>,
    xn: &'a CudaSlice<f32>,
    row0: usize,
    d: usize,
    c: &'a CudaSlice<f32>,
    cn: &'a CudaSlice<f32>,
    /// Error bound of approximate dots (0: exact).
    slack: f32,
    /// For dots of split rows: the points' unscale (indexed as `xn`) and the centroids'.
    unscale: Option<(&'a CudaSlice<f32>, &'a CudaSlice<f32>)>,
}

impl Argmin<'_> {
    /// Writes the nearest centroid and its distance of points row0.. into `assign` and `dist`
    /// (indexed from the first point).
    fn launch(
        &self,
        dev: &Device,
        assign: &mut CudaViewMut<'_, u32>,
        dist: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        let (ri, ki, r0, di, ub) = (
            self.rows as i32,
            self.k as i32,
            self.row0 as i32,
            self.d as i32,
            self.use_bias as i32,
        );
        let (scaled, xu, cu) = match self.unscale {
            Some((xu, cu)) => (1i32, xu, cu),
            None => (0, self.xn, self.cn),
        };
        // SAFETY: dots holds rows x k floats, x and c rows of d, xn, xu, assign and dist at
        // least row0 + rows values and off, bias, cn, cu k each, as the kernel indexes them.
        ran(
            unsafe {
                dev.stream
                    .launch_builder(&dev.k.argmin_rows)
                    .arg(self.dots)
                    .arg(&ri)
                    .arg(&ki)
                    .arg(self.off)
                    .arg(self.bias)
                    .arg(&ub)
                    .arg(self.xn)
                    .arg(&r0)
                    .arg(assign)
                    .arg(dist)
                    .arg(self.x)
                    .arg(self.c)
                    .arg(self.cn)
                    .arg(&di)
                    .arg(&self.slack)
                    .arg(&scaled)
                    .arg(xu)
                    .arg(cu)
                    .launch(per_row(self.rows))
            },
            "argmin",
        )
    }
}

/// Squared norm of each of the `rows` rows of `x` (rows x d) into `out`.
fn row_norms(
    dev: &Device,
    x: &CudaSlice<f32>,
    rows: usize,
    d: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let (ri, di) = (rows as i32, d as i32);
    // SAFETY: x holds rows x d floats and out at least rows, as the kernel reads and writes.
    ran(
        unsafe {
            dev.stream
                .launch_builder(&dev.k.row_norms)
                .arg(x)
                .arg(&ri)
                .arg(&di)
                .arg(out)
                .launch(per_row(rows))
        },
        "row norms",
    )
}

/// Twice the error bound of a TF32 dot product over `d` terms, as a fraction of |x| |c|: each
/// operand keeps 10 of fp32's 23 mantissa bits (at most 2^-10 off each, if truncated), so
/// each product is within 2^-9; the fp32 sums add at most d units of 2^-23 more.
fn tf32_slack(d: usize) -> f32 {
    2.0 * (2f32.powi(-9) + d as f32 * 2f32.powi(-23))
}

/// Twice the error bound of a 3xFP16 dot product beyond its fp32 sums, as a fraction of
/// |x| |c|: rounding each scaled operand to fp16 leaves hi within 2^-11 of it and lo within
/// 2^-22, so hi.hi + hi.lo + lo.hi misses each product by under 3.01 x 2^-22 of |x_i| |c_i|.
/// The scale puts each row's largest value in [2^14, 2^15): pieces that fall below fp16's
/// normal range (under 2^-28 of that value, or lo parts of values under 2^-17 of it) lose at
/// most 2^-25 each, under 2^-28 |x| |c| in all for any d up to 2^20. Both stay under 2^-20.
/// The sums round as an fp32 GEMM's do.
const SPLIT_SLACK: f32 = 2.0 / (1u32 << 20) as f32;

/// Rows split into three scaled fp16 pieces each (`split_f16` in kmeans.cu): what the 3xFP16
/// GEMMs read, in place of fp32 rows.
struct Split {
    /// rows x 3d fp16 values (their bits): points as [hi, hi, lo], centroids as [hi, lo, hi].
    h: CudaSlice<u16>,
    /// Per row, the power of two that undoes its scale.
    unscale: CudaSlice<f32>,
}

impl Split {
    /// Device bytes that `new` takes for `rows` rows of `d` values.
    fn bytes(rows: usize, d: usize) -> usize {
        rows * (3 * d * std::mem::size_of::<u16>() + std::mem::size_of::<f32>())
    }

    /// Buffers for `rows` rows of `d` values.
    fn new(s: &Arc<CudaStream>, rows: usize, d: usize) -> Result<Split> {
        // SAFETY: `fill` writes every element before any GEMM or argmin reads them.
        unsafe {
            Ok(Split {
                h: CudaBackend::filled_later(s, rows * 3 * d)?,
                unscale: CudaBackend::filled_later(s, rows)?,
            })
        }
    }

    /// As `new`, or `None` where the device has no room (the caller then runs fp32 GEMMs).
    fn if_room(s: &Arc<CudaStream>, rows: usize, d: usize) -> Result<Option<Split>> {
        crate::error::none_if_out_of_memory(Split::new(s, rows, d))
    }

    /// Splits the first `rows` rows of `x` (rows x d) into these buffers.
    fn fill(
        &mut self,
        dev: &Device,
        x: &CudaSlice<f32>,
        rows: usize,
        d: usize,
        centroids: bool,
    ) -> Result<()> {
        let (ri, di, ci) = (rows as i32, d as i32, centroids as i32);
        // SAFETY: x holds rows x d floats, h rows x 3d values and unscale rows, as the kernel
        // reads and writes.
        ran(
            unsafe {
                dev.stream
                    .launch_builder(&dev.k.split_f16)
                    .arg(x)
                    .arg(&ri)
                    .arg(&di)
                    .arg(&ci)
                    .arg(&mut self.h)
                    .arg(&mut self.unscale)
                    .launch(per_row(rows))
            },
            "split to fp16",
        )
    }
}

/// The cuBLAS math mode for one stretch of GEMMs: TF32 tensor cores when asked, back to the
/// default (fp32) when dropped, so other calls on the handle stay exact.
struct MathMode<'a>(Option<&'a Device>);

impl<'a> MathMode<'a> {
    fn set(dev: &'a Device, tf32: bool) -> Result<MathMode<'a>> {
        if !tf32 {
            return Ok(MathMode(None));
        }
        use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode};
        // SAFETY: the handle is live for as long as `dev`, and the lock on it is held.
        unsafe { cublasSetMathMode(*dev.blas.handle(), cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH) }
            .result()
            .map_err(|e| Error::Device(format!("cuBLAS math mode: {e}")))?;
        Ok(MathMode(Some(dev)))
    }
}

impl Drop for MathMode<'_> {
    fn drop(&mut self) {
        if let Some(dev) = self.0 {
            use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode};
            // SAFETY: as in `set`.
            let _ =
                unsafe { cublasSetMathMode(*dev.blas.handle(), cublasMath_t::CUBLAS_DEFAULT_MATH) };
        }
    }
}

/// Whether the PQ kernel takes this shape: sub-vectors in registers, at most 256 codewords.
fn pq_kernel_fits(dsub: usize, ksub: usize) -> bool {
    (1..=MAX_DSUB).contains(&dsub) && (1..=256).contains(&ksub)
}

/// Row-major `out (rows x m) = x (rows x kd) . c (m x kd)^T` through cuBLAS: in column-major
/// terms out^T = c . x^T, so c is transposed and x is not.
fn gemm_rows_by(
    dev: &Device,
    c: &CudaSlice<f32>,
    m: usize,
    kd: usize,
    x: &cudarc::driver::CudaView<'_, f32>,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_T,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: rows as i32,
        k: kd as i32,
        alpha: 1.0f32,
        lda: kd as i32,
        ldb: kd as i32,
        beta: 0.0f32,
        ldc: m as i32,
    };
    // SAFETY: c holds m x kd floats, x rows x kd, out at least rows x m.
    unsafe { dev.blas.gemm(cfg, c, x, out) }
        .map_err(|e| Error::Device(format!("cuBLAS sgemm: {e}")))
}

/// As `gemm_rows_by` for split rows (3d fp16 values each): the pieces multiply on tensor
/// cores with fp32 sums, into dots still scaled by each row's and centroid's power of two.
fn gemm_split_rows_by(
    dev: &Device,
    c: &Split,
    m: usize,
    kd: usize,
    x: &cudarc::driver::CudaView<'_, u16>,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
    let s = &dev.stream;
    let (a, _ra) = c.h.device_ptr(s);
    let (b, _rb) = x.device_ptr(s);
    let (o, _ro) = out.device_ptr_mut(s);
    let (alpha, beta) = (1f32, 0f32);
    // SAFETY: c holds m x kd values, x rows x kd, out at least rows x m floats; the handle
    // runs on this stream, where the pointers' uses are recorded.
    unsafe {
        cudarc::cublas::result::gemm_ex(
            *dev.blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            m as i32,
            rows as i32,
            kd as i32,
            (&alpha as *const f32).cast(),
            a as *const _,
            cudaDataType_t::CUDA_R_16F,
            kd as i32,
            b as *const _,
            cudaDataType_t::CUDA_R_16F,
            kd as i32,
            (&beta as *const f32).cast(),
            o as *mut _,
            cudaDataType_t::CUDA_R_32F,
            m as i32,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| Error::Device(format!("cuBLAS fp16 GEMM: {e}")))
}

/// Dots of rows `row0..row0 + rows` of `x` (n x d) with the `k` centroids `c`, into `out`:
/// from the fp16 pieces where both sides are split (`split`: the rows', the centroids'; the
/// dots then carry their scales, which `Argmin::unscale` undoes), else one fp32 GEMM.
#[allow(clippy::too_many_arguments)]
fn dots_rows(
    dev: &Device,
    x: &CudaSlice<f32>,
    c: &CudaSlice<f32>,
    split: Option<(&Split, &Split)>,
    k: usize,
    d: usize,
    (row0, rows): (usize, usize),
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    match split {
        Some((xs, cs)) => {
            let v = xs.h.slice(row0 * 3 * d..(row0 + rows) * 3 * d);
            gemm_split_rows_by(dev, cs, k, 3 * d, &v, rows, out)
        }
        None => {
            let v = x.slice(row0 * d..(row0 + rows) * d);
            gemm_rows_by(dev, c, k, d, &v, rows, out)
        }
    }
}

/// Most bytes of anchor scores per encoding GEMM.
const ENCODE_DOTS_BYTES: usize = 256 << 20;

/// One encoding call's device buffers, per block of `block` rows.
struct EncodeScratch {
    block: usize,
    /// Blocks of points: the copy stream fills one while another is encoded.
    x: [CudaSlice<f32>; BUFS],
    xn: CudaSlice<f32>,
    dist: CudaSlice<f32>,
    /// The block split for 3xFP16 GEMMs (`None` where there was no room: fp32 GEMMs).
    x3: Option<Split>,
    /// Anchor scores for `chunk` rows.
    dots: CudaSlice<f32>,
    chunk: usize,
}

impl EncodeScratch {
    fn new(s: &Arc<CudaStream>, block: usize, d: usize, k: usize) -> Result<EncodeScratch> {
        let chunk = (ENCODE_DOTS_BYTES / (4 * k)).clamp(1, block);
        // SAFETY (all of them): each block's rows arrive by copy, then its norms, split, dots
        // and distances are written by kernels and GEMMs before anything reads them.
        let f = |len| unsafe { CudaBackend::filled_later::<f32>(s, len) };
        Ok(EncodeScratch {
            block,
            x: per_buf(|| f(block * d))?,
            xn: f(block)?,
            dist: f(block)?,
            x3: Split::if_room(s, block, d)?,
            dots: f(chunk * k)?,
            chunk,
        })
    }
}

/// Where the rows an encoding reads live.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// Host memory (n x d), staged through page-locked memory and checked on the way up.
    Host(&'a [f32]),
    /// `n` rows of device memory at `at` (a range `device_rows` accepted), copied block by
    /// block on the device and checked there.
    Device { at: u64, n: usize },
}

impl CudaBackend {
    /// Everything on the device (nearest anchor, residual, rotation, PQ) with the codebook
    /// uploaded once for all calls, through `encode_pipelined`; `None` where the kernels do
    /// not take the codebook's shapes or page-locked memory cannot be had.
    fn encode_resident(
        &self,
        cb: &crate::Codebook,
        src: Source<'_>,
    ) -> Result<Option<(Vec<u32>, Vec<u8>)>> {
        if !(pq_kernel_fits(cb.pq.dsub, cb.pq.ksub()) && cb.pq.dim() >= cb.d) {
            return Ok(None);
        }
        self.bind()?;
        let mut slot = self.codebook.lock().unwrap_or_else(|e| e.into_inner());
        let dc = slot.get(cb.fingerprint(), || DeviceCodebook::upload(self, cb))?;
        let mut dev = self.lock();
        if dev.staging().is_none() {
            return Ok(None);
        }
        // Out of `dev` while the pipeline borrows both.
        let mut st = dev.staging.take().expect("made above");
        let out = self.encode_pipelined(&dev, &mut st, dc, cb, src);
        dev.staging = Some(st);
        out.map(Some)
    }

    /// Encodes the rows of `src` a block at a time, up to `BUFS` blocks in flight. From host
    /// memory, while block j is encoded, the next blocks cross the bus on the copy stream,
    /// and the host refills each staging buffer as soon as its copy ends (checking every
    /// value on the way), not when its block's kernels do; from device memory each block is
    /// a device copy and a check kernel. Each block's anchor ids and PQ indices come back
    /// into page-locked memory behind it, and from there into the output on every thread.
    fn encode_pipelined(
        &self,
        dev: &Device,
        st: &mut Staging,
        dc: &DeviceCodebook,
        cb: &crate::Codebook,
        src: Source<'_>,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        let (d, nsub) = (cb.d, cb.pq.nsub);
        let n = match src {
            Source::Host(x) => x.len() / d,
            Source::Device { n, .. } => n,
        };
        let s = &dev.stream;
        let mut sc = EncodeScratch::new(s, (STAGE / d).clamp(1, n), d, cb.anchors())?;
        let block = sc.block;
        // Copies a failed call left in flight may still use the buffers.
        for e in st
            .sent
            .iter_mut()
            .chain(&mut st.done)
            .filter_map(Option::take)
        {
            e.synchronize().map_err(|e| dev_err("encode", e))?;
        }
        // SAFETY: each block's argmin and PQ kernel write the rows its download reads.
        let mut ids_d = unsafe { CudaBackend::filled_later::<u32>(s, block)? };
        let mut idx_d = unsafe { CudaBackend::filled_later::<u8>(s, block * nsub)? };
        // Device input: the first position that is not finite, folded in by every block.
        let mut first = match src {
            Source::Device { .. } => Some(self.up(s, &[u64::MAX])?),
            Source::Host(_) => None,
        };
        // Each block's results: its ids (4 bytes a row, first, so they stay aligned), then its
        // indices.
        st.back(s.context(), block * (4 + nsub))?;
        // The copy stream writes buffers this stream allocated.
        dev.copy.join(s).map_err(|e| dev_err("upload", e))?;
        let mut trace = Trace::new();
        // Host time per step, without the device waits of `trace` (which would stop the
        // pipeline): `VLCC_CUDA_HOST_TRACE`.
        let mut host_trace = crate::trace::Trace::new("cuda host", "VLCC_CUDA_HOST_TRACE");
        let (mut ids, mut idx) = (vec![0u32; n], vec![0u8; n * nsub]);
        // Blocks in flight, oldest first: (buffer, first row, rows).
        let mut flight = std::collections::VecDeque::new();
        for j in 0..n.div_ceil(block) {
            let (b, r0) = (j % BUFS, j * block);
            let rows = block.min(n - r0);
            // Block j - BUFS used these buffers: its results go out first.
            let old = (flight.len() == BUFS).then(|| flight.pop_front().expect("a full flight"));
            match src {
                Source::Host(x) => {
                    let blk = &x[r0 * d..(r0 + rows) * d];
                    // Block j - BUFS's kernels read the device buffer the copy below writes:
                    // the copy stream waits for them, the host does not.
                    if let Some(e) = &st.done[b] {
                        dev.copy.wait(e).map_err(|e| dev_err("upload", e))?;
                    }
                    host_trace.mark("other", || ());
                    // The fill waits only for the copy of block j - BUFS out of this buffer;
                    // that block's results go out beside it on other threads, not after it
                    // (notes/perf-cuda.md, encoding version 13).
                    let Staging {
                        bufs,
                        sent,
                        done,
                        back,
                    } = &mut *st;
                    let back = back.as_ref().expect("made above");
                    let (filled, taken) = rayon::join(
                        || Staging::fill_buf(&mut sent[b], &mut bufs[b], blk),
                        || match old {
                            Some((ob, or0, orows)) => take_back(
                                &mut done[ob],
                                &back[ob],
                                (or0, orows),
                                &mut ids,
                                &mut idx,
                            ),
                            None => Ok(()),
                        },
                    );
                    taken?;
                    let Some(host) = filled? else {
                        s.synchronize().map_err(|e| dev_err("encode", e))?;
                        return Err(crate::error::non_finite_in(x, "vectors"));
                    };
                    host_trace.mark("fill", || ());
                    trace.mark(s, "fill");
                    let mut xv = sc.x[b].slice_mut(..blk.len());
                    dev.copy
                        .memcpy_htod(host, &mut xv)
                        .map_err(|e| dev_err("upload", e))?;
                    let up = dev
                        .copy
                        .record_event(None)
                        .map_err(|e| dev_err("upload", e))?;
                    s.wait(&up).map_err(|e| dev_err("upload", e))?;
                    st.sent[b] = Some(up);
                    self.h2d
                        .fetch_add(std::mem::size_of_val(blk) as u64, Ordering::Relaxed);
                    trace.mark(s, "upload");
                }
                Source::Device { at, .. } => {
                    let first = first.as_mut().expect("made for device input");
                    self.device_block(dev, cb, at, (r0, rows), &mut sc.x[b], first)?;
                    trace.mark(s, "device copy");
                    if let Some((ob, or0, orows)) = old {
                        host_trace.mark("other", || ());
                        st.take_back(ob, (or0, orows), &mut ids, &mut idx)?;
                        host_trace.mark("results", || ());
                    }
                }
            }
            let (mut iv, mut xv) = (ids_d.slice_mut(..rows), idx_d.slice_mut(..rows * nsub));
            self.encode_block(dev, dc, cb, &mut sc, b, rows, &mut iv, &mut xv, &mut trace)?;
            let back = st.back.as_mut().expect("made above")[b]
                .as_mut_slice()
                .map_err(|e| dev_err("download", e))?;
            let (bi, bx) = back.split_at_mut(rows * 4);
            s.memcpy_dtoh(
                &ids_d.slice(..rows),
                bytemuck::cast_slice_mut::<u8, u32>(bi),
            )
            .map_err(|e| dev_err("download", e))?;
            s.memcpy_dtoh(&idx_d.slice(..rows * nsub), &mut bx[..rows * nsub])
                .map_err(|e| dev_err("download", e))?;
            self.d2h
                .fetch_add((rows * (4 + nsub)) as u64, Ordering::Relaxed);
            st.done[b] = Some(s.record_event(None).map_err(|e| dev_err("encode", e))?);
            flight.push_back((b, r0, rows));
            trace.mark(s, "download");
        }
        host_trace.mark("other", || ());
        while let Some((b, r0, rows)) = flight.pop_front() {
            st.take_back(b, (r0, rows), &mut ids, &mut idx)?;
        }
        host_trace.mark("results", || ());
        if let (Some(first), Source::Device { at, .. }) = (&first, src) {
            let at_pos = self.down(s, first)?[0];
            if at_pos != u64::MAX {
                return Err(self.non_finite_at(at, at_pos as usize));
            }
        }
        Ok((ids, idx))
    }

    /// Block `(r0, rows)` of the device input at `at` into `x`, checked for values that are
    /// not finite (into `first`) and made unit length for cosine, all on the stream.
    fn device_block(
        &self,
        dev: &Device,
        cb: &crate::Codebook,
        at: u64,
        (r0, rows): (usize, usize),
        x: &mut CudaSlice<f32>,
        first: &mut CudaSlice<u64>,
    ) -> Result<()> {
        let (s, d) = (&dev.stream, cb.d);
        let len = rows * d;
        {
            let (dst, _sync) = x.device_ptr_mut(s);
            // SAFETY: `x` holds at least `len` floats; the source range lies within the
            // memory `device_rows` accepted; both are read and written in stream order.
            ran(
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        dst,
                        at + (r0 * d * 4) as u64,
                        len * 4,
                        s.cu_stream(),
                    )
                },
                "device copy",
            )?;
        }
        let (total, base) = (len as u64, (r0 * d) as u64);
        // SAFETY: x holds `len` floats; `first` one value.
        ran(
            unsafe {
                s.launch_builder(&dev.k.first_non_finite)
                    .arg(&*x)
                    .arg(&total)
                    .arg(&base)
                    .arg(&mut *first)
                    .launch(strided(len, self.sms))
            },
            "finite check",
        )?;
        if cb.metric == crate::Metric::Cosine {
            let (ri, di) = (rows as i32, d as i32);
            // SAFETY: x holds rows x d floats.
            ran(
                unsafe {
                    s.launch_builder(&dev.k.unit_rows)
                        .arg(&mut *x)
                        .arg(&ri)
                        .arg(&di)
                        .launch(per_row(rows))
                },
                "unit rows",
            )?;
        }
        Ok(())
    }

    /// Checks that `n` rows of `d` floats at `at` lie in one allocation this device reads:
    /// device memory of this device, or managed memory, as the driver reports it. Anything
    /// else (host memory, another device's, freed or never allocated, a range running past
    /// the allocation, a size that overflows) is an `InvalidArgument`, before anything is
    /// read. The driver knows allocations, not tensors: a range inside a larger allocation (a
    /// framework's caching pool) passes, so the row count is the caller's to get right.
    /// Returns the rows' size in bytes.
    fn device_rows(&self, at: u64, n: usize, d: usize, what: &str) -> Result<usize> {
        use cudarc::driver::sys::{self, CUmemorytype, CUpointer_attribute as A};
        let bytes = n
            .checked_mul(d)
            .and_then(|v| v.checked_mul(4))
            .ok_or_else(|| Error::InvalidArgument(format!("{n} {what} overflow the size")))?;
        let dev = self.lock();
        dev.bind()?;
        let ctx = dev.stream.context();
        let bad = |why: String| Err(Error::InvalidArgument(format!("{what} at {at:#x}: {why}")));
        if at % 4 != 0 {
            return bad("not 4-byte aligned".into());
        }
        // SAFETY (each query): `v` points to a value as large as the attribute's.
        let query = |attr: A, v: *mut std::ffi::c_void| unsafe {
            sys::cuPointerGetAttribute(v, attr, at).result()
        };
        let (mut kind, mut managed, mut ordinal) = (0u32, 0u32, -1i32);
        if query(A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (&raw mut kind).cast()).is_err() {
            return bad(
                "not memory CUDA knows of (vectors in host memory take the host calls)".into(),
            );
        }
        let known = query(
            A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            (&raw mut managed).cast(),
        );
        known.map_err(|e| dev_err("pointer attributes", e))?;
        if managed == 0 {
            if kind != CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
                return bad("host memory (vectors in host memory take the host calls)".into());
            }
            let known = query(
                A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                (&raw mut ordinal).cast(),
            );
            known.map_err(|e| dev_err("pointer attributes", e))?;
            if ordinal != ctx.ordinal() as i32 {
                return bad(format!(
                    "memory of CUDA device {ordinal}, not of this context's device {}",
                    ctx.ordinal()
                ));
            }
        }
        let (mut start, mut size) = (0u64, 0usize);
        query(
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            (&raw mut start).cast(),
        )
        .and_then(|_| query(A::CU_POINTER_ATTRIBUTE_RANGE_SIZE, (&raw mut size).cast()))
        .map_err(|e| dev_err("pointer attributes", e))?;
        let room = (start + size as u64).saturating_sub(at);
        if (bytes as u64) > room {
            return bad(format!(
                "{bytes} bytes asked for, {room} left in the allocation holding them"
            ));
        }
        Ok(bytes)
    }

    /// The error the host's check gives for position `i` of the device input at `at`.
    fn non_finite_at(&self, at: u64, i: usize) -> Error {
        let mut v = [0f32];
        // SAFETY: position i lies within the range `device_rows` accepted.
        match unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut v, at + 4 * i as u64) } {
            Ok(()) => Error::NonFinite(format!("vectors: value {} at position {i}", v[0])),
            Err(e) => dev_err("download", e),
        }
    }

    /// Nearest anchors (into `ids`) and PQ indices (into `idx`) of the `rows` rows in block
    /// buffer `b` of `sc`.
    #[allow(clippy::too_many_arguments)]
    fn encode_block(
        &self,
        dev: &Device,
        dc: &DeviceCodebook,
        cb: &crate::Codebook,
        sc: &mut EncodeScratch,
        b: usize,
        rows: usize,
        ids: &mut CudaViewMut<'_, u32>,
        idx: &mut CudaViewMut<'_, u8>,
        trace: &mut Trace,
    ) -> Result<()> {
        let (d, dp, nsub, dsub, k) = (cb.d, cb.pq.dim(), cb.pq.nsub, cb.pq.dsub, cb.anchors());
        let s = &dev.stream;
        let xb = &sc.x[b];
        row_norms(dev, xb, rows, d, &mut sc.xn)?;
        if let Some(x3) = sc.x3.as_mut() {
            x3.fill(dev, xb, rows, d, false)?;
        }
        let split = sc.x3.as_ref().map(|x3| (x3, &dc.anchors3));
        for r0 in (0..rows).step_by(sc.chunk) {
            let rr = sc.chunk.min(rows - r0);
            dots_rows(dev, xb, &dc.anchors, split, k, d, (r0, rr), &mut sc.dots)?;
            Argmin {
                dots: &sc.dots,
                rows: rr,
                k,
                off: &dc.anorm,
                bias: &dc.anorm,
                use_bias: false,
                x: xb,
                xn: &sc.xn,
                row0: r0,
                d,
                c: &dc.anchors,
                cn: &dc.anorm,
                slack: if split.is_some() { SPLIT_SLACK } else { 0.0 },
                unscale: split.map(|(x3, a3)| (&x3.unscale, &a3.unscale)),
            }
            .launch(dev, ids, &mut sc.dist.slice_mut(..))?;
        }
        trace.mark(s, "anchors");
        let assign = ids.as_view();
        let ksub = cb.pq.ksub();
        if dc.rot.is_none() {
            let rows_in = PqRows::Residual {
                x: xb,
                d,
                anchors: &dc.anchors,
                assign: &assign,
            };
            pq_assign_into(dev, rows_in, rows, nsub, dsub, &dc.books, ksub, idx)?;
        } else {
            // SAFETY: the residual kernel writes every element, pads included.
            let mut y = unsafe { CudaBackend::filled_later::<f32>(s, rows * dp)? };
            let (ni, di, dpi, dsi) = (rows as i32, d as i32, dp as i32, dsub as i32);
            // SAFETY: x is rows x d, anchors k x d with every assignment below k, y rows x dp.
            ran(
                unsafe {
                    s.launch_builder(&dev.k.residuals)
                        .arg(xb)
                        .arg(&ni)
                        .arg(&di)
                        .arg(&dc.anchors)
                        .arg(&assign)
                        .arg(&dpi)
                        .arg(&dsi)
                        .arg(&mut y)
                        .launch(strided(rows * dp, self.sms))
                },
                "residuals",
            )?;
            let y = rotated(dev, dc, y, rows, dp)?;
            let rows_in = PqRows::Padded(&y);
            pq_assign_into(dev, rows_in, rows, nsub, dsub, &dc.books, ksub, idx)?;
        }
        trace.mark(s, "pq");
        Ok(())
    }
}

/// Where the PQ kernel reads its sub-vectors.
enum PqRows<'a> {
    /// Rows already in the padded layout (n x nsub*dsub).
    Padded(&'a CudaSlice<f32>),
    /// Raw rows (n x d) minus their anchors: the residuals, padded as they are read.
    Residual {
        x: &'a CudaSlice<f32>,
        d: usize,
        anchors: &'a CudaSlice<f32>,
        assign: &'a CudaView<'a, u32>,
    },
}

/// Sub-space widths with a kernel of their own, and the rows each of its threads takes.
const PQ_EXACT: [(usize, usize); 6] = [(4, 4), (8, 4), (12, 4), (16, 4), (24, 2), (32, 2)];

/// PQ indices (n x nsub bytes, into `out` on the device) of `n` rows against the codebooks
/// `books` (nsub x ksub x dsub, on the device).
#[allow(clippy::too_many_arguments)]
fn pq_assign_into(
    dev: &Device,
    rows: PqRows<'_>,
    n: usize,
    nsub: usize,
    dsub: usize,
    books: &CudaSlice<f32>,
    ksub: usize,
    out: &mut CudaViewMut<'_, u8>,
) -> Result<()> {
    let (ld, rem, q) = match rows {
        PqRows::Padded(_) => (nsub * dsub, nsub, 0),
        PqRows::Residual { d, .. } => (d, d % nsub, d / nsub),
    };
    let (ni, ldi, dsi, ki, nsi) = (
        as_i32(n, "rows")?,
        ld as i32,
        dsub as i32,
        ksub as i32,
        nsub as i32,
    );
    let (remi, qi, none) = (rem as i32, q as i32, 0u64);
    // Rows per thread, as built into each kernel (kernels/cuda/encode.cu).
    let (kernel, rows_per_thread) = match PQ_EXACT.iter().position(|&(w, _)| w == dsub) {
        Some(i) => (&dev.k.pq_exact[i], PQ_EXACT[i].1),
        None => match dsub {
            0..=8 => (&dev.k.pq_assign[0], 4),
            9..=16 => (&dev.k.pq_assign[1], 4),
            _ => (&dev.k.pq_assign[2], 2),
        },
    };
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(128 * rows_per_thread) as u32, nsub as u32, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: (4 * ksub * (dsub + 1)) as u32,
    };
    let mut lb = dev.stream.launch_builder(kernel);
    match rows {
        PqRows::Padded(y) => lb.arg(y),
        PqRows::Residual { x, .. } => lb.arg(x),
    };
    lb.arg(&ni)
        .arg(&ldi)
        .arg(&dsi)
        .arg(&ki)
        .arg(books)
        .arg(out)
        .arg(&nsi);
    match rows {
        PqRows::Padded(_) => lb.arg(&none).arg(&none),
        PqRows::Residual {
            anchors, assign, ..
        } => lb.arg(anchors).arg(assign),
    };
    lb.arg(&remi).arg(&qi);
    // SAFETY: the rows hold n x ld floats (anchors k x ld, with every assignment below k),
    // books nsub x ksub x dsub, out n x nsub bytes; the shared block holds one sub-codebook
    // and its norms.
    ran(unsafe { lb.launch(cfg) }, "pq assign")
}

/// One index's lists on the device, back to back, with what its search needs.
struct DeviceLists {
    m: usize,
    d: usize,
    dp: usize,
    nsub: usize,
    dsub: usize,
    l2: bool,
    codes: CudaSlice<u8>,
    ids: CudaSlice<u64>,
    start: CudaSlice<u64>,
    /// m x nsub x 256 L2 table terms (one unused value for inner product).
    terms: CudaSlice<f32>,
}

/// A codebook's arrays on the device.
struct DeviceCodebook {
    anchors: CudaSlice<f32>,
    /// |a|^2 per anchor, as the host computes them (coarse scores then round alike).
    anorm: CudaSlice<f32>,
    /// The anchors split into fp16 pieces: encoding's 3xFP16 GEMMs.
    anchors3: Split,
    books: CudaSlice<f32>,
    rot: Option<CudaSlice<f32>>,
}

/// `y` (n x dp) turned by the codebook's rotation (row-major y R^T, as `rotation::apply`), or
/// `y` itself when it has none.
fn rotated(
    dev: &Device,
    dc: &DeviceCodebook,
    y: CudaSlice<f32>,
    n: usize,
    dp: usize,
) -> Result<CudaSlice<f32>> {
    let Some(r) = &dc.rot else { return Ok(y) };
    // SAFETY: the GEMM writes every element.
    let mut turned = unsafe { CudaBackend::filled_later::<f32>(&dev.stream, n * dp)? };
    gemm_rows_by(dev, r, dp, dp, &y.slice(..n * dp), n, &mut turned)?;
    Ok(turned)
}

impl DeviceCodebook {
    fn upload(b: &CudaBackend, cb: &crate::Codebook) -> Result<DeviceCodebook> {
        let dev = b.lock();
        let s = &dev.stream;
        let (k, d) = (cb.anchors(), cb.d);
        let anchors = b.up(s, &cb.anchors)?;
        let mut anchors3 = Split::new(s, k, d)?;
        anchors3.fill(&dev, &anchors, k, d, true)?;
        Ok(DeviceCodebook {
            anchors,
            anorm: b.up(s, &crate::linalg::row_norms(&cb.anchors, cb.d))?,
            anchors3,
            books: b.up(s, &cb.pq.centroids)?,
            rot: if cb.rot.is_empty() {
                None
            } else {
                Some(b.up(s, &cb.rot)?)
            },
        })
    }
}

impl DeviceLists {
    fn upload(b: &CudaBackend, dev: &Device, ix: &crate::Index) -> Result<DeviceLists> {
        let s = &dev.stream;
        let cb = &ix.cb;
        let m = ix.nlist();
        let (start, ids, codes) = ix.flat_lists();
        let terms = match &ix.tables.l2_terms {
            Some(t) if cb.metric == crate::Metric::L2 => b.up(s, t)?,
            _ => CudaBackend::zeros(s, 1)?,
        };
        Ok(DeviceLists {
            m,
            d: cb.dim(),
            dp: cb.pq.dim(),
            nsub: cb.pq.nsub,
            dsub: cb.pq.dsub,
            l2: cb.metric == crate::Metric::L2,
            codes: if codes.is_empty() {
                CudaBackend::zeros(s, 1)?
            } else {
                b.up(s, &codes)?
            },
            ids: if ids.is_empty() {
                CudaBackend::zeros(s, 1)?
            } else {
                b.up(s, &ids)?
            },
            start: b.up(s, &start)?,
            terms,
        })
    }
}

impl CudaBackend {
    /// `search_lists`, with the candidates re-ranked on the device against `raw` when given
    /// (`raw.k` results per query, else `want`); `None` where the device does not scan.
    fn scan(
        &self,
        ix: &crate::Index,
        q: &[f32],
        nprobe: usize,
        want: usize,
        raw: Option<DeviceRerank>,
    ) -> Result<Option<(Vec<u64>, Vec<f32>)>> {
        let cb = &ix.cb;
        let fits = ix.device_scannable() && cb.pq.nsub * 256 * 4 <= 44 << 10 && want <= MAX_WANT;
        if !fits {
            return Ok(None);
        }
        self.bind()?;
        let mut lists = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let mut slot = self.codebook.lock().unwrap_or_else(|e| e.into_inner());
        let dc = slot.get(cb.fingerprint(), || DeviceCodebook::upload(self, cb))?;
        let dev = self.lock();
        let Some(dl) = lists.get_or_host(ix.stamp, || DeviceLists::upload(self, &dev, ix))? else {
            return Ok(None);
        };
        let s = &dev.stream;
        let mut rerank = match raw {
            Some(r) => Some((r, self.rerank_flags(s)?)),
            None => None,
        };
        let (mut ids, mut dist) = (Vec::new(), Vec::new());
        for batch in q.chunks(cb.dim() * QUERY_BATCH) {
            let (qd, cid, cd) = self.search_batch(&dev, dc, dl, batch, nprobe.min(dl.m), want)?;
            let (i, v) = match &mut rerank {
                None => (self.down(s, &cid)?, self.down(s, &cd)?),
                Some((r, bad)) => self.rerank_batch(&dev, ix, &qd, &cid, want, *r, bad)?,
            };
            ids.extend(i);
            dist.extend(v);
        }
        if let Some((_, bad)) = &rerank {
            self.rerank_errors(s, bad)?;
        }
        Ok(Some((ids, dist)))
    }

    /// The re-rank's error words for one call (`bad` in search.cu), none set: the smallest
    /// id without a row, then the smallest whose score is not finite.
    fn rerank_flags(&self, s: &Arc<CudaStream>) -> Result<CudaSlice<u64>> {
        self.up(s, &[u64::MAX; 2])
    }

    /// The error a call's re-rank batches left in `bad`, if any.
    fn rerank_errors(&self, s: &Arc<CudaStream>, bad: &CudaSlice<u64>) -> Result<()> {
        match self.down(s, bad)?[..] {
            [id, _] if id != u64::MAX => Err(crate::index::raw_missing(id)),
            [_, id] if id != u64::MAX => Err(crate::index::raw_not_finite(id)),
            _ => Ok(()),
        }
    }

    /// The `raw.k` best per query of `cand` (`want` per query of `qd`) by their exact
    /// scores against `raw`; ids without rows and scores that are not finite go to `bad`
    /// (`rerank_flags`).
    #[allow(clippy::too_many_arguments)]
    fn rerank_batch(
        &self,
        dev: &Device,
        ix: &crate::Index,
        qd: &CudaSlice<f32>,
        cand: &CudaSlice<u64>,
        want: usize,
        raw: DeviceRerank,
        bad: &mut CudaSlice<u64>,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let (s, d, k) = (&dev.stream, ix.cb.dim(), raw.k);
        let nb = cand.len() / want;
        // SAFETY: a query's `want` candidates take the ranks 0..want once each, and k <= want.
        let mut out_id = unsafe { CudaBackend::filled_later::<u64>(s, nb * k)? };
        let mut out_d = unsafe { CudaBackend::filled_later::<f32>(s, nb * k)? };
        let metric = match ix.cb.metric {
            crate::Metric::L2 => 0i32,
            crate::Metric::InnerProduct => 1,
            crate::Metric::Cosine => 2,
        };
        let vec4 = d % 4 == 0 && raw.at % 16 == 0;
        let (di, wi, ki, n) = (d as i32, want as i32, k as i32, raw.n as u64);
        // SAFETY: qd holds nb x d floats, cand nb x want ids, the outputs nb x k; the kernel
        // reads rows only below `raw.n`, within the range `device_rows` accepted.
        ran(
            unsafe {
                s.launch_builder(&dev.k.rerank_rows[vec4 as usize])
                    .arg(qd)
                    .arg(&di)
                    .arg(cand)
                    .arg(&wi)
                    .arg(&raw.at)
                    .arg(&n)
                    .arg(&metric)
                    .arg(&ki)
                    .arg(&mut out_id)
                    .arg(&mut out_d)
                    .arg(bad)
                    .launch(LaunchConfig {
                        grid_dim: (nb as u32, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    })
            },
            "re-rank",
        )?;
        Ok((self.down(s, &out_id)?, self.down(s, &out_d)?))
    }

    /// One batch of queries (nb x d, prepared) through the device search: coarse GEMM and
    /// probe selection, the query tables, one block per (probe, query) scanning a list, and a
    /// merge per query. Returns the queries on the device and their `want` candidates (ids,
    /// scores), still there.
    fn search_batch(
        &self,
        dev: &Device,
        dc: &DeviceCodebook,
        dl: &DeviceLists,
        q: &[f32],
        nprobe: usize,
        want: usize,
    ) -> Result<(CudaSlice<f32>, CudaSlice<u64>, CudaSlice<f32>)> {
        let s = &dev.stream;
        let (d, dp, m, nsub) = (dl.d, dl.dp, dl.m, dl.nsub);
        let nb = q.len() / d;
        let qd = self.up(s, q)?;
        let mut dots = CudaBackend::zeros::<f32>(s, nb * m)?;
        gemm_rows_by(dev, &dc.anchors, m, d, &qd.slice(..nb * d), nb, &mut dots)?;
        let mut probes = CudaBackend::zeros::<u32>(s, nb * nprobe)?;
        let mut base = CudaBackend::zeros::<f32>(s, nb * nprobe)?;
        let (nbi, di, mi, l2i, npi) = (nb as i32, d as i32, m as i32, dl.l2 as i32, nprobe as i32);
        // SAFETY (every launch here): buffers are sized from nb, d, dp, m, nsub, nprobe and
        // want as the kernels index them; list offsets and codes come from the same index.
        ran(
            unsafe {
                s.launch_builder(&dev.k.coarse_probe)
                    .arg(&qd)
                    .arg(&nbi)
                    .arg(&di)
                    .arg(&mut dots)
                    .arg(&mi)
                    .arg(&dc.anorm)
                    .arg(&l2i)
                    .arg(&npi)
                    .arg(&mut probes)
                    .arg(&mut base)
                    .launch(per_row(nb))
            },
            "coarse probe",
        )?;
        let mut y = CudaBackend::zeros::<f32>(s, nb * dp)?;
        let (dpi, dsubi) = (dp as i32, dl.dsub as i32);
        let none = 0u64; // null anchors: the residual kernel only pads
        ran(
            unsafe {
                s.launch_builder(&dev.k.residuals)
                    .arg(&qd)
                    .arg(&nbi)
                    .arg(&di)
                    .arg(&none)
                    .arg(&none)
                    .arg(&dpi)
                    .arg(&dsubi)
                    .arg(&mut y)
                    .launch(strided(nb * dp, self.sms))
            },
            "pad queries",
        )?;
        let y = rotated(dev, dc, y, nb, dp)?;
        let mut qt = CudaBackend::zeros::<f32>(s, nb * nsub * 256)?;
        let (dsi, ksi, nsi) = (dl.dsub as i32, 256i32, nsub as i32);
        let scale: f32 = if dl.l2 { -2.0 } else { -1.0 };
        ran(
            unsafe {
                s.launch_builder(&dev.k.query_tables)
                    .arg(&y)
                    .arg(&dpi)
                    .arg(&dsi)
                    .arg(&ksi)
                    .arg(&dc.books)
                    .arg(&scale)
                    .arg(&mut qt)
                    .arg(&nsi)
                    .launch(LaunchConfig {
                        grid_dim: (nb as u32, nsub as u32, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: (4 * dl.dsub) as u32,
                    })
            },
            "query tables",
        )?;
        let per = nprobe * want;
        let mut cand_d = CudaBackend::zeros::<f32>(s, nb * per)?;
        let mut cand_p = CudaBackend::zeros::<u32>(s, nb * per)?;
        let wi = want as i32;
        ran(
            unsafe {
                s.launch_builder(&dev.k.scan_lists)
                    .arg(&dl.codes)
                    .arg(&dl.start)
                    .arg(&dl.terms)
                    .arg(&l2i)
                    .arg(&qt)
                    .arg(&nsi)
                    .arg(&probes)
                    .arg(&base)
                    .arg(&npi)
                    .arg(&wi)
                    .arg(&mut cand_d)
                    .arg(&mut cand_p)
                    .launch(LaunchConfig {
                        grid_dim: (nprobe as u32, nb as u32, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: (4 * nsub * 256) as u32,
                    })
            },
            "scan lists",
        )?;
        let mut out_d = CudaBackend::zeros::<f32>(s, nb * want)?;
        let mut out_id = CudaBackend::zeros::<u64>(s, nb * want)?;
        let pi = per as i32;
        ran(
            unsafe {
                s.launch_builder(&dev.k.merge_candidates)
                    .arg(&cand_d)
                    .arg(&cand_p)
                    .arg(&pi)
                    .arg(&wi)
                    .arg(&dl.ids)
                    .arg(&mut out_d)
                    .arg(&mut out_id)
                    .launch(LaunchConfig {
                        grid_dim: (nb as u32, 1, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: 0,
                    })
            },
            "merge candidates",
        )?;
        Ok((qd, out_id, out_d))
    }
}

/// The encoding results of rows `r0..r0 + rows` (into `ids` and `idx`, whole: one id and
/// `idx.len() / ids.len()` indices a row) out of return buffer `back` once `done` (the copy
/// into it) has ended, laid out as `encode_pipelined` has them copied: ids (4 bytes each),
/// then indices.
fn take_back(
    done: &mut Option<CudaEvent>,
    back: &PinnedHostSlice<u8>,
    (r0, rows): (usize, usize),
    ids: &mut [u32],
    idx: &mut [u8],
) -> Result<()> {
    if let Some(e) = done.take() {
        e.synchronize().map_err(|e| dev_err("encode", e))?;
    }
    let nsub = idx.len() / ids.len().max(1);
    let bytes = back.as_slice().map_err(|e| dev_err("download", e))?;
    let (bi, bx) = bytes[..rows * (4 + nsub)].split_at(rows * 4);
    let ids = &mut ids[r0..r0 + rows];
    crate::stage::copy_spread(ids, bytemuck::cast_slice::<u8, u32>(bi));
    crate::stage::copy_spread(&mut idx[r0 * nsub..(r0 + rows) * nsub], bx);
    Ok(())
}

/// Step timings (`VLCC_CUDA_TRACE`): when recording, each step waits for the stream.
struct Trace(crate::trace::Trace);

impl Trace {
    fn new() -> Trace {
        Trace(crate::trace::Trace::new("cuda", "VLCC_CUDA_TRACE"))
    }
    fn mark(&mut self, s: &CudaStream, step: &'static str) {
        self.0.mark(step, || {
            let _ = s.synchronize();
        });
    }
}

/// A training set on the device.
struct CudaSession<'a> {
    trace: Trace,
    /// Distance GEMMs on TF32 tensor cores.
    tf32: bool,
    /// TF32 without the fp32 re-check (`allow_rough`).
    rough: bool,
    /// The points split into fp16 pieces for fp32-class GEMMs on tensor cores; `None` in
    /// TF32 sessions, or where the device had no room (then plain fp32 GEMMs).
    split: Option<Split>,
    b: &'a CudaBackend,
    n: usize,
    d: usize,
    k: usize,
    x: CudaSlice<f32>,
    xn: CudaSlice<f32>,
    assign: CudaSlice<u32>,
    dist: CudaSlice<f32>,
    order: CudaSlice<u32>,
    /// Each member's distance at its place in `order`.
    mdist: CudaSlice<f32>,
    /// Per-centroid buffers, sized at `set_centroids`.
    c: Option<Centroids>,
    /// Counts of the last assignment (host copy: they set the group offsets).
    counts: Vec<u32>,
    /// Whether the centroid buffers hold an update's spread.
    updated: bool,
}

struct Centroids {
    c: CudaSlice<f32>,
    /// The centroids split into fp16 pieces, in sessions with split points.
    c3: Option<Split>,
    cn: CudaSlice<f32>,
    off: CudaSlice<f32>,
    bias: CudaSlice<f32>,
    dots: CudaSlice<f32>,
    chunk: usize,
    counts: CudaSlice<u32>,
    energy: CudaSlice<f64>,
    start: CudaSlice<u32>,
    cursor: CudaSlice<u32>,
    spread: CudaSlice<f32>,
}

impl Centroids {
    /// What the assignment reads besides the centroids, once they have changed: their
    /// norms, and their fp16 pieces in split sessions.
    fn derive(&mut self, dev: &Device, k: usize, d: usize) -> Result<()> {
        row_norms(dev, &self.c, k, d, &mut self.cn)?;
        match self.c3.as_mut() {
            Some(c3) => c3.fill(dev, &self.c, k, d, true),
            None => Ok(()),
        }
    }
}

impl<'a> CudaSession<'a> {
    /// Sizes the per-centroid buffers for k centroids, lets `fill` write the centroids, and
    /// computes their norms.
    fn load_centroids(
        &mut self,
        k: usize,
        fill: impl FnOnce(&Device, &mut CudaSlice<f32>) -> Result<()>,
    ) -> Result<()> {
        as_i32(k, "centroids")?;
        let dev = self.b.lock();
        let s = &dev.stream;
        self.trace.mark(s, "host");
        if self.k != k || self.c.is_none() {
            self.c = Some(self.buffers(s, k)?);
            self.k = k;
            self.updated = false;
        }
        let cb = self.c.as_mut().expect("centroid buffers were just made");
        fill(&dev, &mut cb.c)?;
        cb.derive(&dev, k, self.d)?;
        self.trace.mark(s, "set_centroids");
        Ok(())
    }

    fn new(b: &'a CudaBackend, x: &[f32], d: usize) -> Result<Self> {
        let n = crate::error::whole_rows(x.len(), d, "values")?;
        as_i32(n, "points")?;
        as_i32(d, "dimension")?;
        let mut dev = b.lock();
        let mut trace = Trace::new();
        let xd = b.up_staged(&mut dev, x)?;
        let s = &dev.stream;
        let mut xn = CudaBackend::zeros::<f32>(s, n)?;
        row_norms(&dev, &xd, n, d, &mut xn)?;
        trace.mark(s, "upload");
        Ok(CudaSession {
            trace,
            tf32: false,
            rough: false,
            split: None,
            b,
            n,
            d,
            k: 0,
            x: xd,
            xn,
            assign: CudaBackend::zeros(s, n)?,
            dist: CudaBackend::zeros(s, n)?,
            order: CudaBackend::zeros(s, n)?,
            mdist: CudaBackend::zeros(s, n)?,
            c: None,
            counts: Vec::new(),
            updated: false,
        })
    }

    /// The points split for 3xFP16 GEMMs, or `None` where the three pieces would take more
    /// than half the free device memory (assignment then runs plain fp32 GEMMs).
    fn split_points(&self) -> Result<Option<Split>> {
        let dev = self.b.lock();
        let free = free_bytes(dev.stream.context());
        if Split::bytes(self.n, self.d) > free / 2 {
            return Ok(None);
        }
        let Some(mut out) = Split::if_room(&dev.stream, self.n, self.d)? else {
            return Ok(None);
        };
        out.fill(&dev, &self.x, self.n, self.d, false)?;
        Ok(Some(out))
    }

    fn buffers(&self, s: &Arc<CudaStream>, k: usize) -> Result<Centroids> {
        let z32 = |n| CudaBackend::zeros::<u32>(s, n);
        let zf = |n| CudaBackend::zeros::<f32>(s, n);
        let bytes = if self.tf32 || self.split.is_some() {
            (free_bytes(s.context()) / 8).clamp(DOTS_BYTES, TC_DOTS_BYTES)
        } else {
            DOTS_BYTES
        };
        let chunk = (bytes / (4 * k)).max(256).min(self.n.max(1));
        Ok(Centroids {
            c: zf(k * self.d)?,
            c3: match self.split {
                Some(_) => Some(Split::new(s, k, self.d)?),
                None => None,
            },
            cn: zf(k)?,
            off: zf(k)?,
            bias: zf(k)?,
            dots: zf(chunk * k)?,
            chunk,
            counts: z32(k)?,
            energy: CudaBackend::zeros::<f64>(s, 1)?,
            start: z32(k + 1)?,
            cursor: z32(k)?,
            spread: zf(k)?,
        })
    }
}

impl Drop for CudaSession<'_> {
    fn drop(&mut self) {
        // The buffers are freed on the dropping thread, which may not have the context.
        let _ = self.b.bind();
    }
}

impl KmeansSession for CudaSession<'_> {
    fn len(&self) -> usize {
        self.n
    }

    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        let d = self.d;
        let k = crate::error::whole_rows(centroids.len(), d, "centroid values")?;
        if k == 0 {
            return Err(Error::InvalidArgument("no centroids".into()));
        }
        let b = self.b;
        self.load_centroids(k, |dev, c| b.up_into(&dev.stream, centroids, c))
    }

    fn assign(&mut self, bias: Option<&[f32]>) -> Result<AssignStats> {
        let (n, d, k) = (self.n, self.d, self.k);
        let cb = self
            .c
            .as_mut()
            .ok_or_else(|| Error::InvalidState("assign before set_centroids".into()))?;
        let b = self.b;
        let dev = b.lock();
        let s = &dev.stream;
        self.trace.mark(s, "host");
        let use_bias: i32 = match bias {
            Some(v) if v.len() == k => {
                b.up_into(s, v, &mut cb.bias)?;
                1
            }
            Some(v) => {
                return Err(Error::InvalidArgument(format!(
                    "bias has {} values for {k} centroids",
                    v.len()
                )))
            }
            None => 0,
        };
        let (ni, ki) = (n as i32, k as i32);
        // SAFETY (all launches below): every buffer was sized from n, d and k at creation,
        // and the kernels index within those sizes.
        ran(
            unsafe {
                s.launch_builder(&dev.k.offsets)
                    .arg(&cb.cn)
                    .arg(&cb.bias)
                    .arg(&use_bias)
                    .arg(&ki)
                    .arg(&mut cb.off)
                    .launch(LaunchConfig::for_num_elems(k as u32))
            },
            "offsets",
        )?;
        // Exact sessions take 3xFP16 GEMMs where the split points fit (TF32 sessions have
        // none), TF32 sessions plain TF32; either is re-checked in fp32 wherever it could have
        // picked the wrong anchor (TF32 not while `rough`). Only plain fp32 GEMMs go unchecked.
        let split = self.split.as_ref().zip(cb.c3.as_ref());
        let _math = MathMode::set(&dev, self.tf32)?;
        let slack = match split {
            Some(_) => SPLIT_SLACK,
            None if self.tf32 && !self.rough => tf32_slack(d),
            None => 0f32,
        };
        let mut row0 = 0usize;
        while row0 < n {
            let rows = cb.chunk.min(n - row0);
            dots_rows(
                &dev,
                &self.x,
                &cb.c,
                split,
                k,
                d,
                (row0, rows),
                &mut cb.dots,
            )?;
            self.trace.mark(s, "gemm");
            Argmin {
                dots: &cb.dots,
                rows,
                k,
                off: &cb.off,
                bias: &cb.bias,
                use_bias: use_bias != 0,
                x: &self.x,
                xn: &self.xn,
                row0,
                d,
                c: &cb.c,
                cn: &cb.cn,
                slack,
                unscale: split.map(|(x3, c3)| (&x3.unscale, &c3.unscale)),
            }
            .launch(
                &dev,
                &mut self.assign.slice_mut(..),
                &mut self.dist.slice_mut(..),
            )?;
            self.trace.mark(s, "argmin");
            row0 += rows;
        }
        s.memset_zeros(&mut cb.counts)
            .map_err(|e| dev_err("clear counts", e))?;
        s.memset_zeros(&mut cb.energy)
            .map_err(|e| dev_err("clear energy", e))?;
        ran(
            unsafe {
                s.launch_builder(&dev.k.count_energy)
                    .arg(&self.assign)
                    .arg(&self.dist)
                    .arg(&ni)
                    .arg(&mut cb.counts)
                    .arg(&mut cb.energy)
                    .launch(strided(n, b.sms))
            },
            "counts",
        )?;
        let counts = b.down(s, &cb.counts)?;
        let energy = b.down(s, &cb.energy)?[0];
        self.counts.clone_from(&counts);
        self.trace.mark(s, "counts");
        Ok(AssignStats { counts, energy })
    }

    fn allow_rough(&mut self, rough: bool) {
        self.rough = rough;
    }

    fn update(&mut self, trim: f32) -> Result<()> {
        let (n, d, k) = (self.n, self.d, self.k);
        let cb = self
            .c
            .as_mut()
            .ok_or_else(|| Error::InvalidState("update before set_centroids".into()))?;
        if self.counts.len() != k {
            return Err(Error::InvalidState("update before assign".into()));
        }
        let b = self.b;
        let dev = b.lock();
        let s = &dev.stream;
        self.trace.mark(s, "host");
        let (ni, di) = (n as i32, d as i32);
        // Group offsets from the counts the host already has.
        let mut start = Vec::with_capacity(k + 1);
        let mut acc = 0u32;
        start.push(0);
        for &c in &self.counts {
            acc += c;
            start.push(acc);
        }
        b.up_into(s, &start, &mut cb.start)?;
        b.up_into(s, &start[..k], &mut cb.cursor)?;
        ran(
            unsafe {
                s.launch_builder(&dev.k.scatter)
                    .arg(&self.assign)
                    .arg(&self.dist)
                    .arg(&ni)
                    .arg(&mut cb.cursor)
                    .arg(&mut self.order)
                    .arg(&mut self.mdist)
                    .launch(strided(n, b.sms))
            },
            "group",
        )?;
        self.trace.mark(s, "scatter");
        // Warps take 32 members at a time, so the largest group sets the kernel's time: enough
        // warps for it (up to eight), not for the mean group.
        let most = self.counts.iter().copied().max().unwrap_or(0) as usize;
        let threads = (most.div_ceil(32) * 32).clamp(32, 256) as u32;
        ran(
            unsafe {
                s.launch_builder(&dev.k.update_means)
                    .arg(&self.x)
                    .arg(&di)
                    .arg(&self.order)
                    .arg(&self.mdist)
                    .arg(&cb.start)
                    .arg(&trim)
                    .arg(&mut cb.c)
                    .arg(&mut cb.spread)
                    .launch(LaunchConfig {
                        grid_dim: (k as u32, 1, 1),
                        block_dim: (threads, 1, 1),
                        shared_mem_bytes: 0,
                    })
            },
            "means",
        )?;
        self.trace.mark(s, "means");
        cb.derive(&dev, k, d)?;
        self.trace.mark(s, "norms");
        self.updated = true;
        Ok(())
    }

    fn centroids_and_spread(&mut self) -> Result<(Vec<f32>, Vec<f32>)> {
        let cb = self
            .c
            .as_ref()
            .filter(|_| self.updated)
            .ok_or_else(|| Error::InvalidState("spread before update".into()))?;
        let dev = self.b.lock();
        let c = self.b.down(&dev.stream, &cb.c)?;
        Ok((c, self.b.down(&dev.stream, &cb.spread)?))
    }

    fn centroids(&mut self) -> Result<Vec<f32>> {
        let cb = self
            .c
            .as_ref()
            .ok_or_else(|| Error::InvalidState("no centroids yet".into()))?;
        let dev = self.b.lock();
        self.trace.mark(&dev.stream, "host");
        let c = self.b.down(&dev.stream, &cb.c);
        self.trace.mark(&dev.stream, "get_centroids");
        c
    }

    fn assignment(&mut self) -> Result<Vec<u32>> {
        let dev = self.b.lock();
        self.b.down(&dev.stream, &self.assign)
    }

    fn assignment_with_distances(&mut self) -> Result<(Vec<u32>, Vec<f32>)> {
        let dev = self.b.lock();
        let a = self.b.down(&dev.stream, &self.assign)?;
        Ok((a, self.b.down(&dev.stream, &self.dist)?))
    }
}

/// Free and total bytes on device `ordinal` (for leak checks and reports).
pub fn memory_info(ordinal: usize) -> Result<(usize, usize)> {
    let ctx = CudaContext::new(ordinal).map_err(|e| dev_err("create context", e))?;
    ctx.mem_get_info().map_err(|e| dev_err("memory info", e))
}
