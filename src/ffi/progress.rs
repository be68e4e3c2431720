//! Progress callbacks for the long calls (train, encode, add, merge, search, load, verify),
//! cancelling them, and their deadlines.

use super::context::{context_ref, vlcc_context};
use super::status::vlcc_status;
use crate::progress::{Phase, Progress, SharedProgress};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// The steps of long work a progress callback hears (numbers are stable).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_phase {
    /// Training the anchors: `done` of `total` iterations.
    Anchors = 0,
    /// Training the residual codebooks: `done` of `total` sub-quantizer fits.
    Codebooks = 1,
    /// Encoding vectors (encode, add): `done` of `total` rows.
    Encode = 2,
    /// Merging another index in: `done` of `total` lists.
    Merge = 3,
    /// Searching (search, search with bounds, range search): `done` of `total` queries.
    Search = 4,
    /// Checking a file's checksums (load, verify): `done` of `total` bytes.
    Verify = 5,
}

impl From<Phase> for vlcc_phase {
    fn from(p: Phase) -> Self {
        match p {
            Phase::Anchors => vlcc_phase::Anchors,
            Phase::Codebooks => vlcc_phase::Codebooks,
            Phase::Encode => vlcc_phase::Encode,
            Phase::Merge => vlcc_phase::Merge,
            Phase::Search => vlcc_phase::Search,
            Phase::Verify => vlcc_phase::Verify,
        }
    }
}

/// A progress callback: `done` of `total` in `phase`. Return 0 to go on; anything else
/// cancels the call, which returns VLCC_STATUS_CANCELLED and leaves every object as it was
/// before it (an index keeps its contents, a compressor its codebook or none).
pub type vlcc_progress_fn = Option<
    unsafe extern "C" fn(user: *mut c_void, phase: vlcc_phase, done: u64, total: u64) -> c_int,
>;

pub(crate) struct CProgress {
    f: unsafe extern "C" fn(*mut c_void, vlcc_phase, u64, u64) -> c_int,
    user: *mut c_void,
}

// SAFETY: the caller promises (header docs) that `f` may be called with `user` from any
// thread; the library calls it from one thread at a time per call.
unsafe impl Send for CProgress {}
unsafe impl Sync for CProgress {}

impl Progress for CProgress {
    fn report(&self, phase: Phase, done: u64, total: u64) -> bool {
        // SAFETY: as the caller promised when setting it.
        unsafe { (self.f)(self.user, phase.into(), done, total) == 0 }
    }
}

/// A call's control from its own callback, if any, and timeout in milliseconds (0 = none).
pub(crate) fn call_control(
    own: &Option<SharedProgress>,
    timeout_ms: u64,
) -> crate::progress::Control<'_> {
    let after = std::time::Duration::from_millis(timeout_ms);
    crate::progress::Control {
        progress: own.as_deref().map(|p| p as &dyn Progress),
        deadline: (timeout_ms > 0)
            .then(|| std::time::Instant::now().checked_add(after))
            .flatten(),
    }
}

pub(crate) fn shared(f: vlcc_progress_fn, user: *mut c_void) -> Option<SharedProgress> {
    f.map(|f| Arc::new(CProgress { f, user }) as SharedProgress)
}

/// Long calls on objects made from `ctx` that have no callback of their own report to
/// `f(user, ...)` (`vlcc_progress_fn`); `f` NULL removes it. `f` is called from the calling
/// thread or the library's worker threads, never two at once for one call; `user` must stay
/// valid while the callback is set. Reports come at least every few hundred milliseconds of
/// CPU work (one batch on a GPU). Thread-safe; calls already running keep the callback
/// they started with.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_set_progress(
    ctx: *const vlcc_context,
    f: vlcc_progress_fn,
    user: *mut c_void,
) -> vlcc_status {
    ffi_boundary! {
        context_ref(ctx)?.set_progress(shared(f, user));
        Ok(())
    }
}

/// Every long call on objects made from `ctx` (train, encode, add, merge, search, search with
/// bounds, range search, load onto it, verify) stops with VLCC_STATUS_TIMED_OUT once
/// `timeout_ms` milliseconds have passed from its start, leaving every object and output as
/// it was; 0 (the default) sets no limit. A search's own `VLCC_SEARCH_PARAM_TIMEOUT_MS` takes
/// precedence. On the host a call stops within about 10 ms of its deadline plus one step
/// (a query, a block of rows); on a GPU, plus one batch. Thread-safe; calls already running
/// keep the deadline they started with.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_set_timeout(
    ctx: *const vlcc_context,
    timeout_ms: u64,
) -> vlcc_status {
    ffi_boundary! {
        let t = (timeout_ms > 0).then(|| std::time::Duration::from_millis(timeout_ms));
        context_ref(ctx)?.set_timeout(t);
        Ok(())
    }
}

/// Stores the context's timeout in milliseconds (0 = none) in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_timeout(
    ctx: *const vlcc_context,
    out: *mut u64,
) -> vlcc_status {
    ffi_boundary! {
        let ms = context_ref(ctx)?.timeout().map_or(0, |t| t.as_millis().max(1) as u64);
        super::boundary::write_out(out, ms, "out")
    }
}
