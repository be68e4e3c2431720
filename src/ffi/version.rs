//! Run-time versions; they match the header's `VLCC_VERSION_*` and `VLCC_ABI_VERSION` macros.

use std::ffi::c_char;

/// ABI version: raised only when a change breaks binary compatibility; the installed
/// library's soname is `libvlc_compress.so.<ABI_VERSION>` (build.rs reads this line).
/// 2: searches take a `vlcc_search_params` object instead of k, nprobe and rerank.
const ABI_VERSION: u32 = 2;

/// The library version as a static NUL-terminated string ("MAJOR.MINOR.PATCH"); never freed.
#[no_mangle]
pub extern "C" fn vlcc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library version as `MAJOR * 10000 + MINOR * 100 + PATCH` (same as VLCC_VERSION_NUMBER).
#[no_mangle]
pub extern "C" fn vlcc_version_number() -> u32 {
    let p = |s: &str| s.parse::<u32>().unwrap_or(0);
    p(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + p(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + p(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The ABI version of the loaded library (same as VLCC_ABI_VERSION in the header it was built with).
#[no_mangle]
pub extern "C" fn vlcc_abi_version() -> u32 {
    ABI_VERSION
}
