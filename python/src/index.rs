//! `Index`: add, search (FAISS-shaped: `D, I = index.search(q, k)`), filters, re-rank,
//! distance bounds, range search, remove, merge, files and bytes.

use crate::arrays::{f32_rows, id_matrix, ids, matrix, rows, vector};
use crate::context::PyContext;
use crate::errors::{invalid, OrPy};
use crate::lock::Locked;
use crate::progress::{self, settle};
use numpy::{PyArray1, PyArray2, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::RwLockReadGuard;
use std::time::{Duration, Instant};
use vlc_compress::progress::Control;
use vlc_compress::{DenseRaw, Error, FetchRaw, Filter, Index, RawVectors, SearchParams};

#[pyclass(module = "vlc_compress._native", name = "Index", frozen)]
pub struct PyIndex {
    /// Searches share the index; add, remove and merge take it exclusively (`lock`: never
    /// waited for with the GIL held, nor from a callback of a call that holds it).
    ix: Locked<Index>,
    progress: progress::Slot,
}

/// The caller's raw vectors for a re-rank: an array (row i = id i) or a callable
/// `fetch(ids: uint64 array) -> (len(ids), d) array`.
enum Raw<'py> {
    Rows(PyReadonlyArray2<'py, f32>),
    Fetch(Py<PyAny>),
}

fn raw_of<'py>(raw: Option<&Bound<'py, PyAny>>) -> PyResult<Option<Raw<'py>>> {
    match raw {
        None => Ok(None),
        Some(r) if r.is_none() => Ok(None),
        Some(r) if r.is_callable() => Ok(Some(Raw::Fetch(r.clone().unbind()))),
        Some(r) => Ok(Some(Raw::Rows(f32_rows(r, "raw")?))),
    }
}

/// Calls the caller's fetch for `ids` into `out`, with the GIL held for the call only.
fn fetch(f: &Py<PyAny>, d: usize, want: &[u64], out: &mut [f32]) -> vlc_compress::Result<()> {
    crate::lock::as_callback(|| {
        Python::attach(|py| {
            let got = f
                .call1(py, (vector(py, want.to_vec()),))
                .and_then(|v| Ok(f32_rows(v.bind(py), "fetched rows")?.as_slice()?.to_vec()));
            match got {
                Ok(v) if v.len() == out.len() => {
                    out.copy_from_slice(&v);
                    Ok(())
                }
                Ok(v) => Err(Error::Callback(format!(
                    "fetch gave {} values for {} ids of dimension {d}",
                    v.len(),
                    want.len()
                ))),
                Err(e) => Err(Error::Callback(format!("fetch raised {e}"))),
            }
        })
    })
}

/// A filter: allowed ids (any order), a boolean mask over ids, or a callable `fn(id) -> bool`
/// (called from several threads; an exception in it ends the search).
fn filter_of(f: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Filter>> {
    let Some(f) = f.filter(|f| !f.is_none()) else {
        return Ok(None);
    };
    if f.is_callable() {
        let g = f.clone().unbind();
        return Ok(Some(Filter::predicate(move |id| {
            crate::lock::as_callback(|| {
                Python::attach(|py| {
                    g.call1(py, (id,))
                        .and_then(|v| v.is_truthy(py))
                        .map_err(|e| Error::Callback(format!("filter raised {e}")))
                })
            })
        })));
    }
    let np = f.py().import("numpy")?;
    let a = np.call_method1("asarray", (f,))?;
    let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    if kind == "b" {
        let n: u64 = a.getattr("size")?.extract()?;
        let kw = pyo3::types::PyDict::new(f.py());
        kw.set_item("bitorder", "little")?;
        let packed = np.call_method("packbits", (a.call_method1("ravel", ())?,), Some(&kw))?;
        let bits: Vec<u8> = packed.call_method0("tobytes")?.extract()?;
        return Ok(Some(Filter::bitset(&bits, n).py_err()?));
    }
    let mut v = ids(f, "filter")?;
    v.sort_unstable();
    Ok(Some(Filter::ids(&v).py_err()?))
}

impl PyIndex {
    pub fn wrap(ix: Index) -> Self {
        PyIndex {
            ix: Locked::new(ix, "index"),
            progress: Default::default(),
        }
    }

    fn read(&self, py: Python<'_>) -> PyResult<RwLockReadGuard<'_, Index>> {
        self.ix.read(py)
    }

    /// Runs `f` on the index shared, with the GIL released.
    fn shared<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&Index) -> T + Send) -> PyResult<T> {
        let ix = self.read(py)?;
        let ix: &Index = &ix;
        Ok(py.detach(|| f(ix)))
    }

    /// Runs `f` on the index exclusively, with the GIL released.
    fn exclusive<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Index) -> T + Send,
    ) -> PyResult<T> {
        let mut ix = self.ix.write(py)?;
        let ix: &mut Index = &mut ix;
        Ok(py.detach(|| f(ix)))
    }

    fn dim(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.read(py)?.codebook().dim())
    }

    /// Queries as float32 rows of this index's dimension.
    fn queries<'py>(&self, q: &Bound<'py, PyAny>) -> PyResult<(PyReadonlyArray2<'py, f32>, usize)> {
        let q = f32_rows(q, "queries")?;
        let (n, d) = (q.shape()[0], q.shape()[1]);
        let want = self.dim(q.py())?;
        if d != want {
            return Err(invalid(format!(
                "queries have dimension {d}; the index's is {want}"
            )));
        }
        Ok((q, n))
    }

    /// Runs a search call `f` with the queries checked, the raw vectors and filter taken as
    /// the core reads them, and the GIL released: its result and the number of queries.
    #[allow(clippy::too_many_arguments)]
    fn run_search<T: Send>(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        p: SearchParams,
        raw: Option<&Bound<'_, PyAny>>,
        filter: Option<&Bound<'_, PyAny>>,
        (progress, timeout): Watched<'_>,
        f: impl FnOnce(
                &Index,
                &[f32],
                &SearchParams,
                Option<&dyn RawVectors>,
                Option<&Filter>,
                &Control,
            ) -> vlc_compress::Result<T>
            + Send,
    ) -> PyResult<(T, usize)> {
        vlc_compress::report::set_last_run_report(None);
        let (q, nq) = self.queries(queries)?;
        let (raw, filter) = (raw_of(raw)?, filter_of(filter)?);
        let qs = q.as_slice()?;
        let d = self.dim(py)?;
        let r = self.with_raw(d, &raw, |raw| {
            self.watched(py, progress, timeout, |ix, ctl| {
                Ok(f(ix, qs, &p, raw, filter.as_ref(), ctl))
            })
        })???;
        Ok((r, nq))
    }

    /// Runs `f` on the index shared, watched by `progress` (else the index's callback, else
    /// the context's), Ctrl-C and `timeout` seconds (else the context's timeout), with the
    /// GIL released; a callback's exception is raised in place of the cancel it caused.
    fn watched<T: Send>(
        &self,
        py: Python<'_>,
        progress: Option<Bound<'_, PyAny>>,
        timeout: Option<f64>,
        f: impl FnOnce(&Index, &Control) -> PyResult<vlc_compress::Result<T>> + Send,
    ) -> PyResult<PyResult<T>> {
        vlc_compress::report::set_last_run_report(None);
        let deadline = deadline(timeout)?;
        let ix = self.read(py)?;
        let ix: &Index = &ix;
        let (own, heard) = self.progress.watching(progress, ix.context())?;
        let r = progress::interruptible(py, heard, |w| {
            f(
                ix,
                &Control {
                    progress: Some(w),
                    deadline,
                },
            )
        })??;
        Ok(settle(own.as_deref(), r))
    }

    /// Runs `f` with the raw vectors as the core reads them.
    fn with_raw<T>(
        &self,
        d: usize,
        raw: &Option<Raw<'_>>,
        f: impl FnOnce(Option<&dyn RawVectors>) -> T,
    ) -> PyResult<T> {
        Ok(match raw {
            None => f(None),
            Some(Raw::Rows(a)) => f(Some(&DenseRaw {
                data: a.as_slice()?,
                d,
            })),
            Some(Raw::Fetch(g)) => f(Some(&FetchRaw {
                d,
                f: |want: &[u64], out: &mut [f32]| fetch(g, d, want, out),
            })),
        })
    }
}

/// `(D, I)`: distances and ids, nq x k.
type Hits<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray2<i64>>);
/// `(D, I, lower, upper, certified)`.
type BoundedHits<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<i64>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray1<bool>>,
);
/// `(lims, D, I)`.
type RangeHits<'py> = (
    Bound<'py, PyArray1<u64>>,
    Bound<'py, PyArray1<f32>>,
    Bound<'py, PyArray1<i64>>,
);

/// A call's own progress callback and timeout in seconds.
type Watched<'py> = (Option<Bound<'py, PyAny>>, Option<f64>);

/// The deadline `timeout` seconds from now (none without one).
fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        // Past what an Instant can hold, no deadline is ever reached.
        Some(t) if t >= 0.0 => Ok(Duration::try_from_secs_f64(t)
            .ok()
            .and_then(|t| Instant::now().checked_add(t))),
        Some(t) => Err(invalid(format!(
            "timeout must be a number of seconds >= 0, not {t}"
        ))),
    }
}

/// The search parameters of a call.
fn params(k: usize, nprobe: usize, rerank: usize) -> SearchParams {
    SearchParams { k, nprobe, rerank }
}

#[pymethods]
impl PyIndex {
    /// Loads an index file. With `mmap`, codes and ids are read in place from the mapped file
    /// (checksums verified at load unless `verify=False`; then call `verify()` when it suits).
    #[staticmethod]
    /// `progress` hears "verify" (bytes checksummed) and may cancel; past `timeout` seconds
    /// (else the context's) the load raises TimedOutError; Ctrl-C stops it.
    #[pyo3(signature = (path, mmap = true, verify = true, context = None, progress = None, timeout = None))]
    fn load(
        py: Python<'_>,
        path: std::path::PathBuf,
        mmap: bool,
        verify: bool,
        context: Option<&Bound<'_, PyContext>>,
        progress: Option<Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Self> {
        vlc_compress::report::set_last_run_report(None);
        let ctx = PyContext::or_default(context)?;
        let deadline = deadline(timeout)?;
        let own = progress::callback(progress)?;
        let ix = progress::interruptible(py, progress::heard(&own, &ctx), |w| {
            let ctl = Control {
                progress: Some(w),
                deadline,
            };
            // A deferred load checks no checksums: it maps in place.
            Index::load_with(ctx, &path, mmap || !verify, !verify, &ctl)
        })?;
        Ok(Self::wrap(settle(own.as_deref(), ix)?))
    }

    /// An index from `to_bytes()`'s bytes.
    #[staticmethod]
    #[pyo3(signature = (data, context = None))]
    fn from_bytes(
        py: Python<'_>,
        data: &[u8],
        context: Option<&Bound<'_, PyContext>>,
    ) -> PyResult<Self> {
        let ctx = PyContext::or_default(context)?;
        Ok(Self::wrap(
            py.detach(|| Index::from_bytes(ctx, data)).py_err()?,
        ))
    }

    /// Checks every section's checksum (for an index loaded with `verify=False`), watched
    /// as `load`.
    #[pyo3(signature = (progress = None, timeout = None))]
    fn verify(
        &self,
        py: Python<'_>,
        progress: Option<Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        self.watched(py, progress, timeout, |ix, ctl| Ok(ix.verify_with(ctl)))?
    }

    /// Saves the index (written to a temporary file, then renamed over `path`).
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        self.shared(py, |ix| ix.save(&path))?.py_err()
    }

    /// The index in the file format, as bytes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let b = self.shared(py, |ix| ix.try_to_bytes())?.py_err()?;
        Ok(PyBytes::new(py, &b))
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        Ok((slf.getattr("from_bytes")?, (slf.get().to_bytes(slf.py())?,)))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.read(py)?.len())
    }

    /// Vectors held (FAISS's name).
    #[getter]
    fn ntotal(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.read(py)?.len())
    }

    #[getter]
    fn d(&self, py: Python<'_>) -> PyResult<usize> {
        self.dim(py)
    }

    #[getter]
    fn nlist(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.read(py)?.nlist())
    }

    #[getter]
    fn metric(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.read(py)?.codebook().metric().name())
    }

    #[getter]
    fn refine(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.read(py)?.refine().name())
    }

    #[getter]
    fn fingerprint(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.read(py)?.codebook().fingerprint())
    }

    /// Encodes `x` (n x d) and appends it under `ids` (default: ntotal, ntotal + 1, ...).
    /// A progress callback may cancel; the index then keeps its old contents.
    #[pyo3(signature = (x, ids = None, progress = None))]
    fn add(
        &self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        ids: Option<&Bound<'_, PyAny>>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let x = rows(x, "x")?;
        let (n, d) = x.shape();
        let want = self.dim(py)?;
        if d != want {
            return Err(invalid(format!(
                "x has dimension {d}; the index's is {want}"
            )));
        }
        let ids = match ids.filter(|i| !i.is_none()) {
            Some(i) => crate::arrays::ids(i, "ids")?,
            None => {
                let base = self.ntotal(py)? as u64;
                (base..base + n as u64).collect()
            }
        };
        let p = self.progress.for_call(progress)?;
        let v = x.vectors();
        let r = self.exclusive(py, |ix| match &p {
            Some(p) => ix.add_with_progress(v, &ids, p.as_ref()),
            None => ix.add(v, &ids),
        })?;
        settle(p.as_deref(), r)
    }

    /// The k nearest of each query: `(D, I)`, float32 and int64 arrays of nq x k, best first;
    /// missing results have id -1 and distance NaN. Distances are squared L2, or similarities
    /// (inner product, cosine). `rerank` > 0 re-scores that many candidates exactly against
    /// `raw` (an array whose row i is id i, or a callable fetch(ids) -> rows), or against the
    /// index's own refinement rows. `filter`: allowed ids, a boolean mask over ids, or a
    /// callable fn(id) -> bool. `progress(phase, done, total)` hears "search" (queries
    /// answered) and may cancel; past `timeout` seconds (else the context's) the search
    /// raises TimedOutError; Ctrl-C stops it with KeyboardInterrupt.
    #[pyo3(signature = (queries, k, nprobe = 16, rerank = 0, raw = None, filter = None, progress = None, timeout = None))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        nprobe: usize,
        rerank: usize,
        raw: Option<&Bound<'py, PyAny>>,
        filter: Option<&Bound<'py, PyAny>>,
        progress: Option<Bound<'py, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Hits<'py>> {
        let p = params(k, nprobe, rerank);
        let w = (progress, timeout);
        let (r, nq) = self.run_search(py, queries, p, raw, filter, w, |ix, q, p, raw, f, c| {
            ix.search_with(q, p, raw, f, c)
        })?;
        Ok((
            matrix(py, r.distances, nq, k)?,
            id_matrix(py, r.ids, nq, k)?,
        ))
    }

    /// As `search`, with each hit's distance bounds from the index's error bounds (an index
    /// made with a refine kind): `(D, I, lower, upper, certified)`. With `auto`, the re-rank
    /// keeps going (up to `rerank` candidates) until the top k is proven exact over the
    /// probed lists; `certified[i]` says whether query i's was. `progress` and `timeout` as
    /// in `search`.
    #[pyo3(signature = (queries, k, nprobe = 16, rerank = 0, raw = None, filter = None, auto = false, progress = None, timeout = None))]
    #[allow(clippy::too_many_arguments)]
    fn search_bounded<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        nprobe: usize,
        rerank: usize,
        raw: Option<&Bound<'py, PyAny>>,
        filter: Option<&Bound<'py, PyAny>>,
        auto: bool,
        progress: Option<Bound<'py, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<BoundedHits<'py>> {
        let p = params(k, nprobe, rerank);
        let w = (progress, timeout);
        let (r, nq) = self.run_search(py, queries, p, raw, filter, w, |ix, q, p, raw, f, c| {
            ix.search_bounded_with(q, p, raw, f, auto, c)
        })?;
        Ok((
            matrix(py, r.results.distances, nq, k)?,
            id_matrix(py, r.results.ids, nq, k)?,
            matrix(py, r.lower, nq, k)?,
            matrix(py, r.upper, nq, k)?,
            vector(py, r.certified),
        ))
    }

    /// Every vector of the probed lists within `radius` (squared L2) or at or above it
    /// (similarity): `(lims, D, I)` in FAISS's shape, query i's hits at `lims[i]:lims[i+1]`.
    /// `progress` and `timeout` as in `search`.
    #[pyo3(signature = (queries, radius, nprobe = 16, rerank = 0, raw = None, filter = None, progress = None, timeout = None))]
    #[allow(clippy::too_many_arguments)]
    fn range_search<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        radius: f32,
        nprobe: usize,
        rerank: usize,
        raw: Option<&Bound<'py, PyAny>>,
        filter: Option<&Bound<'py, PyAny>>,
        progress: Option<Bound<'py, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<RangeHits<'py>> {
        let p = params(1, nprobe, rerank);
        let w = (progress, timeout);
        let (r, _) = self.run_search(py, queries, p, raw, filter, w, |ix, q, p, raw, f, c| {
            ix.range_search_with(q, radius, p, raw, f, c)
        })?;
        let lims = r.offsets.iter().map(|&o| o as u64).collect();
        let ids = r.ids.iter().map(|&i| i as i64).collect();
        Ok((vector(py, lims), vector(py, r.distances), vector(py, ids)))
    }

    /// Removes every vector under each of `ids`; returns how many were removed.
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let ids = crate::arrays::ids(ids, "ids")?;
        self.exclusive(py, |ix| ix.remove(&ids))?.py_err()
    }

    fn __contains__(&self, py: Python<'_>, id: u64) -> PyResult<bool> {
        self.shared(py, |ix| ix.contains(id))?.py_err()
    }

    /// The decoded vectors of `ids` (each must be present): float32 len(ids) x d.
    fn reconstruct<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let ids = crate::arrays::ids(ids, "ids")?;
        let x = self.shared(py, |ix| ix.reconstruct(&ids))?.py_err()?;
        matrix(py, x, ids.len(), self.dim(py)?)
    }

    /// The codes of `ids` (each must be present) as `Compressor.encode` gives them: uint8,
    /// len(ids) x the codebook's code_size; `Compressor.decode` reads them.
    fn get_codes<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<u8>>> {
        let ids = crate::arrays::ids(ids, "ids")?;
        let (codes, size) = self
            .shared(py, |ix| {
                let size = ix.codebook().codec_size();
                ix.get_codes(&ids).map(|c| (c, size))
            })?
            .py_err()?;
        matrix(py, codes, ids.len(), size)
    }

    /// Moves `other`'s vectors into this index (both on the same codebook, else an error
    /// with status CODEBOOK_MISMATCH); `other` is left as it was.
    #[pyo3(signature = (other, progress = None))]
    fn merge(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyIndex>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let other = other.get();
        if std::ptr::eq(other, self) {
            return Err(invalid("an index cannot merge itself"));
        }
        let p = self.progress.for_call(progress)?;
        let src = other.read(py)?;
        let mut dst = self.ix.write(py)?;
        let (src, dst): (&Index, &mut Index) = (&src, &mut dst);
        let r = py.detach(|| match &p {
            Some(p) => dst.merge_from_with_progress(&src, p.as_ref()),
            None => dst.merge_from(&src),
        });
        settle(p.as_deref(), r)
    }

    /// Estimated peak memory, (host, device) bytes, of `work` on this index: "build", adding
    /// n vectors in one call; "search", searching n queries with k, nprobe and rerank (its
    /// working memory and results, and the tables and fast-scan blocks it builds where the
    /// index has none yet). What the context's memory cap is checked against.
    #[pyo3(signature = (n, work = "search", k = 10, nprobe = 16, rerank = 0))]
    fn estimate_memory(
        &self,
        py: Python<'_>,
        n: usize,
        work: &str,
        k: usize,
        nprobe: usize,
        rerank: usize,
    ) -> PyResult<(usize, usize)> {
        let ix = self.read(py)?;
        match work.parse().py_err()? {
            vlc_compress::Work::Build => ix.estimate_add_memory(n).py_err(),
            vlc_compress::Work::Search => {
                let p = params(k, nprobe, rerank);
                p.validate().py_err()?;
                ix.estimate_search_memory(n, &p).py_err()
            }
            vlc_compress::Work::Train => Err(invalid(
                "an index estimates \"build\" or \"search\"; a Compressor trains",
            )),
        }
    }

    /// Counts and memory by part (codes, ids, refinement rows, id map, search tables).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s =
            serde_json::to_string(&self.read(py)?.stats()).map_err(|e| invalid(e.to_string()))?;
        py.import("json")?.call_method1("loads", (s,))
    }

    /// A progress callback for this index's calls that have none of their own.
    fn set_progress(&self, progress: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        self.progress.set(progress)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let ix = self.read(py)?;
        Ok(format!(
            "Index(ntotal={}, d={}, nlist={}, metric={:?})",
            ix.len(),
            ix.codebook().dim(),
            ix.nlist(),
            ix.codebook().metric().name()
        ))
    }
}
