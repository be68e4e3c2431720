//! How much host memory training takes, before it starts: the sum, at its peak, of what
//! `Codebook::train` and the CPU backend allocate for `n` x `d` vectors (the caller's own
//! vectors not counted). Checked against measured peaks in `tests/memory_estimate.rs`.

use crate::linalg::BLOCK;
use crate::params::{Metric, Rotation, TrainParams};

/// Bytes of working memory a CPU training of `n` x `d` vectors with `p` on `threads`
/// threads needs at its peak, the input excluded.
pub fn training_bytes(p: &TrainParams, n: usize, d: usize, threads: usize) -> usize {
    let f = 4usize; // an f32 or u32
    let threads = threads.max(1);
    let k = p.anchor.anchors.min(n.max(1));
    // Cosine trains on a normalised copy of the whole input, kept throughout.
    let prepared = if p.metric == Metric::Cosine {
        n * d * f
    } else {
        0
    };

    // Anchors: the sample (a copy when smaller than the input), its norms, assignment and
    // distances, the centroids (three copies: session, maintenance, result), each thread's
    // block of scores, and the update's f64 partial sums (at most 8 chunks and 64 MB).
    let mpa = p.anchor.max_points_per_anchor;
    let ns = if mpa > 0 && n > k * mpa { k * mpa } else { n };
    let sample = if ns < n { ns * d * f } else { 0 };
    let chunks = (ns / 2048)
        .min(8)
        .min((64 << 20) / (k * d * 8).max(1))
        .max(1);
    let anchors = sample
        + ns * 3 * f
        + 3 * k * d * f
        + (threads * BLOCK * k * f).max((chunks + 1) * k * d * 8);

    // Codebooks: the sample, its assignment, residuals and rotated residuals (both held
    // while the sub-quantizers train), the rotation's covariance and eigenvectors (f64),
    // and per training thread a sub-space's columns with its session and score block.
    let nsub = p.subquantizers().max(1);
    let dsub = d.div_ceil(nsub);
    let dp = nsub * dsub;
    let npq = if p.pq_train_points > 0 {
        n.min(p.pq_train_points)
    } else {
        n
    };
    let pq_sample = if npq < n { npq * d * f } else { 0 };
    let ksub = 1usize << p.bits;
    let rotated = if p.rotation == Rotation::None {
        0
    } else {
        npq * dp * f
    };
    let rotation = if p.rotation == Rotation::None {
        0
    } else {
        dp * dp * 40
    };
    let per_thread = npq * (dsub + 3) * f + BLOCK * ksub * f;
    let codebooks = k * d * f
        + pq_sample
        + npq * f
        + npq * dp * f
        + rotated
        + rotation
        + threads.min(nsub) * per_thread;

    prepared + anchors.max(codebooks)
}

/// Bytes of device memory a GPU training holds at its peak: the resident sample (values,
/// norms, assignment, distances) and the centroids with their sums. Not yet checked against
/// measured device peaks.
pub fn training_device_bytes(p: &TrainParams, n: usize, d: usize) -> usize {
    let k = p.anchor.anchors.min(n.max(1));
    let mpa = p.anchor.max_points_per_anchor;
    let ns = if mpa > 0 && n > k * mpa { k * mpa } else { n };
    ns * (d + 3) * 4 + 3 * k * d * 4
}
