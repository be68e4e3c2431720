//! The device bytes CUDA's buffers take for a piece of work, from its plain shape: what the
//! memory estimates and caps read before the work starts. Checked against measured device
//! peaks (`tests/cuda.rs`).

use super::kmeans::{session_least_bytes, session_point_bytes, session_rows};
use super::STAGE;
use crate::backend::{KmeansShape, PqAssignShape, Shape};

const MIB: usize = 1 << 20;

/// A k-means session with `free` bytes free: its points as `session_rows` holds them (all of
/// them, or a block at a time), a block of scores sized from what is then free (16 MiB to
/// 1 GiB), and the centroids with their split, and their sums where the points are
/// streamed; where not even a streamed session fits, the least it opens with.
pub(super) fn kmeans_bytes(s: KmeansShape, free: usize) -> usize {
    let KmeansShape {
        points: ns,
        d,
        centroids: k,
        exact,
    } = s;
    let Some(rows) = session_rows(ns, d, exact, free) else {
        return session_least_bytes(ns, d, exact);
    };
    let held = session_point_bytes(ns, d, exact, rows);
    let dots = (free.saturating_sub(held) / 8).clamp(16 * MIB, 1 << 30);
    let chunk = (dots / (4 * k).max(1)).max(256).min(rows.max(1));
    let split = if exact { 6 * d + 4 } else { 0 };
    let sums = if rows < ns { k * (8 * d + 8) } else { 0 };
    held + chunk * k * 4 + k * (4 * d + split + 32) + sums
}

/// A PQ assignment with `free` bytes free: its rows in blocks of half of that (at least
/// 1,024), each row's values and indices, and the books.
pub(super) fn pq_assign_bytes(s: PqAssignShape, free: usize) -> usize {
    let row = s.dp * 4 + s.nsub;
    let rows = s.rows.min((free / 2 / row).max(1024));
    if rows == 0 {
        return 0;
    }
    rows * row + s.dp * s.ksub * 4
}

/// Adding (or encoding) `n` vectors: per staged block of rows, the three buffers the copies
/// fill, their norms and distances, their fp16 split, the anchor scores (at most 256 MiB),
/// the residuals and their rotation, and the anchor ids and indices; and the codebook
/// (anchors with their split and norms, the sub-quantizers' centroids and the rotation),
/// which stays on the device for later calls.
pub(super) fn encode_bytes(s: &Shape, n: usize) -> usize {
    let b = (STAGE / s.d.max(1)).clamp(1, n.max(1));
    let chunk = ((256 * MIB) / (4 * s.anchors).max(1)).clamp(1, b);
    let residuals = if s.rotated { 2 } else { 1 } * b * s.dp * 4;
    let block = 3 * b * s.d * 4
        + 2 * b * 4
        + b * (6 * s.d + 4)
        + chunk * s.anchors * 4
        + residuals
        + b * (4 + s.fields);
    let rotation = if s.rotated { s.dp * s.dp * 4 } else { 0 };
    let codebook = s.anchors * (s.d * 4 + 6 * s.d + 4 + 4) + s.dp * s.ksub * 4 + rotation;
    block + codebook
}
