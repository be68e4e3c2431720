//! `vlcc_search_params`: what a search is asked for, as an object, so that what searches
//! learn to take later (filters, bounds, callbacks) never changes a function's signature.

use super::boundary::{fail, handle, handle_mut, need_out, slice, write_out, FfiResult};
use super::status::vlcc_status;
use crate::error::Error;
use crate::index::Filter;
use crate::params::SearchParams;
use std::ffi::{c_int, c_void};

/// Opaque handle to a set of search parameters. Owned by the caller; free with
/// `vlcc_search_params_free`. Searches read it (const); any number may share one while
/// nothing changes it.
pub struct vlcc_search_params {
    _private: [u8; 0],
}

/// Search parameters for `vlcc_search_params_set` / `_get`. Values are doubles holding whole
/// numbers. Numbers are stable.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_search_param {
    /// Results per query, >= 1. Default 10.
    K = 1,
    /// Lists probed per query, >= 1 (values above the list count probe every list). Default 16.
    Nprobe = 2,
    /// Candidates re-scored exactly against raw vectors: 0 (none) or >= k. Default 0.
    Rerank = 3,
    /// 1: the re-rank is certified (`auto`): rerank (>= k) is then the most candidates kept,
    /// re-scored in the order of their distance lower bounds until none left can beat the
    /// k-th exact distance, so the top-k is exact over the probed lists unless that cap was
    /// hit (`vlcc_index_search_bounds` tells which). Needs an index that keeps error bounds
    /// (`vlcc_index_new_with_refine`, any kind but NONE) and raw vectors or a fetch. 0 or 1.
    /// Default 0.
    RerankAuto = 4,
    /// Milliseconds a search with these parameters may take, from its start (0 = none: the
    /// context's timeout, `vlcc_context_set_timeout`, applies). Past it the search stops with
    /// VLCC_STATUS_TIMED_OUT and writes nothing. Whole numbers >= 0. Default 0.
    TimeoutMs = 5,
}

/// What a `vlcc_search_params` holds: the numbers, the filter and the fetch callback if set.
#[derive(Debug, Default)]
pub(crate) struct Params {
    pub p: SearchParams,
    pub filter: Option<Filter>,
    pub fetch: Option<Fetch>,
    /// `VLCC_SEARCH_PARAM_RERANK_AUTO`.
    pub auto: bool,
    /// `VLCC_SEARCH_PARAM_TIMEOUT_MS` (0 = none).
    pub timeout_ms: u64,
    /// `vlcc_search_params_set_progress`.
    pub progress: crate::progress::Listener,
}

impl Params {
    /// How a search with these parameters is watched: its own callback and deadline, where
    /// set (else the index's or context's apply).
    pub fn control(&self) -> crate::progress::Control<'_> {
        super::progress::call_control(&self.progress.0, self.timeout_ms)
    }
}

/// A caller's fetch callback and pointer, which the caller vouches may be used from any thread.
#[derive(Debug)]
pub(crate) struct Fetch {
    f: unsafe extern "C" fn(*mut c_void, *const u64, usize, *mut f32) -> c_int,
    user: *mut c_void,
}
// SAFETY: `vlcc_search_params_set_fetch` documents that the callback is called from several
// threads at once with this pointer; the caller takes that on.
unsafe impl Send for Fetch {}
unsafe impl Sync for Fetch {}

/// A fetch callback as the raw vectors of an index of dimension `d`.
pub(crate) struct FetchRows<'a> {
    pub fetch: &'a Fetch,
    pub d: usize,
}

impl crate::index::RawVectors for FetchRows<'_> {
    fn dim(&self) -> usize {
        self.d
    }
    fn fetch(&self, ids: &[u64], out: &mut [f32]) -> crate::error::Result<()> {
        self.fetch.rows(ids, out)
    }
}

impl Fetch {
    /// Rows of `ids` into `out` through the callback.
    pub fn rows(&self, ids: &[u64], out: &mut [f32]) -> crate::error::Result<()> {
        // SAFETY: `ids` and `out` are valid for the lengths given; the callback is the
        // caller's, as they vouched.
        match unsafe { (self.f)(self.user, ids.as_ptr(), ids.len(), out.as_mut_ptr()) } {
            0 => Ok(()),
            s => Err(Error::Callback(format!(
                "the fetch callback returned {s} for {} ids",
                ids.len()
            ))),
        }
    }
}

pub(crate) unsafe fn search_params_ref<'a>(p: *const vlcc_search_params) -> FfiResult<&'a Params> {
    handle::<vlcc_search_params, Params>(p, "params")
}

unsafe fn params_mut<'a>(p: *mut vlcc_search_params) -> FfiResult<&'a mut Params> {
    handle_mut::<vlcc_search_params, Params>(p, "params")
}

/// The caller's callback and pointer, which the caller vouches may be used from any thread.
struct Callback {
    f: unsafe extern "C" fn(*mut c_void, u64) -> c_int,
    user: *mut c_void,
}
// SAFETY: `vlcc_search_params_set_filter_callback` documents that the callback is called from
// several threads at once with this pointer; the caller takes that on.
unsafe impl Send for Callback {}
unsafe impl Sync for Callback {}

impl Callback {
    fn allows(&self, id: u64) -> crate::error::Result<bool> {
        // SAFETY: as the caller vouched when setting the callback.
        match unsafe { (self.f)(self.user, id) } {
            r if r > 0 => Ok(true),
            0 => Ok(false),
            r => Err(Error::Callback(format!(
                "the filter callback returned {r} for id {id}"
            ))),
        }
    }
}

/// Creates search parameters with their defaults (k 10, nprobe 16, rerank 0). `*out`
/// receives them, owned by the caller.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_new(out: *mut *mut vlcc_search_params) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let p = Box::into_raw(Box::new(Params::default())) as *mut vlcc_search_params;
        write_out(out, p, "out")
    }
}

/// Frees search parameters. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_free(p: *mut vlcc_search_params) {
    if !p.is_null() {
        let _ = std::panic::catch_unwind(|| drop(Box::from_raw(p as *mut Params)));
    }
}

/// Sets a search parameter (a `vlcc_search_param` value). An unknown parameter, or a value that
/// is not a whole number within its range, fails with INVALID_ARGUMENT and changes nothing;
/// whether the set holds together (rerank 0 or >= k) is checked by the search. Exclusive
/// access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_set(
    p: *mut vlcc_search_params,
    param: u32,
    value: f64,
) -> vlcc_status {
    ffi_boundary! {
        let p = params_mut(p)?;
        if param == vlcc_search_param::TimeoutMs as u32 {
            if !(value >= 0.0 && value.fract() == 0.0 && value <= u64::MAX as f64) {
                return fail(vlcc_status::InvalidArgument, format!("timeout_ms = {value}: must be a whole number >= 0"));
            }
            p.timeout_ms = value as u64;
            return Ok(());
        }
        if param != vlcc_search_param::RerankAuto as u32 {
            return Ok(p.p.set(param, value)?);
        }
        if value != 0.0 && value != 1.0 {
            return fail(vlcc_status::InvalidArgument, format!("rerank_auto = {value}: must be 0 or 1"));
        }
        p.auto = value == 1.0;
        Ok(())
    }
}

/// Stores the current value of a search parameter in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_get(
    p: *const vlcc_search_params,
    param: u32,
    out: *mut f64,
) -> vlcc_status {
    ffi_boundary! {
        let p = search_params_ref(p)?;
        let v = if param == vlcc_search_param::RerankAuto as u32 {
            p.auto as u8 as f64
        } else if param == vlcc_search_param::TimeoutMs as u32 {
            p.timeout_ms as f64
        } else {
            p.p.get(param)?
        };
        write_out(out, v, "out")
    }
}

/// Searches with these parameters return only ids in `[0, n_bits)` whose bit is set in `bits`:
/// bit `i % 8` (least significant first) of byte `i / 8`, `ceil(n_bits / 8)` bytes, copied
/// here (the caller's array may be freed at once). A size no address space holds fails with
/// INVALID_ARGUMENT, a copy that cannot be allocated with OUT_OF_MEMORY; either way the
/// filter is unchanged. Replaces any filter set before. The copy counts against the memory
/// cap of each search that uses it. The
/// filter is applied during the scan: a query gets k hits whenever its probed lists hold k
/// allowed vectors; fewer leave the last slots with id UINT64_MAX and distance NaN. Bitsets
/// and id lists are applied in the device scan on CUDA and WGPU contexts (a mask over the
/// index's vectors, made per search); a callback runs on the host path. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_set_filter_bitset(
    p: *mut vlcc_search_params,
    bits: *const u8,
    n_bits: u64,
) -> vlcc_status {
    ffi_boundary! {
        let p = params_mut(p)?;
        let Ok(len) = usize::try_from(n_bits.div_ceil(8)) else {
            return fail(vlcc_status::InvalidArgument, format!("{n_bits} bits do not fit in memory"));
        };
        p.filter = Some(Filter::bitset(slice(bits, len, "bits")?, n_bits)?);
        Ok(())
    }
}

/// Searches with these parameters return only the `n` ids given, which must be sorted
/// ascending (else INVALID_ARGUMENT, and the filter is unchanged); copied here. Otherwise as
/// `vlcc_search_params_set_filter_bitset`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_set_filter_ids(
    p: *mut vlcc_search_params,
    ids: *const u64,
    n: usize,
) -> vlcc_status {
    ffi_boundary! {
        let p = params_mut(p)?;
        p.filter = Some(Filter::ids(slice(ids, n, "ids")?)?);
        Ok(())
    }
}

/// Searches with these parameters ask `f(user, id)` about each vector that would enter a
/// query's candidates: positive allows it, 0 skips it, negative stops the search with
/// VLCC_STATUS_CALLBACK_FAILED (nothing is written). `f` is called from several threads at
/// once, during the search calls only; `user` must stay valid while the parameters may be used.
/// Searches with a callback scan on the host, whatever the context's backend. Otherwise as
/// `vlcc_search_params_set_filter_bitset`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_set_filter_callback(
    p: *mut vlcc_search_params,
    f: Option<unsafe extern "C" fn(user: *mut c_void, id: u64) -> c_int>,
    user: *mut c_void,
) -> vlcc_status {
    ffi_boundary! {
        let p = params_mut(p)?;
        let Some(f) = f else {
            return fail(vlcc_status::NullPointer, "f is NULL");
        };
        let cb = Callback { f, user };
        p.filter = Some(Filter::predicate(move |id| cb.allows(id)));
        Ok(())
    }
}

/// Searches with these parameters and rerank above 0 get the raw vectors of their candidates
/// from `f` instead of a dense array: `f(user, ids, n, out)` writes the n rows of `ids` (d
/// floats each, in order) into `out` and returns 0 (VLCC_STATUS_OK); any other value fails the
/// search with VLCC_STATUS_CALLBACK_FAILED, and nothing is written. It is called once per
/// query, from several threads at once; `user` must stay valid while the parameters may be
/// used. A search given both a callback and raw vectors fails with INVALID_ARGUMENT. `f` NULL
/// removes the callback. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_set_fetch(
    p: *mut vlcc_search_params,
    f: Option<
        unsafe extern "C" fn(user: *mut c_void, ids: *const u64, n: usize, out: *mut f32) -> c_int,
    >,
    user: *mut c_void,
) -> vlcc_status {
    ffi_boundary! {
        params_mut(p)?.fetch = f.map(|f| Fetch { f, user });
        Ok(())
    }
}

/// Removes the filter, if any: searches return any id again. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_clear_filter(
    p: *mut vlcc_search_params,
) -> vlcc_status {
    ffi_boundary! {
        params_mut(p)?.filter = None;
        Ok(())
    }
}

/// Searches with these parameters (search, search with bounds, range search) report to
/// `f(user, ...)` (`vlcc_progress_fn`, phase VLCC_PHASE_SEARCH: queries answered of those
/// asked) instead of the index's or context's callback; a non-zero answer stops the search
/// with VLCC_STATUS_CANCELLED and nothing written. Reports come at least every 10 ms of work
/// (and a query), so a cancel is heard within about that. `f` NULL removes it. `f` is called
/// from the searching threads, one at a time per search; `user` must stay valid while the
/// parameters may be used. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_set_progress(
    p: *mut vlcc_search_params,
    f: super::progress::vlcc_progress_fn,
    user: *mut c_void,
) -> vlcc_status {
    ffi_boundary! {
        params_mut(p)?.progress = crate::progress::Listener(super::progress::shared(f, user));
        Ok(())
    }
}
