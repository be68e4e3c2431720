//! How much host memory training takes, before it starts: the sum, at its peak, of what
//! `Codebook::train` and the CPU backend allocate for `n` x `d` vectors (the caller's own
//! vectors not counted). Checked against measured peaks in `tests/memory_estimate.rs`.

use crate::backend::streaming::wgpu_streamed_rows;
use crate::error::{Error, Result};
use crate::index::coarse8;
use crate::linalg::{fused_nearest, nearest_bytes, BLOCK};
use crate::params::{Metric, Rotation, TrainParams};

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
    b: &dyn crate::backend::Backend,
    p: &TrainParams,
    n: usize,
    d: usize,
    threads: usize,
    cap: usize,
) -> TrainingFit {
    let gathered = gathered(b, threads);
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

/// How many values of their rows the anchors' sessions on `b` gather at once, reading them
/// where they lie: the CPU's blocks are counted with its threads; CUDA gathers a few MB for
/// each upload, WGPU a piece on each of the `threads`.
fn gathered(b: &dyn crate::backend::Backend, threads: usize) -> usize {
    match b.kind() {
        crate::backend::BackendKind::Cuda => crate::backend::cuda::GATHER_VALUES,
        crate::backend::BackendKind::Wgpu => {
            threads.max(1) * crate::backend::streaming::WGPU_FILL_PIECE / 4
        }
        _ => 0,
    }
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

const MIB: usize = 1 << 20;

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

/// The k-means sessions a device training opens, one after another, as (points, dimension,
/// centroids, exact): the anchors' over their sample; the nearest anchor of each PQ training
/// point, a block of rows at a time; each sub-quantizer's over those points' residuals.
fn training_sessions(p: &TrainParams, n: usize, d: usize) -> [(usize, usize, usize, bool); 3] {
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
    [
        (ns, d, k, exact),
        (npq.min(super::assign_block_rows(d)), d, k, true),
        (npq, d.div_ceil(nsub), ksub, true),
    ]
}

/// The PQ assignment a device training runs at once, as (points, sub-spaces, padded
/// dimension, centroids per sub-space): the learned rotation's fit sample, encoded whole at
/// each of its alternations; none without them (each sub-quantizer's error comes from its
/// own session's shape).
fn training_pq_assign(p: &TrainParams, n: usize, d: usize) -> (usize, usize, usize, usize) {
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
    (rows, nsub, dp, 1 << p.bits)
}

/// Bytes of device memory a training holds at its peak on `b`'s device (0 on the CPU), with
/// what `b` then has free under its cap: on CUDA, that of the largest of its k-means sessions
/// (`training_sessions`) and its PQ assignment (`training_pq_assign`, in blocks of half what
/// is free), each session with its points as `cuda::session_rows` holds them (all of
/// them, or a block at a time), a block of scores sized from what is then free (16 MiB to
/// 1 GiB), and the centroids with their split, and their sums where the points are streamed.
/// Where not even a streamed session fits, the least it opens with (more than `free`).
/// Checked against measured device peaks (`tests/cuda.rs`). On WGPU, `wgpu_training_bytes`.
pub fn training_device_bytes(
    b: &dyn crate::backend::Backend,
    p: &TrainParams,
    n: usize,
    d: usize,
) -> usize {
    match b.kind() {
        crate::backend::BackendKind::Cpu => 0,
        crate::backend::BackendKind::Wgpu => {
            wgpu_training_bytes(p, n, d, b.memory_free(), b.caps().fp16_rows)
        }
        _ => cuda_training_bytes(p, n, d, b.memory_free().unwrap_or(usize::MAX / 2)),
    }
}

/// `training_device_bytes` on CUDA, with `free` bytes free (under its cap).
fn cuda_training_bytes(p: &TrainParams, n: usize, d: usize, free: usize) -> usize {
    use crate::backend::cuda::{session_least_bytes, session_point_bytes, session_rows};
    let one = |(ns, d, k, exact): (usize, usize, usize, bool)| {
        let Some(rows) = session_rows(ns, d, exact, free) else {
            return session_least_bytes(ns, d, exact);
        };
        let held = session_point_bytes(ns, d, exact, rows);
        let dots = (free.saturating_sub(held) / 8).clamp(16 * MIB, 1 << 30);
        let chunk = (dots / (4 * k).max(1)).max(256).min(rows.max(1));
        let split = if exact { 6 * d + 4 } else { 0 };
        let sums = if rows < ns { k * (8 * d + 8) } else { 0 };
        held + chunk * k * 4 + k * (4 * d + split + 32) + sums
    };
    let (rows, nsub, dp, ksub) = training_pq_assign(p, n, d);
    let row = dp * 4 + nsub;
    let rows = rows.min((free / 2 / row).max(1024));
    let pq = if rows > 0 {
        rows * row + dp * ksub * 4
    } else {
        0
    };
    let sessions = training_sessions(p, n, d).into_iter().map(one);
    sessions.max().unwrap_or(0).max(pq)
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

/// What the memory of encoding, adding and searching depends on: a codebook's shape, known
/// from the parameters before training or from a trained codebook.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub anchors: usize,
    pub d: usize,
    /// The padded dimension the sub-quantizers split.
    pub dp: usize,
    pub nsub: usize,
    /// Fields of a code an encoder writes a row: the sub-codes and the error level, if any.
    pub fields: usize,
    pub ksub: usize,
    /// Bytes of residual code per vector.
    pub code: usize,
    pub metric: Metric,
    /// Whether residuals are rotated before the sub-quantizers.
    pub rotated: bool,
}

impl Shape {
    /// The shape training `p` on `n` x `d` vectors gives.
    pub fn of_params(p: &TrainParams, n: usize, d: usize) -> Shape {
        let nsub = p.subquantizers(d).max(1);
        let fields = nsub + usize::from(p.error_code_for(d));
        Shape {
            anchors: p.anchor.anchors.min(n.max(1)),
            d,
            dp: nsub * d.div_ceil(nsub),
            nsub,
            fields,
            ksub: 1 << p.bits,
            code: (fields * p.bits as usize).div_ceil(8),
            metric: p.metric,
            rotated: p.rotation != crate::params::Rotation::None,
        }
    }

    pub fn of_codebook(cb: &crate::quant::Codebook) -> Shape {
        Shape {
            anchors: cb.anchors(),
            d: cb.dim(),
            dp: cb.pq.dim(),
            nsub: cb.pq.nsub,
            fields: cb.pq.code_fields(),
            ksub: cb.pq.ksub(),
            code: cb.residual_code_size(),
            metric: cb.metric(),
            rotated: !cb.rot.is_empty(),
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

/// Bytes adding `n` vectors to an index allocates at its peak: the encoding (`encode_bytes`),
/// after which, beside its results: with refinement rows (`refine_row` bytes each), the vectors
/// prepared for the metric (cosine) with what the codes decode to and the decoder's two
/// intermediate copies, then the rows made; and what the lists grow by (an id, a code and a
/// refinement row each, and 2% for the allocator around each list's buffers: 1M x 768 at
/// 64 B peaked 1.7% over their bytes) while the rows are still held.
pub fn add_bytes(s: &Shape, n: usize, refine_row: usize, threads: usize, converted: bool) -> usize {
    let f = 4;
    let rows = n * refine_row;
    let grown = n * (8 + s.code + refine_row);
    let held = grown + grown / 50 + rows;
    let refine = if refine_row > 0 {
        let prepared = if s.metric == Metric::Cosine {
            n * s.d * f
        } else {
            0
        };
        prepared + n * (s.d + 2 * s.dp) * f
    } else {
        0
    };
    encode_bytes(s, n, threads, converted, refine.max(held))
}

/// Bytes decoding `n` codes allocates at its peak: each vector's anchor and code gathered
/// (`gathered` bytes in all, a codec record's worth each), the sub-quantizers' output, its
/// rotation back, and the vectors returned.
pub fn decode_bytes(s: &Shape, n: usize, gathered: usize) -> usize {
    let rotated = if s.rotated { 2 } else { 1 };
    gathered + n * (rotated * s.dp + s.d) * 4
}

/// Bytes of the search tables an index builds at its first search: every list's terms under
/// L2 (M x ksub floats a list), the rotated anchors and the anchors' axes for probing, each
/// where within `cap` (512 MB), the anchors in 8-bit integers and the rotation's columns that
/// meet a query's dimensions, and the anchors' norms and the transposed sub-quantizer
/// centroids.
pub fn tables_bytes(s: &Shape, cap: usize) -> usize {
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
    let probe = crate::index::probe::held_under(s.anchors, s.d, cap);
    rotated + terms + probe + always_bytes(s) + s.anchors * f + s.dp * s.ksub * f
}

/// Bytes of the fast-scan blocks of a 4-bit index of `n` vectors: 32 codes a block, at most
/// one block's padding per list, and each list's offset. 0 for 8-bit codes.
pub fn fast_scan_bytes(s: &Shape, n: usize) -> usize {
    if s.ksub != 16 {
        return 0;
    }
    let per_vector = s.nsub.div_ceil(2);
    n * per_vector + s.anchors * (32 * per_vector + 8)
}

/// Bytes a search of `nq` queries with `want` candidates each allocates besides the tables and
/// blocks it may build: its results (`k` ids and distances a query), the queries prepared for
/// the metric (cosine), and per task (a block of up to 128 queries; as many at once as
/// threads) the block's anchor scores with its padded and rotated copies (and the rotation's
/// products in integers, where taken so), coarse distances,
/// query tables and candidates.
pub fn search_bytes(s: &Shape, nq: usize, k: usize, want: usize, threads: usize) -> usize {
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
pub fn search_tasks(nq: usize, threads: usize) -> usize {
    threads.max(1).min(nq.div_ceil(16).max(1))
}

/// Bytes each search task makes where the index's tables are not built (under a memory cap
/// that leaves them no room): the anchors' norms, the transposed centroids, a list's terms,
/// and the rotation's columns and the anchors in 8-bit integers that every search uses.
pub fn light_tables_bytes(s: &Shape) -> usize {
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

/// Values per staged block on CUDA (`STAGE` there).
const DEVICE_STAGE: usize = 8 << 20;

/// Device bytes the codebook takes on CUDA: anchors with their split and norms, the
/// sub-quantizers' centroids and the rotation.
fn device_codebook_bytes(s: &Shape) -> usize {
    let rotation = if s.rotated { s.dp * s.dp * 4 } else { 0 };
    s.anchors * (s.d * 4 + 6 * s.d + 4 + 4) + s.dp * s.ksub * 4 + rotation
}

/// Device bytes adding (or encoding) `n` vectors takes on CUDA at its peak (0 on the CPU): per
/// staged block of rows, the three buffers the copies fill, their norms and distances, their
/// fp16 split, the anchor scores (at most 256 MiB), the residuals and their rotation, and the
/// anchor ids and indices; and the codebook, which stays on the device for later calls.
/// Checked against measured device peaks (`tests/cuda.rs`).
pub fn device_build_bytes(b: &dyn crate::backend::Backend, s: &Shape, n: usize) -> usize {
    match b.kind() {
        crate::backend::BackendKind::Cpu => return 0,
        crate::backend::BackendKind::Wgpu => {
            return wgpu_build_bytes(s, n, b.memory_free(), b.caps().fp16_rows)
        }
        _ => {}
    }
    let b = (DEVICE_STAGE / s.d.max(1)).clamp(1, n.max(1));
    let chunk = ((256 * MIB) / (4 * s.anchors).max(1)).clamp(1, b);
    let residuals = if s.rotated { 2 } else { 1 } * b * s.dp * 4;
    let block = 3 * b * s.d * 4
        + 2 * b * 4
        + b * (6 * s.d + 4)
        + chunk * s.anchors * 4
        + residuals
        + b * (4 + s.fields);
    block + device_codebook_bytes(s)
}

/// Rows per encoding block on WGPU (`ENCODE_BLOCK` there).
const WGPU_ENCODE_BLOCK: usize = 65_536;

/// `device_build_bytes` on WGPU: per block of rows, the rows, their norms, anchor ids and
/// distances, residuals (and rotated residuals), PQ indices, codes and what comes back; two
/// blocks at once (one comes back while the next runs), under a cap (`free` left) each in a
/// quarter of what it leaves; and the codebook. With cooperative matrices (`halves`), the
/// fp16 halves of a block and of the anchors. Checked against the allocator's peaks
/// (`tests/wgpu.rs`).
fn wgpu_build_bytes(s: &Shape, n: usize, free: Option<usize>, halves: bool) -> usize {
    let rotated = if s.rotated { 2 } else { 1 };
    let block =
        |rows: usize| rows * (4 * s.d + 12 + rotated * 4 * s.dp + 5 * s.fields + 4 + s.fields);
    let row = 4 * s.d + 16 + rotated * 4 * s.dp + 6 * s.fields;
    let per = free.map_or(WGPU_ENCODE_BLOCK, |f| {
        (f / 4 / row).clamp(256, WGPU_ENCODE_BLOCK)
    });
    let first = n.clamp(1, per);
    let second = n.saturating_sub(first).min(per);
    let rotation = if s.rotated { s.dp * s.dp * 4 } else { 0 };
    let fp16 = if halves {
        wgpu_halves_bytes(first, s.d) + (first + 1) * 4 + wgpu_halves_bytes(s.anchors, s.d)
    } else {
        0
    };
    block(first) + block(second) + s.anchors * (s.d + 1) * 4 + s.dp * s.ksub * 4 + rotation + fp16
}

/// WGPU's fp16 halves of `rows` rows of `d` values (`mma::Halves`): rows padded to 64,
/// values to 16, two bytes each, and 16 bytes a row.
fn wgpu_halves_bytes(rows: usize, d: usize) -> usize {
    rows.next_multiple_of(64) * d.next_multiple_of(16) * 2 + rows * 16
}

/// `training_device_bytes` on WGPU, with `free` bytes left under its device cap (`None`: no
/// cap): that of the largest of its k-means sessions (`training_sessions`) and its PQ
/// assignment (`training_pq_assign`), each session with its
/// points, their norms, assignment, distances and group order held whole, or under a cap
/// they do not fit one block at a time with its staging copy (a quarter of what the
/// per-point buffers leave, each); the centroids with their sums and per-centroid
/// buffers; the assignment and distances read back; with cooperative matrices (`halves`), the fp16 halves of the points and the
/// centroids. Checked against the allocator's peaks (`tests/wgpu.rs`).
fn wgpu_training_bytes(
    p: &TrainParams,
    n: usize,
    d: usize,
    free: Option<usize>,
    halves: bool,
) -> usize {
    let one = |(ns, d, k, _): (usize, usize, usize, bool)| {
        let fp16 = |rows: usize| {
            if halves {
                wgpu_halves_bytes(rows, d)
            } else {
                0
            }
        };
        // With the assignment and distances read back (a nearest-anchor pass).
        let centroids = k * (8 * d + 48) + 2048 + fp16(k) + 8 * ns;
        match free.and_then(|f| wgpu_streamed_rows(ns, d, f, halves)) {
            // Where even the least block does not fit, the session refuses: counted at it.
            Some(rows) => {
                let rows = rows.clamp(1024.min(ns), ns);
                16 * ns + rows * 4 * d + fp16(rows) + rows * 4 * d + centroids
            }
            None => ns * (4 * d + 16) + fp16(ns) + (ns + 1) * 4 * halves as usize + centroids,
        }
    };
    // PQ assignment: the rows (under a cap, in half of what it leaves), their indices, codes
    // and what comes back, and the books.
    let (rows, nsub, dp, ksub) = training_pq_assign(p, n, d);
    let row = dp * 4 + 6 * nsub;
    let rows = free.map_or(rows, |f| rows.min((f / 2 / row).max(1024)));
    let pq = if rows > 0 {
        rows * row + dp * ksub * 4
    } else {
        0
    };
    let sessions = training_sessions(p, n, d).into_iter().map(one);
    sessions.max().unwrap_or(0).max(pq)
}

/// Device bytes a search of `nq` queries (`nprobe` lists, `want` candidates each) takes on
/// CUDA at its peak (0 on the CPU): the index's `n` vectors (ids and codes) with the lists'
/// terms under L2, uploaded by its first search and kept until it changes (counted every
/// time), and per batch of up to 4,096 queries, the queries, their anchor scores, probes,
/// padded and rotated copies and tables, then their candidates. Checked against measured
/// device peaks (`tests/cuda.rs`).
pub fn device_search_bytes(
    kind: crate::backend::BackendKind,
    s: &Shape,
    n: usize,
    nq: usize,
    nprobe: usize,
    want: usize,
) -> usize {
    if kind == crate::backend::BackendKind::Cpu {
        return 0;
    }
    let per_list = s.nsub * s.ksub * 4;
    let terms = if s.metric == Metric::L2 && s.anchors * per_list <= 512 * MIB {
        s.anchors * per_list
    } else {
        0
    };
    let lists = n * (8 + s.code) + (s.anchors + 1) * 4 + terms;
    let nb = nq.clamp(1, 4096);
    let np = nprobe.min(s.anchors);
    let tables = nb * (s.d + 2 * np + s.dp + s.nsub * s.ksub) * 4;
    let probe = tables + nb * s.anchors * 4;
    let scan = tables + nb * np * want * 8 + nb * want * 12;
    lists + probe.max(scan)
}
