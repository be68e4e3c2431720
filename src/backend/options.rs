//! What a backend is opened with. The library reads no environment and writes nothing to
//! stderr: what tools and tests once set through `VLCC_*` variables is given here (the `vlcc`
//! command still reads those variables, and fills these options from them).

pub use crate::trace::TraceSink;

/// Options fixed when a backend opens; the defaults are what a user wants.
#[derive(Clone, Default)]
pub struct BackendOptions {
    /// Device steps timed one by one: each waits for the device, so the run is slower and
    /// the times are the device's. `None` (the default) times nothing.
    pub trace_device: Option<TraceSink>,
    /// Host steps timed without waiting: the training loop's calls, CUDA's encoding
    /// pipeline as the host sees it.
    pub trace_host: Option<TraceSink>,
    /// WGPU only.
    pub wgpu: WgpuOptions,
}

impl std::fmt::Debug for BackendOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendOptions")
            .field("trace_device", &self.trace_device.is_some())
            .field("trace_host", &self.trace_host.is_some())
            .field("wgpu", &self.wgpu)
            .finish()
    }
}

/// Checks wgpu adds to the kernels' code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShaderChecks {
    /// None: they cost 6-8% of training, 15% of encoding and 25% of search on an H100, and
    /// storage buffers stay bounded by the driver where it has robust buffer access.
    #[default]
    Off,
    /// Index clamps only.
    Bounds,
    /// wgpu's default: index clamps, loop bounds, division guards.
    All,
}

/// Cooperative matrices (fp16 tensor cores) for WGPU's anchor assignment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cooperative {
    /// fp32 kernels only (the default until a GPU run shows the other exact and faster).
    #[default]
    Off,
    /// Where the adapter has them.
    On,
    /// A test hook: the kernel around the products on any adapter with fp16 and subgroups,
    /// its products summed by every thread.
    #[cfg(feature = "test-hooks")]
    Emulate,
}

/// WGPU's options.
#[derive(Clone, Debug, Default)]
pub struct WgpuOptions {
    pub checks: ShaderChecks,
    pub cooperative: Cooperative,
    /// Uploads through wgpu's mapped buffers even where the adapter offers host-memory
    /// staging (slower; what adapters without it do).
    pub mapped_uploads: bool,
    /// Bytes per storage binding at most (0: the adapter's limit; at least 4096 otherwise):
    /// smaller values split arrays into more blocks.
    pub max_binding: u64,
    /// A test hook: the device is destroyed after this many submissions (0: never).
    #[cfg(feature = "test-hooks")]
    pub lose_after: u64,
    /// A test hook: the cap is checked against the bytes of the backend's own buffers, as on
    /// adapters whose allocator gives no report (Metal).
    #[cfg(feature = "test-hooks")]
    pub no_allocator_report: bool,
}
