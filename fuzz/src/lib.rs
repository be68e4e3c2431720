//! What the fuzz targets do with whatever they manage to load: everything a caller may do
//! next must work or fail with a status, and what loads must save back to the same bytes
//! (the reader accepts only the layout the writer makes).

use std::sync::{Arc, OnceLock};
use vlc_compress::{format, BackendKind, Codebook, Context, Index, SearchParams};

/// One CPU context for every input (opening a thread pool per input would be the cost).
pub fn cpu() -> Arc<Context> {
    static CPU: OnceLock<Arc<Context>> = OnceLock::new();
    CPU.get_or_init(|| Arc::new(Context::new(BackendKind::Cpu, 0, 1).unwrap()))
        .clone()
}

/// The tests' file crafting: `reseal` gives mutated bytes their checksums back.
#[path = "../../tests/common/craft.rs"]
#[allow(dead_code)]
pub mod craft;

/// `file` with every checksum recomputed: fuzz builds skip checksums, so an accepted input is
/// the writer's bytes up to them.
fn sealed(file: &[u8]) -> Vec<u8> {
    let mut b = file.to_vec();
    craft::reseal(&mut b);
    b
}

/// Queries of the codebook's dimension, small and varied.
fn queries(cb: &Codebook, n: usize) -> Vec<f32> {
    let d = cb.dim();
    (0..n * d)
        .map(|i| ((i * 37) % 11) as f32 * 0.1 - 0.5)
        .collect()
}

/// Uses a codebook that loaded: encode, decode, and its bytes round-trip.
pub fn use_codebook(cb: &Codebook, file: Option<&[u8]>) {
    let bytes = format::codebook_bytes(cb);
    if let Some(f) = file {
        assert_eq!(
            bytes,
            sealed(f),
            "an accepted codebook file saves back to other bytes"
        );
    }
    let again = format::read_codebook_bytes(&bytes).expect("a saved codebook loads");
    assert_eq!(&again, cb);
    // Encoding needs a backend; a one-thread CPU context is what any caller has.
    let ctx = vlc_compress::Context::new(vlc_compress::BackendKind::Cpu, 0, 1).unwrap();
    let x = queries(cb, 3);
    if let Ok(codes) = ctx.run(|b| cb.encode(b, x[..].into())) {
        let y = cb.decode(&codes).expect("codes just made decode");
        assert_eq!(y.len(), x.len());
    }
}

/// Uses an index that loaded: search (with and without re-rank), stats, reconstruction, and its
/// bytes round-trip.
pub fn use_index(ix: &Index, file: Option<&[u8]>) {
    let bytes = ix.to_bytes();
    if let Some(f) = file {
        assert_eq!(
            bytes,
            sealed(f),
            "an accepted index file saves back to other bytes"
        );
    }
    let cb = ix.codebook();
    let q = queries(cb, 2);
    for p in [
        SearchParams {
            k: 3,
            nprobe: 2,
            rerank: 0,
        },
        SearchParams {
            k: 1,
            nprobe: 1 << 20,
            rerank: 0,
        },
    ] {
        let r = ix
            .search(&q, &p, None)
            .expect("a finite query searches a loaded index");
        assert_eq!(r.ids.len(), 2 * p.k);
        // An empty slot (fewer vectors than k) is id u64::MAX with a NaN distance, and only
        // an empty slot has NaN.
        for (&id, d) in r.ids.iter().zip(&r.distances) {
            assert_eq!(id == u64::MAX, d.is_nan(), "slot {id} at {d}");
        }
    }
    let st = ix.stats();
    assert_eq!(st.vectors, ix.len());
    if ix.len() <= 4096 {
        let (ids, x) = ix.reconstruct_all().expect("stored codes decode");
        assert_eq!(x.len(), ids.len() * cb.dim());
    }
}
