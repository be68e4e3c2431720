//! How much host memory training takes, before it starts: the sum, at its peak, of what
//! `Codebook::train` and the CPU backend allocate for `n` x `d` vectors (the caller's own
//! vectors not counted). Checked against measured peaks in `tests/memory_estimate.rs`.

use crate::backend::{Backend, KmeansShape, PqAssignShape};
use crate::error::{Error, Result};
use crate::linalg::{fused_nearest, nearest_bytes, BLOCK};
use crate::params::{Metric, Rotation, TrainParams};

pub use crate::backend::Shape;

/// How a training of `n` x `d` vectors with `p` on `b` with `threads` threads fits under a
/// host cap of `cap` bytes (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainingFit {
    /// Host working memory at its peak, the input excluded.
    pub host_bytes: usize,
    /// Sub-quantizers training at once: no limit (`usize::MAX`: as many as the threads
    /// take), or fewer where that fits under the cap and more would not; at least one. Each
    /// holds a copy of its sub-space's columns, and the results do not depend on how many
    /// train at once.
    pub at_once: usize,
    /// The codebooks' residuals are held as one copy (else rebuilt a block at a time where
    /// read, when even one sub-quantizer at a time does not fit with them held; never where
    /// the learned rotation alternates). The codebook is the same either way.
    pub held: bool,
}

/// `TrainingFit` of a training: its sub-quantizers train as many at once as fit.
pub fn training_fit(
    b: &dyn Backend,
    p: &TrainParams,
    n: usize,
    d: usize,
    threads: usize,
    cap: usize,
) -> TrainingFit {
    let gathered = b.gathered_values(threads);
    let bytes = |a: usize, held: bool| training_host_bytes(p, n, d, threads, gathered, a, held);
    let most = threads.max(1).min(p.subquantizers(d).max(1));
    let fit = |a: usize, held: bool| TrainingFit {
        host_bytes: bytes(a, held),
        at_once: a,
        held,
    };
    if cap == 0 || bytes(most, true) <= cap {
        return fit(usize::MAX, true);
    }
    // Fewer sub-quantizers at once first, then residuals rebuilt, the first that fits;
    // where none does, the least (which the cap refuses).
    let alternates = super::alternates(p);
    let holds = (1..most).rev().map(|a| (a, true));
    let rebuilds = (1..=most).rev().map(|a| (a, false)).filter(|_| !alternates);
    holds
        .chain(rebuilds)
        .find(|&(a, h)| bytes(a, h) <= cap)
        .map_or(fit(1, alternates), |(a, h)| fit(a, h))
}

/// Host bytes a training takes at its peak with `at_once` sub-quantizers training at a time
/// and the codebooks' residuals `held` (else rebuilt where read).
fn training_host_bytes(
    p: &TrainParams,
    n: usize,
    d: usize,
    threads: usize,
    gathered: usize,
    at_once: usize,
    held: bool,
) -> usize {
    let f = 4usize; // an f32 or u32
    let threads = threads.max(1);
    let k = p.anchor.anchors.min(n.max(1));
    // A step trains on a copy of its sample, or of the whole input under cosine (its rows
    // made unit length); otherwise on the input itself.
    let copied = |rows: usize| {
        if rows < n || p.metric == Metric::Cosine {
            rows * d * f
        } else {
            0
        }
    };

    // Anchors: the values of their sample gathered at once (where it is not the input
    // itself), its norms, assignment and distances, the centroids (three copies: session,
    // maintenance, result), each thread's block of rows and scores, and the update's f64
    // partial sums (at most 8 chunks and 64 MB).
    let mpa = p.anchor.max_points_per_anchor;
    let ns = if mpa > 0 && n > k * mpa { k * mpa } else { n };
    let sample = copied(ns).min(gathered * f);
    let chunks = (ns / 2048)
        .min(8)
        .min((64 << 20) / (k * d * 8).max(1))
        .max(1);
    // A nearest pass's block of scores, or the fused kernel's copy of the centroids.
    let scored = |m: usize, d: usize| {
        let (scores, layout) = nearest_bytes(m, d);
        scores + layout
    };
    let anchors = sample
        + ns * 3 * f
        + 3 * k * d * f
        + (threads * (scored(k, d) + BLOCK * d * f)).max((chunks + 1) * k * d * 8);

    // Codebooks: the sample's residuals where held (written over the sample's copy), its
    // assignment, the rotation's covariance and eigenvectors (f64), the learned rotation's
    // alternations (its fit rows rotated, then reconstructed in their place, and their
    // codes), per sub-quantizer in training its columns with three values a row (norms,
    // assignment and distances), and a fourth for one of them at a time (its update's
    // grouping of the rows: without it, 1M x 128 and GloVe peaked 1-2% over; with it for
    // every one, 8 threads' estimate rose 31% over their peak), and per thread a block of
    // scores, and of residuals where they are rebuilt.
    let nsub = p.subquantizers(d).max(1);
    let dsub = d.div_ceil(nsub);
    let dp = nsub * dsub;
    let npq = if p.pq_train_points > 0 {
        n.min(p.pq_train_points)
    } else {
        n
    };
    let ksub = 1usize << p.bits;
    let rotation = if p.rotation == Rotation::None {
        0
    } else {
        dp * dp * 40
    };
    let alternations = if super::alternates(p) {
        let fit = match p.opq_train_points {
            0 => npq,
            t => npq.min(t),
        };
        fit * (dp * f + nsub)
    } else {
        0
    };
    let (resid, rebuilt) = if held {
        (npq * dp * f, 0)
    } else {
        (0, threads * BLOCK * dp * f)
    };
    let fits = (at_once.min(threads).min(nsub) * (dsub + 3) + 1) * npq * f
        + threads.min(nsub) * (scored(ksub, dsub) + rebuilt);
    let codebooks = k * d * f + resid + npq * f + rotation + alternations + fits;

    // Rebuilt residuals come in small blocks, which reuse what the anchors' step left
    // resident (measured).
    let kept = if held { KEPT_BYTES } else { 0 };
    // Rows narrow enough for the fused kernel are scored without a GEMM; a rotation of such
    // rows packs little.
    let gemm = !fused_nearest(d) || !fused_nearest(dsub) || (rotation > 0 && !fused_nearest(dp));
    let per_thread = if gemm { THREAD_BYTES } else { 0 };
    anchors.max(codebooks) + threads * per_thread + kept
}

/// What each pool thread adds as training first runs a GEMM on it, measured: its stack and
/// its GEMM packing buffers (about 240 KiB a thread on 16 threads).
const THREAD_BYTES: usize = 256 << 10;

/// What stays resident from the anchors' step into the codebooks' (small buffers freed to
/// the allocator, not to the system), measured at 1.3 to 2.3 MiB on 2 threads.
const KEPT_BYTES: usize = 5 << 19;

/// The most values (rows x dimension) an estimate is made for: 2^56 floats are 256 PiB, more
/// than any machine holds, and below it no product the figures take passes 64 bits.
pub const MOST_VALUES: usize = 1 << 56;

/// The widest dimension an estimate is made for (a rotation of it takes 40 d^2 bytes).
pub const MOST_DIMS: usize = 1 << 24;

/// `OutOfMemory` where `rows` x `width` values (`what`: "searching") pass what an estimate is
/// made for: no machine holds them, and past it the figures would wrap to small numbers.
pub fn within_reach(rows: usize, width: usize, what: &str) -> Result<()> {
    match rows.checked_mul(width) {
        Some(v) if v <= MOST_VALUES => Ok(()),
        Some(_) => Err(Error::OutOfMemory(format!(
            "{what}: {rows} x {width} values pass the {MOST_VALUES} (2^56) that memory \
             estimates are made for: more than any machine holds"
        ))),
        None => Err(Error::OutOfMemory(format!(
            "{what}: {rows} x {width} values overflows 64 bits"
        ))),
    }
}

/// `within_reach` of `n` rows of `d` values, with `d` in 1..=`MOST_DIMS`.
pub fn rows_within_reach(n: usize, d: usize, what: &str) -> Result<()> {
    if d == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what}: dimension d = 0: must be >= 1"
        )));
    }
    if d > MOST_DIMS {
        return Err(Error::InvalidArgument(format!(
            "{what}: dimension {d} passes the {MOST_DIMS} (2^24) that memory estimates are \
             made for"
        )));
    }
    within_reach(n, d, what)
}

/// The k-means sessions a device training opens, one after another: the anchors' over their
/// sample; the nearest anchor of each PQ training point, a block of rows at a time; each
/// sub-quantizer's over those points' residuals.
fn training_sessions(p: &TrainParams, n: usize, d: usize) -> [KmeansShape; 3] {
    let k = p.anchor.anchors.min(n.max(1));
    let mpa = p.anchor.max_points_per_anchor;
    let ns = if mpa > 0 && n > k * mpa { k * mpa } else { n };
    let npq = if p.pq_train_points > 0 {
        n.min(p.pq_train_points)
    } else {
        n
    };
    let nsub = p.subquantizers(d).max(1);
    let ksub = (1usize << p.bits).min(npq.max(1));
    let exact = p.anchor.precision == crate::params::Precision::Exact;
    let session = |points, d, centroids, exact| KmeansShape {
        points,
        d,
        centroids,
        exact,
    };
    [
        session(ns, d, k, exact),
        session(npq.min(super::assign_block_rows(d)), d, k, true),
        session(npq, d.div_ceil(nsub), ksub, true),
    ]
}

/// The PQ assignment a device training runs at once: the learned rotation's fit sample,
/// encoded whole at each of its alternations; none without them (each sub-quantizer's error
/// comes from its own session's shape).
fn training_pq_assign(p: &TrainParams, n: usize, d: usize) -> PqAssignShape {
    let npq = if p.pq_train_points > 0 {
        n.min(p.pq_train_points)
    } else {
        n
    };
    let nsub = p.subquantizers(d).max(1);
    let dp = nsub * d.div_ceil(nsub);
    let rows = match (p.rotation, p.opq_iters, p.opq_train_points) {
        (Rotation::Learned, 1.., 0) => npq,
        (Rotation::Learned, 1.., m) => npq.min(m),
        _ => 0,
    };
    PqAssignShape {
        rows,
        nsub,
        dp,
        ksub: 1 << p.bits,
    }
}

/// Bytes of device memory a training holds at its peak on `b`'s device (0 on the CPU), with
/// what `b` then has free under its cap: that of the largest of its k-means sessions
/// (`training_sessions`) and its PQ assignment (`training_pq_assign`), as `b` answers them.
/// Checked against measured device peaks (`tests/cuda.rs`, `tests/wgpu.rs`).
pub fn training_device_bytes(b: &dyn Backend, p: &TrainParams, n: usize, d: usize) -> usize {
    let sessions = training_sessions(p, n, d).map(|s| b.kmeans_device_bytes(s));
    let pq = b.pq_assign_device_bytes(training_pq_assign(p, n, d));
    sessions.into_iter().max().unwrap_or(0).max(pq)
}

/// The work an estimate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Training a codebook on `n` vectors.
    Train,
    /// Building an index: adding `n` vectors to it in one call.
    Build,
    /// Searching `n` queries (with `k` results each) the first time: the search tables and
    /// fast-scan blocks it builds, and its working memory.
    Search,
}

impl std::str::FromStr for Work {
    type Err = crate::error::Error;
    /// "train", "build" or "search".
    fn from_str(s: &str) -> crate::error::Result<Work> {
        match s {
            "train" => Ok(Work::Train),
            "build" => Ok(Work::Build),
            "search" => Ok(Work::Search),
            _ => Err(crate::error::Error::InvalidArgument(format!(
                "work {s:?}: expected train, build or search"
            ))),
        }
    }
}

/// Bytes encoding `n` vectors allocates at its peak, where `after` bytes more are allocated
/// once it is done while its results are still held (the records it returns, or what an index
/// grows by). Its results (an anchor and a code a vector) fill block by block, so while the
/// last block is encoded all but that block's are resident, beside the block's work: its rows
/// converted and prepared for the metric with the next block's (`converted`: f16 input or
/// cosine), the backend's outputs for it, and each thread's scores and residuals.
pub fn encode_bytes(s: &Shape, n: usize, threads: usize, converted: bool, after: usize) -> usize {
    let f = 4;
    let rows = n.min(super::ENCODE_BLOCK);
    let gathered = n * (4 + s.code);
    let blocks = n.div_ceil(rows.max(1)).max(1);
    let filled = gathered / blocks * (blocks - 1);
    let prepared = if converted {
        n.min(2 * rows) * s.d * f
    } else {
        0
    };
    // Anchor ids and sub-space indices; 4-bit indices are then packed into a copy.
    let packed = if s.ksub == 16 { s.code } else { 0 };
    let block = rows * (4 + s.fields + packed);
    // Each thread's buffers, kept from block to block: the scores (anchors, then each
    // sub-space's codewords) beside the residuals and their rotation, one sub-space's columns,
    // and a norm, a distance and an index per row.
    let dsub = s.dp / s.nsub.max(1);
    let (anchor_scores, anchor_layout) = nearest_bytes(s.anchors, s.d);
    let (code_scores, code_layout) = nearest_bytes(s.ksub, dsub);
    let per_thread = anchor_scores.max(code_scores) + BLOCK * (2 * s.dp + dsub + 3) * f;
    // The squared norms of the anchors and of every codeword, taken once per call, and their
    // copies laid out for the fused kernel.
    let norms = (s.anchors + s.nsub * s.ksub) * f + anchor_layout + s.nsub * code_layout;
    let work = prepared + block + norms + threads.max(1) * per_thread;
    (filled + work).max(gathered + after)
}

/// Bytes decoding `n` codes allocates at its peak: each vector's anchor and code gathered
/// (`gathered` bytes in all, a codec record's worth each), the sub-quantizers' output, its
/// rotation back, and the vectors returned.
pub fn decode_bytes(s: &Shape, n: usize, gathered: usize) -> usize {
    let rotated = if s.rotated { 2 } else { 1 };
    gathered + n * (rotated * s.dp + s.d) * 4
}
