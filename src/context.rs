//! The context: a backend, its device and a thread pool, shared by everything made from it.

use crate::backend::{self, Backend, BackendKind, BackendOptions};
use crate::error::{Error, Result};
use crate::progress::{Control, Listener, SharedProgress, Watch};

/// A backend, its device and a thread pool: shared by everything made from it. All methods take
/// `&self`; the pool and backend synchronize internally.
pub struct Context {
    backend: Box<dyn Backend>,
    pool: crate::threads::Threads,
    memory_cap: std::sync::atomic::AtomicUsize,
    device_memory_cap: std::sync::atomic::AtomicUsize,
    exact_rotation: std::sync::atomic::AtomicBool,
    progress: std::sync::RwLock<Listener>,
    /// Microseconds a long call may take (0 = no limit).
    timeout_micros: std::sync::atomic::AtomicU64,
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
        let pool = crate::threads::Threads::new(threads)?;
        Ok(Context {
            backend,
            pool,
            memory_cap: 0.into(),
            device_memory_cap: 0.into(),
            exact_rotation: false.into(),
            progress: Default::default(),
            timeout_micros: 0.into(),
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

    /// Caps the host memory one call allocates (training, encoding, adding, merging,
    /// searching), in bytes (0 = no cap). Calls check their estimate against it before they
    /// allocate, and return `OutOfMemory` where it does not fit; a search builds its tables
    /// and fast-scan blocks only where they fit, and goes without them otherwise; training
    /// trains fewer sub-quantizers at once, then rebuilds the codebooks' residuals where
    /// they are read, to the same codebook. While any context has a cap, the library's
    /// large buffers are on pages of their own (`pages`), so that the cap bounds the growth
    /// of resident memory a host sees, whatever its allocator's settings.
    pub fn set_memory_cap(&self, bytes: usize) {
        let was = self
            .memory_cap
            .swap(bytes, std::sync::atomic::Ordering::Relaxed);
        crate::pages::cap_changed(was, bytes);
    }

    pub fn memory_cap(&self) -> usize {
        self.memory_cap.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// With `true`, host searches rotate every query in f32 products. By default (`false`),
    /// a CPU with AVX-512 VNNI takes them in 8-bit integers where the codes hold at most one
    /// bit a dimension (about 30% more queries a second on 784-d Fashion-MNIST at 64 B):
    /// the rotated query is then within a bound of the exact one that moves recall by no
    /// more than about 0.001 where measured, and that the distance bounds take in, but a
    /// result near a tie can differ from another CPU's. Exact rotation gives every CPU the
    /// same results up to the rounding of the sums.
    pub fn set_exact_rotation(&self, exact: bool) {
        self.exact_rotation
            .store(exact, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn exact_rotation(&self) -> bool {
        self.exact_rotation
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Caps the device memory one call takes on a GPU backend, in bytes (0 = no cap): calls
    /// check their device estimate against it before they start, and return `OutOfMemory`
    /// where it does not fit; the CUDA backend sizes its GEMM tiles under it. The CPU backend
    /// has no device memory: the cap does not apply there.
    pub fn set_device_memory_cap(&self, bytes: usize) {
        self.device_memory_cap
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        self.backend.set_memory_cap(bytes);
    }

    pub fn device_memory_cap(&self) -> usize {
        self.device_memory_cap
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `OutOfMemory` where `host` bytes pass the memory cap or `device` bytes the device
    /// memory cap, for `what` (a phrase: "adding 10 vectors").
    pub(crate) fn check_caps(
        &self,
        (host, device): (usize, usize),
        what: impl Fn() -> String,
    ) -> Result<()> {
        self.check_cap(host, &what)?;
        let cap = self.device_memory_cap();
        if cap > 0 && device > cap {
            return Err(Error::OutOfMemory(format!(
                "{} needs about {device} bytes of device memory, the context's device memory \
                 cap is {cap}",
                what()
            )));
        }
        Ok(())
    }

    /// `OutOfMemory` where `need` bytes for `what` (a phrase: "adding 10 vectors") pass the
    /// memory cap.
    pub(crate) fn check_cap(&self, need: usize, what: impl FnOnce() -> String) -> Result<()> {
        let cap = self.memory_cap();
        if cap > 0 && need > cap {
            return Err(Error::OutOfMemory(format!(
                "{} needs about {need} bytes of memory, the context's memory cap is {cap}",
                what()
            )));
        }
        Ok(())
    }

    /// Every long call on objects made from this context (train, encode, add, merge, search,
    /// range search, load, verify) stops with `Error::TimedOut` once `timeout` has passed
    /// from its start, leaving every object as it was; `None` (the default) sets no limit.
    /// A call's own deadline (`Control`) takes precedence. Checked as often as progress is
    /// polled: a call stops within tens of milliseconds of its deadline on the host.
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) {
        let us = timeout.map_or(0, |t| t.as_micros().clamp(1, u64::MAX as u128) as u64);
        self.timeout_micros
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn timeout(&self) -> Option<std::time::Duration> {
        match self
            .timeout_micros
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            us => Some(std::time::Duration::from_micros(us)),
        }
    }

    /// The deadline of a call starting now, from the timeout.
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        self.timeout()
            .and_then(|t| std::time::Instant::now().checked_add(t))
    }

    /// The progress callback for long calls on objects made from this context that have none
    /// of their own (`Compressor::set_progress`, `Index::set_progress`); `None` clears it.
    pub fn set_progress(&self, progress: Option<SharedProgress>) {
        *self.progress.write().unwrap_or_else(|e| e.into_inner()) = Listener(progress);
    }

    pub fn progress(&self) -> Option<SharedProgress> {
        self.progress
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        crate::pages::cap_changed(self.memory_cap(), 0);
    }
}

impl Listener {
    /// This object's callback, else its context's.
    pub fn or_context(&self, ctx: &Context) -> Option<SharedProgress> {
        self.0.clone().or_else(|| ctx.progress())
    }
}

/// Runs `f` with a watch on the call's progress callback (`ctl`'s, else `fallback`: the
/// object's or its context's) and deadline (`ctl`'s, else `ctx`'s timeout from now).
/// Without a listener, work is not split into reporting steps.
pub(crate) fn watching<R>(
    ctx: &Context,
    ctl: &Control,
    fallback: Option<&SharedProgress>,
    f: impl FnOnce(&Watch) -> R,
) -> R {
    let deadline = ctl.deadline.or_else(|| ctx.deadline());
    let w = match (ctl.progress, fallback) {
        (Some(p), _) => Watch::new(p),
        (None, Some(p)) => Watch::new(&**p),
        (None, None) => Watch::none(),
    };
    let w = w.until(deadline);
    let r = f(&w);
    crate::report::set_last(crate::report::RunReport {
        backend: ctx.backend().kind(),
        fallbacks: w.fallbacks(),
    });
    r
}
