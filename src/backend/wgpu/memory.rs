//! The device bytes WGPU's buffers take for a piece of work, from its plain shape, and how
//! many of a session's points it holds at once under a cap. Checked against the allocator's
//! peaks (`tests/wgpu.rs`).

use super::encode::ENCODE_BLOCK;
use crate::backend::{KmeansShape, PqAssignShape, Shape};

/// Bytes of one point's fp16 halves, kept beside its f32 row where cooperative matrices are on.
fn halves_row(d: usize, halves: bool) -> usize {
    match halves {
        true => d.next_multiple_of(16) * 2 + 16,
        false => 0,
    }
}

/// WGPU's fp16 halves of `rows` rows of `d` values (`mma::Halves`): rows padded to 64,
/// values to 16, two bytes each, and 16 bytes a row.
fn halves_bytes(rows: usize, d: usize) -> usize {
    rows.next_multiple_of(64) * d.next_multiple_of(16) * 2 + rows * 16
}

/// Rows of the `n` x `d` points a WGPU session holds at once with `free` bytes left under
/// its cap: `None` (all of them) where they fit in half of it, else the rows that take a
/// quarter of what the per-point buffers (16 bytes a point) leave, their staging copy
/// another. These may be fewer than a session works with (it then refuses).
pub(super) fn streamed_rows(n: usize, d: usize, free: usize, halves: bool) -> Option<usize> {
    let row = 4 * d + halves_row(d, halves);
    if n * (row + 16) <= free / 2 {
        return None;
    }
    Some(free.saturating_sub(16 * n) / 4 / row)
}

/// A k-means session with `free` bytes left under the device cap (`None`: no cap): its
/// points, their norms, assignment, distances and group order held whole, or under a cap
/// they do not fit one block at a time with its staging copy (a quarter of what the
/// per-point buffers leave, each); the centroids with their sums and per-centroid buffers;
/// the assignment and distances read back; with cooperative matrices (`halves`), the fp16
/// halves of the points and the centroids.
pub(super) fn kmeans_bytes(s: KmeansShape, free: Option<usize>, halves: bool) -> usize {
    let (ns, d, k) = (s.points, s.d, s.centroids);
    let fp16 = |rows: usize| if halves { halves_bytes(rows, d) } else { 0 };
    // With the assignment and distances read back (a nearest-anchor pass).
    let centroids = k * (8 * d + 48) + 2048 + fp16(k) + 8 * ns;
    match free.and_then(|f| streamed_rows(ns, d, f, halves)) {
        // Where even the least block does not fit, the session refuses: counted at it.
        Some(rows) => {
            let rows = rows.clamp(1024.min(ns), ns);
            16 * ns + rows * 4 * d + fp16(rows) + rows * 4 * d + centroids
        }
        None => ns * (4 * d + 16) + fp16(ns) + (ns + 1) * 4 * halves as usize + centroids,
    }
}

/// A PQ assignment: the rows (under a cap, in half of what it leaves), their indices, codes
/// and what comes back, and the books.
pub(super) fn pq_assign_bytes(s: PqAssignShape, free: Option<usize>) -> usize {
    let row = s.dp * 4 + 6 * s.nsub;
    let rows = free.map_or(s.rows, |f| s.rows.min((f / 2 / row).max(1024)));
    if rows == 0 {
        return 0;
    }
    rows * row + s.dp * s.ksub * 4
}

/// Adding (or encoding) `n` vectors: per block of rows, the rows, their norms, anchor ids
/// and distances, residuals (and rotated residuals), PQ indices, codes and what comes back;
/// two blocks at once (one comes back while the next runs), under a cap (`free` left) each in
/// a quarter of what it leaves; and the codebook. With cooperative matrices (`halves`), the
/// fp16 halves of a block and of the anchors.
pub(super) fn encode_bytes(s: &Shape, n: usize, free: Option<usize>, halves: bool) -> usize {
    let rotated = if s.rotated { 2 } else { 1 };
    let block =
        |rows: usize| rows * (4 * s.d + 12 + rotated * 4 * s.dp + 5 * s.fields + 4 + s.fields);
    let row = 4 * s.d + 16 + rotated * 4 * s.dp + 6 * s.fields;
    let per = free.map_or(ENCODE_BLOCK, |f| (f / 4 / row).clamp(256, ENCODE_BLOCK));
    let first = n.clamp(1, per);
    let second = n.saturating_sub(first).min(per);
    let rotation = if s.rotated { s.dp * s.dp * 4 } else { 0 };
    let fp16 = if halves {
        halves_bytes(first, s.d) + (first + 1) * 4 + halves_bytes(s.anchors, s.d)
    } else {
        0
    };
    block(first) + block(second) + s.anchors * (s.d + 1) * 4 + s.dp * s.ksub * 4 + rotation + fp16
}
