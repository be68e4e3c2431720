//! What an index holds in memory, by part, and what calls will take.

use super::boundary::{need_out, write_out};
use super::compressor::{compressor_ref, vlcc_compressor};
use super::error::fail;
use super::index::{index_ref, vlcc_index};
use super::search_params::{search_params_ref, vlcc_search_params};
use super::status::vlcc_status;
use crate::quant::estimate::Work;

/// The work a memory estimate is for (`vlcc_estimate_memory`, `vlcc_index_estimate_memory`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_work {
    /// Training a codebook on `n` vectors.
    Train = 0,
    /// Building an index: adding `n` vectors in one call.
    Build = 1,
    /// A search: of an index of `n` vectors (`vlcc_estimate_memory`), or of `n` queries
    /// (`vlcc_index_estimate_memory`).
    Search = 2,
}

/// Checks both outputs, then writes the estimate's `(host, device)` bytes to them.
unsafe fn write_estimate(
    host: *mut u64,
    device: *mut u64,
    estimate: impl FnOnce() -> super::error::FfiResult<(usize, usize)>,
) -> super::error::FfiResult {
    need_out(host, "host")?;
    need_out(device, "device")?;
    let (h, dv) = estimate()?;
    write_out(host, h as u64, "host")?;
    write_out(device, dv as u64, "device")
}

fn work_of(work: u32) -> Option<Work> {
    match work {
        0 => Some(Work::Train),
        1 => Some(Work::Build),
        2 => Some(Work::Search),
        _ => None,
    }
}

/// An index's memory by part, in bytes. Parts built on demand read 0 until built.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct vlcc_index_memory {
    /// Residual codes held.
    pub codes: u64,
    /// Ids held (8 bytes each).
    pub ids: u64,
    /// Refinement vectors held.
    pub refine: u64,
    /// The id map (built by remove, contains, reconstruct and get_codes).
    pub id_map: u64,
    /// Search tables derived from the codebook (built by the first search).
    pub search_tables: u64,
    /// 4-bit codes regrouped for the fast scan (built by the first search of a 4-bit index).
    pub fast_scan_blocks: u64,
    /// 1 when codes, ids and refinement vectors are read from a memory-mapped file (their
    /// bytes are then the file's pages, not the heap).
    pub memory_mapped: u32,
}

/// Stores the index's memory by part in `*out`. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_memory_usage(
    ix: *const vlcc_index,
    out: *mut vlcc_index_memory,
) -> vlcc_status {
    ffi_boundary! {
        let s = index_ref(ix)?.stats();
        let v = vlcc_index_memory {
            codes: s.code_bytes as u64,
            ids: s.id_bytes as u64,
            refine: s.refine_bytes as u64,
            id_map: s.id_map_bytes as u64,
            search_tables: s.table_bytes as u64,
            fast_scan_blocks: s.fast_scan_bytes as u64,
            memory_mapped: s.memory_mapped as u32,
        };
        write_out(out, v, "out")
    }
}

/// Stores in `*host` and `*device` the working memory, in bytes, that training `n` x `d`
/// vectors with this compressor's parameters on its context takes at its peak (the input
/// excluded): what the context's memory caps (`vlcc_context_set_memory_cap`,
/// `vlcc_context_set_device_memory_cap`) are checked against before training starts. `device`
/// is 0 on the CPU. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_estimate_memory(
    c: *const vlcc_compressor,
    n: usize,
    d: usize,
    host: *mut u64,
    device: *mut u64,
) -> vlcc_status {
    ffi_boundary! {
        write_estimate(host, device, || Ok(compressor_ref(c)?.estimate_training_memory(n, d)?))
    }
}

/// Stores in `*host` and `*device` the memory, in bytes, that `work` (a `vlcc_work`) takes at
/// its peak with `params`'s parameters on its context (backend and threads), for `n` vectors
/// of `d` dimensions; the caller's input is not counted:
/// - TRAIN: training on `n` vectors (as `vlcc_compressor_estimate_memory`);
/// - BUILD: adding `n` vectors to an empty index in one call (f32 input, no refinement rows;
///   `vlcc_index_estimate_memory` counts those): the index's lists and the encoding;
/// - SEARCH: the first search of an index of `n` vectors: the search tables and fast-scan
///   blocks it builds, and a block of queries per thread; a call's results add 12 bytes per
///   result, and its queries 4 x d bytes each under cosine.
///
/// The shape is the trained codebook's for BUILD and SEARCH where `params` is trained (with
/// that `d`), else its parameters'. These are what the context's memory caps
/// (`vlcc_context_set_memory_cap`, `vlcc_context_set_device_memory_cap`) are checked against.
/// Host figures are within 25% of the measured peaks in the project's tests, device figures
/// (0 on the CPU) of the CUDA memory pool's measured peaks. An unknown `work` is
/// INVALID_ARGUMENT; sizes past what any machine holds are OUT_OF_MEMORY (more than 2^56
/// values) or INVALID_ARGUMENT (more than 2^24 dimensions): never a figure that wrapped.
/// Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_estimate_memory(
    params: *const vlcc_compressor,
    work: u32,
    n: usize,
    d: usize,
    host: *mut u64,
    device: *mut u64,
) -> vlcc_status {
    ffi_boundary! {
        write_estimate(host, device, || {
            let Some(w) = work_of(work) else {
                return fail(vlcc_status::InvalidArgument, format!("work = {work}: not a vlcc_work (0, 1 or 2)"));
            };
            Ok(compressor_ref(params)?.estimate_memory(w, n, d)?)
        })
    }
}

/// Stores in `*host` and `*device` the memory, in bytes, that `work` on this index takes at
/// its peak: BUILD, adding `n` vectors (f32) in one call (its lists' growth, the encoding and
/// any refinement rows); SEARCH, searching `n` queries as `params` asks (k, nprobe, rerank;
/// NULL for the defaults): the call's working memory and results, and the search tables and
/// fast-scan blocks it builds where the index has none yet (on CUDA: the lists it uploads,
/// counted every time, and its batches of queries). What the context's memory caps are
/// checked against. TRAIN is INVALID_ARGUMENT (a compressor trains: `vlcc_estimate_memory`);
/// sizes past what any machine holds fail as in `vlcc_estimate_memory`. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_index_estimate_memory(
    ix: *const vlcc_index,
    work: u32,
    n: usize,
    params: *const vlcc_search_params,
    host: *mut u64,
    device: *mut u64,
) -> vlcc_status {
    ffi_boundary! {
        write_estimate(host, device, || {
            let ix = index_ref(ix)?;
            match work_of(work) {
                Some(Work::Build) => Ok(ix.estimate_add_memory(n)?),
                Some(Work::Search) => {
                    let p = if params.is_null() {
                        crate::params::SearchParams::default()
                    } else {
                        search_params_ref(params)?.p
                    };
                    Ok(ix.estimate_search_memory(n, &p)?)
                }
                _ => fail(
                    vlcc_status::InvalidArgument,
                    format!("work = {work}: an index estimates BUILD (1) or SEARCH (2)"),
                ),
            }
        })
    }
}
