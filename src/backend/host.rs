//! Host fallbacks any backend can use: operations built from the backend's own `nearest`,
//! with the rest of the work on the host.

use super::layout;
use super::{Backend, CodebookView};
use crate::error::Result;

/// [`Backend::pq_assign`] through `nearest`, one subspace at a time.
pub(crate) fn pq_assign<B: Backend + ?Sized>(
    b: &B,
    y: &[f32],
    nsub: usize,
    dsub: usize,
    codebooks: &[f32],
) -> Result<Vec<u8>> {
    let dp = nsub * dsub;
    let per = codebooks.len() / nsub.max(1);
    let mut out = vec![0u8; y.len() / dp.max(1) * nsub];
    for j in 0..nsub {
        let sub = sub_columns(y, dp, j * dsub, dsub);
        let (a, _) = b.nearest(&sub, dsub, &codebooks[j * per..(j + 1) * per])?;
        for (i, &c) in a.iter().enumerate() {
            out[i * nsub + j] = c as u8;
        }
    }
    Ok(out)
}

/// Column block `[off, off+w)` of a row-major matrix with `d` columns, made contiguous.
pub(crate) fn sub_columns(y: &[f32], d: usize, off: usize, w: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(y.len() / d * w);
    sub_columns_into(y, d, off, w, &mut out);
    out
}

/// `sub_columns` appended to `out`.
pub(crate) fn sub_columns_into(y: &[f32], d: usize, off: usize, w: usize, out: &mut Vec<f32>) {
    for row in y.chunks_exact(d) {
        out.extend_from_slice(&row[off..off + w]);
    }
}

/// [`Backend::encode_residuals`] as separate backend steps (nearest anchor, then PQ) with the
/// residual and rotation on the host.
pub(crate) fn encode_in_steps<B: Backend + ?Sized>(
    b: &B,
    cb: &CodebookView,
    x: &[f32],
) -> Result<(Vec<u32>, Vec<u8>)> {
    let (d, dp) = (cb.d, cb.dp());
    let (a, _) = b.nearest(x, d, cb.anchors)?;
    let r = layout::residuals(x, d, cb.dsub, dp, cb.anchors, &a);
    let y = if cb.rotation.is_empty() {
        r
    } else {
        layout::rotate(cb.rotation, &r, dp)
    };
    let idx = b.pq_assign(&y, cb.nsub, cb.dsub, cb.books)?;
    Ok((a, with_levels(cb, &y, idx)))
}

/// The index of the level of `levels` (ascending) nearest to the squared error of `code`'s
/// sub-codes (one byte each, `nsub` of them) for the rotated residual `y` (nsub x dsub
/// values), summed sub-space by sub-space in order: what every encoder writes after the
/// sub-codes of a codebook with levels.
pub(crate) fn error_level(cb: &CodebookView, y: &[f32], code: &[u8]) -> u8 {
    let (dsub, per) = (cb.dsub, cb.ksub() * cb.dsub);
    let mut e = 0f32;
    for (j, (ys, &c)) in y.chunks_exact(dsub).zip(code).enumerate() {
        let w = &cb.books[j * per + c as usize * dsub..][..dsub];
        e += ys
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>();
    }
    nearest_level(cb.levels, e)
}

/// `idx` (n x nsub sub-codes of the rotated residuals `y`) with each row's error level after
/// its sub-codes where `cb` has levels (`CodebookView::row_bytes`); `idx` itself otherwise.
pub(crate) fn with_levels(cb: &CodebookView, y: &[f32], idx: Vec<u8>) -> Vec<u8> {
    if cb.levels.is_empty() {
        return idx;
    }
    let (nsub, dp, rb) = (cb.nsub, cb.dp(), cb.row_bytes());
    let mut out = vec![0u8; idx.len() / nsub.max(1) * rb];
    for ((o, code), ys) in out
        .chunks_exact_mut(rb)
        .zip(idx.chunks_exact(nsub))
        .zip(y.chunks_exact(dp))
    {
        o[..nsub].copy_from_slice(code);
        o[nsub] = error_level(cb, ys, code);
    }
    out
}

/// The index of the value of `levels` (ascending) nearest to `e`; the lower of two at a tie.
fn nearest_level(levels: &[f32], e: f32) -> u8 {
    let i = levels.partition_point(|&l| l < e);
    let pick = match i {
        0 => 0,
        i if i == levels.len() => i - 1,
        i if e - levels[i - 1] <= levels[i] - e => i - 1,
        i => i,
    };
    pick as u8
}
