//! numpy in and out. float32 and float16 rows are read in place when C-contiguous; anything
//! else numpy can turn into floats (float64, lists, strided views) is converted once.

use crate::errors::invalid;
use half::f16;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use vlc_compress::Vectors;

/// Rows of floats as the caller gave them (or converted once).
pub enum Rows<'py> {
    F32(PyReadonlyArray2<'py, f32>),
    F16(PyReadonlyArray2<'py, f16>),
}

impl Rows<'_> {
    pub fn shape(&self) -> (usize, usize) {
        let s = match self {
            Rows::F32(a) => a.shape(),
            Rows::F16(a) => a.shape(),
        };
        (s[0], s[1])
    }

    pub fn vectors(&self) -> Vectors<'_> {
        // Contiguity was checked when the rows were taken.
        match self {
            Rows::F32(a) => Vectors::F32(a.as_slice().expect("contiguous")),
            Rows::F16(a) => Vectors::F16(a.as_slice().expect("contiguous")),
        }
    }
}

fn numpy(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("numpy")
}

/// `x` as C-contiguous 2-D rows of `T` (numpy's `dtype`): in place where it already is,
/// else converted once by numpy.
fn typed_rows<'py, T: numpy::Element>(
    x: &Bound<'py, PyAny>,
    dtype: &str,
    what: &str,
) -> PyResult<PyReadonlyArray2<'py, T>> {
    if let Ok(a) = x.cast::<PyArray2<T>>() {
        if a.is_c_contiguous() {
            return Ok(a.readonly());
        }
    }
    let a = numpy(x.py())?.call_method1("ascontiguousarray", (x, dtype))?;
    let ndim: usize = a.getattr("ndim")?.extract()?;
    if ndim != 2 {
        let shape = a.getattr("shape")?.str()?.to_string();
        return Err(invalid(format!(
            "{what} must be 2-D (rows, dim); got shape {shape}"
        )));
    }
    Ok(a.cast_into::<PyArray2<T>>()?.readonly())
}

/// Rows for train, encode and add: float16 kept as float16, everything else as float32.
pub fn rows<'py>(x: &Bound<'py, PyAny>, what: &str) -> PyResult<Rows<'py>> {
    if let Ok(a) = x.cast::<PyArray2<f16>>() {
        if a.is_c_contiguous() {
            return Ok(Rows::F16(a.readonly()));
        }
    }
    Ok(Rows::F32(f32_rows(x, what)?))
}

/// Rows as float32 (queries, raw vectors).
pub fn f32_rows<'py>(x: &Bound<'py, PyAny>, what: &str) -> PyResult<PyReadonlyArray2<'py, f32>> {
    typed_rows(x, "float32", what)
}

/// Ids as u64: unsigned arrays as they are, signed ones checked for negatives.
pub fn ids(x: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    let np = numpy(x.py())?;
    let a = np.call_method1("asarray", (x,))?;
    let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    let ndim: usize = a.getattr("ndim")?.extract()?;
    if ndim != 1 {
        return Err(invalid(format!(
            "{what} must be 1-D; got {ndim} dimensions"
        )));
    }
    match kind.as_str() {
        "u" => {
            let a = np.call_method1("ascontiguousarray", (a, "uint64"))?;
            let a: PyReadonlyArray1<u64> = a.extract()?;
            Ok(a.as_slice()?.to_vec())
        }
        "i" => {
            let a = np.call_method1("ascontiguousarray", (a, "int64"))?;
            let a: PyReadonlyArray1<i64> = a.extract()?;
            let s = a.as_slice()?;
            if let Some(&v) = s.iter().find(|&&v| v < 0) {
                return Err(invalid(format!("{what}: id {v} is negative")));
            }
            Ok(s.iter().map(|&v| v as u64).collect())
        }
        _ => {
            let dt = a.getattr("dtype")?.str()?.to_string();
            Err(invalid(format!("{what} must be integers; got dtype {dt}")))
        }
    }
}

/// Byte rows (codes).
pub fn byte_rows<'py>(x: &Bound<'py, PyAny>, what: &str) -> PyResult<PyReadonlyArray2<'py, u8>> {
    typed_rows(x, "uint8", what)
}

/// `v` (rows x cols values) as a 2-D array, without a copy.
pub fn matrix<T: numpy::Element>(
    py: Python<'_>,
    v: Vec<T>,
    rows: usize,
    cols: usize,
) -> PyResult<Bound<'_, PyArray2<T>>> {
    v.into_pyarray(py).reshape([rows, cols])
}

/// Ids as int64, missing ones (`u64::MAX`) as -1, in the FAISS convention.
pub fn id_matrix(
    py: Python<'_>,
    ids: Vec<u64>,
    rows: usize,
    cols: usize,
) -> PyResult<Bound<'_, PyArray2<i64>>> {
    let v: Vec<i64> = ids
        .into_iter()
        .map(|i| if i == u64::MAX { -1 } else { i as i64 })
        .collect();
    matrix(py, v, rows, cols)
}

/// A 1-D array from `v`, without a copy.
pub fn vector<T: numpy::Element>(py: Python<'_>, v: Vec<T>) -> Bound<'_, PyArray1<T>> {
    v.into_pyarray(py)
}
