//! The WGPU backend: the same engine on any Vulkan or Metal GPU (and on a software Vulkan
//! driver such as lavapipe, where CI runs it). Kernels are `kernels/wgpu/*.wgsl`, built once per
//! context with workgroup sizes and workgroup-memory budgets taken from the adapter's limits.
//!
//! As with CUDA, a k-means session keeps points, centroids, assignments and distances on the
//! device and brings back only O(k) values per iteration; encoding runs assignment, residual,
//! rotation and PQ in one submission per block; search keeps the last index's lists resident.
//! Arrays larger than one storage binding are split into blocks of rows.

mod host;
mod mma;
mod search;
mod session;

use super::{Backend, BackendKind, Caps, CodebookView, KmeansSession, ListsView, Transfers};
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use session::WgpuSession;

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

/// Kernel file `name` built for this adapter: the constants its limits set, then `extra`
/// (constants per codebook or index shape) over them.
fn module(
    device: &wgpu::Device,
    limits: &wgpu::Limits,
    name: &str,
    extra: &[(&str, u32)],
) -> Result<wgpu::ShaderModule> {
    module_of(device, limits, name, kernel(name), extra)
}

/// The source of kernel file `name`.
fn kernel(name: &str) -> &'static str {
    KERNELS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
        .expect("every kernel file is listed")
}

/// `module` for the text `src` (a kernel file, or one changed for a test).
fn module_of(
    device: &wgpu::Device,
    limits: &wgpu::Limits,
    name: &str,
    src: &str,
    extra: &[(&str, u32)],
) -> Result<wgpu::ShaderModule> {
    let mut s = with_const(src, "WG", workgroup_size(limits));
    s = with_const(&s, "BOOK", book_floats(limits) as u32);
    s = with_const(&s, "TK", dots_step(limits));
    for (c, v) in extra {
        s = with_const(&s, c, *v);
    }
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(s.into()),
    };
    // SAFETY: short of `all` (`runtime_checks`), every loop of these kernels ends (each counts
    // up to a bound taken from its parameters) and no division is by zero (divisors are
    // constants or checked sizes); without `bounds`, every index they make is in range (the
    // host sizes each dispatch and binding; tests/wgpu.rs runs them against the CPU).
    scoped(device, || unsafe {
        device.create_shader_module_trusted(desc, runtime_checks())
    })
}

/// What wgpu adds to the kernels' code. By default nothing: its index clamps, loop counters
/// and division guards cost 6-8% of training, 15% of encoding and 25% of search on an H100
/// (notes/perf-wgpu.md, version 26), and storage buffers stay bounded by the driver where it
/// has robust buffer access. `VLCC_WGPU_CHECKS=all` restores wgpu's default; `bounds` keeps
/// the index clamps only.
fn runtime_checks() -> wgpu::ShaderRuntimeChecks {
    let mut c = wgpu::ShaderRuntimeChecks::checked();
    match std::env::var("VLCC_WGPU_CHECKS").as_deref() {
        Ok("all") => return c,
        Ok("bounds") => {}
        _ => c.bounds_checks = false,
    }
    c.force_loop_bounding = false;
    c.int_div_checks = false;
    c
}

/// The pipeline cached under `key`, built on first use.
fn cached<K: PartialEq + Copy, T>(
    cache: &Mutex<Vec<(K, Arc<T>)>>,
    key: K,
    build: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = c.iter().find(|(k, _)| *k == key) {
        return Ok(p.clone());
    }
    let p = Arc::new(build()?);
    c.push((key, p.clone()));
    Ok(p)
}

/// Threads per workgroup of the one-dimensional kernels: 256, or what the adapter allows.
/// Powers of two only: the kernels' tree reductions halve it.
fn workgroup_size(l: &wgpu::Limits) -> u32 {
    let cap = l
        .max_compute_invocations_per_workgroup
        .min(l.max_compute_workgroup_size_x)
        .clamp(1, 256);
    1 << (31 - cap.leading_zeros())
}

/// The dot-product kernels' shared-dimension step: 16 where two 16-row slices fit in
/// workgroup memory (16.5 KB: 16 x 33 four-float pieces each, dots.wgsl), else 8.
fn dots_step(l: &wgpu::Limits) -> u32 {
    if l.max_compute_workgroup_storage_size >= 2 * 16 * 33 * 16 {
        16
    } else {
        8
    }
}

/// Floats of sub-codebook the PQ kernel holds in workgroup memory (beside 256 norms).
fn book_floats(l: &wgpu::Limits) -> usize {
    ((l.max_compute_workgroup_storage_size as usize / 4).saturating_sub(256 + 64))
        .min(256 * MAX_DSUB)
}

fn fold(groups: usize) -> (u32, u32) {
    let g = groups.max(1);
    let x = g.min(MAX_GROUPS as usize);
    (x as u32, g.div_ceil(x) as u32)
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
    pack: wgpu::ComputePipeline,
}

/// Four-float pieces per codeword in the PQ kernel.
fn pq_pieces(dsub: usize) -> u32 {
    dsub.div_ceil(4) as u32
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
    lose_after: AtomicU64,
    /// Parameter blocks by content: iterations repeat the same few, so each is made once.
    uniforms: Mutex<HashMap<[u32; 12], wgpu::Buffer>>,
    h2d: AtomicU64,
    d2h: AtomicU64,
    lists: Mutex<super::Resident<search::DeviceLists>>,
    codebook: Mutex<super::Resident<search::DeviceCodebook>>,
    /// Host-memory staging for large uploads (Vulkan adapters; `None` elsewhere).
    host: Mutex<Option<host::HostPool>>,
    /// Assignment on cooperative matrices, or why it is not used.
    coop: std::result::Result<mma::Mma, String>,
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
pub fn open(device: usize) -> Result<WgpuBackend> {
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
    let coop = mma::supported(&adapter);
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
    if let Some(cap) = std::env::var("VLCC_WGPU_MAX_BINDING")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        limits.max_storage_buffer_binding_size =
            limits.max_storage_buffer_binding_size.min(cap.max(4096));
    }
    let (dots, kmeans, encode) = (
        module(&device, &limits, "dots.wgsl", &[])?,
        module(&device, &limits, "kmeans.wgsl", &[])?,
        module(&device, &limits, "encode.wgsl", &[])?,
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
        pack: pipe(&encode, "pack")?,
    };
    // Where the adapter offers cooperative matrices but their kernels do not build, the
    // fp32 kernels serve alone.
    let coop = coop.and_then(|c| {
        mma::Mma::new(&device, &limits, &c).map_err(|e| format!("its kernels failed: {e}"))
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
        // A test hook: `VLCC_WGPU_LOSE_AFTER=N` destroys the device after its Nth submission,
        // so tests can check that each step of a run answers a lost device with an error.
        lose_after: AtomicU64::new(
            std::env::var("VLCC_WGPU_LOSE_AFTER")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        ),
        uniforms: Mutex::new(Default::default()),
        h2d: AtomicU64::new(0),
        d2h: AtomicU64::new(0),
        lists: Mutex::new(super::Resident::new()),
        codebook: Mutex::new(super::Resident::new()),
        // `VLCC_WGPU_HOST_STAGING=0` sends uploads through mapped buffers, as on adapters
        // without host-memory staging (tests use it to run that path on any adapter).
        host: Mutex::new(match std::env::var("VLCC_WGPU_HOST_STAGING").as_deref() {
            Ok("0") => None,
            _ => host::HostPool::new(&device, STREAM_PIECE),
        }),
        coop,
        device,
    })
}

/// Runs `f` inside validation and out-of-memory error scopes: what it got wrong becomes an
/// error instead of a panic or a later failure.
fn scoped<T>(device: &wgpu::Device, f: impl FnOnce() -> T) -> Result<T> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let val = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let out = f();
    let v = pollster::block_on(val.pop());
    let o = pollster::block_on(oom.pop());
    if let Some(e) = o {
        return Err(Error::OutOfMemory(format!("WGPU: {e}")));
    }
    if let Some(e) = v {
        return Err(Error::Device(format!("WGPU: {e}")));
    }
    Ok(out)
}

/// Uploads larger than this go up in pieces of this size (`WgpuBackend::upload`).
const STREAM_PIECE: usize = 16 << 20;

/// Bytes per task when the host fills staging memory: every thread takes part in a piece.
const FILL_PIECE: usize = 1 << 20;

/// Uploads from this size on go through host-memory staging where the adapter has it.
const HOST_STAGED: usize = 1 << 20;

/// Fills `mem` with the data's bytes, in 1 MB ranges on every thread, as `fill_mapped` does
/// a mapped buffer; whether they were clean.
fn fill_host(
    mem: &mut [u8],
    fill: &(dyn Fn(wgpu::WriteOnly<'_, [u8]>, usize) -> bool + Sync),
) -> bool {
    use rayon::prelude::*;
    mem.par_chunks_mut(FILL_PIECE)
        .enumerate()
        .map(|(i, c)| fill(wgpu::WriteOnly::from_mut(c), i * FILL_PIECE))
        .reduce(|| true, |a, b| a & b)
}

/// Fills the start of the mapped buffer `b` with `len` bytes of data, in disjoint 1 MB ranges
/// on every thread: `fill(view, at)` writes the data's bytes from `at` on into the view and
/// says whether they were clean. Past the data the buffer keeps its zeros.
fn fill_mapped(
    b: &wgpu::Buffer,
    len: usize,
    what: &str,
    fill: &(dyn Fn(wgpu::WriteOnly<'_, [u8]>, usize) -> bool + Sync),
) -> Result<bool> {
    use rayon::prelude::*;
    let size = b.size() as usize;
    let views = (0..size.div_ceil(FILL_PIECE))
        .map(|i| {
            let r = (i * FILL_PIECE) as u64..((i + 1) * FILL_PIECE).min(size) as u64;
            b.slice(r)
                .get_mapped_range_mut()
                .map_err(|e| Error::Device(format!("WGPU: mapping {what}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(views
        .into_par_iter()
        .enumerate()
        .map(|(i, mut v)| {
            let at = (i * FILL_PIECE).min(len);
            let (head, _) = v.slice(..).split_at(((i + 1) * FILL_PIECE).min(len) - at);
            fill(head, at)
        })
        .reduce(|| true, |a, b| a & b))
}

fn pipeline(
    device: &wgpu::Device,
    module: &wgpu::ShaderModule,
    entry: &str,
) -> Result<wgpu::ComputePipeline> {
    scoped(device, || {
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        })
    })
}

/// Step timings (`VLCC_WGPU_TRACE`): when recording, each step is submitted on its own and
/// waited for.
pub(crate) struct Trace(crate::trace::Trace);

impl Trace {
    pub fn new() -> Trace {
        Trace(crate::trace::Trace::new("wgpu", "VLCC_WGPU_TRACE"))
    }
    pub fn recording(&self) -> bool {
        self.0.recording()
    }
    /// Ends a step: when recording, submits what `enc` holds, waits, and starts a new encoder.
    pub fn mark(&mut self, b: &WgpuBackend, enc: &mut Rec, step: &'static str) {
        self.0.mark(step, || {
            let done = std::mem::replace(enc, b.encoder());
            let _ = b.finish(done);
        });
    }
}

/// Results on their way back from the device (`WgpuBackend::start_read`): the parts lie one
/// after another (offset, bytes) in one staging buffer.
struct PendingRead {
    stage: wgpu::Buffer,
    parts: Vec<(usize, usize)>,
    end: u64,
    done: Arc<Mutex<Option<Result<()>>>>,
    index: wgpu::SubmissionIndex,
}

impl PendingRead {
    /// Waits for the submission and returns the bytes of every part. The buffer is unmapped
    /// whenever its mapping came through, so that a kept one serves the next read even
    /// after an error.
    fn finish(self, b: &WgpuBackend) -> Result<Vec<Vec<u8>>> {
        let waited = b
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(self.index),
                timeout: None,
            })
            .map_err(|e| Error::Device(format!("WGPU: {e}")));
        let mapped = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        let out = match mapped {
            Some(Ok(())) => {
                let view = self.stage.slice(..self.end).get_mapped_range();
                let out = view.map(|v| {
                    let parts = self.parts.iter();
                    parts
                        .map(|&(at, bytes)| v[at..at + bytes].to_vec())
                        .collect()
                });
                self.stage.unmap();
                out.map_err(|e| Error::Device(format!("WGPU: reading back: {e}")))
            }
            Some(Err(e)) => Err(e),
            None => Err(Error::Device("WGPU: a read-back was not mapped".into())),
        };
        // A loss comes first, from `check`, whatever the wait and the mapping said.
        b.check()?;
        waited?;
        let out = out?;
        let total: usize = self.parts.iter().map(|p| p.1).sum();
        b.d2h.fetch_add(total as u64, Ordering::Relaxed);
        Ok(out)
    }
}

/// A command encoder whose dispatches share one compute pass until a copy, a clear or the
/// end needs the encoder itself: closing a pass took the host longer than recording the
/// dispatch in it.
pub(crate) struct Rec {
    /// Declared first: dropped (so ended) before the encoder.
    pass: Option<wgpu::ComputePass<'static>>,
    enc: wgpu::CommandEncoder,
}

impl Rec {
    /// The open compute pass, begun if none is.
    fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        self.pass.get_or_insert_with(|| {
            self.enc
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// The encoder, for a copy or a clear: ends the open pass first.
    fn enc(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.enc
    }

    fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        self.enc.finish()
    }
}

/// Bind groups a k-means session keeps: its iterations bind the same buffers with the same
/// parameters again and again, and making a bind group took more of the host's time than
/// recording its dispatch. Kept until the session drops them (the buffers with them).
#[derive(Default)]
pub(crate) struct Binds(RefCell<HashMap<BindKey, wgpu::BindGroup>>);

type BindKey = (wgpu::ComputePipeline, [u32; 12], Vec<(u32, wgpu::Buffer)>);

impl Binds {
    /// Most groups kept: parameters that change every iteration (the trim) make new ones.
    const MAX: usize = 256;

    fn get(
        &self,
        pipe: &wgpu::ComputePipeline,
        params: &Params,
        bufs: &[(u32, &wgpu::Buffer)],
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        let key = (
            pipe.clone(),
            params.0,
            bufs.iter().map(|&(i, b)| (i, b.clone())).collect(),
        );
        let mut map = self.0.borrow_mut();
        if map.len() >= Self::MAX {
            map.clear();
        }
        map.entry(key).or_insert_with(make).clone()
    }

    /// Forgets every group (their buffers are about to be replaced).
    pub fn clear(&self) {
        self.0.borrow_mut().clear();
    }
}

/// Parameters of one dispatch: the kernels' `Params` structs, 12 words at most.
pub(crate) struct Params([u32; 12]);

impl Params {
    pub fn new(words: &[u32]) -> Params {
        let mut p = [0u32; 12];
        p[..words.len()].copy_from_slice(words);
        Params(p)
    }
}

/// One assignment: per row of a block of points (`x`, rows x d, global rows `row0..`), the
/// nearest of `n` anchors (`c`) under offsets `off` (|c|^2 [+ bias]), into `assigned` and
/// `dist` (global rows).
pub(crate) struct Assign<'a> {
    x: &'a wgpu::Buffer,
    rows: usize,
    row0: usize,
    d: usize,
    c: &'a wgpu::Buffer,
    n: usize,
    off: &'a wgpu::Buffer,
    bias: Option<&'a wgpu::Buffer>,
    /// |x|^2 of every row (global rows).
    norms: &'a wgpu::Buffer,
    assigned: &'a wgpu::Buffer,
    dist: &'a wgpu::Buffer,
    /// For cooperative matrices: the points' and anchors' halves, and room for the rows
    /// they leave to fp32 (a count, then up to `rows` rows).
    halves: Option<(&'a mma::Halves, &'a mma::Halves, &'a wgpu::Buffer)>,
    /// Where a session keeps the bind groups.
    keep: Option<&'a Binds>,
}

impl Assign<'_> {
    /// The assignment kernels' parameters: the shape, then `gx` (workgroups along x) and the
    /// kernel's own last word.
    fn params(&self, gx: u32, last: u32) -> Params {
        let bias = self.bias.is_some() as u32;
        let (rows, n, d, row0) = (self.rows, self.n, self.d, self.row0);
        Params::new(&[rows as u32, n as u32, d as u32, row0 as u32, bias, gx, last])
    }
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what} {v} exceeds 2^32 - 1")))
}

impl WgpuBackend {
    /// The cooperative-matrix kernels, where they are used.
    fn mma(&self) -> Option<&mma::Mma> {
        self.coop.as_ref().ok()
    }

    /// Whether the adapter is a software (CPU) driver: AUTO skips those.
    pub fn is_cpu_adapter(&self) -> bool {
        self.cpu_adapter
    }

    /// `e`, or where the device is lost and `e` is a device's failure, the loss: the root of
    /// whatever failed after it.
    fn explain(&self, e: Error) -> Error {
        match (self.lost.get(), e) {
            (Some(why), Error::Device(_) | Error::OutOfMemory(_)) => Error::Device(why.clone()),
            (_, e) => e,
        }
    }

    /// The error the device reported since the last check (its loss first), if any.
    fn check(&self) -> Result<()> {
        if let Some(why) = self.lost.get() {
            return Err(Error::Device(why.clone()));
        }
        match self.fault.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Largest buffer one storage binding may cover.
    fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    fn fits_binding(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes as u64 > self.max_binding() {
            return Err(Error::OutOfMemory(format!(
                "WGPU: {what} needs {bytes} bytes in one binding; the adapter allows {}",
                self.max_binding()
            )));
        }
        Ok(())
    }

    const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
        .union(wgpu::BufferUsages::COPY_SRC)
        .union(wgpu::BufferUsages::COPY_DST);

    /// A new buffer; allocation failures come back as errors, not panics.
    fn buffer(
        &self,
        what: &str,
        size: usize,
        usage: wgpu::BufferUsages,
        mapped: bool,
    ) -> Result<wgpu::Buffer> {
        scoped(&self.device, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(what),
                size: size as u64,
                usage,
                mapped_at_creation: mapped,
            })
        })
        .map_err(|e| self.explain(e))
    }

    /// A zeroed storage buffer of `bytes` (at least 4).
    fn zeros(&self, bytes: usize, what: &str) -> Result<wgpu::Buffer> {
        let size = bytes.max(4).next_multiple_of(4);
        self.fits_binding(size, what)?;
        self.buffer(what, size, Self::USAGE, false)
    }

    /// A storage buffer holding `data`, filled while mapped by all threads at once (one copy
    /// thread moves about 5 GB/s, the device takes several times that); above
    /// `STREAM_PIECE`, in pieces that go up while the next is filled.
    fn upload<T: bytemuck::Pod>(&self, data: &[T], what: &str) -> Result<wgpu::Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let copy = |mut v: wgpu::WriteOnly<'_, [u8]>, at: usize| {
            v.copy_from_slice(&bytes[at..at + v.len()]);
            true
        };
        Ok(self.upload_with(bytes.len(), what, &copy)?.0)
    }

    /// As `upload`, checking every value on the way: `None` where one is not finite.
    fn upload_finite(&self, data: &[f32], what: &str) -> Result<Option<wgpu::Buffer>> {
        let copy = |mut v: wgpu::WriteOnly<'_, [u8]>, at: usize| {
            // Pieces start at multiples of 1 MB: whole floats.
            let src = &data[at / 4..(at + v.len()) / 4];
            // SAFETY: the view is valid for writes of its whole length, src.len() floats.
            unsafe { crate::stage::stage_piece(v.as_raw_element_ptr().as_ptr().cast(), src) }
        };
        let (b, clean) = self.upload_with(std::mem::size_of_val(data), what, &copy)?;
        Ok(clean.then_some(b))
    }

    /// `upload`'s body: `fill` moves the data's bytes from `at` on into a mapped view.
    fn upload_with(
        &self,
        len: usize,
        what: &str,
        fill: &(dyn Fn(wgpu::WriteOnly<'_, [u8]>, usize) -> bool + Sync),
    ) -> Result<(wgpu::Buffer, bool)> {
        let size = len.max(4).next_multiple_of(4);
        self.fits_binding(size, what)?;
        let mut pool = self.host.lock().unwrap_or_else(|e| e.into_inner());
        let mut host = pool.as_mut().filter(|_| len >= HOST_STAGED);
        let mapped = host.is_none() && size <= STREAM_PIECE;
        let b = self.buffer(what, size, Self::USAGE, mapped)?;
        let mut clean = true;
        if mapped {
            clean = fill_mapped(&b, len, what, fill).map_err(|e| self.explain(e))?;
            b.unmap();
        } else {
            // In pieces, each copied up while the host fills the next: filling and the copy
            // take about as long, and in one piece they ran one after the other. The pieces
            // go through host memory where the adapter has it, else through mapped buffers.
            for at in (0..len).step_by(STREAM_PIECE) {
                let piece = STREAM_PIECE.min(len - at);
                let padded = piece.next_multiple_of(4);
                let shifted = |v: wgpu::WriteOnly<'_, [u8]>, o: usize| fill(v, at + o);
                // The source, and the pool's buffer behind it (back to the pool once sent).
                let (src, lent) = match host.as_deref_mut() {
                    Some(pool) => {
                        let mut hb = pool.take(&self.device).map_err(|e| self.explain(e))?;
                        let mem = &mut hb.bytes()[..padded];
                        mem[piece..].fill(0);
                        clean &= fill_host(&mut mem[..piece], &shifted);
                        (hb.buf.clone(), Some(hb))
                    }
                    None => {
                        let usage = wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC;
                        let stage = self.buffer("upload staging", padded, usage, true)?;
                        clean &= fill_mapped(&stage, piece, what, &shifted)
                            .map_err(|e| self.explain(e))?;
                        stage.unmap();
                        (stage, None)
                    }
                };
                let mut enc = self.encoder();
                enc.enc()
                    .copy_buffer_to_buffer(&src, 0, &b, at as u64, padded as u64);
                self.submit(enc);
                if let (Some(hb), Some(pool)) = (lent, host.as_deref_mut()) {
                    pool.give(&self.queue, hb);
                }
            }
        }
        self.h2d.fetch_add(len as u64, Ordering::Relaxed);
        Ok((b, clean))
    }

    /// Overwrites the start of `buf` with `data`, ordered before the next submission.
    fn write<T: bytemuck::Pod>(&self, buf: &wgpu::Buffer, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.queue.write_buffer(buf, 0, bytes);
        self.h2d.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    fn encoder(&self) -> Rec {
        Rec {
            pass: None,
            enc: self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None }),
        }
    }

    /// Records one dispatch of `pipe` with `params` at binding 0 and `bufs` at their bindings.
    fn dispatch(
        &self,
        enc: &mut Rec,
        pipe: &wgpu::ComputePipeline,
        params: Params,
        bufs: &[(u32, &wgpu::Buffer)],
        groups: (u32, u32, u32),
    ) {
        self.dispatch_kept(enc, None, pipe, params, bufs, groups);
    }

    /// As `dispatch`, taking the bind group from `keep` (made there once) where given.
    fn dispatch_kept(
        &self,
        enc: &mut Rec,
        keep: Option<&Binds>,
        pipe: &wgpu::ComputePipeline,
        params: Params,
        bufs: &[(u32, &wgpu::Buffer)],
        groups: (u32, u32, u32),
    ) {
        let bg = match keep {
            Some(k) => k.get(pipe, &params, bufs, || self.bind_group(pipe, &params, bufs)),
            None => self.bind_group(pipe, &params, bufs),
        };
        let pass = enc.pass();
        pass.set_pipeline(pipe);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
    }

    fn bind_group(
        &self,
        pipe: &wgpu::ComputePipeline,
        params: &Params,
        bufs: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let ub = {
            let mut cache = self.uniforms.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= 4096 {
                cache.clear();
            }
            cache
                .entry(params.0)
                .or_insert_with(|| {
                    // Written, not mapped at creation: a lost device fails the write with an
                    // error where wgpu's mapped initialisation panics.
                    let ub = self.device.create_buffer(&wgpu::BufferDescriptor {
                        label: None,
                        size: std::mem::size_of_val(&params.0) as u64,
                        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    self.queue
                        .write_buffer(&ub, 0, bytemuck::cast_slice(&params.0));
                    ub
                })
                .clone()
        };
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: ub.as_entire_binding(),
        }];
        entries.extend(bufs.iter().map(|(i, b)| wgpu::BindGroupEntry {
            binding: *i,
            resource: b.as_entire_binding(),
        }));
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Submits what `enc` recorded.
    fn submit(&self, enc: Rec) -> wgpu::SubmissionIndex {
        let index = self.queue.submit([enc.finish()]);
        let left = self.lose_after.load(Ordering::Relaxed);
        if left > 0 && self.lose_after.fetch_sub(1, Ordering::Relaxed) == 1 {
            // A driver's loss is known at once (wgpu calls back from the failing call);
            // destroying reports only once the queue drains, so the hook records it here.
            self.device.destroy();
            let _ = self
                .lost
                .set("WGPU: the device was lost (VLCC_WGPU_LOSE_AFTER)".into());
        }
        index
    }

    /// Submits `enc` and waits for it.
    fn finish(&self, enc: Rec) -> Result<()> {
        self.submit(enc);
        self.wait()
    }

    fn wait(&self) -> Result<()> {
        let waited = self.device.poll(wgpu::PollType::wait_indefinitely());
        self.check()?;
        waited.map_err(|e| Error::Device(format!("WGPU: {e}")))?;
        Ok(())
    }

    /// Submits `enc` with copies of `parts` (buffer, bytes) appended, waits, and returns their
    /// bytes: one round trip for several small results.
    fn read(&self, enc: Rec, parts: &[(&wgpu::Buffer, usize)]) -> Result<Vec<Vec<u8>>> {
        self.start_read(enc, parts, None)?.finish(self)
    }

    /// As `read`, without waiting: the device runs `enc` while the host goes on. The parts
    /// come back through `into` where it is large enough (a caller that reads every
    /// iteration keeps one), else through a new buffer.
    fn start_read(
        &self,
        mut enc: Rec,
        parts: &[(&wgpu::Buffer, usize)],
        into: Option<&wgpu::Buffer>,
    ) -> Result<PendingRead> {
        // Copies move whole words, at least one.
        let padded = |bytes: usize| bytes.max(4).next_multiple_of(4);
        let mut at = Vec::with_capacity(parts.len());
        let mut end = 0;
        for &(_, bytes) in parts {
            at.push((end, bytes));
            end += padded(bytes);
        }
        let stage = match into {
            Some(s) if s.size() >= end as u64 => s.clone(),
            _ => self.buffer("readback", end, Self::READ_BACK, false)?,
        };
        for ((b, _), &(o, bytes)) in parts.iter().zip(&at) {
            enc.enc()
                .copy_buffer_to_buffer(b, 0, &stage, o as u64, padded(bytes) as u64);
        }
        let index = self.submit(enc);
        let done = Arc::new(Mutex::new(None));
        let d = done.clone();
        stage
            .slice(..end as u64)
            .map_async(wgpu::MapMode::Read, move |r| {
                let r = r.map_err(|e| Error::Device(format!("WGPU: reading back: {e}")));
                *d.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        Ok(PendingRead {
            stage,
            parts: at,
            end: end as u64,
            done,
            index,
        })
    }

    /// Usage of read-back buffers.
    const READ_BACK: wgpu::BufferUsages =
        wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

    /// Workgroups (folded into two dimensions) for `items` threads of a 1-D kernel.
    fn groups_for(&self, items: usize) -> (u32, u32, u32) {
        let (x, y) = fold(items.div_ceil(self.wg as usize));
        (x, y, 1)
    }

    /// `out (rows x n) = a (rows x k) . b (n x k)^T`.
    fn dots(
        &self,
        enc: &mut Rec,
        a: &wgpu::Buffer,
        rows: usize,
        b: &wgpu::Buffer,
        n: usize,
        k: usize,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let (gx, gy) = (n.div_ceil(TILE), rows.div_ceil(TILE));
        if gx > MAX_GROUPS as usize || gy > MAX_GROUPS as usize {
            return Err(Error::InvalidArgument(format!(
                "WGPU: a {rows} x {n} product is too large for one dispatch"
            )));
        }
        let p = Params::new(&[u32_of(rows, "rows")?, n as u32, k as u32]);
        self.dispatch(
            enc,
            &self.k.dots,
            p,
            &[(1, a), (2, b), (3, out), (9, a)],
            (gx as u32, gy as u32, 1),
        );
        Ok(())
    }

    /// Records an assignment: on cooperative matrices where the backend has them and the
    /// caller gave halves, else in fp32. The same answers either way.
    fn assign_rows(&self, enc: &mut Rec, a: &Assign<'_>, trace: &mut Trace) {
        match (self.mma(), a.halves) {
            (Some(mma), Some(h)) => self.assign_mma(enc, mma, a, h, trace),
            _ => self.assign_exact(enc, a, None),
        }
    }

    /// The fp32 assignment (dots.wgsl) of every row of the block, or of the rows `listed`
    /// names (a count, then rows within the block).
    fn assign_exact(&self, enc: &mut Rec, a: &Assign<'_>, listed: Option<&wgpu::Buffer>) {
        let (gx, gy) = fold(a.rows.div_ceil(TILE));
        let p = a.params(gx, listed.is_some() as u32);
        self.dispatch_kept(
            enc,
            a.keep,
            &self.k.assign,
            p,
            &[
                (1, a.x),
                (2, a.c),
                (4, a.off),
                (5, a.bias.unwrap_or(a.off)),
                (6, a.norms),
                (7, a.assigned),
                (8, a.dist),
                (9, listed.unwrap_or(a.x)),
            ],
            (gx, gy, 1),
        );
    }

    /// Squared norms of `rows` rows of `x` into `out[row0..]`.
    #[allow(clippy::too_many_arguments)]
    fn row_norms(
        &self,
        enc: &mut Rec,
        keep: Option<&Binds>,
        x: &wgpu::Buffer,
        rows: usize,
        d: usize,
        row0: usize,
        out: &wgpu::Buffer,
    ) {
        let g = self.groups_for(rows);
        let p = Params::new(&[0, d as u32, 0, row0 as u32, rows as u32, 0, 0, g.0]);
        let bufs = [(1, x), (2, out)];
        self.dispatch_kept(enc, keep, &self.k.row_norms, p, &bufs, g);
    }

    /// Rows per block so that a block of `width` floats per row fits one binding.
    fn rows_per_block(&self, width: usize) -> usize {
        ((self.max_binding() as usize / 4) / width.max(1)).max(1)
    }

    /// PQ indices of `y` (rows x nsub*dsub, on the device) packed as bytes (rows x nsub),
    /// recorded into `enc`; returns the packed buffer.
    #[allow(clippy::too_many_arguments)]
    fn pq_on_device(
        &self,
        enc: &mut Rec,
        y: &wgpu::Buffer,
        rows: usize,
        nsub: usize,
        dsub: usize,
        books: &wgpu::Buffer,
        ksub: usize,
    ) -> Result<wgpu::Buffer> {
        let idx = self.zeros(rows * nsub * 4, "PQ indices")?;
        let packed = self.zeros(rows * nsub, "codes")?;
        let dp = nsub * dsub;
        let pipe = self.pq_pipeline(dsub)?;
        // Two rows per thread (encode.wgsl).
        let tiles = rows.div_ceil(2 * self.wg as usize);
        if tiles > MAX_GROUPS as usize || nsub > MAX_GROUPS as usize {
            return Err(Error::InvalidArgument(format!(
                "WGPU: {rows} rows x {nsub} sub-spaces is too large for one dispatch"
            )));
        }
        let p = Params::new(&[
            rows as u32,
            0,
            dp as u32,
            dsub as u32,
            ksub as u32,
            nsub as u32,
            0,
            0,
        ]);
        self.dispatch(
            enc,
            &pipe,
            p,
            &[(4, y), (5, books), (6, &idx)],
            (tiles as u32, nsub as u32, 1),
        );
        let g = self.groups_for((rows * nsub).div_ceil(4));
        let p = Params::new(&[rows as u32, 0, 0, 0, 0, nsub as u32, 0, g.0]);
        self.dispatch(enc, &self.k.pack, p, &[(6, &idx), (7, &packed)], g);
        Ok(packed)
    }

    fn pq_pipeline(&self, dsub: usize) -> Result<Arc<wgpu::ComputePipeline>> {
        cached(&self.pq, dsub, || {
            let extra = [("D4", pq_pieces(dsub))];
            let m = module(&self.device, &self.limits, "encode.wgsl", &extra)?;
            pipeline(&self.device, &m, "pq_assign")
        })
    }

    /// Whether the PQ kernel takes this shape (sub-codebook in workgroup memory).
    fn pq_fits(&self, dsub: usize, ksub: usize) -> bool {
        (1..=MAX_DSUB).contains(&dsub)
            && (1..=256).contains(&ksub)
            && ksub * 4 * pq_pieces(dsub) as usize <= book_floats(&self.limits)
    }
}

impl Backend for WgpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wgpu
    }
    fn caps(&self) -> Caps {
        Caps {
            concurrent_calls: false,
            device_pointers: false,
            list_search: true,
            max_candidates: search::MAX_WANT,
            scan_bits: &[8],
            // A query's table (M x 256 floats) in workgroup memory; the scan's own buffers
            // beside it are checked per call.
            max_scan_nsub: self.limits.max_compute_workgroup_storage_size as usize / 1024,
        }
    }
    fn describe(&self) -> String {
        format!(
            "wgpu ({}; {} KB workgroup memory, {} MB per binding; uploads through {}; \
             assignment on {})",
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
            }
        )
    }
    fn kmeans_session<'a>(
        &'a self,
        x: &'a [f32],
        d: usize,
        _precision: crate::Precision, // exact always: the fp32 answers, on any kernel
    ) -> Result<Box<dyn KmeansSession + 'a>> {
        Ok(Box::new(WgpuSession::new(self, x, d)?))
    }
    fn pq_assign(&self, y: &[f32], nsub: usize, dsub: usize, books: &[f32]) -> Result<Vec<u8>> {
        let dp = nsub * dsub;
        let ksub = books.len() / dp.max(1);
        if !self.pq_fits(dsub, ksub) || y.len() % dp != 0 {
            return super::host::pq_assign(self, y, nsub, dsub, books);
        }
        let n = y.len() / dp;
        let bd = self.upload(books, "sub-codebooks")?;
        let mut out = Vec::with_capacity(n * nsub);
        let per = self
            .rows_per_block(dp * 2)
            .min(MAX_GROUPS as usize * self.wg as usize);
        for block in y.chunks(per * dp) {
            let rows = block.len() / dp;
            let yd = self.upload(block, "PQ input")?;
            let mut enc = self.encoder();
            let packed = self.pq_on_device(&mut enc, &yd, rows, nsub, dsub, &bd, ksub)?;
            out.extend(self.read(enc, &[(&packed, rows * nsub)])?.remove(0));
        }
        Ok(out)
    }
    fn checks_input(&self) -> bool {
        true
    }

    fn encode_residuals(&self, cb: &CodebookView, x: &[f32]) -> Result<(Vec<u32>, Vec<u8>)> {
        search::encode_residuals(self, cb, x)
    }
    fn search_lists(
        &self,
        cb: &CodebookView,
        lists: &ListsView,
        q: &[f32],
        nprobe: usize,
        want: usize,
    ) -> Result<Option<(Vec<u64>, Vec<f32>)>> {
        search::search_lists(self, cb, lists, q, nprobe, want)
    }
    fn transfers(&self) -> Transfers {
        Transfers {
            h2d_bytes: self.h2d.load(Ordering::Relaxed),
            d2h_bytes: self.d2h.load(Ordering::Relaxed),
        }
    }
}
