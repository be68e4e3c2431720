//! Progress callbacks: `fn(phase: str, done: int, total: int)`, returning True to cancel.
//! An exception raised inside one cancels the call and is raised again in its place.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::time::Duration;
use vlc_compress::{Phase, Progress, SharedProgress};

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
        Phase::Search => "search",
        Phase::Verify => "verify",
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

/// What the core hears a call on: its own callback, else the context's.
pub fn heard(own: &Option<Arc<PyProgress>>, ctx: &vlc_compress::Context) -> Option<SharedProgress> {
    match own {
        Some(p) => Some(p.clone() as SharedProgress),
        None => ctx.progress(),
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

    /// The callback for one call: its own, else the object's, else the context's.
    pub fn watching(
        &self,
        per_call: Option<Bound<'_, PyAny>>,
        ctx: &vlc_compress::Context,
    ) -> PyResult<(Option<Arc<PyProgress>>, Option<SharedProgress>)> {
        let own = self.for_call(per_call)?;
        let shared = heard(&own, ctx);
        Ok((own, shared))
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

/// A call's progress as the core hears it: the caller's callback (if any), and a cancel once
/// the interpreter has a signal's exception (Ctrl-C's `KeyboardInterrupt`) to raise.
struct Interruptible {
    inner: Option<SharedProgress>,
    interrupted: AtomicBool,
}

impl Progress for Interruptible {
    fn report(&self, phase: Phase, done: u64, total: u64) -> bool {
        !self.interrupted.load(Ordering::Relaxed)
            && self
                .inner
                .as_ref()
                .is_none_or(|p| p.report(phase, done, total))
    }
}

/// How often the main thread looks for a signal while a call runs.
const SIGNALS_EVERY: Duration = Duration::from_millis(20);

/// Runs `f`, a library call watched by the progress it is given (`inner`, and on the main
/// thread Ctrl-C), with the GIL released. Signals reach Python only on the main thread and
/// only when it runs Python, so there `f` runs on a scoped thread while the main thread
/// checks for signals every 20 ms: a handler's exception (`KeyboardInterrupt`) cancels the
/// call and is raised in its place, once the call has stopped.
pub fn interruptible<T: Send>(
    py: Python<'_>,
    inner: Option<SharedProgress>,
    f: impl FnOnce(&dyn Progress) -> T + Send,
) -> PyResult<T> {
    let watch = Interruptible {
        inner,
        interrupted: AtomicBool::new(false),
    };
    if !on_main_thread(py)? {
        return Ok(py.detach(|| f(&watch)));
    }
    let mut raised = None;
    let got = py.detach(|| {
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let watch = &watch;
            let call = s.spawn(move || {
                let r = f(watch);
                let _ = tx.send(());
                (r, vlc_compress::last_run_report())
            });
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(SIGNALS_EVERY) {
                if raised.is_none() {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        raised = Some(e);
                        watch.interrupted.store(true, Ordering::Relaxed);
                    }
                }
            }
            call.join()
        })
    });
    // The call's report, for `last_run_report` on the caller's thread.
    let got = got.map(|(v, report)| {
        vlc_compress::report::set_last_run_report(report);
        v
    });
    match (raised, got) {
        (Some(e), _) => Err(e),
        (None, Ok(v)) => Ok(v),
        (None, Err(panic)) => std::panic::resume_unwind(panic),
    }
}

/// Whether this is the interpreter's main thread, the one its signal handlers run on.
fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?.getattr("ident")?;
    Ok(main.eq(threading.call_method0("get_ident")?)?)
}
