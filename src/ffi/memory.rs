//! What an index holds in memory, by part.

use super::boundary::{need_out, write_out};
use super::compressor::{compressor_ref, vlcc_compressor};
use super::index::{index_ref, vlcc_index};
use super::status::vlcc_status;

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
/// excluded): what the context's memory cap (`vlcc_context_set_memory_cap`) is checked
/// against before training starts. `device` is 0 on the CPU; on GPU contexts it is not yet
/// checked against measured peaks. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_estimate_memory(
    c: *const vlcc_compressor,
    n: usize,
    d: usize,
    host: *mut u64,
    device: *mut u64,
) -> vlcc_status {
    ffi_boundary! {
        need_out(host, "host")?;
        need_out(device, "device")?;
        let (h, dv) = compressor_ref(c)?.estimate_training_memory(n, d);
        write_out(host, h as u64, "host")?;
        write_out(device, dv as u64, "device")
    }
}
