//! Orthogonal rotations of the residual space (dp x dp, row-major, `y = R x`).

use crate::backend::Poll;
use crate::error::Result;
use crate::rng::Rng;
use faer::Mat;
use rayon::prelude::*;

/// A seeded random orthogonal matrix: Q of the QR factorization of a Gaussian matrix, with
/// column signs fixed so the distribution is uniform (Haar).
pub(crate) fn random_orthogonal(dp: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let g = Mat::<f64>::from_fn(dp, dp, |_, _| rng.normal());
    let qr = g.qr();
    let q = qr.compute_Q();
    let r = qr.R();
    let mut out = vec![0f32; dp * dp];
    for i in 0..dp {
        for j in 0..dp {
            let s = if r[(j, j)] < 0.0 { -1.0 } else { 1.0 };
            out[i * dp + j] = (q[(i, j)] * s) as f32;
        }
    }
    out
}

/// `X^T Y` (dp x dp), summed over chunks of `CROSS_CHUNK` rows in order: a GEMM per chunk
/// in f32, the chunks summed in f64. Each output entry is computed whole by one thread, so
/// the result does not depend on the thread count.
pub(crate) struct Cross {
    dp: usize,
    part: Vec<f32>,
    sum: Vec<f64>,
}

/// Rows per chunk of a `Cross`: whoever feeds one gives chunks of this many rows (the last
/// one fewer), so that the same rows give the same sums however they are held.
pub(crate) const CROSS_CHUNK: usize = 4096;

impl Cross {
    pub(crate) fn new(dp: usize) -> Self {
        Cross {
            dp,
            part: vec![0f32; dp * dp],
            sum: vec![0f64; dp * dp],
        }
    }

    /// Adds the chunk's `xc^T yc`.
    pub(crate) fn add(&mut self, xc: &[f32], yc: &[f32]) {
        use faer::{linalg::matmul::matmul, Accum, MatMut, MatRef, Par};
        const BAND: usize = 64;
        let dp = self.dp;
        let r = xc.len() / dp;
        let xa = MatRef::from_row_major_slice(xc, r, dp);
        let ya = MatRef::from_row_major_slice(yc, r, dp);
        // Bands of output rows in parallel: rows a0.. of X^T Y are X[:, a0..]^T Y.
        self.part
            .par_chunks_mut(BAND * dp)
            .enumerate()
            .for_each(|(b, band)| {
                let rows = band.len() / dp;
                let o = MatMut::from_row_major_slice_mut(band, rows, dp);
                let xb = xa.subcols(b * BAND, rows);
                matmul(o, Accum::Replace, xb.transpose(), ya, 1.0f32, Par::Seq);
            });
        for (a, &b) in self.sum.iter_mut().zip(&self.part) {
            *a += b as f64;
        }
    }

    fn done(self) -> Mat<f64> {
        let dp = self.dp;
        Mat::<f64>::from_fn(dp, dp, |i, j| self.sum[i * dp + j])
    }
}

/// `X^T Y` of whole matrices (n x dp).
fn cross(x: &[f32], y: &[f32], dp: usize, poll: Poll) -> Result<Cross> {
    let mut c = Cross::new(dp);
    for (xc, yc) in x.chunks(CROSS_CHUNK * dp).zip(y.chunks(CROSS_CHUNK * dp)) {
        poll()?;
        c.add(xc, yc);
    }
    Ok(c)
}

/// OPQ's parametric start (eigenvalue allocation): the principal axes of `x` (n x dp), dealt
/// largest first to the sub-space of `nsub` whose product of variances is smallest so far, so
/// every sub-space gets a similar share of the information. Rows of the result are the axes.
/// `poll` is asked between chunks of rows; its error stops the work.
#[cfg(test)]
pub(crate) fn eigen_allocation(x: &[f32], dp: usize, nsub: usize, poll: Poll) -> Result<Vec<f32>> {
    Ok(eigen_allocation_of(cross(x, x, dp, poll)?, nsub))
}

/// `eigen_allocation` of the rows whose `X^T X` is `c`.
///
/// A dimension on which every row is zero (padding, or one constant at zero) is an axis of
/// its own, with variance zero: it is kept as that exact axis, dealt last, and the solver
/// sees only the other dimensions. So the rotation's rows for padding are zero on every real
/// dimension, and a query's rotation can pass them over (`index::tables`).
pub(crate) fn eigen_allocation_of(c: Cross, nsub: usize) -> Vec<f32> {
    let dp = c.dp;
    let c = c.done();
    // Every dimension is one or the other (a NaN diagonal is dead), so all are dealt.
    let (live, dead): (Vec<usize>, Vec<usize>) = (0..dp).partition(|&i| c[(i, i)] > 0.0);
    let nl = live.len();
    if nl == 0 {
        return identity(dp);
    }
    let solved = Mat::<f64>::from_fn(nl, nl, |i, j| c[(live[i], live[j])]);
    drop(c);
    let Ok(evd) = solved.self_adjoint_eigen(faer::Side::Lower) else {
        return identity(dp);
    };
    let (u, s) = (evd.U(), evd.S().column_vector());
    // The axes largest variance first: the solver's (its values come in nondecreasing
    // order), then the dead dimensions' at zero.
    let order = (0..nl)
        .rev()
        .map(|e| (s[e], Axis::Solved(e)))
        .chain(dead.into_iter().map(|i| (0.0, Axis::Dead(i))));
    let dsub = dp / nsub;
    let floor = s[nl - 1].max(0.0) * 1e-9 + f64::MIN_POSITIVE;
    let mut log_prod = vec![0f64; nsub];
    let mut filled = vec![0usize; nsub];
    let mut out = vec![0f32; dp * dp];
    for (value, axis) in order {
        let b = (0..nsub)
            .filter(|&b| filled[b] < dsub)
            .min_by(|&a, &b| log_prod[a].total_cmp(&log_prod[b]).then(a.cmp(&b)))
            .expect("dp = nsub * dsub slots");
        let row = &mut out[(b * dsub + filled[b]) * dp..][..dp];
        filled[b] += 1;
        log_prod[b] += value.max(floor).ln();
        match axis {
            Axis::Solved(e) => {
                for (t, &at) in live.iter().enumerate() {
                    row[at] = u[(t, e)] as f32;
                }
            }
            Axis::Dead(i) => row[i] = 1.0,
        }
    }
    out
}

/// An axis `eigen_allocation_of` deals: the solver's eigenvector e, or dimension i's own.
enum Axis {
    Solved(usize),
    Dead(usize),
}

/// The orthogonal R minimising `sum |R x_i - y_i|^2` (orthogonal Procrustes): with
/// `X^T Y = U S V^T`, `R = V U^T`. `poll` as in `eigen_allocation`.
pub(crate) fn procrustes(x: &[f32], y: &[f32], dp: usize, poll: Poll) -> Result<Vec<f32>> {
    let Ok(svd) = cross(x, y, dp, poll)?.done().svd() else {
        return Ok(identity(dp));
    };
    let (u, v) = (svd.U(), svd.V());
    let mut out = vec![0f32; dp * dp];
    for i in 0..dp {
        for j in 0..dp {
            let mut s = 0f64;
            for t in 0..dp {
                s += v[(i, t)] * u[(j, t)];
            }
            out[i * dp + j] = s as f32;
        }
    }
    Ok(out)
}

pub(crate) fn identity(dp: usize) -> Vec<f32> {
    let mut out = vec![0f32; dp * dp];
    for i in 0..dp {
        out[i * dp + i] = 1.0;
    }
    out
}

pub(crate) fn transpose(r: &[f32], dp: usize) -> Vec<f32> {
    let mut t = vec![0f32; dp * dp];
    for i in 0..dp {
        for j in 0..dp {
            t[j * dp + i] = r[i * dp + j];
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::layout::rotate;

    fn gram(r: &[f32], dp: usize) -> Vec<f32> {
        let mut g = vec![0f32; dp * dp];
        crate::linalg::dot_block(r, r, dp, &mut g);
        g
    }

    fn assert_orthogonal(r: &[f32], dp: usize) {
        let g = gram(r, dp);
        for i in 0..dp {
            for j in 0..dp {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!(
                    (g[i * dp + j] - want).abs() < 1e-5,
                    "R R^T [{i},{j}] = {}",
                    g[i * dp + j]
                );
            }
        }
    }

    #[test]
    fn random_rotation_is_orthogonal_and_seeded() {
        let dp = 24;
        let r = random_orthogonal(dp, 5);
        assert_orthogonal(&r, dp);
        assert_ne!(r, identity(dp));
        assert_eq!(r, random_orthogonal(dp, 5));
        assert_ne!(r, random_orthogonal(dp, 6));
    }

    #[test]
    fn eigen_allocation_balances_variance_across_sub_spaces() {
        // Axis variances 4^7 .. 4^0 hidden behind a rotation: in the original order the
        // two halves' variance products differ by 4^16; allocated, they should be close.
        let (dp, nsub, n) = (8, 2, 4000);
        let mut x = crate::synth::gaussian(n, dp, 11);
        for row in x.chunks_mut(dp) {
            for (t, v) in row.iter_mut().enumerate() {
                *v *= 2f32.powi(7 - t as i32);
            }
        }
        let x = rotate(&random_orthogonal(dp, 3), &x, dp);
        let r = eigen_allocation(&x, dp, nsub, &|| Ok(())).unwrap();
        assert_orthogonal(&r, dp);
        let y = rotate(&r, &x, dp);
        let log_prod = |b: usize| -> f64 {
            (b * dp / nsub..(b + 1) * dp / nsub)
                .map(|t| {
                    (y.chunks(dp).map(|row| (row[t] as f64).powi(2)).sum::<f64>() / n as f64).ln()
                })
                .sum()
        };
        let gap = (log_prod(0) - log_prod(1)).abs();
        assert!(gap < 4f64.ln() * 2.0, "log-product gap {gap}");
        assert_eq!(r, eigen_allocation(&x, dp, nsub, &|| Ok(())).unwrap());
    }

    #[test]
    fn dimensions_zero_in_every_row_stay_axes() {
        // 12 dimensions, of which 2, 7 and 11 are zero everywhere (padding, or a pixel
        // never lit), among others of varied spread mixed by a rotation.
        let (dp, nsub, n, dead) = (12, 4, 3000, [2usize, 7, 11]);
        let live: Vec<usize> = (0..dp).filter(|t| !dead.contains(t)).collect();
        let x = crate::synth::gaussian(n, live.len(), 5);
        let x = rotate(&random_orthogonal(live.len(), 8), &x, live.len());
        let mut padded = vec![0f32; n * dp];
        for (row, v) in padded.chunks_exact_mut(dp).zip(x.chunks_exact(live.len())) {
            for (&t, &v) in live.iter().zip(v) {
                row[t] = v * (1 + t) as f32;
            }
        }
        let r = eigen_allocation(&padded, dp, nsub, &|| Ok(())).unwrap();
        assert_orthogonal(&r, dp);
        // Each dead dimension is one row's exact axis; every other row is zero on it.
        for &t in &dead {
            let rows: Vec<usize> = (0..dp).filter(|&i| r[i * dp + t] != 0.0).collect();
            assert_eq!(rows.len(), 1, "dimension {t}");
            let axis: Vec<f32> = (0..dp).map(|c| if c == t { 1.0 } else { 0.0 }).collect();
            assert_eq!(
                r[rows[0] * dp..(rows[0] + 1) * dp],
                axis[..],
                "dimension {t}"
            );
        }
    }

    #[test]
    fn procrustes_recovers_a_known_rotation() {
        let dp = 8;
        let truth = random_orthogonal(dp, 9);
        let x = crate::synth::gaussian(500, dp, 3);
        let y = rotate(&truth, &x, dp);
        let r = procrustes(&x, &y, dp, &|| Ok(())).unwrap();
        for (a, b) in r.iter().zip(&truth) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        // Inverse through the transpose.
        let back = rotate(&transpose(&r, dp), &y, dp);
        for (a, b) in back.iter().zip(&x) {
            assert!((a - b).abs() < 1e-3);
        }
    }
}
