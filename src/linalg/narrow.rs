//! The nearest centroid of narrow rows (PQ sub-spaces: a few to a few dozen dimensions),
//! fused: a few rows are scored against 16 centroids at a time in registers, and only each
//! row's best is kept. A GEMM over so few columns spends its time packing operands and writing
//! a score matrix that is read once.
//!
//! Scores are `offset[j] + sum_t x_t * (-2 c_jt)`, accumulated with fused multiply-adds in `t`
//! order, lane by lane: the SIMD builds and the portable reference give the same bits.

/// Centroids per group: one 512-bit register, two 256-bit ones.
const LANES: usize = 16;
/// Rows scored together: each centroid value loaded serves all of them.
const ROWS: usize = 8;
/// Rows at most this wide go through [`Narrow`]; wider ones through the GEMM, which wins once
/// its packing is paid over enough columns.
pub(crate) const MAX_D: usize = 32;

/// Whether rows of `d` columns take the fused kernel: where this CPU has a SIMD build of it
/// (elsewhere the portable kernel is slower than the GEMM).
pub(crate) fn fits(d: usize) -> bool {
    (1..=MAX_D).contains(&d) && simd() != Simd::None
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Simd {
    None,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

fn simd() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") {
            return Simd::Avx512;
        }
        if has!("avx2") && has!("fma") {
            return Simd::Avx2;
        }
    }
    Simd::None
}

/// Bytes of [`Narrow`]'s copy of `m` centroids of `d` values.
pub(crate) fn layout_bytes(m: usize, d: usize) -> usize {
    m.div_ceil(LANES) * LANES * (d + 1) * 4
}

/// Centroids laid out for the kernel.
pub(crate) struct Narrow {
    d: usize,
    /// Per group of `LANES` centroids: `d` rows of `LANES` values, each `-2 c_jt` (exact).
    ct: Vec<f32>,
    /// Per group: its centroids' offsets; +inf past the last centroid, so none is chosen.
    off: Vec<f32>,
}

impl Narrow {
    /// `c`: m x d centroids (`fits(d)`), `offset`: m values added to their scores.
    pub(crate) fn new(c: &[f32], offset: &[f32], d: usize) -> Narrow {
        debug_assert!((1..=MAX_D).contains(&d));
        let m = offset.len();
        let groups = m.div_ceil(LANES);
        let mut ct = vec![0f32; groups * d * LANES];
        let mut off = vec![f32::INFINITY; groups * LANES];
        for (j, row) in c.chunks_exact(d).take(m).enumerate() {
            let (g, l) = (j / LANES, j % LANES);
            for (t, &v) in row.iter().enumerate() {
                ct[(g * d + t) * LANES + l] = -2.0 * v;
            }
        }
        off[..m].copy_from_slice(offset);
        Narrow { d, ct, off }
    }

    /// For each row of `x` (`at.len()` rows of d), the index of its smallest score (the
    /// first on ties; 0 when none is below +inf) into `at`, and that score into `score`.
    pub(crate) fn nearest(&self, x: &[f32], at: &mut [u32], score: &mut [f32]) {
        debug_assert_eq!(x.len(), at.len() * self.d);
        debug_assert_eq!(at.len(), score.len());
        match simd() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F, checked by `simd`.
            Simd::Avx512 => unsafe { x86::nearest512(self, x, at, score) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA, checked by `simd`.
            Simd::Avx2 => unsafe { x86::nearest256(self, x, at, score) },
            Simd::None => nearest_portable(self, x, at, score),
        }
    }

    /// The groups of centroids: their `-2 c` rows and their offsets.
    #[inline(always)]
    fn groups(&self) -> impl Iterator<Item = (&[f32], &[f32])> {
        self.ct
            .chunks_exact(self.d * LANES)
            .zip(self.off.chunks_exact(LANES))
    }
}

/// The lanes' best (score, index) pairs merged: the smallest score, then the smallest index.
#[inline(always)]
fn merge(best: &[f32; LANES], idx: &[u32; LANES]) -> (u32, f32) {
    let (mut b, mut j) = (f32::INFINITY, 0u32);
    for l in 0..LANES {
        if best[l] < b || (best[l] == b && idx[l] < j) {
            (b, j) = (best[l], idx[l]);
        }
    }
    (j, b)
}

/// The kernel in portable code, a row at a time: the reference the SIMD builds are tested
/// against. Per lane, the best score so far and where it was (groups in order, strict
/// improvement, so a lane keeps its first minimum); then the lanes are merged.
fn nearest_portable(n: &Narrow, x: &[f32], at: &mut [u32], score: &mut [f32]) {
    for ((row, a), s) in x.chunks_exact(n.d).zip(at.iter_mut()).zip(score.iter_mut()) {
        let mut best = [f32::INFINITY; LANES];
        let mut idx = [0u32; LANES];
        for (g, (ct, off)) in n.groups().enumerate() {
            for l in 0..LANES {
                let mut acc = off[l];
                for (t, &v) in row.iter().enumerate() {
                    acc = v.mul_add(ct[t * LANES + l], acc);
                }
                if acc < best[l] {
                    (best[l], idx[l]) = (acc, (g * LANES + l) as u32);
                }
            }
        }
        (*a, *s) = merge(&best, &idx);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{merge, Narrow, LANES, MAX_D, ROWS};
    use std::arch::x86_64::*;

    /// Rows of `d` values with their outputs: in blocks of `ROWS`, then the rest one by one.
    #[allow(clippy::type_complexity)]
    #[inline(always)]
    fn split<'a>(
        d: usize,
        x: &'a [f32],
        at: &'a mut [u32],
        score: &'a mut [f32],
    ) -> (
        impl Iterator<Item = (&'a [f32], &'a mut [u32], &'a mut [f32])>,
        impl Iterator<Item = (&'a [f32], &'a mut [u32], &'a mut [f32])>,
    ) {
        let full = at.len() / ROWS * ROWS;
        let (xa, xb) = x.split_at(full * d);
        let (aa, ab) = at.split_at_mut(full);
        let (sa, sb) = score.split_at_mut(full);
        let whole = xa
            .chunks_exact(ROWS * d)
            .zip(aa.chunks_exact_mut(ROWS))
            .zip(sa.chunks_exact_mut(ROWS))
            .map(|((x, a), s)| (x, a, s));
        let rest = xb
            .chunks_exact(d)
            .zip(ab.chunks_exact_mut(1))
            .zip(sb.chunks_exact_mut(1))
            .map(|((x, a), s)| (x, a, s));
        (whole, rest)
    }

    /// `P` rows of `d` values, column by column: a column's `P` values side by side.
    #[inline(always)]
    fn transpose<const P: usize>(x: &[f32], d: usize) -> [[f32; P]; MAX_D] {
        let mut xs = [[0f32; P]; MAX_D];
        for (p, row) in x.chunks_exact(d).take(P).enumerate() {
            for (t, &v) in row.iter().enumerate() {
                xs[t][p] = v;
            }
        }
        xs
    }

    /// `nearest_portable` with one 512-bit register per row and group, `ROWS` rows at once.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn nearest512(n: &Narrow, x: &[f32], at: &mut [u32], score: &mut [f32]) {
        let (whole, rest) = split(n.d, x, at, score);
        for (x, a, s) in whole {
            block512::<ROWS>(n, x, a, s);
        }
        for (x, a, s) in rest {
            block512::<1>(n, x, a, s);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn block512<const P: usize>(n: &Narrow, x: &[f32], at: &mut [u32], score: &mut [f32]) {
        let d = n.d;
        let mut best = [_mm512_set1_ps(f32::INFINITY); P];
        let mut idx = [_mm512_setzero_si512(); P];
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let xs = transpose::<P>(x, d);
        for (g, (ct, off)) in n.groups().enumerate() {
            // SAFETY (loads): offsets and each row of `ct` hold LANES values.
            let mut acc = [unsafe { _mm512_loadu_ps(off.as_ptr()) }; P];
            for (c, xv) in ct.chunks_exact(LANES).zip(&xs[..d]) {
                let c = unsafe { _mm512_loadu_ps(c.as_ptr()) };
                for p in 0..P {
                    acc[p] = _mm512_fmadd_ps(_mm512_set1_ps(xv[p]), c, acc[p]);
                }
            }
            let at_g = _mm512_add_epi32(lanes, _mm512_set1_epi32((g * LANES) as i32));
            for p in 0..P {
                let better = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(acc[p], best[p]);
                best[p] = _mm512_mask_mov_ps(best[p], better, acc[p]);
                idx[p] = _mm512_mask_mov_epi32(idx[p], better, at_g);
            }
        }
        // `merge` in registers: the smallest score, then the smallest index holding it (all
        // lanes at +inf hold index 0).
        for p in 0..P {
            let b = _mm512_reduce_min_ps(best[p]);
            let holds = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(best[p], _mm512_set1_ps(b));
            at[p] = _mm512_mask_reduce_min_epu32(holds, idx[p]);
            score[p] = b;
        }
    }

    /// `nearest_portable` with two 256-bit registers per row and group, `ROWS` rows at once.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn nearest256(n: &Narrow, x: &[f32], at: &mut [u32], score: &mut [f32]) {
        let (whole, rest) = split(n.d, x, at, score);
        for (x, a, s) in whole {
            block256::<ROWS>(n, x, a, s);
        }
        for (x, a, s) in rest {
            block256::<1>(n, x, a, s);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn block256<const P: usize>(n: &Narrow, x: &[f32], at: &mut [u32], score: &mut [f32]) {
        let d = n.d;
        let mut best = [[_mm256_set1_ps(f32::INFINITY); 2]; P];
        let mut idx = [[_mm256_setzero_si256(); 2]; P];
        let lanes = [
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15),
        ];
        // SAFETY (loads): `v` holds LANES = 16 values, two registers' worth.
        let load = |v: &[f32]| unsafe {
            [
                _mm256_loadu_ps(v.as_ptr()),
                _mm256_loadu_ps(v.as_ptr().add(8)),
            ]
        };
        let xs = transpose::<P>(x, d);
        for (g, (ct, off)) in n.groups().enumerate() {
            let mut acc = [load(off); P];
            for (c, xv) in ct.chunks_exact(LANES).zip(&xs[..d]) {
                let c = load(c);
                for p in 0..P {
                    let v = _mm256_set1_ps(xv[p]);
                    for h in 0..2 {
                        acc[p][h] = _mm256_fmadd_ps(v, c[h], acc[p][h]);
                    }
                }
            }
            let base = _mm256_set1_epi32((g * LANES) as i32);
            for p in 0..P {
                for h in 0..2 {
                    let better = _mm256_cmp_ps::<_CMP_LT_OQ>(acc[p][h], best[p][h]);
                    best[p][h] = _mm256_blendv_ps(best[p][h], acc[p][h], better);
                    let at_g = _mm256_add_epi32(lanes[h], base);
                    idx[p][h] = _mm256_blendv_epi8(idx[p][h], at_g, _mm256_castps_si256(better));
                }
            }
        }
        for p in 0..P {
            let (mut b, mut j) = ([0f32; LANES], [0u32; LANES]);
            // SAFETY: both arrays hold two registers' worth.
            unsafe {
                _mm256_storeu_ps(b.as_mut_ptr(), best[p][0]);
                _mm256_storeu_ps(b.as_mut_ptr().add(8), best[p][1]);
                _mm256_storeu_si256(j.as_mut_ptr().cast(), idx[p][0]);
                _mm256_storeu_si256(j.as_mut_ptr().add(8).cast(), idx[p][1]);
            }
            (at[p], score[p]) = merge(&b, &j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values on `levels` steps: few steps make ties.
    fn values(seed: u64, n: usize, levels: u64) -> Vec<f32> {
        let mut rng = crate::rng::Rng::new(seed);
        (0..n)
            .map(|_| (rng.next_u64() % levels) as f32 / levels as f32 - 0.4)
            .collect()
    }

    /// Every build this CPU runs against the portable kernel, and that kernel against the
    /// first minimum of each row's scores computed one by one.
    fn check(c: &[f32], x: &[f32], d: usize, what: &str) {
        let (m, n) = (c.len() / d, x.len() / d);
        let off: Vec<f32> = c.chunks_exact(d).map(|r| super::super::dot(r, r)).collect();
        let nar = Narrow::new(c, &off, d);
        let (mut ra, mut rs) = (vec![0u32; n], vec![0f32; n]);
        nearest_portable(&nar, x, &mut ra, &mut rs);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        #[cfg(target_arch = "x86_64")]
        for build in [Simd::Avx2, Simd::Avx512] {
            use std::arch::is_x86_feature_detected as has;
            let (mut a, mut s) = (vec![0u32; n], vec![0f32; n]);
            match build {
                // SAFETY: each build runs only where the CPU has its features.
                Simd::Avx2 if has!("avx2") && has!("fma") => unsafe {
                    x86::nearest256(&nar, x, &mut a, &mut s)
                },
                Simd::Avx512 if has!("avx512f") => unsafe {
                    x86::nearest512(&nar, x, &mut a, &mut s)
                },
                _ => continue,
            }
            assert_eq!(a, ra, "{what} {build:?}");
            assert_eq!(bits(&s), bits(&rs), "{what} {build:?}");
        }
        for (i, row) in x.chunks_exact(d).enumerate() {
            let sc: Vec<f32> = (0..m)
                .map(|j| {
                    let cj = &c[j * d..(j + 1) * d];
                    row.iter()
                        .zip(cj)
                        .fold(off[j], |acc, (&xv, &cv)| xv.mul_add(-2.0 * cv, acc))
                })
                .collect();
            assert_eq!(ra[i] as usize, super::super::argmin(&sc), "{what} row {i}");
            assert_eq!(
                rs[i].to_bits(),
                sc[ra[i] as usize].to_bits(),
                "{what} row {i}"
            );
        }
    }

    #[test]
    fn the_simd_builds_equal_the_portable_kernel_bit_for_bit() {
        for (d, m, n, levels) in [
            (1usize, 3usize, 7usize, 5u64),
            (4, 256, 301, 1 << 20),
            (6, 16, 100, 1 << 20),
            (12, 256, 257, 7),
            (13, 200, 64, 1 << 20),
            (32, 40, 33, 1 << 20),
        ] {
            let c = values(d as u64, m * d, levels);
            let x = values(99 + n as u64, n * d, levels);
            check(&c, &x, d, &format!("d {d} m {m} levels {levels}"));
        }
    }

    #[test]
    fn the_simd_builds_equal_the_portable_kernel_on_real_data() {
        // GloVe demo vectors cut into sub-spaces of several widths; centroids are rows of
        // the data itself (so exact ties occur where rows repeat).
        // .fvecs: each row is its dimension (i32) and its values.
        let raw: &[u8] = include_bytes!("../../tests/data/glove-demo/base.fvecs");
        let dim = i32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
        let data: Vec<f32> = raw
            .chunks_exact(4 * (dim + 1))
            .flat_map(|r| r[4..].chunks_exact(4))
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let n = (data.len() / dim).min(1000);
        for d in [2usize, 5, 10, 25] {
            for j in 0..dim / d {
                let sub: Vec<f32> = data[..n * dim]
                    .chunks_exact(dim)
                    .flat_map(|r| r[j * d..(j + 1) * d].to_vec())
                    .collect();
                let c = &sub[..256.min(n) * d];
                check(c, &sub, d, &format!("d {d} sub-space {j}"));
            }
        }
    }
}
