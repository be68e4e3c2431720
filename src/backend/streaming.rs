//! How many of its points a WGPU k-means session holds at once under a device memory cap, and
//! how much of them the host gathers at once: plain numbers, shared by the session and by
//! the memory estimate, which builds without WGPU.

/// Bytes per task when the host fills WGPU staging memory (every thread takes a piece), and
/// of rows read in place gathered at once for a write.
pub(crate) const WGPU_FILL_PIECE: usize = 1 << 20;

/// Bytes of one point's fp16 halves, kept beside its f32 row where cooperative matrices are on.
fn wgpu_halves_row(d: usize, halves: bool) -> usize {
    match halves {
        true => d.next_multiple_of(16) * 2 + 16,
        false => 0,
    }
}

/// Rows of the `n` x `d` points a WGPU session holds at once with `free` bytes left under
/// its cap: `None` (all of them) where they fit in half of it, else the rows that take a
/// quarter of what the per-point buffers (16 bytes a point) leave, their staging copy
/// another. These may be fewer than a session works with (it then refuses).
pub(crate) fn wgpu_streamed_rows(n: usize, d: usize, free: usize, halves: bool) -> Option<usize> {
    let row = 4 * d + wgpu_halves_row(d, halves);
    if n * (row + 16) <= free / 2 {
        return None;
    }
    Some(free.saturating_sub(16 * n) / 4 / row)
}
