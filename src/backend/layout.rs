//! The padded sub-space layout and the row operations around it, shared by the host code and
//! mirrored by the device kernels (`kernels/`): a residual of d columns is spread into M
//! sub-spaces of `dsub` columns (`dp` = M x dsub), then turned by the codebook's rotation.

use crate::linalg;
use rayon::prelude::*;
use std::borrow::Cow;

/// Which input column lands at position `p` of the padded M x dsub layout, or None for a
/// zero. When d is not a multiple of M, the first `d % M` sub-spaces hold dsub real columns
/// and the rest dsub - 1 and one zero each: padding all at the end would leave whole
/// sub-spaces empty and waste their bytes. Mirrored by the residual kernels.
#[inline]
pub(crate) fn source_column(p: usize, d: usize, dsub: usize, dp: usize) -> Option<usize> {
    let nsub = dp / dsub;
    let (q, rem) = (d / nsub, d % nsub);
    let (j, o) = (p / dsub, p % dsub);
    if j < rem {
        Some(p)
    } else if o < q {
        Some(rem * dsub + (j - rem) * q + o)
    } else {
        None
    }
}

/// Rows of d columns spread into the padded layout (`dp` = M x `dsub` columns).
pub(crate) fn pad_rows(x: &[f32], d: usize, dsub: usize, dp: usize) -> Vec<f32> {
    spread_rows(x.len() / d, d, dsub, dp, |i, t| x[i * d + t])
}

/// `x - anchor` in the padded layout.
pub(crate) fn residuals(
    x: &[f32],
    d: usize,
    dsub: usize,
    dp: usize,
    anchors: &[f32],
    assign: &[u32],
) -> Vec<f32> {
    if dp == d {
        // Nothing to spread: a plain subtraction the compiler vectorizes.
        return residuals_in_place(x[..assign.len() * d].to_vec(), d, dsub, dp, anchors, assign);
    }
    spread_rows(assign.len(), d, dsub, dp, |i, t| {
        x[i * d + t] - anchors[assign[i] as usize * d + t]
    })
}

/// n rows of the padded layout, column t of row i holding `value(i, t)`.
pub(crate) fn spread_rows(
    n: usize,
    d: usize,
    dsub: usize,
    dp: usize,
    value: impl Fn(usize, usize) -> f32 + Sync,
) -> Vec<f32> {
    // Each position's source column, worked out once rather than per row.
    let columns: Vec<Option<usize>> = (0..dp).map(|p| source_column(p, d, dsub, dp)).collect();
    let mut out = vec![0f32; n * dp];
    out.par_chunks_mut(dp.max(1))
        .enumerate()
        .for_each(|(i, o)| {
            for (v, t) in o.iter_mut().zip(&columns) {
                if let Some(t) = *t {
                    *v = value(i, t);
                }
            }
        });
    out
}

/// `out = x R^T` for row vectors, i.e. `R x` for each row: one GEMM per row block.
pub(crate) fn rotate(r: &[f32], x: &[f32], dp: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    rotate_into(r, x, dp, &mut out);
    out
}

/// `rotate` into `out` (as long as `x`).
pub(crate) fn rotate_into(r: &[f32], x: &[f32], dp: usize, out: &mut [f32]) {
    out.par_chunks_mut(linalg::BLOCK * dp)
        .zip(x.par_chunks(linalg::BLOCK * dp))
        .for_each(|(o, xb)| linalg::dot_block(xb, r, dp, o));
}

/// `residuals` of the rows `x` (n x d, n = `assign.len()`), written over them: the buffer
/// grows to n x dp and, where it is padded, rows move out to their places from the last one
/// back, so that nothing is overwritten before it is read (a column never moves left).
pub(crate) fn residuals_in_place(
    mut x: Vec<f32>,
    d: usize,
    dsub: usize,
    dp: usize,
    anchors: &[f32],
    assign: &[u32],
) -> Vec<f32> {
    let n = assign.len();
    if dp == d {
        x.par_chunks_mut(d).zip(assign).for_each(|(row, &a)| {
            let c = &anchors[a as usize * d..(a as usize + 1) * d];
            row.iter_mut().zip(c).for_each(|(v, c)| *v -= c);
        });
        return x;
    }
    x.resize(n * dp, 0.0);
    for i in (0..n).rev() {
        let a = assign[i] as usize * d;
        for p in (0..dp).rev() {
            x[i * dp + p] = match source_column(p, d, dsub, dp) {
                Some(t) => x[i * d + t] - anchors[a + t],
                None => 0.0,
            };
        }
    }
    x
}

/// Rows of `d` scaled to unit length (zero rows stay zero), in place when `x` is already
/// owned: what cosine compares.
pub(crate) fn unit_rows<'a>(x: impl Into<Cow<'a, [f32]>>, d: usize) -> Cow<'a, [f32]> {
    let mut x = x.into();
    x.to_mut().par_chunks_mut(d).for_each(unit_row);
    x
}

pub(crate) use crate::linalg::unit_row;

/// Sub-code `j` of one code (8 bits: byte j; 4 bits: nibble j, low nibble first).
#[inline]
pub fn get_code(code: &[u8], j: usize, bits: u32) -> u8 {
    if bits == 8 {
        code[j]
    } else {
        (code[j / 2] >> ((j & 1) * 4)) & 0xf
    }
}

#[cfg(test)]
mod tests {
    use super::source_column;

    #[test]
    fn padding_spreads_one_zero_per_subspace() {
        for (d, nsub) in [
            (784usize, 64usize),
            (50, 16),
            (50, 64),
            (384, 32),
            (7, 3),
            (1, 1),
        ] {
            let dsub = d.div_ceil(nsub);
            let dp = nsub * dsub;
            let cols: Vec<Option<usize>> = (0..dp).map(|p| source_column(p, d, dsub, dp)).collect();
            let seen: Vec<usize> = cols.iter().flatten().copied().collect();
            // Input order is kept and every column appears once.
            assert_eq!(seen, (0..d).collect::<Vec<_>>(), "d={d} M={nsub}");
            for j in 0..nsub {
                let zeros = cols[j * dsub..(j + 1) * dsub]
                    .iter()
                    .filter(|c| c.is_none())
                    .count();
                assert!(
                    zeros <= 1 || d < nsub,
                    "d={d} M={nsub}: sub-space {j} has {zeros} zeros"
                );
            }
        }
    }
}
