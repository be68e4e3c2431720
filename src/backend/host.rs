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
    Ok((a, b.pq_assign(&y, cb.nsub, cb.dsub, cb.books)?))
}
