//! `Context`: a backend (CPU, CUDA, WGPU), its threads and its memory cap.

use crate::errors::OrPy;
use crate::progress;
use pyo3::prelude::*;
use std::sync::Arc;
use vlc_compress::{BackendKind, Context};

#[pyclass(module = "vlc_compress._native", name = "Context", frozen)]
pub struct PyContext {
    pub ctx: Arc<Context>,
}

impl PyContext {
    /// The context a call was given, or a CPU context on all cores.
    pub fn or_default(c: Option<&Bound<'_, PyContext>>) -> PyResult<Arc<Context>> {
        match c {
            Some(c) => Ok(c.get().ctx.clone()),
            None => Ok(Arc::new(Context::new(BackendKind::Cpu, 0, 0).py_err()?)),
        }
    }
}

#[pymethods]
impl PyContext {
    /// `backend`: "cpu", "cuda", "wgpu" or "auto" (CUDA, then WGPU, then the CPU); `device`
    /// the GPU's number; `threads` the host threads (0 = all cores).
    #[new]
    #[pyo3(signature = (backend = "cpu", device = 0, threads = 0))]
    fn new(py: Python<'_>, backend: &str, device: usize, threads: usize) -> PyResult<Self> {
        let kind: BackendKind = backend.parse().py_err()?;
        let ctx = py.detach(|| Context::new(kind, device, threads)).py_err()?;
        Ok(PyContext { ctx: Arc::new(ctx) })
    }

    /// The backend in use: "cpu", "cuda" or "wgpu".
    #[getter]
    fn backend(&self) -> String {
        self.ctx.backend().kind().name().to_string()
    }

    #[getter]
    fn threads(&self) -> usize {
        self.ctx.threads()
    }

    /// The host memory cap in bytes (0 = none): every call checks its estimate against it.
    #[getter]
    fn memory_cap(&self) -> usize {
        self.ctx.memory_cap()
    }

    #[setter]
    fn set_memory_cap(&self, bytes: usize) {
        self.ctx.set_memory_cap(bytes)
    }

    /// Whether host searches rotate every query in f32 products (the same results on every
    /// CPU; C `vlcc_context_set_exact_rotation`). False (the default): a CPU with AVX-512 VNNI takes them in 8-bit integers where
    /// the codes hold at most one bit a dimension (faster; a result near a tie can differ
    /// from another CPU's).
    #[getter]
    fn exact_rotation(&self) -> bool {
        self.ctx.exact_rotation()
    }

    #[setter]
    fn set_exact_rotation(&self, exact: bool) {
        self.ctx.set_exact_rotation(exact)
    }

    /// The device memory cap in bytes (0 = none) on GPU backends: every call checks its
    /// device estimate against it.
    #[getter]
    fn device_memory_cap(&self) -> usize {
        self.ctx.device_memory_cap()
    }

    #[setter]
    fn set_device_memory_cap(&self, bytes: usize) {
        self.ctx.set_device_memory_cap(bytes)
    }

    /// Seconds after which searches, range searches, loads and verifies on this context
    /// without a timeout of their own raise TimedOutError (None or 0: never).
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.ctx.timeout().map(|t| t.as_secs_f64())
    }

    #[setter]
    fn set_timeout(&self, seconds: Option<f64>) -> PyResult<()> {
        let t = match seconds {
            None => None,
            Some(s) if s >= 0.0 => {
                Some(std::time::Duration::try_from_secs_f64(s).map_err(|_| {
                    crate::errors::invalid(format!(
                        "timeout {s} s is beyond what a deadline can hold"
                    ))
                })?)
            }
            Some(s) => {
                return Err(crate::errors::invalid(format!(
                    "timeout must be a number of seconds >= 0 or None, not {s}"
                )))
            }
        };
        self.ctx.set_timeout(t.filter(|t| !t.is_zero()));
        Ok(())
    }

    /// A progress callback for every long call on this context that has none of its own
    /// (None removes it).
    fn set_progress(&self, progress: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let p = progress::callback(progress)?;
        self.ctx
            .set_progress(p.map(|p| p as vlc_compress::SharedProgress));
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "Context(backend={:?}, threads={})",
            self.backend(),
            self.threads()
        )
    }
}
