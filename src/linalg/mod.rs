//! Dense kernels shared by training, encoding and search on the CPU: GEMM through faer,
//! blocked so that every row block is computed the same way whatever the thread count.

use faer::{linalg::matmul::matmul, Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

mod narrow;
mod rows;
use narrow::Narrow;
pub(crate) use rows::unit_row;
pub use rows::{Poll, RowsView};

/// Whether the nearest of `d`-dimensional rows is found by the fused kernel rather than a
/// GEMM (rows of at most 32 values, on CPUs with AVX2 and FMA or AVX-512).
pub(crate) fn fused_nearest(d: usize) -> bool {
    narrow::fits(d)
}

/// What finding the nearest of `m` centroids of `d` values holds, in bytes: per thread, a
/// block of scores (GEMM) or nothing (fused kernel), and once, the centroids' copy laid out
/// for the fused kernel (or nothing).
pub(crate) fn nearest_bytes(m: usize, d: usize) -> (usize, usize) {
    if narrow::fits(d) {
        (0, narrow::layout_bytes(m, d))
    } else {
        (BLOCK * m * 4, 0)
    }
}

/// Rows per block: the unit of parallel work. Fixed, so results never depend on threads.
pub(crate) const BLOCK: usize = 256;

/// `out (r x m) = x (r x d) * c (m x d)^T`, row-major, single-threaded (callers parallelize).
pub(crate) fn dot_block(x: &[f32], c: &[f32], d: usize, out: &mut [f32]) {
    let r = x.len() / d;
    let m = c.len() / d;
    debug_assert_eq!(out.len(), r * m);
    if r == 0 || m == 0 {
        return;
    }
    if d == 0 {
        out.fill(0.0);
        return;
    }
    let xa = MatRef::from_row_major_slice(x, r, d);
    let ca = MatRef::from_row_major_slice(c, m, d);
    let o = MatMut::from_row_major_slice_mut(out, r, m);
    matmul(o, Accum::Replace, xa, ca.transpose(), 1.0f32, Par::Seq);
}

/// An upper bound on the spectral norm of `a` (rows of `w` values): the square root of the
/// largest absolute row sum of its Gram matrix on the smaller side (Gershgorin), each product
/// widened by its f32 rounding. Near the norm for matrices whose rows are near orthogonal (a
/// rotation, or the rounding errors of one), where the Frobenius norm is far above it.
pub(crate) fn spectral_norm_bound(a: &[f32], w: usize) -> f64 {
    let n = a.len() / w.max(1);
    if n == 0 || w == 0 {
        return 0.0;
    }
    // The Gram matrix of the smaller side: rows of `a`, or of its transpose.
    let (g, n, w) = if n <= w {
        (a.to_vec(), n, w)
    } else {
        let mut t = vec![0f32; n * w];
        for (i, row) in a.chunks_exact(w).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                t[j * n + i] = v;
            }
        }
        (t, w, n)
    };
    let norms: Vec<f64> = g
        .chunks_exact(w)
        .map(|r| {
            r.iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    // An f32 sum of w products is within about w 2^-24 |x| |y| of the exact one; twice that.
    let rounding = 2.0 * w as f64 * f64::from(f32::EPSILON) / 2.0;
    const ROWS: usize = 64;
    let mut most = 0f64;
    let mut block = vec![0f32; ROWS * n];
    for (b, rows) in g.chunks(ROWS * w).enumerate() {
        let r = rows.len() / w;
        dot_block(rows, &g, w, &mut block[..r * n]);
        for (i, sums) in block[..r * n].chunks_exact(n).enumerate() {
            let ni = norms[b * ROWS + i];
            let row: f64 = (sums.iter().zip(&norms))
                .map(|(&s, &nj)| f64::from(s).abs() + rounding * ni * nj)
                .sum();
            most = most.max(row);
        }
    }
    most.sqrt() * (1.0 + 1e-6)
}

/// Squared norm of each row.
pub(crate) fn row_norms(x: &[f32], d: usize) -> Vec<f32> {
    if d == 0 {
        return vec![0.0; 0];
    }
    x.par_chunks(d).map(|r| dot(r, r)).collect()
}

/// `sum_lanes`' sums of products: with AVX where the CPU has it (the compiler keeps the eight
/// partial sums in pairs of 128-bit halves otherwise), the same float operations in the same
/// order, so the same bits in every build.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: AVX checked.
        return unsafe { dot_avx(a, b) };
    }
    sum_lanes(a, b, |x, y| x * y)
}

/// # Safety
/// The CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn dot_avx(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let whole = n / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 <= n, within both slices; unaligned loads.
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            )
        };
        // A multiply, then an add: no fused rounding, as in `sum_lanes`.
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, y));
    }
    let mut s = 0f32;
    for (x, y) in a[whole..n].iter().zip(&b[whole..n]) {
        s += x * y;
    }
    let mut t = [0f32; 4];
    let halves = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    // SAFETY: four floats into `t`.
    unsafe { _mm_storeu_ps(t.as_mut_ptr(), halves) };
    t[0] + t[1] + t[2] + t[3] + s
}

#[inline]
pub(crate) fn l2_sq(a: &[f32], b: &[f32]) -> f32 {
    sum_lanes(a, b, |x, y| (x - y) * (x - y))
}

/// The sum of `term` over paired values: eight partial sums so the compiler vectorizes
/// without fast-math, merged in a fixed order, then the tail.
#[inline(always)]
fn sum_lanes(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += term(x[i], y[i]);
        }
    }
    let mut s = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += term(*x, *y);
    }
    (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]) + s
}

/// `out (r x m) = offset[j] - 2 x (r x d) * c (m x d)^T`: the GEMM accumulates onto rows
/// prefilled with `offset`, so distances need no second arithmetic pass.
pub(crate) fn scores_block(x: &[f32], c: &[f32], offset: &[f32], d: usize, out: &mut [f32]) {
    let r = x.len() / d;
    let m = offset.len();
    for row in out.chunks_exact_mut(m) {
        row.copy_from_slice(offset);
    }
    if r == 0 || m == 0 || d == 0 {
        return;
    }
    let xa = MatRef::from_row_major_slice(x, r, d);
    let ca = MatRef::from_row_major_slice(c, m, d);
    let o = MatMut::from_row_major_slice_mut(out, r, m);
    matmul(o, Accum::Add, xa, ca.transpose(), -2.0f32, Par::Seq);
}

/// For each row of `x`, the index of the nearest row of `c` by `|x|^2 - 2 x.c + |c|^2 + bias[c]`
/// and the squared L2 distance (bias excluded, clamped at 0). Ties go to the smaller index.
/// `poll` is asked before each block of rows; its error stops the work and is returned.
pub(crate) fn nearest(
    x: RowsView,
    xn: &[f32],
    c: &[f32],
    cn: &[f32],
    bias: Option<&[f32]>,
    d: usize,
    assign: &mut [u32],
    dist: &mut [f32],
    poll: Poll,
) -> crate::error::Result<()> {
    let m = cn.len();
    let offset: Vec<f32> = match bias {
        Some(b) => cn.iter().zip(b).map(|(a, b)| a + b).collect(),
        None => cn.to_vec(),
    };
    let narrow = narrow::fits(d).then(|| Narrow::new(c, &offset, d));
    assign
        .par_chunks_mut(BLOCK)
        .zip(dist.par_chunks_mut(BLOCK))
        .enumerate()
        .try_for_each_init(
            || (Vec::new(), Vec::new()),
            |(buf, rows), (b, (ab, db))| {
                poll()?;
                let r = ab.len();
                let xb = x.block(b * BLOCK, r, rows);
                let xn = &xn[b * BLOCK..b * BLOCK + r];
                match &narrow {
                    Some(nar) => {
                        nar.nearest(xb, ab, db);
                        finish_rows(ab, bias, xn, db);
                    }
                    None => {
                        buf.resize(r * m, 0.0);
                        scores_block(xb, c, &offset, d, buf);
                        pick_rows(buf, m, bias, xn, ab, db);
                    }
                }
                Ok(())
            },
        )
}

/// The squared distances of rows whose best scores (`offset - 2 x.c`, bias included) are in
/// `d`, in place: the bias taken out, the row's norm added, clamped at 0.
#[inline(always)]
fn finish_rows(a: &[u32], bias: Option<&[f32]>, xn: &[f32], d: &mut [f32]) {
    for ((v, &j), &n) in d.iter_mut().zip(a).zip(xn) {
        let without_bias = match bias {
            Some(bv) => *v - bv[j as usize],
            None => *v,
        };
        *v = (n + without_bias).max(0.0);
    }
}

/// Centroids ready for many blocks of `nearest` rows: their squared norms computed once.
/// `assign` gives what [`nearest`] gives for the same rows without a bias, to the bit.
pub(crate) struct Centroids<'a> {
    c: &'a [f32],
    cn: Vec<f32>,
    d: usize,
    narrow: Option<Narrow>,
}

/// Buffers one thread reuses across `Centroids::assign` calls.
#[derive(Default)]
pub(crate) struct AssignScratch {
    scores: Vec<f32>,
    norms: Vec<f32>,
    dist: Vec<f32>,
}

impl<'a> Centroids<'a> {
    pub(crate) fn new(c: &'a [f32], d: usize) -> Self {
        let cn: Vec<f32> = c.chunks_exact(d.max(1)).map(|r| dot(r, r)).collect();
        let narrow = narrow::fits(d).then(|| Narrow::new(c, &cn, d));
        Centroids { c, cn, d, narrow }
    }
    /// The nearest centroid of each row of `x` (at most `BLOCK` rows), one thread.
    pub(crate) fn assign(&self, x: &[f32], s: &mut AssignScratch, a: &mut [u32]) {
        let r = a.len();
        if let Some(nar) = &self.narrow {
            // Only the choice is wanted: no norms, no distances.
            s.dist.resize(r, 0.0);
            return nar.nearest(x, a, &mut s.dist);
        }
        s.norms.clear();
        s.norms
            .extend(x.chunks_exact(self.d.max(1)).map(|row| dot(row, row)));
        s.scores.resize(r * self.cn.len(), 0.0);
        s.dist.resize(r, 0.0);
        scores_block(x, self.c, &self.cn, self.d, &mut s.scores);
        pick_rows(&s.scores, self.cn.len(), None, &s.norms, a, &mut s.dist);
    }
}

/// Squared norm of each row of `x`, read a block at a time.
pub(crate) fn view_norms(x: RowsView) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    out.par_chunks_mut(BLOCK)
        .enumerate()
        .for_each_init(Vec::new, |buf, (b, o)| {
            let xb = x.block(b * BLOCK, o.len(), buf);
            for (v, r) in o.iter_mut().zip(xb.chunks_exact(x.d.max(1))) {
                *v = dot(r, r);
            }
        });
    out
}

/// Per row of a score block: the nearest column and its squared distance.
fn pick_rows(s: &[f32], m: usize, bias: Option<&[f32]>, xn: &[f32], a: &mut [u32], d: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { pick_rows_avx2(s, m, bias, xn, a, d) };
    }
    pick_rows_any(s, m, bias, xn, a, d)
}

/// The same code compiled for AVX2: eight lanes in one register. Only comparisons and one
/// subtraction per row, so results equal the baseline build's exactly.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pick_rows_avx2(
    s: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    xn: &[f32],
    a: &mut [u32],
    d: &mut [f32],
) {
    pick_rows_any(s, m, bias, xn, a, d)
}

#[inline(always)]
fn pick_rows_any(
    s: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    xn: &[f32],
    a: &mut [u32],
    d: &mut [f32],
) {
    for (i, row) in s.chunks_exact(m).enumerate() {
        let j = argmin(row);
        a[i] = j as u32;
        d[i] = row[j];
    }
    finish_rows(a, bias, xn, d);
}

/// Index of the smallest value (the first one on ties), in one pass: eight lanes each keep
/// their minimum and where it was, then the lanes are merged by (value, index).
#[inline(always)]
pub(crate) fn argmin(row: &[f32]) -> usize {
    let mut val = [f32::INFINITY; 8];
    let mut idx = [0u32; 8];
    let mut chunks = row.chunks_exact(8);
    let mut cur = [0u32, 1, 2, 3, 4, 5, 6, 7];
    for ch in &mut chunks {
        for l in 0..8 {
            let better = ch[l] < val[l];
            val[l] = if better { ch[l] } else { val[l] };
            idx[l] = if better { cur[l] } else { idx[l] };
            cur[l] += 8;
        }
    }
    let base = cur[0];
    let (mut best, mut at) = (f32::INFINITY, 0u32);
    for l in 0..8 {
        if val[l] < best || (val[l] == best && idx[l] < at) {
            (best, at) = (val[l], idx[l]);
        }
    }
    for (o, &v) in chunks.remainder().iter().enumerate() {
        if v < best {
            (best, at) = (v, base + o as u32);
        }
    }
    at as usize
}

/// Up to this many best columns are kept by insertion rather than selection.
const SMALL_K: usize = 64;

/// `v` as an integer in `f32::total_cmp`'s order.
#[inline(always)]
pub(crate) fn order_key(v: f32) -> i32 {
    let b = v.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// The `p` best columns of each row of `scores` (smaller is better), best first: with
/// AVX-512 where the CPU has it (sixteen keys in one compare), the same integer operations.
pub(crate) fn smallest_k(row: &[f32], p: usize, out: &mut Vec<u32>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F checked.
        return unsafe { smallest_k_avx512(row, p, out) };
    }
    smallest_k_any(row, p, out)
}

/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn smallest_k_avx512(row: &[f32], p: usize, out: &mut Vec<u32>) {
    smallest_k_any(row, p, out)
}

#[inline(always)]
fn smallest_k_any(row: &[f32], p: usize, out: &mut Vec<u32>) {
    out.clear();
    let p = p.min(row.len());
    if p == 0 {
        return;
    }
    if p <= SMALL_K {
        // A sorted run of the best so far; a column gets in when its key is under `limit`.
        // The chunks' minima are p distinct columns, so the p-th smallest of them bounds
        // the p-th smallest column: `limit` starts just above it, and once the run is full
        // it is the run's last (a later column loses a tie). A chunk with nothing under
        // `limit` is passed over in a few vector compares: nearly all are.
        const CHUNK: usize = 16;
        let mut limit = i64::MAX;
        if row.len().div_ceil(CHUNK) >= p {
            // Borrow `out` for the minima, as keys in unsigned order.
            out.extend(row.chunks(CHUNK).map(|c| {
                let m = c.iter().fold(i32::MAX, |m, &v| m.min(order_key(v)));
                (m as u32) ^ 0x8000_0000
            }));
            let (_, &mut pth, _) = out.select_nth_unstable(p - 1);
            limit = i64::from((pth ^ 0x8000_0000) as i32) + 1;
            out.clear();
        }
        for (c, chunk) in row.chunks(CHUNK).enumerate() {
            // `limit` in 32 bits, so that a chunk is one compare: above every key, it lets
            // all in.
            let (lim, all) = (
                limit.min(i64::from(i32::MAX)) as i32,
                limit > i64::from(i32::MAX),
            );
            if !all
                && !chunk
                    .iter()
                    .fold(false, |any, &v| any | (order_key(v) < lim))
            {
                continue;
            }
            for (j, &v) in (c as u32 * CHUNK as u32..).zip(chunk) {
                let kv = order_key(v);
                if i64::from(kv) >= limit {
                    continue;
                }
                if out.len() == p {
                    out.pop();
                }
                let at = out.partition_point(|&a| (order_key(row[a as usize]), a) < (kv, j));
                out.insert(at, j);
                if out.len() == p {
                    limit = i64::from(order_key(row[out[p - 1] as usize]));
                }
            }
        }
        return;
    }
    let cmp = |a: &u32, b: &u32| row[*a as usize].total_cmp(&row[*b as usize]).then(a.cmp(b));
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    if p < idx.len() {
        idx.select_nth_unstable_by(p - 1, cmp);
        idx.truncate(p);
    }
    idx.sort_unstable_by(cmp);
    out.extend_from_slice(&idx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spectral_norm_bound_is_above_the_norm_and_near_it_for_rotations() {
        // A rotation (a Householder reflection I - 2 v v^T / |v|^2): norm 1, and so the
        // bound, within its rounding margin.
        for dp in [5usize, 64, 130] {
            let v = crate::synth::gaussian(1, dp, 3);
            let vv = dot(&v, &v);
            let r: Vec<f32> = (0..dp * dp)
                .map(|i| f32::from(i / dp == i % dp) - 2.0 * v[i / dp] * v[i % dp] / vv)
                .collect();
            let b = spectral_norm_bound(&r, dp);
            assert!((1.0 - 1e-5..1.01).contains(&b), "rotation {dp}: {b}");
        }
        // Gaussian matrices, wide and tall: the bound is above the norm (from below, by power
        // iteration) and below the Frobenius norm (a mutation dropping the absolute values, or
        // summing the wrong side, leaves one of them).
        for (n, w) in [(40usize, 100usize), (100, 40), (64, 64)] {
            let a = crate::synth::gaussian(n, w, 9);
            let b = spectral_norm_bound(&a, w);
            let mut v = vec![1f64; w];
            let mut norm = 0f64;
            for _ in 0..200 {
                let av: Vec<f64> = a
                    .chunks_exact(w)
                    .map(|r| r.iter().zip(&v).map(|(&x, y)| f64::from(x) * y).sum())
                    .collect();
                let mut atav = vec![0f64; w];
                for (r, s) in a.chunks_exact(w).zip(&av) {
                    for (o, &x) in atav.iter_mut().zip(r) {
                        *o += f64::from(x) * s;
                    }
                }
                let len = atav.iter().map(|x| x * x).sum::<f64>().sqrt();
                norm = len.sqrt();
                v = atav.iter().map(|x| x / len).collect();
            }
            let frob = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
            assert!(norm <= b && b < frob, "{n} x {w}: {norm} <= {b} < {frob}");
        }
    }

    #[test]
    fn argmin_is_the_first_minimum() {
        let mut rng = crate::rng::Rng::new(7);
        for len in [1usize, 3, 8, 9, 17, 64, 100, 257] {
            for _ in 0..50 {
                // Few distinct values, so ties across lanes and in the tail are common.
                let row: Vec<f32> = (0..len).map(|_| (rng.next_u64() % 5) as f32).collect();
                let want = row
                    .iter()
                    .enumerate()
                    .fold(0, |b, (i, &v)| if v < row[b] { i } else { b });
                assert_eq!(argmin(&row), want, "{row:?}");
            }
        }
    }

    #[test]
    fn dot_equals_the_portable_sums_bit_for_bit() {
        let mut rng = crate::rng::Rng::new(4);
        for n in [0usize, 1, 7, 8, 9, 50, 384, 785] {
            let a: Vec<f32> = (0..n).map(|_| rng.normal() as f32 * 3.0).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
            let want = sum_lanes(&a, &b, |x, y| x * y);
            assert_eq!(dot(&a, &b).to_bits(), want.to_bits(), "n {n}");
        }
    }

    #[test]
    fn smallest_k_is_the_sorted_prefix_by_score_then_column() {
        let mut rng = crate::rng::Rng::new(9);
        let mut got = Vec::new();
        for len in [1usize, 5, 64, 200, 1024] {
            for p in [1usize, 2, 8, 63, 64, 65, 300, 2000] {
                // Few distinct values (ties) and a NaN now and then, one of them the
                // largest key there is.
                let row: Vec<f32> = (0..len)
                    .map(|_| match rng.next_u64() % 10 {
                        9 => f32::from_bits(0x7fff_ffff),
                        8 => f32::NAN,
                        v => v as f32 - 3.0,
                    })
                    .collect();
                let mut want: Vec<u32> = (0..len as u32).collect();
                want.sort_by(|&a, &b| row[a as usize].total_cmp(&row[b as usize]).then(a.cmp(&b)));
                want.truncate(p);
                smallest_k(&row, p, &mut got);
                assert_eq!(got, want, "len {len} p {p}");
            }
        }
        // Whole chunks of the largest key: a chunk is passed over only below the limit.
        let row = vec![f32::from_bits(0x7fff_ffff); 40];
        smallest_k(&row, 3, &mut got);
        assert_eq!(got, [0, 1, 2]);
    }
}
