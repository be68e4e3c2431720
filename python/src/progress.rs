//! Progress callbacks: `fn(phase: str, done: int, total: int)`, returning True to cancel.
//! An exception raised inside one cancels the call and is raised again in its place.

use pyo3::prelude::*;
use std::sync::{Arc, Mutex, RwLock};
use vlc_compress::{Phase, Progress};

pub struct PyProgress {
    f: Py<PyAny>,
    raised: Mutex<Option<PyErr>>,
}

pub fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Anchors => "anchors",
        Phase::Codebooks => "codebooks",
        Phase::Encode => "encode",
        Phase::Merge => "merge",
    }
}

impl PyProgress {
    pub fn new(f: Py<PyAny>) -> Arc<PyProgress> {
        Arc::new(PyProgress {
            f,
            raised: Mutex::new(None),
        })
    }

    /// The exception a callback raised, once (the call's own error otherwise stands).
    pub fn take_raised(&self) -> Option<PyErr> {
        self.raised.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Progress for PyProgress {
    fn report(&self, phase: Phase, done: u64, total: u64) -> bool {
        crate::lock::as_callback(|| {
            Python::attach(
                |py| match self.f.call1(py, (phase_name(phase), done, total)) {
                    Ok(v) => !v.is_truthy(py).unwrap_or(false),
                    Err(e) => {
                        *self.raised.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                        false
                    }
                },
            )
        })
    }
}

/// A callable given to a call or object, checked to be callable.
pub fn callback(f: Option<Bound<'_, PyAny>>) -> PyResult<Option<Arc<PyProgress>>> {
    match f {
        None => Ok(None),
        Some(f) if f.is_none() => Ok(None),
        Some(f) if !f.is_callable() => Err(crate::errors::invalid(
            "progress must be a callable fn(phase, done, total) -> bool",
        )),
        Some(f) => Ok(Some(PyProgress::new(f.unbind()))),
    }
}

/// An object's own callback (`set_progress`), kept here rather than in the core object so
/// that the exception it raises can be raised again in the call's place.
#[derive(Default)]
pub struct Slot(RwLock<Option<Arc<PyProgress>>>);

impl Slot {
    pub fn set(&self, f: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = callback(f)?;
        Ok(())
    }

    /// The callback for one call: its own, else the object's (the core then consults the
    /// context's).
    pub fn for_call(
        &self,
        per_call: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Option<Arc<PyProgress>>> {
        Ok(
            callback(per_call)?
                .or_else(|| self.0.read().unwrap_or_else(|e| e.into_inner()).clone()),
        )
    }
}

/// The result of a call that `p` watched: a callback's own exception replaces the
/// cancellation it caused.
pub fn settle<T>(p: Option<&PyProgress>, r: vlc_compress::Result<T>) -> PyResult<T> {
    match r {
        Ok(v) => Ok(v),
        Err(e) => Err(p
            .and_then(PyProgress::take_raised)
            .unwrap_or_else(|| crate::errors::to_py(e))),
    }
}
