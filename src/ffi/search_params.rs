//! `vlcc_search_params`: what a search is asked for, as an object, so that what searches
//! learn to take later (filters, bounds, callbacks) never changes a function's signature.

use super::boundary::{handle, handle_mut, need_out, write_out, FfiResult};
use super::status::vlcc_status;
use crate::SearchParams;

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
}

pub(crate) unsafe fn search_params_ref<'a>(
    p: *const vlcc_search_params,
) -> FfiResult<&'a SearchParams> {
    handle::<vlcc_search_params, SearchParams>(p, "params")
}

/// Creates search parameters with their defaults (k 10, nprobe 16, rerank 0). `*out`
/// receives them, owned by the caller.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_new(out: *mut *mut vlcc_search_params) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let p = Box::into_raw(Box::new(SearchParams::default())) as *mut vlcc_search_params;
        write_out(out, p, "out")
    }
}

/// Frees search parameters. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn vlcc_search_params_free(p: *mut vlcc_search_params) {
    if !p.is_null() {
        let _ = std::panic::catch_unwind(|| drop(Box::from_raw(p as *mut SearchParams)));
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
        let p = handle_mut::<vlcc_search_params, SearchParams>(p, "params")?;
        Ok(p.set(param, value)?)
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
        let v = search_params_ref(p)?.get(param)?;
        write_out(out, v, "out")
    }
}
