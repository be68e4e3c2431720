//! `vlcc_range_results`: what a range search found, held by the library until freed.

use super::boundary::{count, handle, need_out, slice, write_out, FfiResult};
use super::index::{index_ref, vlcc_index, Raw};
use super::search_params::{search_params_ref, vlcc_search_params};
use super::status::vlcc_status;
use crate::index::RangeResults;

/// Opaque handle to the results of `vlcc_index_range_search`. Owned by the caller; free with
/// `vlcc_range_results_free`. Read-only: any number of threads may read one.
pub struct vlcc_range_results {
    _private: [u8; 0],
}

/// Every vector of the lists each query probes (`params`: nprobe; k is not used) whose squared
/// L2 distance is at most `radius` (L2 indexes), or whose similarity is at least `radius`
/// (inner product, cosine), best first; the params' filter applies. Distances are those of the
/// codes; with rerank above 0, each hit is scored again exactly against `raw` (row i = id i, as
/// `vlcc_index_search` reads it) and kept only if that score is within the radius. `*out`
/// receives the results (read them with `vlcc_range_results_view`), owned by the caller. A NaN
/// radius fails with INVALID_ARGUMENT. Hits count against the context's memory cap as they
/// are found (28 bytes each while the call runs, 12 in the results): where they pass what the
/// cap leaves beside the search, or what memory holds, the call fails with OUT_OF_MEMORY and
/// `*out` is not written. Progress, cancel and deadlines as `vlcc_index_search`. Scans on the
/// device on CUDA contexts (a callback filter keeps the host path), on the host elsewhere;
/// thread-safe like search.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_range_search(
    ix: *const vlcc_index,
    queries: *const f32,
    nq: usize,
    params: *const vlcc_search_params,
    radius: f32,
    raw: *const f32,
    raw_n: usize,
    out: *mut *mut vlcc_range_results,
) -> vlcc_status {
    ffi_watched! {
        need_out(out, "out")?;
        let h = index_ref(ix)?;
        let sp = search_params_ref(params)?;
        let d = h.codebook().dim();
        let q = slice(queries, count(nq, d, "queries")?, "queries")?;
        let raw = Raw::of(sp, raw, raw_n, d)?;
        let r = h.range_search_with(q, radius, &sp.p, raw.get(), sp.filter.as_ref(), &sp.control())?;
        write_out(out, Box::into_raw(Box::new(r)) as *mut vlcc_range_results, "out")
    }
}

/// Views the results: `*nq` queries; query i's hits are `ids[offsets[i] .. offsets[i + 1]]`
/// with `distances` at the same places (`offsets` holds nq + 1 values). The arrays belong to
/// `r` and stay valid until it is freed. Any out-pointer may be NULL to skip it.
#[no_mangle]
pub unsafe extern "C" fn vlcc_range_results_view(
    r: *const vlcc_range_results,
    nq: *mut usize,
    offsets: *mut *const usize,
    ids: *mut *const u64,
    distances: *mut *const f32,
) -> vlcc_status {
    ffi_boundary! {
        let r = handle::<vlcc_range_results, RangeResults>(r, "results")?;
        let put = |p: *mut *const u8, v: *const u8, what: &str| -> FfiResult {
            if p.is_null() { Ok(()) } else { write_out(p, v, what) }
        };
        if !nq.is_null() {
            write_out(nq, r.len(), "nq")?;
        }
        put(offsets.cast(), r.offsets.as_ptr().cast(), "offsets")?;
        put(ids.cast(), r.ids.as_ptr().cast(), "ids")?;
        put(distances.cast(), r.distances.as_ptr().cast(), "distances")
    }
}

/// Frees range-search results. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn vlcc_range_results_free(r: *mut vlcc_range_results) {
    if !r.is_null() {
        let _ = std::panic::catch_unwind(|| drop(Box::from_raw(r as *mut RangeResults)));
    }
}
