//! Errors: each becomes `vlc_compress.Error` (or its subclass for the status) carrying the C
//! ABI's status number and name, so Python, C and Go callers read the same statuses.

use pyo3::prelude::*;
use std::ffi::CStr;
use vlc_compress::ffi::status::{vlcc_status, vlcc_status_str};
use vlc_compress::Error;

/// The status's name without its prefix: "INVALID_ARGUMENT".
fn status_name(status: u32) -> String {
    // SAFETY: vlcc_status_str returns a static NUL-terminated string for every number.
    let s = unsafe { CStr::from_ptr(vlcc_status_str(status)) };
    s.to_string_lossy()
        .trim_start_matches("VLCC_STATUS_")
        .to_string()
}

/// Every status the C ABI defines: (name, number) pairs, for `vlc_compress.Status`.
#[pyfunction]
pub fn statuses() -> Vec<(String, u32)> {
    (0..)
        .map(|s| (status_name(s), s))
        .take_while(|(n, _)| n != "UNKNOWN")
        .collect()
}

/// A Python exception for `status` and `message`, built by `vlc_compress.errors.error`.
pub fn raise(py: Python<'_>, status: u32, message: String) -> PyErr {
    let made = py
        .import("vlc_compress.errors")
        .and_then(|m| m.getattr("error"))
        .and_then(|f| f.call1((message.clone(), status, status_name(status))));
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// The core's error as a Python exception.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| raise(py, vlcc_status::from(&e) as u32, e.to_string()))
}

/// An invalid argument of the binding's own checks (shapes, dtypes).
pub fn invalid(message: impl Into<String>) -> PyErr {
    Python::attach(|py| raise(py, vlcc_status::InvalidArgument as u32, message.into()))
}

/// `?` on core results inside the binding.
pub trait OrPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> OrPy<T> for vlc_compress::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
