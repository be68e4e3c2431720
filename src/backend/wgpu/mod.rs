//! The WGPU backend: the same engine on any Vulkan or Metal GPU (and on a software Vulkan
//! driver such as lavapipe, where CI runs it). Kernels are `kernels/wgpu/*.wgsl`, built once per
//! context with workgroup sizes and workgroup-memory budgets taken from the adapter's limits.
//!
//! As with CUDA, a k-means session keeps points, centroids, assignments and distances on the
//! device and brings back only O(k) values per iteration; encoding runs assignment, residual,
//! rotation and PQ in one submission per block; search keeps the last index's lists resident.
//! Arrays larger than one storage binding are split into blocks of rows.

mod buffers;
mod device;
mod encode;
mod gemm;
mod host;
mod kmeans;
mod memory;
mod mma;
mod search;

use buffers::*;
use device::*;
use gemm::*;

use super::{
    Backend, BackendKind, BackendOptions, Caps, CodebookView, KmeansSession, KmeansShape,
    ListsView, PqAssignShape, RowsView, SearchShape, ShaderChecks, Shape, Transfers,
};
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use kmeans::WgpuSession;

/// Every kernel source, by file name: built at context creation and validated by the tests.
pub const KERNELS: &[(&str, &str)] = &[
    ("dots.wgsl", include_str!("../../../kernels/wgpu/dots.wgsl")),
    (
        "kmeans.wgsl",
        include_str!("../../../kernels/wgpu/kmeans.wgsl"),
    ),
    (
        "encode.wgsl",
        include_str!("../../../kernels/wgpu/encode.wgsl"),
    ),
    (
        "search.wgsl",
        include_str!("../../../kernels/wgpu/search.wgsl"),
    ),
    ("mma.wgsl", include_str!("../../../kernels/wgpu/mma.wgsl")),
];

/// Widest sub-vector the PQ kernel keeps in registers (its `DSUB` is set per codebook).
const MAX_DSUB: usize = 32;

/// Rows per tile of the dot-product kernels (`T` in dots.wgsl).
const TILE: usize = 128;

/// Workgroups per grid dimension that every adapter accepts.
const MAX_GROUPS: u32 = 65_535;

/// Sets `const NAME: u32 = ...u;` in a kernel source: how adapter limits reach the WGSL.
pub fn with_const(src: &str, name: &str, value: u32) -> String {
    let key = format!("const {name}: u32 = ");
    let Some(at) = src.find(&key) else {
        return src.to_string();
    };
    let end = at + src[at..].find(';').expect("a const line ends with ;");
    format!("{}{key}{value}u{}", &src[..at], &src[end..])
}

struct Pipelines {
    dots: wgpu::ComputePipeline,
    assign: wgpu::ComputePipeline,
    row_norms: wgpu::ComputePipeline,
    offsets: wgpu::ComputePipeline,
    group_starts: wgpu::ComputePipeline,
    count_energy: wgpu::ComputePipeline,
    scatter: wgpu::ComputePipeline,
    update_cut: wgpu::ComputePipeline,
    update_sums: wgpu::ComputePipeline,
    finalize: wgpu::ComputePipeline,
    residuals: wgpu::ComputePipeline,
    error_levels: wgpu::ComputePipeline,
    pack: wgpu::ComputePipeline,
}

/// The WGPU backend: one adapter, its device and queue, and the built pipelines.
pub struct WgpuBackend {
    name: String,
    cpu_adapter: bool,
    device: wgpu::Device,
    queue: wgpu::Queue,
    limits: wgpu::Limits,
    wg: u32,
    k: Pipelines,
    search: Mutex<search::PipeCache>,
    /// PQ assignment pipelines by sub-vector width.
    pq: Mutex<Vec<(usize, Arc<wgpu::ComputePipeline>)>>,
    /// The first error the device reported outside a scope, not yet returned.
    fault: Arc<Mutex<Option<Error>>>,
    /// Why the device was lost, once it is: every later call answers with it.
    lost: Arc<OnceLock<String>>,
    /// Submissions left before the test hook destroys the device (0: never).
    #[cfg(feature = "test-hooks")]
    lose_after: AtomicU64,
    /// Parameter blocks by content: iterations repeat the same few, so each is made once.
    uniforms: Mutex<HashMap<[u32; 12], Buf>>,
    h2d: AtomicU64,
    d2h: AtomicU64,
    /// The device memory cap (0: none), checked at each buffer's creation.
    memory_cap: AtomicUsize,
    /// The most device memory the allocator held after a buffer's creation since the last
    /// `memory_usage` reset, kept once `memory_usage` has been asked (`watch_memory`).
    high_water: AtomicUsize,
    watch_memory: std::sync::atomic::AtomicBool,
    /// Bytes of the buffers this backend made that the device may still hold (`Buf`).
    count: Arc<Count>,
    lists: Mutex<super::Resident<search::DeviceLists>>,
    codebook: Mutex<super::Resident<encode::DeviceCodebook>>,
    /// Host-memory staging for large uploads (Vulkan adapters; `None` elsewhere).
    host: Mutex<Option<host::HostPool>>,
    /// Assignment on cooperative matrices, or why it is not used.
    coop: std::result::Result<mma::Mma, String>,
    opts: BackendOptions,
}

/// Adapters, real GPUs first (a CPU adapter is a software driver).
fn adapters() -> Vec<wgpu::Adapter> {
    let backends = wgpu::Backends::VULKAN | wgpu::Backends::METAL;
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let mut all = pollster::block_on(instance.enumerate_adapters(backends));
    all.sort_by_key(|a| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    });
    all
}

/// Opens adapter `device` (real GPUs are numbered before software ones).
pub fn open(device: usize, opts: &BackendOptions) -> Result<WgpuBackend> {
    let all = adapters();
    let found = all.len();
    let Some(adapter) = all.into_iter().nth(device) else {
        return Err(Error::BackendUnavailable(if found == 0 {
            "no Vulkan or Metal adapter was found".into()
        } else {
            format!("WGPU adapter {device} does not exist ({found} found)")
        }));
    };
    let info = adapter.get_info();
    let limits = adapter.limits();
    if limits.max_compute_invocations_per_workgroup < 256
        || limits.max_compute_workgroup_size_x < 16
        || limits.max_compute_workgroup_size_y < 16
        || limits.max_compute_workgroup_storage_size < 16 << 10
    {
        return Err(Error::BackendUnavailable(format!(
            "{}: compute limits below what the kernels need (256 threads, 16 KB per workgroup)",
            info.name
        )));
    }
    let coop = mma::supported(&adapter, opts.wgpu.cooperative);
    let (device, queue) = pollster::block_on(
        adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("vlc_compress"),
            required_features: coop
                .as_ref()
                .map_or(wgpu::Features::empty(), |c| c.features),
            required_limits: limits.clone(),
            // SAFETY: the one experimental feature asked for is cooperative matrices, used by
            // mma.wgsl alone; tests/wgpu.rs checks its answers against the CPU's.
            experimental_features: match coop {
                Ok(_) => unsafe { wgpu::ExperimentalFeatures::enabled() },
                Err(_) => wgpu::ExperimentalFeatures::disabled(),
            },
            ..Default::default()
        }),
    )
    .map_err(|e| Error::BackendUnavailable(format!("{}: {e}", info.name)))?;
    let fault: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
    let f = fault.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        let mine = match e {
            wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory(format!("WGPU: {e}")),
            _ => Error::Device(format!("WGPU: {e}")),
        };
        f.lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(mine);
    }));
    // Nothing here destroys the device but the test hook below, so every loss is reported.
    let lost: Arc<OnceLock<String>> = Arc::default();
    let l = lost.clone();
    device.set_device_lost_callback(move |reason, msg| {
        let why = format!("WGPU: the device was lost ({reason:?})");
        let _ = l.set(if msg.is_empty() {
            why
        } else {
            format!("{why}: {msg}")
        });
    });
    let wg = workgroup_size(&limits);
    // A smaller binding cap makes tests split arrays into blocks on any adapter.
    let mut limits = limits;
    if opts.wgpu.max_binding > 0 {
        let cap = opts.wgpu.max_binding;
        limits.max_storage_buffer_binding_size =
            limits.max_storage_buffer_binding_size.min(cap.max(4096));
    }
    let (dots, kmeans, encode) = (
        module(&device, &limits, opts.wgpu.checks, "dots.wgsl", &[])?,
        module(&device, &limits, opts.wgpu.checks, "kmeans.wgsl", &[])?,
        module(&device, &limits, opts.wgpu.checks, "encode.wgsl", &[])?,
    );
    let pipe = |m: &wgpu::ShaderModule, entry: &str| pipeline(&device, m, entry);
    let k = Pipelines {
        dots: pipe(&dots, "dots")?,
        assign: pipe(&dots, "assign")?,
        row_norms: pipe(&kmeans, "row_norms")?,
        offsets: pipe(&kmeans, "offsets")?,
        group_starts: pipe(&kmeans, "group_starts")?,
        count_energy: pipe(&kmeans, "count_energy")?,
        scatter: pipe(&kmeans, "scatter")?,
        update_cut: pipe(&kmeans, "update_cut")?,
        update_sums: pipe(&kmeans, "update_sums")?,
        finalize: pipe(&kmeans, "finalize")?,
        residuals: pipe(&encode, "residuals")?,
        error_levels: pipe(&encode, "error_levels")?,
        pack: pipe(&encode, "pack")?,
    };
    // Where the adapter offers cooperative matrices but their kernels do not build, the
    // fp32 kernels serve alone.
    let coop = coop.and_then(|c| {
        mma::Mma::new(&device, &limits, opts.wgpu.checks, &c)
            .map_err(|e| format!("its kernels failed: {e}"))
    });
    Ok(WgpuBackend {
        name: format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type),
        cpu_adapter: info.device_type == wgpu::DeviceType::Cpu,
        queue,
        limits,
        wg,
        k,
        search: Mutex::new(Vec::new()),
        pq: Mutex::new(Vec::new()),
        fault,
        lost,
        #[cfg(feature = "test-hooks")]
        lose_after: AtomicU64::new(opts.wgpu.lose_after),
        uniforms: Mutex::new(Default::default()),
        h2d: AtomicU64::new(0),
        d2h: AtomicU64::new(0),
        memory_cap: AtomicUsize::new(0),
        high_water: AtomicUsize::new(0),
        watch_memory: std::sync::atomic::AtomicBool::new(false),
        count: Arc::new(Count::new()),
        lists: Mutex::new(super::Resident::new()),
        codebook: Mutex::new(super::Resident::new()),
        // Mapped uploads are what adapters without host-memory staging do (tests run that
        // path on any adapter).
        host: Mutex::new(match opts.wgpu.mapped_uploads {
            true => None,
            false => host::HostPool::new(&device, STREAM_PIECE),
        }),
        opts: opts.clone(),
        coop,
        device,
    })
}

/// Step timings (`BackendOptions::trace_device`): when recording, each step is submitted on its own and
/// waited for.
pub(crate) struct Trace(crate::trace::Trace);

impl Trace {
    pub fn new(b: &WgpuBackend) -> Trace {
        Trace(crate::trace::Trace::new(
            "wgpu",
            b.opts.trace_device.as_ref(),
        ))
    }
    pub fn recording(&self) -> bool {
        self.0.recording()
    }
    pub fn note(&self, line: impl FnOnce() -> String) {
        self.0.note(line)
    }
    /// Ends a step: when recording, submits what `enc` holds, waits, and starts a new encoder.
    pub fn mark(&mut self, b: &WgpuBackend, enc: &mut Rec, step: &'static str) {
        self.0.mark(step, || {
            let done = std::mem::replace(enc, b.encoder());
            let _ = b.finish(done);
        });
    }
}

impl Backend for WgpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wgpu
    }
    fn options(&self) -> &BackendOptions {
        &self.opts
    }
    fn caps(&self) -> Caps {
        Caps {
            concurrent_calls: false,
            device_pointers: false,
            list_search: true,
            // No range kernel yet: range searches scan on the host (reported).
            range_search: false,
            max_candidates: search::MAX_WANT,
            scan_bits: &[8, 4],
            // A query's table (M x ksub floats) in workgroup memory where it fits beside the
            // scan's own buffers, else read from storage: any size.
            max_scan_table: usize::MAX,
            fp16_rows: self.mma().is_some(),
        }
    }
    fn describe(&self) -> String {
        format!(
            "wgpu ({}; {} KB workgroup memory, {} MB per binding; uploads through {}; \
             assignment on {}; device memory {})",
            self.name,
            self.limits.max_compute_workgroup_storage_size >> 10,
            self.max_binding() >> 20,
            match *self.host.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(_) => "host memory",
                None => "mapped buffers",
            },
            match &self.coop {
                Ok(m) if m.emulated() => "cooperative matrices (emulated)".to_string(),
                Ok(_) => "cooperative matrices".to_string(),
                Err(why) => format!("fp32 cores; no cooperative matrices: {why}"),
            },
            match self.counts_own_buffers() {
                true => "counted from its buffers",
                false => "from the allocator's report",
            }
        )
    }
    fn kmeans_session_in_place<'a>(
        &'a self,
        rows: RowsView<'a>,
        _precision: crate::params::Precision, // exact always: the fp32 answers, on any kernel
    ) -> Result<Box<dyn KmeansSession + 'a>> {
        Ok(Box::new(WgpuSession::new(self, rows)?))
    }
    fn pq_assign(&self, y: &[f32], nsub: usize, dsub: usize, books: &[f32]) -> Result<Vec<u8>> {
        let dp = nsub * dsub;
        let ksub = books.len() / dp.max(1);
        if !self.pq_fits(dsub, ksub) || !y.len().is_multiple_of(dp) {
            return super::host::pq_assign(self, y, nsub, dsub, books);
        }
        let n = y.len() / dp;
        let bd = self.upload(books, "sub-codebooks")?;
        let mut out = Vec::with_capacity(n * nsub);
        let per = self
            .rows_per_block(dp * 2)
            .min(MAX_GROUPS as usize * self.wg as usize)
            .min(self.rows_in_cap(dp * 4 + 6 * nsub, 2, 1024));
        for block in y.chunks(per * dp) {
            let rows = block.len() / dp;
            let yd = self.upload(block, "PQ input")?;
            let mut enc = self.encoder();
            let packed = self.pq_on_device(&mut enc, &yd, rows, nsub, dsub, (&bd, None), ksub)?;
            out.extend(self.read(enc, &[(&packed, rows * nsub)])?.remove(0));
        }
        Ok(out)
    }
    fn checks_input(&self) -> bool {
        true
    }

    fn encode_residuals(&self, cb: &CodebookView, x: &[f32]) -> Result<(Vec<u32>, Vec<u8>)> {
        encode::encode_residuals(self, cb, x)
    }
    fn searcher<'a>(
        &'a self,
        cb: &CodebookView<'a>,
        lists: &ListsView,
        job: crate::backend::SearchJob,
    ) -> Result<crate::backend::Session<'a>> {
        search::open_searcher(self, cb, lists, job)
    }
    fn set_memory_cap(&self, bytes: usize) {
        self.memory_cap.store(bytes, Ordering::Relaxed);
    }
    fn memory_free(&self) -> Option<usize> {
        match self.memory_cap.load(Ordering::Relaxed) {
            0 => None,
            cap => Some(cap.saturating_sub(self.in_use())),
        }
    }
    fn gathered_values(&self, threads: usize) -> usize {
        threads.max(1) * FILL_PIECE / 4
    }
    fn kmeans_device_bytes(&self, s: KmeansShape) -> usize {
        memory::kmeans_bytes(s, self.memory_free(), self.caps().fp16_rows)
    }
    fn pq_assign_device_bytes(&self, s: PqAssignShape) -> usize {
        memory::pq_assign_bytes(s, self.memory_free())
    }
    fn encode_device_bytes(&self, s: &Shape, n: usize) -> usize {
        memory::encode_bytes(s, n, self.memory_free(), self.caps().fp16_rows)
    }
    fn search_device_bytes(&self, s: &SearchShape) -> usize {
        s.list_scan_bytes(search::QUERY_BATCH)
    }
    fn memory_usage(&self, reset: bool) -> Option<(usize, usize)> {
        self.watch_memory.store(true, Ordering::Relaxed);
        let now = self.allocated();
        let high = match reset {
            true => self.high_water.swap(now, Ordering::Relaxed),
            false => self.high_water.load(Ordering::Relaxed),
        };
        Some((now, high.max(now)))
    }
    fn transfers(&self) -> Transfers {
        Transfers {
            h2d_bytes: self.h2d.load(Ordering::Relaxed),
            d2h_bytes: self.d2h.load(Ordering::Relaxed),
        }
    }
}
