//! What the host scan holds: its tables (`Tables`), the fast-scan blocks, and each search
//! task's working memory, from the plain shape of the work.

use super::{coarse8, probe};
use crate::backend::Shape;
use crate::params::Metric;

/// Bytes of the search tables an index builds at its first search: every list's terms under
/// L2 (M x ksub floats a list), the rotated anchors and the anchors' axes for probing, each
/// where within `cap` (512 MB), the anchors in 8-bit integers and the rotation's columns that
/// meet a query's dimensions, and the anchors' norms and the transposed sub-quantizer
/// centroids.
pub(crate) fn tables_bytes(s: &Shape, cap: usize) -> usize {
    let f = 4;
    let fits = |v: usize| if v * f <= cap { v * f } else { 0 };
    let rotated = fits(s.anchors * s.dp);
    let terms = if s.metric == Metric::L2 && rotated > 0 {
        fits(s.anchors * s.nsub * s.ksub)
    } else {
        0
    };
    // The anchors' axes for probing with bounds. Finding them holds a few MB more for a
    // moment, at the first search's start, before its queries' buffers are taken.
    let probe = probe::held_under(s.anchors, s.d, cap);
    rotated + terms + probe + always_bytes(s) + s.anchors * f + s.dp * s.ksub * f
}

/// Bytes of the fast-scan blocks of a 4-bit index of `n` vectors: 32 codes a block, at most
/// one block's padding per list, and what the allocator keeps beside each list's blocks. 0
/// for 8-bit codes.
pub(crate) fn fast_scan_bytes(s: &Shape, n: usize) -> usize {
    if s.ksub != 16 {
        return 0;
    }
    let per_vector = s.nsub.div_ceil(2);
    n * per_vector + s.anchors * (32 * per_vector + super::fastscan::LIST_OVERHEAD)
}

/// Bytes a search of `nq` queries with `want` candidates each allocates besides the tables and
/// blocks it may build: its results (`k` ids and distances a query), the queries prepared for
/// the metric (cosine), and per task (a block of up to 128 queries; as many at once as
/// threads) the block's anchor scores with its padded and rotated copies (and the rotation's
/// products in integers, where taken so), coarse distances,
/// query tables and candidates.
pub(crate) fn search_bytes(s: &Shape, nq: usize, k: usize, want: usize, threads: usize) -> usize {
    let f = 4;
    let results = nq * k * 12;
    let prepared = if s.metric == Metric::Cosine {
        nq * s.d * f
    } else {
        0
    };
    let rows = nq.min(128);
    // Every anchor's product with each query: f32, or integers in padded tiles.
    let scores = (rows * s.anchors * f).max(coarse8::block_bytes(s.anchors, s.d, rows));
    // The rotation's products in integers (rows of it at most dp), where taken so.
    let rotation = if s.rotated && coarse8::rotates(s.code, s.d) {
        coarse8::block_bytes(s.dp, s.d, rows)
    } else {
        0
    };
    let per_task = scores
        + rotation
        + rows * 2 * s.dp * f
        + s.anchors * (f + 8)
        + 2 * s.nsub * s.ksub * f
        + s.dp * f
        + want * 16;
    results + prepared + search_tasks(nq, threads) * per_task
}

/// Tasks of a search of `nq` queries that run at once on `threads` threads.
pub(crate) fn search_tasks(nq: usize, threads: usize) -> usize {
    threads.max(1).min(nq.div_ceil(16).max(1))
}

/// Bytes each search task makes where the index's tables are not built (under a memory cap
/// that leaves them no room): the anchors' norms, the transposed centroids, a list's terms,
/// and the rotation's columns and the anchors in 8-bit integers that every search uses.
pub(crate) fn light_tables_bytes(s: &Shape) -> usize {
    (s.anchors + s.dp * s.ksub + s.nsub * s.ksub + s.dp) * 4 + always_bytes(s)
}

/// The tables' parts made under any cap, as they are no larger than what the codebook holds:
/// the rotation's columns that meet a query's dimensions (in f32, and in 8-bit integers
/// where the CPU has their kernel), and the anchors in 8-bit integers likewise. A search uses
/// them with or without room for the rest, so that it gives the same results.
fn always_bytes(s: &Shape) -> usize {
    let ints = if coarse8::rotates(s.code, s.d) {
        coarse8::held(s.dp, s.d)
    } else {
        0
    };
    let rot_in = if s.rotated { s.dp * s.d * 4 + ints } else { 0 };
    rot_in + coarse8::held(s.anchors, s.d)
}
