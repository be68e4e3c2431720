//! `Compressor`: training parameters (named as the core's table names them), a codebook once
//! trained or loaded, encode and decode.

use crate::arrays::{byte_rows, matrix, rows};
use crate::context::PyContext;
use crate::errors::{invalid, OrPy};
use crate::index::PyIndex;
use crate::lock::Locked;
use crate::progress::{self, settle};
use numpy::{PyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::sync::Arc;
use vlc_compress::{format, Compressor, Metric, Refine, Rotation};

#[pyclass(module = "vlc_compress._native", name = "Compressor", frozen)]
pub struct PyCompressor {
    /// Training replaces the codebook: it takes the lock exclusively; encodes share it.
    pub c: Locked<Compressor>,
    progress: progress::Slot,
}

/// Sets one parameter by its table name; metric, rotation, init and error_code also take
/// their names.
fn set_param(c: &mut Compressor, name: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
    let p = c.params_mut();
    if let Ok(s) = v.extract::<String>() {
        match name {
            "metric" => p.metric = s.parse::<Metric>().py_err()?,
            "rotation" => p.rotation = s.parse::<Rotation>().py_err()?,
            "init" => p.anchor.init = s.parse().py_err()?,
            "error_code" => p.error_code = s.parse().py_err()?,
            _ => return Err(invalid(format!("{name} takes a number, not {s:?}"))),
        }
        return Ok(());
    }
    let info = vlc_compress::params::params()
        .find(|i| i.name == name)
        .ok_or_else(|| {
            invalid(format!(
                "{name:?} is not a training parameter (see vlc_compress.PARAMS)"
            ))
        })?;
    let value: f64 = v
        .extract()
        .map_err(|_| invalid(format!("{name} takes a number")))?;
    p.set(info.id, value).py_err()
}

impl PyCompressor {
    fn wrap(c: Compressor) -> Self {
        PyCompressor {
            c: Locked::new(c, "compressor"),
            progress: Default::default(),
        }
    }

    fn read(&self, py: Python<'_>) -> PyResult<std::sync::RwLockReadGuard<'_, Compressor>> {
        self.c.read(py)
    }
}

#[pymethods]
impl PyCompressor {
    /// A compressor with the given training parameters (`vlc_compress.PARAMS` lists them:
    /// `anchors`, `bytes_per_vector`, `bits`, `metric` ("l2", "ip", "cosine"), ...).
    #[new]
    #[pyo3(signature = (context = None, **params))]
    fn new(
        context: Option<&Bound<'_, PyContext>>,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut c = Compressor::new(PyContext::or_default(context)?, Default::default());
        if let Some(params) = params {
            for (k, v) in params.iter() {
                set_param(&mut c, &k.extract::<String>()?, &v)?;
            }
        }
        Ok(Self::wrap(c))
    }

    /// A compressor around a saved codebook (`codebook_bytes()` or a codebook file's bytes).
    #[staticmethod]
    #[pyo3(signature = (data, context = None))]
    fn from_codebook(data: &[u8], context: Option<&Bound<'_, PyContext>>) -> PyResult<Self> {
        let cb = format::read_codebook_bytes(data).py_err()?;
        Ok(Self::wrap(Compressor::with_codebook(
            PyContext::or_default(context)?,
            Arc::new(cb),
        )))
    }

    /// Loads a codebook file.
    #[staticmethod]
    #[pyo3(signature = (path, context = None))]
    fn load_codebook(
        path: std::path::PathBuf,
        context: Option<&Bound<'_, PyContext>>,
    ) -> PyResult<Self> {
        let cb = format::load_codebook(&path).py_err()?;
        Ok(Self::wrap(Compressor::with_codebook(
            PyContext::or_default(context)?,
            Arc::new(cb),
        )))
    }

    /// Every training parameter's current value, by name.
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let c = self.read(py)?;
        for i in vlc_compress::params::params() {
            d.set_item(i.name, c.params().get(i.id).py_err()?)?;
        }
        Ok(d)
    }

    /// Sets training parameters by name (before `train`).
    #[pyo3(signature = (**params))]
    fn set_params(&self, py: Python<'_>, params: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let mut c = self.c.write(py)?;
        for (k, v) in params.into_iter().flat_map(|p| p.iter()) {
            set_param(&mut c, &k.extract::<String>()?, &v)?;
        }
        Ok(())
    }

    /// Trains on `x` (n x d; float32, float16, or anything numpy turns into floats) and
    /// returns the training report. A progress callback may cancel; the compressor then keeps
    /// its previous codebook (or none).
    #[pyo3(signature = (x, progress = None))]
    fn train<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        progress: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let x = rows(x, "x")?;
        let (_, d) = x.shape();
        let p = self.progress.for_call(progress)?;
        let x32: std::borrow::Cow<'_, [f32]> = match x.vectors() {
            vlc_compress::Vectors::F32(s) => s.into(),
            vlc_compress::Vectors::F16(s) => {
                s.iter().map(|v| v.to_f32()).collect::<Vec<_>>().into()
            }
        };
        let mut c = self.c.write(py)?;
        let c: &mut Compressor = &mut c;
        let report = py.detach(|| {
            let r = match &p {
                Some(p) => c.train_with_progress(&x32, d, p.as_ref()),
                None => c.train(&x32, d),
            };
            r.cloned()
        });
        let r = settle(p.as_deref(), report)?;
        let out = PyDict::new(py);
        out.set_item("energy", r.energy)?;
        out.set_item("max_list_over_mean", r.max_list_over_mean)?;
        out.set_item("iterations", r.iterations)?;
        out.set_item("anchor_seconds", r.anchor_seconds)?;
        out.set_item("pq_seconds", r.pq_seconds)?;
        out.set_item("pq_mse", r.pq_mse)?;
        Ok(out)
    }

    /// Whether a codebook is trained or loaded.
    #[getter]
    fn is_trained(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.read(py)?.codebook().is_ok())
    }

    /// Dimension of the vectors the codebook takes.
    #[getter]
    fn d(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.read(py)?.codebook().py_err()?.dim())
    }

    /// Bytes of one encoded vector (anchor id and residual code).
    #[getter]
    fn code_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.read(py)?.codebook().py_err()?.codec_size())
    }

    /// The trained anchors (the inverted lists' centroids): float32, anchors x d.
    #[getter]
    fn anchors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let (a, d) = {
            let c = self.read(py)?;
            let cb = c.codebook().py_err()?;
            (cb.anchor_vectors().to_vec(), cb.dim())
        };
        let m = a.len() / d.max(1);
        matrix(py, a, m, d)
    }

    /// The codebook's fingerprint: indexes merge only when theirs agree.
    #[getter]
    fn fingerprint(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.read(py)?.codebook().py_err()?.fingerprint())
    }

    /// The codebook in the file format, as bytes.
    fn codebook_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let b = format::codebook_bytes(self.read(py)?.codebook().py_err()?);
        Ok(PyBytes::new(py, &b))
    }

    /// Saves the codebook (written to a temporary file, then renamed over `path`).
    fn save_codebook(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let cb = self.read(py)?.codebook().py_err()?.clone();
        py.detach(|| format::save_codebook(&cb, &path)).py_err()
    }

    /// Codes of `x`: a uint8 array of n x code_size.
    #[pyo3(signature = (x, progress = None))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        progress: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<u8>>> {
        let x = rows(x, "x")?;
        let (n, _) = x.shape();
        let p = self.progress.for_call(progress)?;
        let v = x.vectors();
        let c = self.read(py)?;
        let c: &Compressor = &c;
        let codes = py.detach(|| match &p {
            Some(p) => c.encode_with_progress(v, p.as_ref()),
            None => c.encode(v),
        });
        let codes = settle(p.as_deref(), codes)?;
        let size = self.code_size(py)?;
        matrix(py, codes, n, size)
    }

    /// Vectors of `codes` (n x code_size, uint8): float32 n x d.
    fn decode<'py>(
        &self,
        py: Python<'py>,
        codes: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let codes = byte_rows(codes, "codes")?;
        let (n, size, want) = (codes.shape()[0], codes.shape()[1], self.code_size(py)?);
        if size != want {
            return Err(invalid(format!(
                "codes have {size} bytes per row; this codebook's are {want}"
            )));
        }
        let b = codes.as_slice()?;
        let c = self.read(py)?;
        let c: &Compressor = &c;
        let x = py.detach(|| c.decode(b)).py_err()?;
        matrix(py, x, n, self.d(py)?)
    }

    /// An empty index on this codebook. `refine`: None, "bound", "f16" or "int8" (side rows
    /// for error bounds and a re-rank without the caller's vectors).
    #[pyo3(signature = (refine = None))]
    fn new_index(&self, py: Python<'_>, refine: Option<&str>) -> PyResult<PyIndex> {
        let r: Refine = refine.unwrap_or("none").parse().py_err()?;
        Ok(PyIndex::wrap(
            self.read(py)?.new_index_with_refine(r).py_err()?,
        ))
    }

    /// Estimated peak memory, (host, device) bytes, of `work` with these parameters for n
    /// vectors of dimension d: "train", training on them; "build", adding them to an empty
    /// index in one call; "search", the first search of an index of n vectors (its tables and
    /// fast-scan blocks, and a block of queries per thread).
    #[pyo3(signature = (n, d, work = "train"))]
    fn estimate_memory(
        &self,
        py: Python<'_>,
        n: usize,
        d: usize,
        work: &str,
    ) -> PyResult<(usize, usize)> {
        let w: vlc_compress::Work = work.parse().py_err()?;
        self.read(py)?.estimate_memory(w, n, d).py_err()
    }

    /// A progress callback for this compressor's calls that have none of their own.
    fn set_progress(&self, progress: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.progress.set(progress)
    }

    /// Pickles as the codebook's bytes (on a CPU context when unpickled).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let f = slf.getattr("from_codebook")?;
        Ok((f, (slf.get().codebook_bytes(slf.py())?,)))
    }
}
