//! Untrusted files through every load path (`vlcc_index_load` memory-mapped and copied,
//! `vlcc_compressor_load_codebook`), then a search: an error or a usable object, never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vlc_compress::{format, Index};

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("vlcc-fuzz-load-{}.vlcc", std::process::id()));
    std::fs::write(&path, data).unwrap();
    for mmap in [true, false] {
        if let Ok(ix) = Index::load(vlc_compress_fuzz::cpu(), &path, mmap) {
            vlc_compress_fuzz::use_index(&ix, Some(data));
        }
    }
    if let Ok(cb) = format::load_codebook(&path) {
        vlc_compress_fuzz::use_codebook(&cb, None);
    }
});
