//! Untrusted bytes as an index or a codebook (`vlcc_index_deserialize`,
//! `vlcc_compressor_deserialize_codebook`): an error or a usable object, never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vlc_compress::{format, Index};

fuzz_target!(|data: &[u8]| {
    if let Ok(ix) = Index::from_bytes(vlc_compress_fuzz::cpu(), data) {
        vlc_compress_fuzz::use_index(&ix, Some(data));
    }
    if let Ok(cb) = format::read_codebook_bytes(data) {
        // A codebook also reads out of an index file: only a codebook file is its own bytes.
        let own = data.get(12) == Some(&1);
        vlc_compress_fuzz::use_codebook(&cb, own.then_some(data));
    }
});
