//! The options several commands share: how work runs (backend, threads, caps, progress) and
//! what training is asked for.

use crate::{interrupt, AnyResult};
use clap::Args;
use std::sync::Arc;
use vlc_compress::{BackendKind, Context, Metric, Rotation, TrainParams};

/// Options shared by commands that run work.
#[derive(Args, Clone)]
pub(crate) struct RunOpts {
    /// cpu, cuda, wgpu or auto.
    #[arg(long, default_value = "cpu")]
    pub(crate) backend: BackendKind,
    /// GPU index.
    #[arg(long, default_value_t = 0)]
    pub(crate) device: usize,
    /// CPU threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub(crate) threads: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Cap on the host memory each call allocates, in bytes (0 = none): a call that needs
    /// more fails with an out-of-memory error before allocating; a search goes without its
    /// tables where they do not fit (see `vlcc estimate`).
    #[arg(long, default_value_t = 0)]
    pub(crate) memory_cap: usize,
    /// Cap on the device memory each call takes on a GPU backend, in bytes (0 = none).
    #[arg(long, default_value_t = 0)]
    pub(crate) device_memory_cap: usize,
    /// Stop searches, loads and checksum checks that run longer than this many
    /// milliseconds (0 = never).
    #[arg(long, default_value_t = 0)]
    pub(crate) timeout_ms: u64,
    /// Rotate every query in f32 products on the host (the same results on every CPU),
    /// instead of in 8-bit integers where the CPU has AVX-512 VNNI and the codes hold at
    /// most a bit a dimension (faster).
    #[arg(long)]
    pub(crate) exact_rotation: bool,
}

impl RunOpts {
    pub(crate) fn context(&self) -> vlc_compress::Result<Arc<Context>> {
        let ctx = Context::with_options(
            self.backend,
            self.device,
            self.threads,
            &backend_options_from_env(),
        )?;
        ctx.set_memory_cap(self.memory_cap);
        ctx.set_device_memory_cap(self.device_memory_cap);
        ctx.set_exact_rotation(self.exact_rotation);
        ctx.set_timeout(
            Some(std::time::Duration::from_millis(self.timeout_ms)).filter(|t| !t.is_zero()),
        );
        interrupt::watch(&ctx);
        Ok(Arc::new(ctx))
    }

    /// `x` copied to this run's CUDA device (untimed), as a caller whose vectors are already
    /// on the GPU holds them; `flag` names the option that asked, for the error on other
    /// backends.
    pub(crate) fn device_copy(
        &self,
        ctx: &Context,
        x: &[f32],
        flag: &str,
    ) -> AnyResult<DeviceCopy> {
        if ctx.backend().kind() != BackendKind::Cuda {
            return Err(format!(
                "{flag} needs a CUDA context; this one runs on {}",
                ctx.backend().kind().name()
            )
            .into());
        }
        let s = cudarc::driver::CudaContext::new(self.device)?.default_stream();
        let x = s.clone_htod(x)?;
        let at = cudarc::driver::DevicePtr::device_ptr(&x, &s).0;
        s.synchronize()?;
        Ok(DeviceCopy { x, at })
    }
}

/// Vectors in CUDA device memory at address `at`, freed on drop.
pub(crate) struct DeviceCopy {
    /// Holds the memory `at` points into.
    #[allow(dead_code)]
    pub(crate) x: cudarc::driver::CudaSlice<f32>,
    pub(crate) at: u64,
}

/// Training parameters (defaults are the library's).
#[derive(Args, Clone)]
pub(crate) struct TrainOpts {
    /// Anchors (inverted lists).
    #[arg(long, default_value_t = 1024)]
    pub(crate) anchors: usize,
    /// Bytes of residual code per vector.
    #[arg(long, default_value_t = 16)]
    pub(crate) bytes: usize,
    /// Bits per sub-code (8 or 4).
    #[arg(long, default_value_t = 8)]
    pub(crate) bits: u32,
    /// l2, ip or cosine.
    #[arg(long, default_value = "l2")]
    pub(crate) metric: Metric,
    /// none, random or learned.
    #[arg(long, default_value_t = TrainParams::default().rotation)]
    pub(crate) rotation: Rotation,
    /// Anchor training iterations.
    #[arg(long, default_value_t = TrainParams::default().anchor.max_iters)]
    pub(crate) iters: usize,
    /// Lloyd iterations per PQ sub-codebook.
    #[arg(long, default_value_t = TrainParams::default().pq_iters)]
    pub(crate) pq_iters: usize,
    #[arg(long, default_value_t = 0x5eed)]
    pub(crate) seed: u64,
    /// Alternations of the learned rotation after its eigenvalue-allocation start
    /// (0 = that start alone) [default: 0].
    #[arg(long)]
    pub(crate) opq_iters: Option<usize>,
    /// Training points for the learned rotation (0 = all of the PQ sample).
    #[arg(long)]
    pub(crate) opq_points: Option<usize>,
    /// Training points for the PQ sub-codebooks (0 = all) [default: 65536].
    #[arg(long)]
    pub(crate) pq_train_points: Option<usize>,
    /// The last sub-code of each code names the squared error of the rest, which L2 search
    /// adds to each code's distance: auto (L2, at least 8 dimensions per byte of code), on
    /// or off
    #[arg(long, default_value = "auto")]
    pub(crate) error_code: vlc_compress::ErrorCode,
    #[command(flatten)]
    pub(crate) anneal: AnnealOpts,
}

/// Overrides of the annealing schedule (library defaults otherwise).
#[derive(Args, Clone, Default)]
pub(crate) struct AnnealOpts {
    /// Starting temperature (0 = no annealing).
    #[arg(long)]
    pub(crate) initial_temp: Option<f32>,
    /// Trimmed fraction at the starting temperature.
    #[arg(long)]
    pub(crate) trim: Option<f32>,
    /// Load-balancing strength at the starting temperature.
    #[arg(long)]
    pub(crate) balance: Option<f32>,
    /// Merge/split every this many iterations (0 = never).
    #[arg(long)]
    pub(crate) maintenance_interval: Option<usize>,
    /// Temperature multiplier per iteration.
    #[arg(long)]
    pub(crate) cooling_rate: Option<f32>,
    /// Anchor initialisation: kmeans++ or sample.
    #[arg(long)]
    pub(crate) init: Option<vlc_compress::Init>,
    /// Split anchors holding more than this times the mean load.
    #[arg(long)]
    pub(crate) split_factor: Option<f32>,
    /// Merge anchors closer than this times their spread.
    #[arg(long)]
    pub(crate) merge_threshold: Option<f32>,
    /// Stop when the relative energy change is below this.
    #[arg(long)]
    pub(crate) tol: Option<f64>,
    /// Train anchors on at most this many sampled points per anchor (0 = all points).
    #[arg(long)]
    pub(crate) max_points_per_anchor: Option<usize>,
    /// On CUDA, compute assignment distances with TF32 tensor cores, re-checking near ties in
    /// fp32 (same assignments, faster on large sets; other backends ignore it).
    #[arg(long)]
    pub(crate) tf32: bool,
}

impl AnnealOpts {
    pub(crate) fn apply(&self, a: &mut vlc_compress::AnchorParams) {
        if let Some(v) = self.initial_temp {
            a.initial_temp = v;
        }
        if let Some(v) = self.trim {
            a.trim = v;
        }
        if let Some(v) = self.balance {
            a.balance = v;
        }
        if let Some(v) = self.maintenance_interval {
            a.maintenance_interval = v;
        }
        if let Some(v) = self.cooling_rate {
            a.cooling_rate = v;
        }
        if let Some(v) = self.init {
            a.init = v;
        }
        if let Some(v) = self.split_factor {
            a.split_factor = v;
        }
        if let Some(v) = self.merge_threshold {
            a.merge_threshold = v;
        }
        if let Some(v) = self.tol {
            a.tol = v;
        }
        if let Some(v) = self.max_points_per_anchor {
            a.max_points_per_anchor = v;
        }
        if self.tf32 {
            a.precision = vlc_compress::Precision::Tf32;
        }
    }
}

impl TrainOpts {
    pub(crate) fn params(&self) -> TrainParams {
        let mut p = TrainParams {
            metric: self.metric,
            bytes_per_vector: self.bytes,
            bits: self.bits,
            rotation: self.rotation,
            pq_iters: self.pq_iters,
            error_code: self.error_code,
            ..TrainParams::default()
        };
        let a = &mut p.anchor;
        a.anchors = self.anchors;
        a.max_iters = self.iters;
        a.seed = self.seed;
        self.anneal.apply(a);
        if let Some(v) = self.opq_iters {
            p.opq_iters = v;
        }
        if let Some(v) = self.opq_points {
            p.opq_train_points = v;
        }
        if let Some(v) = self.pq_train_points {
            p.pq_train_points = v;
        }
        p
    }
}

/// The backend options the environment asks for: the library reads no environment, the
/// command does (docs/backends.md, "Environment").
pub(crate) fn backend_options_from_env() -> vlc_compress::BackendOptions {
    use vlc_compress::backend::{Cooperative, ShaderChecks, TraceSink};
    let var = |name: &str| std::env::var(name).ok();
    let set = |name: &str| var(name).is_some_and(|v| !v.is_empty() && v != "0");
    let to_stderr = || Some(Arc::new(|line: &str| eprintln!("{line}")) as TraceSink);
    let mut o = vlc_compress::BackendOptions::default();
    if set("VLCC_CUDA_TRACE") || set("VLCC_WGPU_TRACE") {
        o.trace_device = to_stderr();
    }
    if set("VLCC_TRAIN_TRACE") || set("VLCC_CUDA_HOST_TRACE") {
        o.trace_host = to_stderr();
    }
    o.wgpu.checks = match var("VLCC_WGPU_CHECKS").as_deref() {
        Some("all") => ShaderChecks::All,
        Some("bounds") => ShaderChecks::Bounds,
        _ => ShaderChecks::Off,
    };
    if var("VLCC_WGPU_MMA").as_deref() == Some("1") {
        o.wgpu.cooperative = Cooperative::On;
    }
    o.wgpu.mapped_uploads = var("VLCC_WGPU_HOST_STAGING").as_deref() == Some("0");
    o.wgpu.max_binding = var("VLCC_WGPU_MAX_BINDING")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    o
}
