//! The CUDA backend: cudarc with the driver, NVRTC and cuBLAS loaded at run time, so one
//! binary runs with or without a GPU. Kernels are `kernels/cuda/*.cu`, compiled once per context.
//!
//! A k-means session keeps points, centroids, assignments and distances on the device. Per
//! iteration only O(k) values cross: the bias and group offsets up, counts, energy and
//! spreads down. Encoding runs anchor assignment, residual, rotation and PQ in one device
//! pass per block; search keeps the last searched index's lists on the device.

use super::{
    AssignStats, Backend, BackendKind, BackendOptions, Caps, CodebookView, DeviceRerank,
    KmeansSession, KmeansShape, ListsView, PqAssignShape, Resident, RowsView, SearchShape, Shape,
    Transfers,
};
use crate::error::{Error, Result};
use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr,
    DevicePtrMut, DeviceRepr, DriverError, LaunchConfig, PinnedHostSlice, PushKernelArg,
    ValidAsZeroBits,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod device;
mod encode;
mod gemm;
mod kmeans;
mod memory;
mod search;

use device::*;
use encode::*;
use gemm::*;
use kmeans::*;
use search::*;

/// Every kernel source, by file name: compiled together at context creation and by the tests.
pub const KERNELS: &[(&str, &str)] = &[
    ("kmeans.cu", include_str!("../../../kernels/cuda/kmeans.cu")),
    ("encode.cu", include_str!("../../../kernels/cuda/encode.cu")),
    ("search.cu", include_str!("../../../kernels/cuda/search.cu")),
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
    /// Bytes of shared memory the list scan may give its table (`scan_shared_memory`).
    scan_smem: usize,
    h2d: AtomicU64,
    d2h: AtomicU64,
    opts: BackendOptions,
    /// Bytes the buffers may take (0 = no cap; `Backend::set_memory_cap`).
    memory_cap: std::sync::atomic::AtomicUsize,
}

/// Opens device `ordinal`: checks the libraries, creates the context, compiles the kernels.
pub fn open(ordinal: usize, opts: &BackendOptions) -> Result<Box<dyn Backend>> {
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
        trim_cuts: f(0, "trim_cuts")?,
        add_kept: f(0, "add_kept")?,
        finish_means: f(0, "finish_means")?,
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
        error_levels: f(1, "error_levels")?,
        first_non_finite: f(1, "first_non_finite")?,
        unit_rows: f(1, "unit_rows")?,
        coarse_probe: f(2, "coarse_probe")?,
        query_tables: f(2, "query_tables")?,
        scan_lists: f(2, "scan_lists")?,
        merge_candidates: f(2, "merge_candidates")?,
        range_lists: f(2, "range_lists")?,
        rerank_rows: [f(2, "rerank_rows")?, f(2, "rerank_rows4")?],
    };
    let scan_smem = scan_shared_memory(&ctx, &k.scan_lists)?;
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
        scan_smem,
        opts: opts.clone(),
        h2d: 0.into(),
        d2h: 0.into(),
        memory_cap: 0.into(),
    }))
}

/// Bytes of shared memory the list scan may take for its table: what a block may opt in to
/// (227 KB on H100), less the scan's own 400-odd bytes. Larger tables are read from global
/// memory instead.
fn scan_shared_memory(ctx: &CudaContext, scan: &CudaFunction) -> Result<usize> {
    use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
    let optin = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(|e| dev_err("query device", e))?;
    let bytes = (optin.max(48 << 10) - 1024) as usize;
    scan.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        bytes as i32,
    )
    .map_err(|e| dev_err("set the scan's shared memory", e))?;
    Ok(bytes)
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

    /// Uploads an array of 8 MB or more through the staging buffers (the plain path for
    /// smaller ones, or when page-locked memory cannot be had), checking every value:
    /// `Error::NonFinite`, with the position within `v`, where one is NaN or infinite.
    fn up_staged(&self, dev: &mut Device, v: &[f32]) -> Result<CudaSlice<f32>> {
        // SAFETY: every element is written by the copies below before any kernel reads it.
        let mut out = unsafe { CudaBackend::filled_later::<f32>(&dev.stream, v.len())? };
        self.up_staged_into(dev, v, &mut out.slice_mut(..), "training vectors")?;
        Ok(out)
    }

    /// `up_staged` into `out` (v.len() values); `what` names the values in errors.
    fn up_staged_into(
        &self,
        dev: &mut Device,
        v: &[f32],
        out: &mut CudaViewMut<'_, f32>,
        what: &str,
    ) -> Result<()> {
        let s = dev.stream.clone();
        self.h2d
            .fetch_add(std::mem::size_of_val(v) as u64, Ordering::Relaxed);
        // Page-locked copies run at about three times the speed of pageable ones (streamed
        // k-means sessions upload blocks of a few MB at every pass).
        let Some(st) = (v.len() >= STAGE / 4).then(|| dev.staging()).flatten() else {
            crate::check::check_finite(v, what)?;
            return s.memcpy_htod(v, out).map_err(|e| dev_err("upload", e));
        };
        for (i, chunk) in v.chunks(STAGE).enumerate() {
            let b = i % BUFS;
            let Some(host) = st.fill(b, chunk)? else {
                return Err(crate::check::non_finite_in(v, what));
            };
            let mut dst = out.slice_mut(i * STAGE..i * STAGE + chunk.len());
            // From page-locked memory the copy is asynchronous: the event says when the
            // buffer may be refilled.
            s.memcpy_htod(host, &mut dst)
                .map_err(|e| dev_err("upload", e))?;
            st.sent[b] = Some(s.record_event(None).map_err(|e| dev_err("upload", e))?);
        }
        Ok(())
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

    /// Device bytes free for the next buffers: `device::free_bytes`, under the memory cap.
    fn free_bytes(&self, ctx: &CudaContext) -> usize {
        let free = free_bytes(ctx);
        match self.memory_cap.load(Ordering::Relaxed) {
            0 => free,
            cap => free.min(cap.saturating_sub(pool_used(ctx))),
        }
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
    fn options(&self) -> &BackendOptions {
        &self.opts
    }
    fn set_memory_cap(&self, bytes: usize) {
        self.memory_cap.store(bytes, Ordering::Relaxed);
    }
    fn memory_free(&self) -> Option<usize> {
        let dev = self.lock();
        Some(self.free_bytes(dev.stream.context()))
    }
    fn memory_usage(&self, reset: bool) -> Option<(usize, usize)> {
        let dev = self.lock();
        pool_usage_of(dev.stream.context(), reset).ok().flatten()
    }
    fn gathered_values(&self, _threads: usize) -> usize {
        GATHER_VALUES
    }
    fn kmeans_device_bytes(&self, s: KmeansShape) -> usize {
        memory::kmeans_bytes(s, self.memory_free().unwrap_or(usize::MAX / 2))
    }
    fn pq_assign_device_bytes(&self, s: PqAssignShape) -> usize {
        memory::pq_assign_bytes(s, self.memory_free().unwrap_or(usize::MAX / 2))
    }
    fn encode_device_bytes(&self, s: &Shape, n: usize) -> usize {
        memory::encode_bytes(s, n)
    }
    fn search_device_bytes(&self, s: &SearchShape) -> usize {
        s.list_scan_bytes(QUERY_BATCH)
    }
    fn caps(&self) -> Caps {
        Caps {
            concurrent_calls: false,
            device_pointers: true,
            list_search: true,
            range_search: true,
            max_candidates: MAX_WANT,
            scan_bits: &[8, 4],
            // Tables beyond shared memory are read from global memory: any size.
            max_scan_table: usize::MAX,
            // Its fp16 splits are in its own estimates.
            fp16_rows: false,
        }
    }
    fn kmeans_session_in_place<'a>(
        &'a self,
        rows: RowsView<'a>,
        precision: crate::params::Precision,
    ) -> Result<Box<dyn KmeansSession + 'a>> {
        let tf32 = precision == crate::params::Precision::Tf32;
        Ok(Box::new(CudaSession::new(self, rows, tf32)?))
    }
    fn pq_assign(&self, y: &[f32], nsub: usize, dsub: usize, books: &[f32]) -> Result<Vec<u8>> {
        let dp = nsub * dsub;
        if !pq_kernel_fits(dsub, books.len() / dp.max(1)) || !y.len().is_multiple_of(dp) {
            return super::host::pq_assign(self, y, nsub, dsub, books);
        }
        if y.is_empty() {
            return Ok(Vec::new());
        }
        let dev = self.lock();
        let s = &dev.stream;
        let bd = self.up(s, books)?;
        let (n, ksub) = (y.len() / dp, books.len() / dp);
        // Blocks of rows in half the free memory, so that a memory cap holds.
        let row = dp * 4 + nsub;
        let block = (self.free_bytes(s.context()) / 2 / row).clamp(1024, n.max(1024));
        let mut out = Vec::with_capacity(n * nsub);
        for part in y.chunks(block * dp) {
            let m = part.len() / dp;
            let yd = self.up(s, part)?;
            // SAFETY: the PQ kernel writes every index.
            let mut idx = unsafe { CudaBackend::filled_later::<u8>(s, m * nsub)? };
            let rows = PqRows::Padded(&yd);
            let out_rows = &mut idx.slice_mut(..);
            pq_assign_into(&dev, &rows, m, (nsub, nsub), dsub, &bd, ksub, out_rows)?;
            out.extend(self.down(s, &idx)?);
        }
        Ok(out)
    }

    fn checks_input(&self) -> bool {
        true
    }

    fn encode_residuals(&self, cb: &CodebookView, x: &[f32]) -> Result<(Vec<u32>, Vec<u8>)> {
        let n = crate::check::whole_rows(x.len(), cb.d, "values")?;
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        if let Some(r) = self.encode_resident(cb, Source::Host(x))? {
            return Ok(r);
        }
        // Shapes the kernels do not take, or no page-locked memory: step by step.
        crate::check::check_finite(x, "vectors")?;
        super::host::encode_in_steps(self, cb, x)
    }

    unsafe fn encode_device(
        &self,
        cb: &CodebookView,
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
        crate::check::check_finite(&x, "vectors")?;
        let x = match cb.metric {
            crate::params::Metric::Cosine => super::layout::unit_rows(x, cb.d),
            _ => x.into(),
        };
        super::host::encode_in_steps(self, cb, &x)
    }

    fn searcher<'a>(
        &'a self,
        cb: &CodebookView<'a>,
        lists: &ListsView,
        job: super::SearchJob,
    ) -> Result<super::Session<'a>> {
        self.open_searcher(cb, lists, job)
    }

    unsafe fn rerank_device(
        &self,
        cb: &CodebookView,
        q: &[f32],
        cands: &[u64],
        want: usize,
        raw: DeviceRerank,
        poll: super::Poll,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let d = cb.d;
        self.check_rerank(d, want, raw)?;
        self.bind()?;
        let dev = self.lock();
        let s = &dev.stream;
        let mut bad = self.rerank_flags(s)?;
        let (mut ids, mut dist) = (Vec::new(), Vec::new());
        for (qb, candb) in q
            .chunks(QUERY_BATCH * d)
            .zip(cands.chunks(QUERY_BATCH * want))
        {
            poll()?;
            let (qd, cd) = (self.up(s, qb)?, self.up(s, candb)?);
            let (i, v) = self.rerank_batch(&dev, cb, &qd, &cd, want, raw, &mut bad)?;
            ids.extend(i);
            dist.extend(v);
        }
        self.rerank_errors(s, &bad)?;
        Ok((ids, dist))
    }

    fn transfers(&self) -> Transfers {
        Transfers {
            h2d_bytes: self.h2d.load(Ordering::Relaxed),
            d2h_bytes: self.d2h.load(Ordering::Relaxed),
        }
    }
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

/// Step timings (`BackendOptions::trace_device`): when recording, each step waits for the
/// stream.
struct Trace(crate::trace::Trace);

impl Trace {
    fn new(b: &CudaBackend) -> Trace {
        Trace(crate::trace::Trace::new(
            "cuda",
            b.opts.trace_device.as_ref(),
        ))
    }
    fn mark(&mut self, s: &CudaStream, step: &'static str) {
        self.0.mark(step, || {
            let _ = s.synchronize();
        });
    }
}

/// Device memory taken from device `ordinal`'s memory pool by stream-ordered allocations,
/// which every buffer of this backend is: (now, the most since the last reset), in bytes;
/// `reset` then starts the high-water mark again from now. How tests and examples measure a
/// call's device peak. `None` where the device has no pool.
pub fn pool_usage(ordinal: usize, reset: bool) -> Result<Option<(usize, usize)>> {
    let ctx = CudaContext::new(ordinal).map_err(|e| dev_err("create context", e))?;
    pool_usage_of(&ctx, reset)
}

/// `pool_usage` for the device of `ctx`.
fn pool_usage_of(ctx: &CudaContext, reset: bool) -> Result<Option<(usize, usize)>> {
    use cudarc::driver::{result, sys::CUmemPool_attribute as A};
    let Some(pool) = device::device_pool(ctx) else {
        return Ok(None);
    };
    let get = |a| device::pool_attribute(pool, a);
    let now = get(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?;
    let high = get(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?;
    if reset {
        let mut zero = 0u64;
        // SAFETY: a live pool; the high-water mark is a u64 that may only be set to 0.
        unsafe {
            result::mem_pool::set_attribute(
                pool,
                A::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut zero as *mut u64).cast(),
            )
        }
        .map_err(|e| dev_err("memory pool", e))?;
    }
    Ok(Some((now as usize, high as usize)))
}

/// Free and total bytes on device `ordinal` (for leak checks and reports).
pub fn memory_info(ordinal: usize) -> Result<(usize, usize)> {
    let ctx = CudaContext::new(ordinal).map_err(|e| dev_err("create context", e))?;
    ctx.mem_get_info().map_err(|e| dev_err("memory info", e))
}
