//! Python bindings: numpy in and out, the GIL released around every compute call. Thin over
//! the Rust API; the parameter table and the status numbers come from the core, never copied.

// Methods take Python's keyword arguments one by one.
#![allow(clippy::too_many_arguments)]

use pyo3::prelude::*;

mod arrays;
mod compressor;
mod context;
mod errors;
mod index;
mod lock;
mod progress;

/// The training parameters as the core's table lists them: dicts of id, name, whole, min,
/// max, default and doc.
#[pyfunction]
fn params(py: Python<'_>) -> PyResult<Vec<Bound<'_, pyo3::types::PyDict>>> {
    use pyo3::types::PyDictMethods;
    vlc_compress::params::params()
        .map(|p| {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("id", p.id)?;
            d.set_item("name", p.name)?;
            d.set_item("whole", p.whole)?;
            d.set_item("min", p.min)?;
            d.set_item("max", p.max)?;
            d.set_item("default", p.default)?;
            d.set_item("doc", p.doc)?;
            Ok(d)
        })
        .collect()
}

/// Where this thread's last call that ran work went: `{"backend": "cpu" | "cuda" | "wgpu",
/// "fallbacks": [names of the parts a GPU context answered on the host, and why]}`, or None
/// when the last search, load or verify was refused before its work (or none ran yet).
#[pyfunction]
fn last_run_report(py: Python<'_>) -> PyResult<Option<Bound<'_, pyo3::types::PyDict>>> {
    use pyo3::types::PyDictMethods;
    let Some(r) = vlc_compress::last_run_report() else {
        return Ok(None);
    };
    let d = pyo3::types::PyDict::new(py);
    d.set_item("backend", r.backend.name())?;
    d.set_item("fallbacks", r.fallbacks.names())?;
    Ok(Some(d))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", vlc_compress::VERSION)?;
    m.add_function(wrap_pyfunction!(params, m)?)?;
    m.add_function(wrap_pyfunction!(last_run_report, m)?)?;
    m.add_function(wrap_pyfunction!(errors::statuses, m)?)?;
    m.add_class::<context::PyContext>()?;
    m.add_class::<compressor::PyCompressor>()?;
    m.add_class::<index::PyIndex>()?;
    Ok(())
}
