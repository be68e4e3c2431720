//! `vlcc_index`: add with ids, search, remove, stats, save/load (memory-mapped), serialize.

use super::boundary::{
    c_path, check_ptr, count, disjoint, fail, handle, handle_mut, need_out, no_overlap, out_buf,
    slice, write_out, FfiResult, Span,
};
use super::buffer::vlcc_buffer;
use super::compressor::{compressor_ref, vlcc_compressor};
use super::context::{context_arc, vlcc_context};
use super::progress::{call_control, shared, vlcc_progress_fn};
use super::search_params::{search_params_ref, vlcc_search_params, FetchRows, Params};
use super::status::vlcc_status;
use crate::index::DenseRaw;
use crate::index::Index;
use crate::index::RawVectors;
use crate::quant::Vectors;
use std::ffi::{c_char, c_void};

/// Opaque handle to an index. Owned by the caller; free with `vlcc_index_free`. Thread rules:
/// calls taking `const vlcc_index*` (search, size, stats, save, serialize) may run concurrently
/// from any number of threads; `add`, `remove` and `merge` need exclusive access (no other call
/// on the same index at the same time).
pub struct vlcc_index {
    _private: [u8; 0],
}

/// Sizes and balance of an index.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct vlcc_index_info {
    /// Vectors held.
    pub vectors: u64,
    /// Inverted lists (anchors).
    pub lists: u64,
    /// Vector dimension.
    pub dim: u64,
    /// Bytes of residual code per vector (the list names the anchor; ids take 8 more). Not
    /// `vlcc_compressor_codec_size`, which adds the anchor id a standalone code carries.
    pub residual_code_size: u64,
    /// Vectors in the largest list.
    pub largest_list: u64,
    /// Lists with no vector.
    pub empty_lists: u64,
    /// Largest list over the mean list size (1 = perfectly balanced).
    pub max_list_over_mean: f64,
    /// 1 when ids and codes are used in place from a memory-mapped file.
    pub memory_mapped: u32,
}

pub(crate) unsafe fn index_ref<'a>(p: *const vlcc_index) -> FfiResult<&'a Index> {
    handle::<vlcc_index, Index>(p, "index")
}

pub(crate) unsafe fn index_mut<'a>(p: *mut vlcc_index) -> FfiResult<&'a mut Index> {
    handle_mut::<vlcc_index, Index>(p, "index")
}

fn boxed(index: Index) -> *mut vlcc_index {
    Box::into_raw(Box::new(index)) as *mut vlcc_index
}

/// Creates an empty index on the compressor's trained codebook and context. The index keeps
/// what it needs: the compressor may be freed first. `*out` receives it, owned by the caller.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_new(
    c: *const vlcc_compressor,
    out: *mut *mut vlcc_index,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let c = compressor_ref(c)?;
        let index = c.new_index()?;
        write_out(out, boxed(index), "out")
    }
}

/// Refinement vectors an index keeps beside its codes (numbers are stable).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_refine {
    /// None: a re-rank needs raw vectors from the caller.
    None = 0,
    /// Each vector in IEEE half precision: 2 d + 2 bytes.
    F16 = 1,
    /// What each code misses, 8 bits per value under a per-vector scale: d + 6 bytes.
    Int8 = 2,
    /// No vectors: the error bounds alone, 2 bytes.
    Bound = 3,
}

/// Creates an empty index like `vlcc_index_new` that keeps side rows of kind `refine` (a
/// `vlcc_refine` value; unknown ones fail with INVALID_ARGUMENT): each vector's error bound
/// (2 bytes, for `vlcc_index_search_bounds` and the certified re-rank), then for F16 and INT8
/// a refinement vector. They are made from the
/// vectors added (host memory only: `vlcc_index_add_device` refuses), saved in the index file,
/// memory-mapped on load, and moved with their ids by remove and merge (which needs both
/// indexes to keep the same kind). A search with rerank above 0 and no raw vectors or fetch
/// callback re-ranks against them.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_new_with_refine(
    c: *const vlcc_compressor,
    refine: u32,
    out: *mut *mut vlcc_index,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let c = compressor_ref(c)?;
        let Some(kind) = crate::params::Refine::from_code(refine) else {
            return fail(vlcc_status::InvalidArgument, format!("unknown refinement kind {refine}"));
        };
        let index = c.new_index_with_refine(kind)?;
        write_out(out, boxed(index), "out")
    }
}

/// Stores in `*out` the kind of refinement vectors the index keeps (a `vlcc_refine` value).
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_refine(ix: *const vlcc_index, out: *mut u32) -> vlcc_status {
    ffi_boundary! {
        let r = index_ref(ix)?.refine().code();
        write_out(out, r, "out")
    }
}

/// Frees an index. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_free(ix: *mut vlcc_index) {
    if !ix.is_null() {
        let _ = std::panic::catch_unwind(|| drop(Box::from_raw(ix as *mut Index)));
    }
}

/// Adds `n` vectors with their `ids` (n values): `input` checks the vectors, given the index's
/// dimension, before the ids are read; `put` adds them.
unsafe fn add<X>(
    ix: *mut vlcc_index,
    n: usize,
    ids: *const u64,
    input: impl FnOnce(usize) -> FfiResult<X>,
    put: impl FnOnce(&mut Index, X, &[u64]) -> crate::error::Result<()>,
) -> FfiResult {
    let ix = index_mut(ix)?;
    let x = input(ix.codebook().dim())?;
    let ids = slice(ids, n, "ids")?;
    put(ix, x, ids)?;
    Ok(())
}

/// Encodes `n` vectors (`x`: n*d floats, d = the index's dimension) and adds them with the
/// caller's `ids` (n values; duplicates are allowed, `remove` drops them all). Nothing is added
/// on error. Exclusive access.
/// Reports to the progress callback (`vlcc_index_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the index as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_add(
    ix: *mut vlcc_index,
    x: *const f32,
    n: usize,
    ids: *const u64,
) -> vlcc_status {
    ffi_watched! {
        let input = |d| Ok(Vectors::F32(slice(x, count(n, d, "vectors")?, "x")?));
        add(ix, n, ids, input, |ix, x, ids| ix.add(x, ids))
    }
}

/// Like `vlcc_index_add` for IEEE half-precision input (`x`: n*d binary16 values).
/// Reports to the progress callback (`vlcc_index_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the index as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_add_f16(
    ix: *mut vlcc_index,
    x: *const u16,
    n: usize,
    ids: *const u64,
) -> vlcc_status {
    ffi_watched! {
        let input = |d| Ok(Vectors::F16(bytemuck::cast_slice(slice(x, count(n, d, "vectors")?, "x")?)));
        add(ix, n, ids, input, |ix, x, ids| ix.add(x, ids))
    }
}

/// Like `vlcc_index_add` for vectors already in CUDA device memory, read in place (as
/// `vlcc_compressor_encode_device`: `x` is a device pointer to n*d floats on the device of the
/// index's context, which must run on CUDA, else BACKEND_UNAVAILABLE; `ids` is host memory).
/// Nothing is added on error. Exclusive access; nothing may write `x` while the call runs.
/// Reports to the progress callback (`vlcc_index_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the index as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_add_device(
    ix: *mut vlcc_index,
    x: *const f32,
    n: usize,
    ids: *const u64,
) -> vlcc_status {
    ffi_watched! {
        let input = |d| {
            let len = count(n, d, "vectors")?;
            if n > 0 {
                check_ptr(x, len, "x")?;
            }
            Ok(x as u64)
        };
        // SAFETY: the caller vouches that nothing writes the vectors meanwhile; the backend
        // checks the range before reading it (and answers first where it cannot).
        add(ix, n, ids, input, |ix, at, ids| unsafe { ix.add_device(at, ids) })
    }
}

/// Searches `nq` queries (`queries`: nq*d floats) as `params` asks (`vlcc_search_params`; k
/// results per query). Writes `nq * k` results, best first, into `ids` and `distances`
/// (caller-allocated, nq*k each): squared L2 distances for L2, inner products (similarities,
/// descending) for IP and cosine. Where a query finds fewer than k (the probed lists hold fewer,
/// or fewer that the params' filter allows), its last slots get id UINT64_MAX and distance NaN:
/// its count of hits is the position of its first UINT64_MAX (k when there is none).
///
/// With rerank above 0 (it must then be >= k), the best `rerank` candidates are re-scored
/// exactly against `raw`: `raw_n` vectors of dimension d where the vector of id i is row i
/// (`raw` may be NULL when rerank is 0), or against the rows the params' fetch callback gives
/// (`vlcc_search_params_set_fetch`; `raw` NULL and `raw_n` 0). An id without a row fails with
/// INVALID_ARGUMENT, a row whose distance is not finite with NON_FINITE.
///
/// The search reports to the params' progress callback (`vlcc_search_params_set_progress`),
/// else the index's, else the context's (phase VLCC_PHASE_SEARCH: queries answered); a
/// non-zero answer stops it with VLCC_STATUS_CANCELLED. Past the params'
/// `VLCC_SEARCH_PARAM_TIMEOUT_MS` (else the context's timeout) it stops with
/// VLCC_STATUS_TIMED_OUT. Either way within about 10 ms and one query on the host (one batch
/// of queries on a GPU), with nothing written.
///
/// Thread-safe: any number of threads may search one index at once, and get exactly what
/// sequential calls return. Outputs are written only on success and must not overlap the inputs.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_search(
    ix: *const vlcc_index,
    queries: *const f32,
    nq: usize,
    params: *const vlcc_search_params,
    raw: *const f32,
    raw_n: usize,
    ids: *mut u64,
    distances: *mut f32,
) -> vlcc_status {
    ffi_watched! {
        let (h, q, sp) = search_args(ix, queries, nq, params)?;
        let (p, filter) = (sp.p, sp.filter.as_ref());
        let raw = Raw::of(sp, raw, raw_n, h.codebook().dim())?;
        let inputs = [Span::slice(q, "queries"), Span::slice(raw.dense(), "raw vectors")];
        let ctl = sp.control();
        write_results(&inputs, &[], nq, p.k, ids, distances, || match sp.auto {
            true => Ok(h.search_bounded_with(q, &p, raw.get(), filter, true, &ctl)?.results),
            false => h.search_with(q, &p, raw.get(), filter, &ctl),
        })
    }
}

/// Like `vlcc_index_search`, re-ranking against raw vectors in CUDA device memory: `raw` is a
/// device pointer to `raw_n` x d floats on the device of the index's context (row i holds the
/// vector of id i), read in place, where the candidates stay: only the k results per query
/// come to the host. The context must run on CUDA, else BACKEND_UNAVAILABLE; a range that is
/// not device memory of that device, or rerank above 128 (the candidates the device keeps
/// per query), fails with INVALID_ARGUMENT. `queries` and the outputs are host memory. With
/// rerank 0, `raw` is not read. Thread-safe as `vlcc_index_search`; nothing may write `raw`
/// while the call runs.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_search_device_raw(
    ix: *const vlcc_index,
    queries: *const f32,
    nq: usize,
    params: *const vlcc_search_params,
    raw: *const f32,
    raw_n: usize,
    ids: *mut u64,
    distances: *mut f32,
) -> vlcc_status {
    ffi_watched! {
        let (h, q, sp) = search_args(ix, queries, nq, params)?;
        if sp.filter.is_some() {
            return fail(vlcc_status::InvalidArgument, "filters do not apply to the device re-rank: clear the filter, or search with vlcc_index_search");
        }
        let p = sp.p;
        let d = h.codebook().dim();
        if p.rerank > 0 && raw_n > 0 {
            check_ptr(raw, count(raw_n, d, "raw vectors")?, "raw")?;
        }
        let at = raw as u64;
        write_results(&[Span::slice(q, "queries")], &[], nq, p.k, ids, distances, || {
            // SAFETY: the caller vouches that nothing writes the rows meanwhile; the backend
            // checks the range before reading it.
            unsafe { h.search_device_raw(q, &p, at, raw_n) }
        })
    }
}

/// What a search re-ranks against: nothing (rerank 0), the caller's dense rows, or the
/// params' fetch callback.
pub(crate) enum Raw<'a> {
    None,
    Dense(DenseRaw<'a>),
    Fetch(FetchRows<'a>),
}

impl<'a> Raw<'a> {
    /// From a search call's parameters and `raw` / `raw_n` (rows of `d`).
    pub(crate) unsafe fn of(
        sp: &'a Params,
        raw: *const f32,
        raw_n: usize,
        d: usize,
    ) -> FfiResult<Raw<'a>> {
        if sp.p.rerank == 0 {
            return Ok(Raw::None);
        }
        match &sp.fetch {
            Some(_) if !raw.is_null() || raw_n > 0 => fail(
                vlcc_status::InvalidArgument,
                "raw vectors and a fetch callback were both given: give one",
            ),
            Some(fetch) => Ok(Raw::Fetch(FetchRows { fetch, d })),
            // No rows: the index's refinement vectors, where it keeps some.
            None if raw.is_null() && raw_n == 0 => Ok(Raw::None),
            None => Ok(Raw::Dense(DenseRaw {
                data: slice(raw, count(raw_n, d, "raw vectors")?, "raw")?,
                d,
            })),
        }
    }

    /// The dense rows, for the overlap checks (empty otherwise).
    pub(crate) fn dense(&self) -> &'a [f32] {
        match self {
            Raw::Dense(r) => r.data,
            _ => &[],
        }
    }

    pub(crate) fn get(&self) -> Option<&dyn RawVectors> {
        match self {
            Raw::None => None,
            Raw::Dense(r) => Some(r),
            Raw::Fetch(r) => Some(r),
        }
    }
}

/// The index, queries and parameters of a search call.
unsafe fn search_args<'a>(
    ix: *const vlcc_index,
    queries: *const f32,
    nq: usize,
    params: *const vlcc_search_params,
) -> FfiResult<(&'a Index, &'a [f32], &'a Params)> {
    let h = index_ref(ix)?;
    let p = search_params_ref(params)?;
    let d = h.codebook().dim();
    let q = slice(queries, count(nq, d, "queries")?, "queries")?;
    Ok((h, q, p))
}

/// Runs `search` and copies its results to the caller's `ids` and `distances` (nq*k each),
/// which must not overlap each other, the call's `extra` outputs or the host `inputs`:
/// checked on the pointers, before any slice of them is made.
unsafe fn write_results(
    inputs: &[Span],
    extra: &[Span],
    nq: usize,
    k: usize,
    ids: *mut u64,
    distances: *mut f32,
    search: impl FnOnce() -> crate::error::Result<crate::index::SearchResults>,
) -> FfiResult {
    let need = count(nq, k, "results")?;
    let mut outputs = vec![
        Span::of(ids, need, "ids")?,
        Span::of(distances, need, "distances")?,
    ];
    outputs.extend_from_slice(extra);
    disjoint(&outputs, inputs)?;
    let out_ids = out_buf(ids, need, need, "ids")?;
    let out_d = out_buf(distances, need, need, "distances")?;
    let res = search()?;
    out_ids.copy_from_slice(&res.ids);
    out_d.copy_from_slice(&res.distances);
    Ok(())
}

/// Removes every vector whose id is among the `n` given; stores how many were removed in
/// `*removed` when it is not NULL. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_remove(
    ix: *mut vlcc_index,
    ids: *const u64,
    n: usize,
    removed: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        let h = index_mut(ix)?;
        let ids = slice(ids, n, "ids")?;
        let r = h.remove(ids)?;
        if !removed.is_null() {
            write_out(removed, r, "removed")?;
        }
        Ok(())
    }
}

/// Appends every vector of `other` to `ix`. Both must be built on the same codebook
/// (same fingerprint), else VLCC_STATUS_CODEBOOK_MISMATCH. `ix` needs exclusive access; `other`
/// is only read and must be a different handle.
/// Reports to the progress callback (`vlcc_index_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the index as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_merge(
    ix: *mut vlcc_index,
    other: *const vlcc_index,
) -> vlcc_status {
    ffi_watched! {
        if std::ptr::eq(ix as *const vlcc_index, other) {
            return fail(vlcc_status::InvalidArgument, "cannot merge an index into itself");
        }
        let o = index_ref(other)?;
        let h = index_mut(ix)?;
        h.merge_from(o)?;
        Ok(())
    }
}

/// Stores the number of vectors held in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_size(ix: *const vlcc_index, out: *mut usize) -> vlcc_status {
    ffi_boundary! {
        let n = index_ref(ix)?.len();
        write_out(out, n, "out")
    }
}

/// Stores the vector dimension in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_dim(ix: *const vlcc_index, out: *mut usize) -> vlcc_status {
    ffi_boundary! {
        let d = index_ref(ix)?.codebook().dim();
        write_out(out, d, "out")
    }
}

/// Stores sizes and balance in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_stats(
    ix: *const vlcc_index,
    out: *mut vlcc_index_info,
) -> vlcc_status {
    ffi_boundary! {
        let s = index_ref(ix)?.stats();
        let v = vlcc_index_info {
            vectors: s.vectors as u64,
            lists: s.lists as u64,
            dim: s.dim as u64,
            residual_code_size: s.residual_code_size as u64,
            largest_list: s.largest_list as u64,
            empty_lists: s.empty_lists as u64,
            max_list_over_mean: s.max_list_over_mean,
            memory_mapped: s.memory_mapped as u32,
        };
        write_out(out, v, "out")
    }
}

/// Saves the index (codebook, ids and codes) to `path` atomically (temporary file, fsync,
/// rename): `path` holds the old file or the new one, never a partial one. A path that exists
/// and is not a regular file fails as in `vlcc_compressor_save_codebook`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_save(
    ix: *const vlcc_index,
    path: *const c_char,
) -> vlcc_status {
    ffi_boundary! {
        index_ref(ix)?.save(c_path(path, "path")?)?;
        Ok(())
    }
}

/// Flags for `vlcc_index_load` (bits; numbers are stable).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_load_flag {
    /// Use ids and codes in place from a read-only memory map.
    Mmap = 1,
    /// With a memory map, leave the checksums of the ids, codes and refinement vectors to
    /// `vlcc_index_verify`: the load reads only the header, section table, codebook, list
    /// offsets and ids (all checked), not the codes' pages.
    DeferChecksums = 2,
}

/// Loads an index file onto `ctx`. `flags` is 0 or a combination of `vlcc_load_flag` bits
/// (any non-zero value maps the file, as before the flags existed; DEFER_CHECKSUMS implies
/// MMAP). Mapped, ids and codes are used in place from a read-only memory map (the file must
/// not be modified in place while loaded; replacing it by rename, as `vlcc_index_save` does,
/// is safe); a change copies into memory only the lists it touches. Every size and offset,
/// and every checksum unless deferred, is validated: damaged files fail with
/// VLCC_STATUS_CORRUPT. A path that is not a regular file (a directory, a FIFO, a device)
/// fails with VLCC_STATUS_INVALID_ARGUMENT naming what it is, found without blocking; a
/// missing or unreadable file with VLCC_STATUS_IO. The checksums report to the context's
/// progress callback (phase VLCC_PHASE_VERIFY: bytes checked), which may cancel
/// (VLCC_STATUS_CANCELLED), and stop at the context's timeout (VLCC_STATUS_TIMED_OUT).
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_load(
    ctx: *const vlcc_context,
    path: *const c_char,
    flags: i32,
    out: *mut *mut vlcc_index,
) -> vlcc_status {
    vlcc_index_load_watched(ctx, path, flags, None, std::ptr::null_mut(), 0, out)
}

/// `vlcc_index_load` watched for this call alone: its checksums report to `f(user, ...)`
/// (phase VLCC_PHASE_VERIFY; NULL: the context's callback) and stop at a non-zero answer
/// (VLCC_STATUS_CANCELLED), and past `timeout_ms` milliseconds (0: the context's timeout) the
/// load stops with VLCC_STATUS_TIMED_OUT. `*out` is written only on success.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_load_watched(
    ctx: *const vlcc_context,
    path: *const c_char,
    flags: i32,
    f: vlcc_progress_fn,
    user: *mut std::ffi::c_void,
    timeout_ms: u64,
    out: *mut *mut vlcc_index,
) -> vlcc_status {
    ffi_watched! {
        need_out(out, "out")?;
        let ctx = context_arc(ctx)?;
        let path = c_path(path, "path")?;
        let own = shared(f, user);
        let ctl = call_control(&own, timeout_ms);
        let defer = flags & vlcc_load_flag::DeferChecksums as i32 != 0;
        let index = Index::load_with(ctx, path, flags != 0, defer, &ctl)?;
        write_out(out, boxed(index), "out")
    }
}

/// `vlcc_index_verify` watched for this call alone, as `vlcc_index_load_watched` (NULL `f`:
/// the index's callback, else the context's).
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_verify_watched(
    ix: *const vlcc_index,
    f: vlcc_progress_fn,
    user: *mut std::ffi::c_void,
    timeout_ms: u64,
) -> vlcc_status {
    ffi_watched! {
        let own = shared(f, user);
        index_ref(ix)?.verify_with(&call_control(&own, timeout_ms))?;
        Ok(())
    }
}

/// Checks every checksum of a memory-mapped index's file: VLCC_STATUS_CORRUPT names the
/// first damaged section. An index held in memory has nothing to check (VLCC_STATUS_OK).
/// Thread-safe; reads the whole file, reporting to the index's progress callback, else the
/// context's (phase VLCC_PHASE_VERIFY: bytes checked), which may cancel; stops at the
/// context's timeout (VLCC_STATUS_TIMED_OUT).
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_verify(ix: *const vlcc_index) -> vlcc_status {
    vlcc_index_verify_watched(ix, None, std::ptr::null_mut(), 0)
}

/// Serializes the index into a library-owned buffer (the same bytes as its file); release it
/// with `vlcc_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_serialize(
    ix: *const vlcc_index,
    out: *mut vlcc_buffer,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let bytes = index_ref(ix)?.try_to_bytes()?;
        write_out(out, vlcc_buffer::from_vec(bytes), "out")
    }
}

/// Builds an index on `ctx` from `len` serialized bytes (copied; `data` is not kept).
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_deserialize(
    ctx: *const vlcc_context,
    data: *const u8,
    len: usize,
    out: *mut *mut vlcc_index,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let ctx = context_arc(ctx)?;
        let index = Index::from_bytes(ctx, slice(data, len, "data")?)?;
        write_out(out, boxed(index), "out")
    }
}

/// Writes every stored vector's id into `ids` (`len` slots) and its approximate vector (decoded
/// from its code) into `vectors` (`len * d` floats), list by list. With `ids` NULL and `len` 0
/// it only stores the number of vectors in `*out_n`; otherwise `len` must be at least that
/// number (else VLCC_STATUS_BUFFER_TOO_SMALL) and `*out_n` receives it. Thread-safe like search.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_reconstruct(
    ix: *const vlcc_index,
    ids: *mut u64,
    vectors: *mut f32,
    len: usize,
    out_n: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out_n, "out_n")?;
        let h = index_ref(ix)?;
        let n = h.len();
        if ids.is_null() && len == 0 {
            return write_out(out_n, n, "out_n");
        }
        let d = h.codebook().dim();
        let out_ids = out_buf(ids, len, n, "ids")?;
        let out_v = out_buf(vectors, count(len, d, "vectors")?, count(n, d, "vectors")?, "vectors")?;
        no_overlap(out_ids, out_v, "ids and vectors")?;
        let (all_ids, all_v) = h.context().run(|_| h.reconstruct_all())?;
        out_ids.copy_from_slice(&all_ids);
        out_v.copy_from_slice(&all_v);
        write_out(out_n, n, "out_n")
    }
}

/// Writes, for each of the `n` ids, 1 into `out[i]` when the index holds a vector with that id,
/// else 0 (`out`: n bytes). The first call that asks by id builds the index's id map (about 20
/// bytes per vector; OUT_OF_MEMORY where it does not fit); later changes keep it. Thread-safe
/// like search.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_contains(
    ix: *const vlcc_index,
    ids: *const u64,
    n: usize,
    out: *mut u8,
) -> vlcc_status {
    ffi_boundary! {
        let h = index_ref(ix)?;
        let ids = slice(ids, n, "ids")?;
        let found = ids.iter().map(|&id| h.contains(id).map(u8::from)).collect::<crate::error::Result<Vec<u8>>>()?;
        let out = out_buf(out, n, n, "out")?;
        no_overlap(ids, out, "ids and out")?;
        out.copy_from_slice(&found);
        Ok(())
    }
}

/// Writes the approximate vector (decoded from its code) of each of the `n` ids into `vectors`
/// (n * d floats, in the order of `ids`). Where several vectors share an id, the first added
/// is given. An id the index does not hold fails with INVALID_ARGUMENT naming it, and nothing
/// is written. Thread-safe like search; the id map as `vlcc_index_contains`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_reconstruct_ids(
    ix: *const vlcc_index,
    ids: *const u64,
    n: usize,
    vectors: *mut f32,
) -> vlcc_status {
    ffi_boundary! {
        by_ids(ix, ids, n, vectors, "vectors", |c| c.dim(), Index::reconstruct)
    }
}

/// Rows for `n` ids (`width(codebook)` values each) from `rows` into `out`, checked as the
/// by-id calls check them.
unsafe fn by_ids<T: Copy>(
    ix: *const vlcc_index,
    ids: *const u64,
    n: usize,
    out: *mut T,
    what: &str,
    width: impl Fn(&crate::quant::Codebook) -> usize,
    rows: impl Fn(&Index, &[u64]) -> crate::error::Result<Vec<T>>,
) -> FfiResult {
    let h = index_ref(ix)?;
    let ids = slice(ids, n, "ids")?;
    let len = count(n, width(h.codebook()), what)?;
    let out = out_buf(out, len, len, what)?;
    no_overlap(ids, out, &format!("ids and {what}"))?;
    out.copy_from_slice(&rows(h, ids)?);
    Ok(())
}

/// Stores in `*out` the bytes of one code as `vlcc_index_get_codes` writes it (anchor id, then
/// residual code: `vlcc_compressor_codec_size` of the index's codebook).
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_codec_size(
    ix: *const vlcc_index,
    out: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        let n = index_ref(ix)?.codebook().codec_size();
        write_out(out, n, "out")
    }
}

/// Writes the code of each of the `n` ids into `codes` (n * `vlcc_index_codec_size` bytes, in
/// the order of `ids`), in the form `vlcc_compressor_encode` gives and `vlcc_compressor_decode`
/// reads. Picks, fails and is thread-safe as `vlcc_index_reconstruct_ids`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_get_codes(
    ix: *const vlcc_index,
    ids: *const u64,
    n: usize,
    codes: *mut u8,
) -> vlcc_status {
    ffi_boundary! {
        by_ids(ix, ids, n, codes, "codes", |c| c.codec_size(), Index::get_codes)
    }
}

/// `vlcc_index_search` with more per result. `lower` and `upper` (nq*k floats each) receive
/// bounds of each hit's true distance (squared L2, or similarity): from its code distance and
/// its error bound, or its exact distance twice where re-ranked; NaN where the slot is missing.
/// `reranked` (nq) receives the candidates each query re-scored exactly, `certified` (nq) 1
/// where its top-k is proven exact over its probed lists (a `VLCC_SEARCH_PARAM_RERANK_AUTO`
/// re-rank that did not hit its cap), else 0. Any of the four may be NULL. No output may
/// overlap another output or the inputs (VLCC_STATUS_OVERLAP). The index must keep
/// error bounds (`vlcc_index_new_with_refine`, any kind but NONE), else INVALID_STATE. Scans
/// on the host; progress, cancel and deadlines as `vlcc_index_search`; thread-safe like
/// search; nothing is written on error.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_search_bounds(
    ix: *const vlcc_index,
    queries: *const f32,
    nq: usize,
    params: *const vlcc_search_params,
    raw: *const f32,
    raw_n: usize,
    ids: *mut u64,
    distances: *mut f32,
    lower: *mut f32,
    upper: *mut f32,
    reranked: *mut u64,
    certified: *mut u8,
) -> vlcc_status {
    ffi_watched! {
        let (h, q, sp) = search_args(ix, queries, nq, params)?;
        let (p, filter) = (sp.p, sp.filter.as_ref());
        let raw = Raw::of(sp, raw, raw_n, h.codebook().dim())?;
        let need = count(nq, p.k, "results")?;
        let extra_out = [
            Span::optional(lower, need, "lower")?,
            Span::optional(upper, need, "upper")?,
            Span::optional(reranked, nq, "reranked")?,
            Span::optional(certified, nq, "certified")?,
        ];
        let mut extra = None;
        let inputs = [Span::slice(q, "queries"), Span::slice(raw.dense(), "raw vectors")];
        let ctl = sp.control();
        write_results(&inputs, &extra_out, nq, p.k, ids, distances, || {
            let b = h.search_bounded_with(q, &p, raw.get(), filter, sp.auto, &ctl)?;
            let res = b.results.clone();
            extra = Some(b);
            Ok(res)
        })?;
        // Checked above: each is NULL or holds its values, apart from every other buffer.
        let opt = |ptr: *mut f32, what: &str| -> FfiResult<Option<&mut [f32]>> {
            if ptr.is_null() { Ok(None) } else { Ok(Some(out_buf(ptr, need, need, what)?)) }
        };
        let (lo, hi) = (opt(lower, "lower")?, opt(upper, "upper")?);
        let rr = if reranked.is_null() { None } else { Some(out_buf(reranked, nq, nq, "reranked")?) };
        let cf = if certified.is_null() { None } else { Some(out_buf(certified, nq, nq, "certified")?) };
        let b = extra.expect("written by the search");
        if let Some(o) = lo { o.copy_from_slice(&b.lower); }
        if let Some(o) = hi { o.copy_from_slice(&b.upper); }
        if let Some(o) = rr { for (o, &v) in o.iter_mut().zip(&b.reranked) { *o = v as u64; } }
        if let Some(o) = cf { for (o, &v) in o.iter_mut().zip(&b.certified) { *o = v as u8; } }
        Ok(())
    }
}

/// As `vlcc_context_set_progress`, for this index's add, merge, search (top-k, bounds, range)
/// and verify calls only (it takes precedence over the context's; a search's own, set on its
/// `vlcc_search_params`, over both). Not saved with the index. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_set_progress(
    ix: *mut vlcc_index,
    f: vlcc_progress_fn,
    user: *mut c_void,
) -> vlcc_status {
    ffi_boundary! {
        index_mut(ix)?.set_progress(shared(f, user));
        Ok(())
    }
}
