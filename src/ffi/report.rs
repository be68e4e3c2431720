//! Run reports: where the calling thread's last watched call ran, and what of it a device
//! context answered on the host, and why.

use super::boundary::write_out;
use super::context::vlcc_backend;
use super::error::fail;
use super::status::vlcc_status;
use crate::backend::BackendKind;
use std::ffi::c_char;

/// Where a call ran (`vlcc_last_run_report`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct vlcc_run_report {
    /// The context's backend (a `vlcc_backend`, never AUTO: the one it opened).
    pub backend: u32,
    /// The parts of the call a GPU context answered on the host, as `vlcc_fallback` bits (0:
    /// everything ran on `backend`; always 0 on the CPU).
    pub fallbacks: u32,
}

/// Why a GPU context answered part of a call on the host (bits of
/// `vlcc_run_report.fallbacks`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_fallback {
    /// A predicate filter (`vlcc_search_params_set_filter_callback`) is host code.
    PredicateFilter = 1,
    /// More candidates per query (k or rerank) than a device scan keeps (128).
    TooManyCandidates = 1 << 1,
    /// A list's lookup table is larger than the device scan takes.
    ScanTableTooLarge = 1 << 2,
    /// The lists' precomputed L2 terms would pass 512 MiB, so they were not made; the
    /// device scan needs them.
    ListTermsTooLarge = 1 << 3,
    /// Codes of a width the device scan does not read.
    CodeWidth = 1 << 4,
    /// More vectors than the device scan's 32-bit offsets reach.
    TooManyVectors = 1 << 5,
    /// The device declined the lists: they did not fit its memory or the context's device
    /// memory cap, the upload failed, or they pass one of its binding limits.
    DeviceDeclined = 1 << 6,
    /// The certified re-rank (`VLCC_SEARCH_PARAM_RERANK_AUTO`) scans on the host.
    CertifiedRerank = 1 << 7,
    /// The backend has no range scan (WGPU): range searches scan on the host.
    NoRangeScan = 1 << 8,
}

/// Stores in `*out` the run report of the last call on this thread that ran work: train,
/// encode, add, merge, a search, search with bounds or range search, load, verify, and their
/// variants; whether it succeeded or not. Such a call refused before its work (a bad
/// argument) leaves no report: INVALID_STATE, as before the first. Read it right after the
/// call, on the same thread (Go: the binding does). Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_last_run_report(out: *mut vlcc_run_report) -> vlcc_status {
    ffi_boundary! {
        let Some(r) = crate::last_run_report() else {
            return fail(
                vlcc_status::InvalidState,
                "no call on this thread has run work since the last refused one",
            );
        };
        let backend = match r.backend {
            BackendKind::Auto => vlcc_backend::Auto,
            BackendKind::Cpu => vlcc_backend::Cpu,
            BackendKind::Cuda => vlcc_backend::Cuda,
            BackendKind::Wgpu => vlcc_backend::Wgpu,
        };
        let rep = vlcc_run_report {
            backend: backend as u32,
            fallbacks: r.fallbacks.0,
        };
        write_out(out, rep, "out")
    }
}

/// A static, NUL-terminated name for one `vlcc_fallback` bit ("predicate_filter", ...);
/// "unknown" for any other number. Never NULL, never freed. Thread-safe.
#[no_mangle]
pub extern "C" fn vlcc_fallback_str(fallback: u32) -> *const c_char {
    let s: &'static [u8] = match fallback {
        1 => b"predicate_filter\0",
        2 => b"too_many_candidates\0",
        4 => b"scan_table_too_large\0",
        8 => b"list_terms_too_large\0",
        16 => b"code_width\0",
        32 => b"too_many_vectors\0",
        64 => b"device_declined\0",
        128 => b"certified_rerank\0",
        256 => b"no_range_scan\0",
        _ => b"unknown\0",
    };
    s.as_ptr() as *const c_char
}
