//! Coarse probing from 8-bit products: every anchor's product with a query taken in 8-bit
//! integers (four times the products of f32 a cycle with AVX-512 VNNI, and a quarter of the
//! anchors' bytes to stream), each bounded by the rounding of the two vectors, then the
//! anchors whose bound could still place them among the `nprobe` nearest scored in full in
//! f32 (a few more than `nprobe`). The probes are those scoring every anchor gives.
//!
//! With `a~ = s_a a8` and `q~ = s_q q8` the rounded vectors, `|<q, a> - <q~, a~>| <=
//! |q - q~| |a| + |q~| |a - a~|` (Cauchy-Schwarz on each half of the difference).
//!
//! The same integers serve a query's rotation (`index::tables`): the rows are then the
//! rotation's, and the products, scaled back to f32, are the rotated query within that bound
//! on each value (`Coarse8::scaled_products`, `Coarse8::error_norm`).

use crate::linalg;

/// Anchors per tile: one 512-bit register of i32 sums.
const TILE: usize = 16;
/// Tiles and queries a kernel step holds at once: 16 accumulators.
const TILES: usize = 4;
const ROWS: usize = 4;
/// Probes from integers only where the anchors are at least this many times `nprobe`: the
/// anchors left to score one by one grow with `nprobe`.
const FEW_PROBES: usize = 8;
/// Fewest dimensions: below them one f32 GEMM over every anchor costs about what the bounds'
/// own work does (GloVe's 50: faster at nprobe 4, slower at 16).
const MIN_DIM: usize = 64;
/// Most dimensions: a product's i32 sum of 255 x 127 a dimension stays in range.
const MAX_DIM: usize = 1 << 16;

/// The anchors in 8-bit integers, packed for the kernel, and what their bounds take.
#[derive(Debug)]
pub(crate) struct Coarse8 {
    /// Dimensions rounded up to groups of 4 (one 32-bit lane's products).
    d4: usize,
    /// Tiles of 16 anchors (m rounded up to `TILE * TILES`), each `d4 / 4` groups of 64 bytes:
    /// byte `4 l + b` of group g is anchor l's value at dimension `4 g + b`.
    packed: Vec<i8>,
    /// Per padded anchor: -128 times the sum of its integers, where its sums start (this
    /// takes the query's offset of 128 out).
    bias: Vec<i32>,
    /// Per anchor: its scale, |a| and |a - a~|.
    scale: Vec<f32>,
    norm: Vec<f32>,
    err: Vec<f32>,
    /// Bounds on the spectral norms of the rows and of their rounding (`measure`).
    spectral: Option<(f64, f64)>,
}

/// A query block in integers, and its products with every anchor, from `Coarse8::block`.
pub(crate) struct Block {
    /// r x (padded m): `<q8, a8>`.
    dots: Vec<i32>,
    cols: usize,
    /// Per query: its scale, |q - q~| and |q~|.
    scale: Vec<f32>,
    err: Vec<f32>,
    norm: Vec<f32>,
}

/// Whether this CPU has the integer products' kernel.
pub(crate) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether a query's rotation is taken in these integers for codes of `code_bytes` a vector
/// of `d` dimensions: only where their own error dwarfs the rounding, at most a bit a
/// dimension (at 4 bits a dimension, 392 B on Fashion-MNIST, recall@10 fell by 0.0016).
/// `held` and `Coarse8::new` tell whether the CPU and the width allow it.
pub(crate) fn rotates(code_bytes: usize, d: usize) -> bool {
    code_bytes.saturating_mul(8) <= d
}

/// Bytes a `Coarse8` of `m` anchors of `d` dimensions holds where this CPU builds one.
pub(crate) fn held(m: usize, d: usize) -> usize {
    if !supported() || !(MIN_DIM..=MAX_DIM).contains(&d) || m == 0 {
        return 0;
    }
    let mp = m.next_multiple_of(TILE * TILES);
    mp * (d.next_multiple_of(4) + 4) + m * 12
}

/// Bytes `Coarse8::block` allocates for `rows` queries, where this CPU builds a `Coarse8`.
pub(crate) fn block_bytes(m: usize, d: usize, rows: usize) -> usize {
    if held(m, d) == 0 {
        return 0;
    }
    let rp = rows.next_multiple_of(ROWS);
    rp * (m.next_multiple_of(TILE * TILES) * 4 + d.next_multiple_of(4)) + rows * 12 + d
}

/// The queries `qb` (r x d) as the kernel takes them: rows of `d4` bytes, offset by 128 as
/// it multiplies unsigned by signed bytes (padded rows, to a multiple of `ROWS`, and padded
/// dimensions are 128, zero once the offset is taken out); and per query its scale, |q - q~|
/// and |q~|.
/// Inlined into `in_bytes_avx512`, whose build turns its rounding into vector code (the
/// baseline build converts a value at a time); the same operations, so the same bytes.
#[inline(always)]
fn in_bytes(qb: &[f32], d: usize, d4: usize) -> (Vec<u8>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let r = qb.len() / d;
    let mut qs = vec![128u8; r.next_multiple_of(ROWS) * d4];
    let (mut scale, mut err, mut norm) = (vec![0f32; r], vec![0f32; r], vec![0f32; r]);
    let mut row = vec![0i8; d];
    for (i, q) in qb.chunks_exact(d).enumerate() {
        (scale[i], err[i], norm[i]) = rounded(q, &mut row);
        for (o, &v) in qs[i * d4..].iter_mut().zip(&row) {
            *o = (v as i16 + 128) as u8;
        }
    }
    (qs, scale, err, norm)
}

/// Query `q` rounded into `row` as `in_bytes` rounds it: its scale, |q - q~| and |q~|.
#[inline(always)]
fn rounded(q: &[f32], row: &mut [i8]) -> (f32, f32, f32) {
    let (s, e) = quantize(q, row);
    let n2: i32 = row.iter().map(|&v| v as i32 * v as i32).sum();
    (s, e, s * (n2 as f32).sqrt())
}

/// Where value `x` of row `j` sits in `Coarse8::packed` (`g4` groups of 4 a row).
#[inline(always)]
fn packed_at(j: usize, x: usize, g4: usize) -> usize {
    ((j / TILE) * g4 + x / 4) * 64 + 4 * (j % TILE) + x % 4
}

/// `in_bytes` in an AVX-512 build.
///
/// # Safety
/// The CPU has AVX-512BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw")]
unsafe fn in_bytes_avx512(
    qb: &[f32],
    d: usize,
    d4: usize,
) -> (Vec<u8>, Vec<f32>, Vec<f32>, Vec<f32>) {
    in_bytes(qb, d, d4)
}

/// `v` rounded to integers of at most 127 in size on one scale, into `out`: (scale, |v - v~|).
/// Rounds half to even by the add of 1.5 x 2^23, which vectorizes where `round` is a call.
#[inline(always)]
fn quantize(v: &[f32], out: &mut [i8]) -> (f32, f32) {
    const MAGIC: f32 = 12_582_912.0;
    let top = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = top / 127.0;
    if scale == 0.0 || !scale.is_finite() {
        out.fill(0);
        return (0.0, rounding(v, out, 0.0));
    }
    let inv = 1.0 / scale;
    for (o, &x) in out.iter_mut().zip(v) {
        *o = ((x * inv + MAGIC) - MAGIC).clamp(-127.0, 127.0) as i8;
    }
    (scale, rounding(v, out, scale))
}

/// |v - scale q|: how far the integers `q` on `scale` are from `v` (16 partial sums, so
/// that it vectorizes).
#[inline(always)]
fn rounding(v: &[f32], q: &[i8], scale: f32) -> f32 {
    let mut acc = [0f32; 16];
    for (x, q) in v.chunks(16).zip(q.chunks(16)) {
        for ((a, &x), &q) in acc.iter_mut().zip(x).zip(q) {
            let r = x - q as f32 * scale;
            *a += r * r;
        }
    }
    acc.iter().sum::<f32>().sqrt()
}

impl Coarse8 {
    /// `None` where this CPU lacks the kernel or the anchors are too short to gain from it.
    pub(crate) fn new(anchors: &[f32], d: usize) -> Option<Coarse8> {
        let m = anchors.len() / d.max(1);
        if held(m, d) == 0 {
            return None;
        }
        let d4 = d.next_multiple_of(4);
        let mp = m.next_multiple_of(TILE * TILES);
        let g4 = d4 / 4;
        let mut packed = vec![0i8; mp * d4];
        let mut bias = vec![0i32; mp];
        let (mut scale, mut norm, mut err) = (vec![], vec![], vec![]);
        let mut row = vec![0i8; d4];
        for (j, a) in anchors.chunks_exact(d).enumerate() {
            let (s, e) = quantize(a, &mut row[..d]);
            scale.push(s);
            err.push(e);
            norm.push(a.iter().map(|x| x * x).sum::<f32>().sqrt());
            bias[j] = -128 * row.iter().map(|&v| v as i32).sum::<i32>();
            for g in 0..g4 {
                let at = packed_at(j, 4 * g, g4);
                packed[at..at + 4].copy_from_slice(&row[4 * g..4 * g + 4]);
            }
        }
        Some(Coarse8 {
            d4,
            packed,
            bias,
            scale,
            norm,
            err,
            spectral: None,
        })
    }

    /// Every row's product with each query of `qb` (r x d), taken in integers and scaled back
    /// to f32, into `out` (r x rows): each within `|q - q~| |a| + |q~| |a - a~|` of the
    /// exact product, and all of a query's together within `error_norm` of the exact ones.
    pub(crate) fn scaled_products(&self, qb: &[f32], d: usize, out: &mut [f32]) {
        let blk = self.block(qb, d);
        let m = self.scale.len();
        for (i, o) in out.chunks_exact_mut(m).enumerate() {
            let (sq, dots) = (blk.scale[i], &blk.dots[i * blk.cols..]);
            for ((o, &sa), &dt) in o.iter_mut().zip(&self.scale).zip(dots) {
                *o = sq * sa * dt as f32;
            }
        }
    }

    /// A bound on the norm of the difference between query `q`'s products with every row and
    /// `scaled_products`' (each value's bound, squared and summed), rounded up by a part in
    /// a thousand for the float sums that take it.
    ///
    /// With the rows' spectral bounds (`measure`), the smaller of that and `|q - q~| |A| +
    /// |q~| |A - A~|` (`A` the rows as a matrix, `|.|` its spectral norm): for a rotation's
    /// rows, whose rounding errors point every way, several times smaller.
    pub(crate) fn error_norm(&self, q: &[f32]) -> f32 {
        let (_, eq, nq) = rounded(q, &mut vec![0i8; q.len()]);
        let sum: f64 = (self.norm.iter().zip(&self.err))
            .map(|(&na, &ea)| f64::from(eq * na + nq * ea).powi(2))
            .sum();
        let per_row = sum.sqrt();
        let whole = self.spectral.map_or(f64::INFINITY, |(ga, ge)| {
            f64::from(eq) * ga + f64::from(nq) * ge
        });
        (per_row.min(whole) * 1.001) as f32
    }

    /// Bounds the spectral norms of the rows `a` this was made from, as a matrix, and of
    /// their rounding, for `error_norm`.
    pub(crate) fn measure(&mut self, a: &[f32], d: usize) {
        let mut err = a.to_vec();
        let g4 = self.d4 / 4;
        for (j, e) in err.chunks_exact_mut(d).enumerate() {
            for (x, e) in e.iter_mut().enumerate() {
                *e -= self.scale[j] * f32::from(self.packed[packed_at(j, x, g4)]);
            }
        }
        // `err` holds each row's rounding; its f32 subtraction is exact to half an ulp of the
        // row's largest value, which the bound's own margin covers.
        self.spectral = Some((
            linalg::spectral_norm_bound(a, d),
            linalg::spectral_norm_bound(&err, d),
        ));
    }

    /// Whether integer products pay for a search of `nprobe` lists.
    pub(crate) fn serves(&self, nprobe: usize) -> bool {
        nprobe.saturating_mul(FEW_PROBES) <= self.scale.len()
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.packed.len() + (self.bias.len() + 3 * self.scale.len()) * 4
    }

    /// The queries `qb` (r x d) in integers, and their products with every anchor.
    pub(crate) fn block(&self, qb: &[f32], d: usize) -> Block {
        // SAFETY: a `Coarse8` is made only where the CPU has AVX-512BW (`held`).
        #[cfg(target_arch = "x86_64")]
        let (qs, scale, err, norm) = unsafe { in_bytes_avx512(qb, d, self.d4) };
        #[cfg(not(target_arch = "x86_64"))]
        let (qs, scale, err, norm) = in_bytes(qb, d, self.d4);
        let cols = self.packed.len() / self.d4;
        let mut dots = vec![0i32; qs.len() / self.d4 * cols];
        products(&qs, &self.packed, &self.bias, self.d4, &mut dots);
        Block {
            dots,
            cols,
            scale,
            err,
            norm,
        }
    }

    /// Query `i` of `blk` (`qv`, its squared norm `qn`): a lower bound on every anchor's coarse
    /// score into `bound` (m values; `anorm` the anchors' squared norms), for
    /// `probe::settle`. Returns how many products each bound sums, for `probe::slack`.
    #[inline(always)]
    pub(crate) fn bounds(
        &self,
        blk: &Block,
        i: usize,
        (qv, qn, l2): (&[f32], f32, bool),
        anorm: &[f32],
        bound: &mut [f32],
    ) -> usize {
        let m = self.scale.len();
        let dots = &blk.dots[i * blk.cols..i * blk.cols + m];
        let (sq, eq, nq) = (blk.scale[i], blk.err[i], blk.norm[i]);
        // <q, a> is at most its product in integers plus `off`; the score (qn + |a|^2 -
        // 2 <q, a> under L2, -<q, a> otherwise) at least what that leaves.
        let per_anchor = self.scale.iter().zip(&self.norm).zip(&self.err).zip(dots);
        let most = per_anchor.map(|(((&sa, &na), &ea), &dt)| {
            let off = eq * na + nq * ea;
            sq * sa * dt as f32 + off
        });
        if l2 {
            for ((b, most), &an) in bound.iter_mut().zip(most).zip(anorm) {
                *b = qn + an - 2.0 * most;
            }
        } else {
            for (b, most) in bound.iter_mut().zip(most) {
                *b = -most;
            }
        }
        2 * qv.len()
    }
}

/// `out[i][j] = bias[j] + <qs_i, a_j>` over `d4` bytes, for every query row (a multiple of
/// `ROWS`) and every packed anchor: VNNI where the CPU has it (`Coarse8::new` builds one only
/// there), else the scalar reference.
fn products(qs: &[u8], packed: &[i8], bias: &[i32], d4: usize, out: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if supported() {
        // SAFETY: AVX-512BW and VNNI checked.
        return unsafe { products_vnni(qs, packed, bias, d4, out) };
    }
    products_scalar(qs, packed, bias, d4, out)
}

/// The scalar reference: the same integer sums.
fn products_scalar(qs: &[u8], packed: &[i8], bias: &[i32], d4: usize, out: &mut [i32]) {
    let (g4, cols) = (d4 / 4, packed.len() / d4);
    for (q, o) in qs.chunks_exact(d4).zip(out.chunks_exact_mut(cols)) {
        for (j, v) in o.iter_mut().enumerate() {
            let mut s = bias[j];
            for g in 0..g4 {
                let at = packed_at(j, 4 * g, g4);
                for b in 0..4 {
                    s += q[4 * g + b] as i32 * packed[at + b] as i32;
                }
            }
            *v = s;
        }
    }
}

/// # Safety
/// The CPU has AVX-512BW and AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw,avx512vnni")]
unsafe fn products_vnni(qs: &[u8], packed: &[i8], bias: &[i32], d4: usize, out: &mut [i32]) {
    use std::arch::x86_64::*;
    let (g4, cols) = (d4 / 4, packed.len() / d4);
    let tiles = cols / TILE;
    let rows = qs.len() / d4;
    assert!(rows.is_multiple_of(ROWS) && tiles.is_multiple_of(TILES));
    assert!(out.len() == rows * cols && bias.len() == cols);
    let p = packed.as_ptr();
    for r0 in (0..rows).step_by(ROWS) {
        let q = qs[r0 * d4..(r0 + ROWS) * d4].as_ptr();
        for t0 in (0..tiles).step_by(TILES) {
            // SAFETY: tiles t0..t0 + 4 are within `bias` (asserted above).
            let b0: [__m512i; TILES] = std::array::from_fn(|u| unsafe {
                _mm512_loadu_si512(bias[(t0 + u) * TILE..].as_ptr().cast())
            });
            let mut acc = [b0; ROWS];
            for g in 0..g4 {
                // SAFETY: tiles t0..t0 + 4 and group g are within `packed` (asserted above:
                // whole tiles of g4 groups of 64 bytes), and rows r0..r0 + 4 within `qs`.
                unsafe {
                    let a: [__m512i; TILES] = std::array::from_fn(|u| {
                        _mm512_loadu_si512(p.add(((t0 + u) * g4 + g) * 64).cast())
                    });
                    for (v, acc) in acc.iter_mut().enumerate() {
                        let four = q.add(v * d4 + 4 * g).cast::<i32>().read_unaligned();
                        let b = _mm512_set1_epi32(four);
                        for (s, &a) in acc.iter_mut().zip(&a) {
                            *s = _mm512_dpbusd_epi32(*s, b, a);
                        }
                    }
                }
            }
            for (v, acc) in acc.iter().enumerate() {
                for (u, s) in acc.iter().enumerate() {
                    let at = (r0 + v) * cols + (t0 + u) * TILE;
                    // SAFETY: 16 i32 within row r0 + v of `out`.
                    unsafe { _mm512_storeu_si512(out[at..at + TILE].as_mut_ptr().cast(), *s) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::probe;
    use super::*;

    #[test]
    fn kernel_equals_the_scalar_reference() {
        if !supported() {
            return;
        }
        let mut rng = crate::rng::Rng::new(17);
        for (m, d) in [(64, 64), (100, 66), (1024, 384), (70, 785)] {
            let a = crate::synth::gaussian(m, d, 3);
            let c = Coarse8::new(&a, d).unwrap();
            let rows = 8;
            // Every byte value, extremes included.
            let qs: Vec<u8> = (0..rows * c.d4).map(|_| rng.next_u64() as u8).collect();
            let cols = c.packed.len() / c.d4;
            let (mut x, mut y) = (vec![0; rows * cols], vec![1; rows * cols]);
            products_scalar(&qs, &c.packed, &c.bias, c.d4, &mut x);
            products(&qs, &c.packed, &c.bias, c.d4, &mut y);
            assert_eq!(x, y, "m {m} d {d}");
        }
    }

    #[test]
    fn integer_bounds_probe_what_scoring_every_anchor_probes() {
        if !supported() {
            return;
        }
        let (m, nq, d) = (1024, 100, 96);
        // Clustered data (anchors near one another, as trained ones are), and an anchor
        // repeated: ties.
        let mut a = crate::synth::low_rank(m + nq, d, 24, 8);
        let q = a.split_off(m * d);
        a.copy_within(0..d, 5 * d);
        let c = Coarse8::new(&a, d).unwrap();
        let blk = c.block(&q, d);
        let share = probe::probes_match_every_anchor(&a, &q, d, &mut |i, qx, an, bound| {
            c.bounds(&blk, i, qx, an, bound)
        });
        assert!(share < 0.1, "scored {share:.3} of the anchors");
    }

    #[test]
    fn kernel_and_probes_on_real_data() {
        if !supported() {
            return;
        }
        // GloVe demo vectors, two rows joined into one of 100 dimensions (the kernel's
        // minimum is 64): 512 anchors, 64 queries.
        let base = crate::vecio::parse_fvecs(include_bytes!(
            "../../../../tests/data/glove-demo/base.fvecs"
        ))
        .unwrap();
        let d = 2 * base.cols;
        let (m, nq) = (512, 64);
        let x = &base.data[..(m + nq) * d];
        let (a, q) = x.split_at(m * d);
        let c = Coarse8::new(a, d).unwrap();
        let blk = c.block(q, d);
        let (qs, ..) = in_bytes(q, d, c.d4);
        let cols = c.packed.len() / c.d4;
        let (mut x8, mut y8) = (vec![0; nq * cols], vec![1; nq * cols]);
        products_scalar(&qs, &c.packed, &c.bias, c.d4, &mut x8);
        products(&qs, &c.packed, &c.bias, c.d4, &mut y8);
        assert_eq!(x8, y8);
        assert_eq!(x8, blk.dots);
        let share = probe::probes_match_every_anchor(a, q, d, &mut |i, qx, an, bound| {
            c.bounds(&blk, i, qx, an, bound)
        });
        assert!(share < 0.2, "scored {share:.3} of the anchors");
    }

    #[test]
    fn no_integers_for_short_anchors() {
        assert!(Coarse8::new(&crate::synth::gaussian(64, 50, 1), 50).is_none());
    }
}
