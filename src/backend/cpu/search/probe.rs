//! Coarse probing with bounds: a query's `nprobe` nearest anchors without every anchor's full
//! product. The anchors' leading principal axes, found once per index, give each anchor a
//! lower bound on its coarse score from a few products; only the anchors whose bound is under
//! the `nprobe`-th score found first are scored in full. The probes are those scoring every
//! anchor gives (the bounds carry a slack for rounding).

use crate::linalg;
use crate::rng::Rng;
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};

/// Dimensions below which every anchor is scored in full: the bounds would save too little.
const MIN_DIM: usize = 128;
/// Anchors below which every anchor is scored in full.
const MIN_ANCHORS: usize = 256;
/// Share of the anchors' spread the axes must hold: the fewest axes that hold it are kept.
/// Below it (MiniLM's 384 dimensions need 128 axes for 90%), so many anchors are left to
/// score one by one that scoring every anchor in one GEMM is faster.
const HELD: f64 = 0.9;
/// Axes come in multiples of this.
const STEP: usize = 16;
/// Most axes: an eighth of the dimensions, and no more than this.
const MAX_AXES: usize = 128;
/// Extra columns of the randomized range finder beyond the axes it may keep.
const OVERSAMPLE: usize = 8;
/// Probes with bounds only where the anchors are at least this many times `nprobe`: more
/// probes leave more anchors to score one by one, and past 1/128 of them (Fashion-MNIST) one
/// GEMM over all anchors is faster.
const FEW_PROBES: usize = 128;
/// Most bytes finding the axes may hold (its matrices cannot be allocated fallibly).
const MAX_BUILDING: usize = 64 << 20;

/// The axes, and the anchors seen through them.
#[derive(Debug)]
pub(crate) struct Probe {
    k: usize,
    /// k x d: the axes, orthonormal rows.
    axes: Vec<f32>,
    /// The anchors' mean (d).
    mean: Vec<f32>,
    /// The mean on the axes (k).
    mean_on: Vec<f32>,
    /// m x k: each anchor less the mean, on the axes.
    on: Vec<f32>,
    /// m: |P(a - mean)|^2.
    on_norms: Vec<f32>,
    /// m: the length of a - mean off the axes.
    off: Vec<f32>,
    /// m: <mean, a> - |mean|^2, the mean's share of an inner product.
    shift: Vec<f32>,
}

/// The most axes `Probe::new` keeps for `d` dimensions and `m` anchors (0: none).
fn max_axes(m: usize, d: usize) -> usize {
    if d < MIN_DIM || m < MIN_ANCHORS {
        return 0;
    }
    (d / 8).min(MAX_AXES) / STEP * STEP
}

/// Bytes a `Probe` of `m` anchors of `d` dimensions holds at most, where `Probe::new` tries
/// one under a table cap of `cap` bytes (what it holds and, for a moment, what finding it
/// holds must fit); 0 where it does not try.
pub(crate) fn held_under(m: usize, d: usize, cap: usize) -> usize {
    let k = max_axes(m, d);
    let l = k + OVERSAMPLE;
    let held = (k * d + d + k + m * k + 3 * m) * 4;
    // The range finder's m x l and d x l products (f32, two of each at once), its l x l
    // (f64, and the eigenvectors) and the axes before they are made orthonormal (f64).
    let building = (2 * m * l + 3 * d * l) * 4 + (2 * l * l + 2 * d * k) * 8;
    if k == 0 || building > MAX_BUILDING || held + building > cap {
        return 0;
    }
    held
}

/// A query block's view through the axes, from `Probe::block`.
pub(crate) struct Block {
    /// r x m: <P(q - mean), P(a - mean)>.
    dots: Vec<f32>,
    /// r: |P(q - mean)|^2.
    on_norms: Vec<f32>,
    /// r: the length of q - mean off the axes.
    off: Vec<f32>,
}

impl Probe {
    /// `None` where a few axes do not hold most of the anchors' spread (then their bounds
    /// would rule out too few anchors to pay for themselves), or the anchors are too few or
    /// too short for bounds to be worth computing, or it does not fit `cap` (`held_under`).
    pub(crate) fn new(anchors: &[f32], d: usize, cap: usize) -> Option<Probe> {
        let m = anchors.len() / d.max(1);
        let kmax = max_axes(m, d);
        if held_under(m, d, cap) == 0 {
            return None;
        }
        let l = (kmax + OVERSAMPLE).min(m).min(d);
        let mut mean = vec![0f64; d];
        for a in anchors.chunks_exact(d) {
            for (s, &v) in mean.iter_mut().zip(a) {
                *s += v as f64;
            }
        }
        mean.iter_mut().for_each(|s| *s /= m as f64);
        let mean: Vec<f32> = mean.iter().map(|&v| v as f32).collect();
        let total: f64 = anchors
            .chunks_exact(d)
            .map(|a| linalg::l2_sq(a, &mean) as f64)
            .sum();
        if !total.is_finite() || total <= 0.0 {
            return None;
        }
        // A randomized range finder with one power step (Halko, Martinsson and Tropp), in
        // f32 on the anchors as they are (the mean taken out of each product): orthonormal
        // columns spanning the anchors' leading directions.
        let a = MatRef::from_row_major_slice(anchors, m, d);
        let mut rng = Rng::new(0x9e37_79b9);
        let omega = Mat::<f32>::from_fn(d, l, |_, _| rng.normal() as f32);
        let y = centred_product(a, omega.as_ref(), &mean);
        let q = y.qr().compute_thin_Q();
        let mut z = Mat::<f32>::zeros(d, l);
        matmul(
            z.as_mut(),
            Accum::Replace,
            a.transpose(),
            q.as_ref(),
            1.0,
            Par::Seq,
        );
        for c in 0..l {
            let sum: f32 = (0..m).map(|i| q[(i, c)]).sum();
            for t in 0..d {
                z[(t, c)] -= mean[t] * sum;
            }
        }
        let basis = z.qr().compute_thin_Q();
        // The anchors on that basis, and the axes within it that diagonalize their spread.
        let b = centred_product(a, basis.as_ref(), &mean);
        let g = Mat::<f64>::from_fn(l, l, |i, j| {
            (0..m).map(|r| b[(r, i)] as f64 * b[(r, j)] as f64).sum()
        });
        let evd = g.self_adjoint_eigen(faer::Side::Lower).ok()?;
        let (w, s) = (evd.U(), evd.S().column_vector());
        // Eigenvalues come in nondecreasing order: the largest last.
        let held = |k: usize| (0..k).map(|e| s[l - 1 - e].max(0.0)).sum::<f64>() / total;
        let k = (STEP..=kmax).step_by(STEP).find(|&k| held(k) >= HELD)?;
        // The axes, made orthonormal again in f64: the bounds rest on it.
        let raw = Mat::<f64>::from_fn(d, k, |t, e| {
            (0..l)
                .map(|c| basis[(t, c)] as f64 * w[(c, l - 1 - e)])
                .sum()
        });
        let ortho = raw.qr().compute_thin_Q();
        let mut axes = vec![0f32; k * d];
        for (e, row) in axes.chunks_exact_mut(d).enumerate() {
            for (t, v) in row.iter_mut().enumerate() {
                *v = ortho[(t, e)] as f32;
            }
        }
        let mut mean_on = vec![0f32; k];
        linalg::dot_block(&mean, &axes, d, &mut mean_on);
        let (on, on_norms, off) = onto((&axes, &mean, &mean_on), anchors, d);
        let cc = linalg::dot(&mean, &mean);
        let shift = anchors
            .chunks_exact(d)
            .map(|a| linalg::dot(&mean, a) - cc)
            .collect();
        Some(Probe {
            k,
            axes,
            mean,
            mean_on,
            on,
            on_norms,
            off,
            shift,
        })
    }

    /// Whether bounds pay for a search of `nprobe` lists.
    pub(crate) fn serves(&self, nprobe: usize) -> bool {
        nprobe.saturating_mul(FEW_PROBES) <= self.off.len()
    }

    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        let per_anchor = self.on_norms.len() + self.off.len() + self.shift.len();
        (self.axes.len() + self.mean.len() + self.mean_on.len() + self.on.len() + per_anchor) * 4
    }

    /// The queries `qb` (r x d) on the axes: two GEMMs, of r x k and r x m products.
    pub(crate) fn block(&self, qb: &[f32], d: usize) -> Block {
        let (r, m) = (qb.len() / d, self.off.len());
        let (on, on_norms, off) = onto((&self.axes, &self.mean, &self.mean_on), qb, d);
        let mut dots = vec![0f32; r * m];
        linalg::dot_block(&on, &self.on, self.k, &mut dots);
        Block {
            dots,
            on_norms,
            off,
        }
    }

    /// Query `i` of `blk` (`qv`; its squared norm is not needed here): a lower bound on every
    /// anchor's coarse score into `bound` (m values), for `settle`. Returns how many products
    /// each bound sums, for `slack`.
    #[inline(always)]
    pub(crate) fn bounds(
        &self,
        blk: &Block,
        i: usize,
        (qv, _, l2): (&[f32], f32, bool),
        bound: &mut [f32],
    ) -> usize {
        let m = self.off.len();
        let dots = &blk.dots[i * m..(i + 1) * m];
        let (qon, qoff) = (blk.on_norms[i], blk.off[i]);
        // With c the mean and P' off the axes: |q - a|^2 = |P(q - c) - P(a - c)|^2 +
        // |P'(q - c) - P'(a - c)|^2, the second at least (|P'(q - c)| - |P'(a - c)|)^2;
        // <q, a> = <q - c, a - c> + <q, c> + <c, a> - |c|^2, where <q - c, a - c> is
        // <P(q - c), P(a - c)> plus at most |P'(q - c)| |P'(a - c)|.
        if l2 {
            for (j, b) in bound.iter_mut().enumerate() {
                let gap = qoff - self.off[j];
                *b = qon + self.on_norms[j] - 2.0 * dots[j] + gap * gap;
            }
        } else {
            let qc = linalg::dot(qv, &self.mean);
            for (j, b) in bound.iter_mut().enumerate() {
                *b = -(dots[j] + qoff * self.off[j] + qc + self.shift[j]);
            }
        }
        qv.len() + self.k
    }
}

/// The rounding slack of bounds and scores for a query of squared norm `qn`, `reach` the
/// longest anchor's length: every term of a bound or a score is at most (|q| + reach)^2, and
/// each is a sum of at most `terms` products, so its rounding is within that many epsilons.
#[inline(always)]
pub(super) fn slack(terms: usize, qn: f32, reach: f32) -> f32 {
    let scale = qn.sqrt() + reach;
    4.0 * (terms + 16) as f32 * f32::EPSILON * scale * scale
}

/// A query's `nprobe` nearest anchors into `probes`, from a lower `bound` on every anchor's
/// coarse score (within `slack` of rounding; scores are `qn + |a|^2 - 2 <q, a>` under L2,
/// `anorm` the anchors' squared norms, `-<q, a>` otherwise): the anchors of the `nprobe` least bounds are
/// scored in full, then every other anchor whose bound is not above the worst of them.
/// `coarse` gets every anchor's entry: its exact score where scored, +inf where its bound
/// ruled it out. The probes are those scoring every anchor gives.
#[inline(always)]
pub(super) fn settle(
    bound: &[f32],
    (qv, qn, l2): (&[f32], f32, bool),
    anchors: &[f32],
    anorm: &[f32],
    nprobe: usize,
    slack: f32,
    (coarse, probes): (&mut [f32], &mut Vec<u32>),
) {
    let d = qv.len();
    coarse.fill(f32::INFINITY);
    linalg::smallest_k(bound, nprobe, probes);
    let mut limit = f32::NEG_INFINITY;
    for &j in probes.iter() {
        let j = j as usize;
        let s = score(qv, qn, l2, &anchors[j * d..(j + 1) * d], anorm[j]);
        coarse[j] = s;
        limit = limit.max(s);
    }
    let limit = limit + slack;
    // Nearly every anchor is ruled out: 16 bounds at a time are passed over in a few vector
    // compares. A NaN bound, which the checked norms of anchors and queries should rule out,
    // rules nothing out.
    const CHUNK: usize = 16;
    let open = |b: f32| b <= limit || b.is_nan();
    for (c, chunk) in bound.chunks(CHUNK).enumerate() {
        if !chunk.iter().fold(false, |any, &b| any | open(b)) {
            continue;
        }
        for (t, &b) in chunk.iter().enumerate() {
            let j = c * CHUNK + t;
            if open(b) && coarse[j] == f32::INFINITY {
                coarse[j] = score(qv, qn, l2, &anchors[j * d..(j + 1) * d], anorm[j]);
                probes.push(j as u32);
            }
        }
    }
    // The scored anchors, in `smallest_k`'s order (score, then anchor): a few, where
    // selecting over every anchor's entry again would read them all.
    let key = |&j: &u32| (linalg::order_key(coarse[j as usize]), j);
    probes.sort_unstable_by_key(key);
    probes.truncate(nprobe);
}

/// `(A - 1 mean^T) X`: the anchors less their mean, times `x` (d x l).
fn centred_product(a: MatRef<'_, f32>, x: MatRef<'_, f32>, mean: &[f32]) -> Mat<f32> {
    let (m, l) = (a.nrows(), x.ncols());
    let mut out = Mat::<f32>::zeros(m, l);
    matmul(out.as_mut(), Accum::Replace, a, x, 1.0, Par::Seq);
    for c in 0..l {
        let shift: f32 = (0..mean.len()).map(|t| mean[t] * x[(t, c)]).sum();
        for i in 0..m {
            out[(i, c)] -= shift;
        }
    }
    out
}

/// A query's coarse score for an anchor, from their product `dt`: `qn + an - 2 dt` under L2
/// (`qn`, `an` their squared norms), `-dt` otherwise. The one formula of every coarse score,
/// whether `dt` comes from a GEMM over all anchors or one dot product here.
#[inline(always)]
pub(super) fn coarse_score(dt: f32, qn: f32, an: f32, l2: bool) -> f32 {
    if l2 {
        qn + an - 2.0 * dt
    } else {
        -dt
    }
}

/// Anchor `a`'s coarse score for query `q`, scored alone. Inlined into the scan's AVX2 build.
#[inline(always)]
fn score(q: &[f32], qn: f32, l2: bool, a: &[f32], an: f32) -> f32 {
    coarse_score(linalg::dot(q, a), qn, an, l2)
}

/// `rows` (r x d) less the mean, on the axes (r x k; `mean_on` is the mean on them), each
/// row's squared length there and its length off the axes: what the bounds take of anchors
/// and of queries alike.
fn onto(
    (axes, mean, mean_on): (&[f32], &[f32], &[f32]),
    rows: &[f32],
    d: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (k, r) = (mean_on.len(), rows.len() / d);
    let mut on = vec![0f32; r * k];
    linalg::dot_block(rows, axes, d, &mut on);
    let (mut on_norms, mut off) = (vec![0f32; r], vec![0f32; r]);
    for (i, x) in rows.chunks_exact(d).enumerate() {
        let row = &mut on[i * k..(i + 1) * k];
        row.iter_mut().zip(mean_on).for_each(|(v, c)| *v -= c);
        on_norms[i] = linalg::dot(row, row);
        // The length off the axes, from the whole length and the length on them.
        off[i] = (linalg::l2_sq(x, mean) - on_norms[i]).max(0.0).sqrt();
    }
    (on, on_norms, off)
}

/// One query's bounds, as the tests call them: (query number, (query, its squared norm,
/// L2?), the anchors' squared norms, bound) -> the products each bound sums.
#[cfg(test)]
pub(super) type Bounds<'n> =
    dyn FnMut(usize, (&[f32], f32, bool), &[f32], &mut [f32]) -> usize + 'n;

/// Checks that `bounds`, settled, probes what scoring every anchor of `a` probes, for each
/// query of `q`, L2 and inner product, nprobe 1 to 64; returns the share of anchors scored.
#[cfg(test)]
pub(super) fn probes_match_every_anchor(
    a: &[f32],
    q: &[f32],
    d: usize,
    bounds: &mut Bounds,
) -> f64 {
    let m = a.len() / d;
    let anorm = linalg::row_norms(a, d);
    let reach = anorm.iter().fold(0f32, |x, &v| x.max(v)).sqrt();
    let (mut bound, mut coarse, mut probes) = (vec![0f32; m], vec![0f32; m], Vec::new());
    let mut scored = 0;
    let nprobes = [1, 4, 16, 64];
    for l2 in [true, false] {
        for nprobe in nprobes {
            for (i, qv) in q.chunks_exact(d).enumerate() {
                let qn = linalg::dot(qv, qv);
                let terms = bounds(i, (qv, qn, l2), &anorm, &mut bound);
                let slack = slack(terms, qn, reach);
                let out = (&mut coarse[..], &mut probes);
                settle(&bound, (qv, qn, l2), a, &anorm, nprobe, slack, out);
                // Every anchor scored alone, with the same scores.
                let scores: Vec<f32> = a
                    .chunks_exact(d)
                    .zip(&anorm)
                    .map(|(a, &an)| score(qv, qn, l2, a, an))
                    .collect();
                let mut want = Vec::new();
                linalg::smallest_k(&scores, nprobe, &mut want);
                assert_eq!(probes, want, "l2 {l2} nprobe {nprobe} query {i}");
                scored += coarse.iter().filter(|v| v.is_finite()).count();
            }
        }
    }
    scored as f64 / (2 * nprobes.len() * q.len() / d * m) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_probe_what_scoring_every_anchor_probes() {
        let (m, nq, d) = (1024, 200, 128);
        let mut a = crate::synth::low_rank(m + nq, d, 12, 5);
        let q = a.split_off(m * d);
        let p = Probe::new(&a, d, usize::MAX).expect("a few axes hold the spread");
        assert!(p.k <= 32, "{} axes", p.k);
        let blk = p.block(&q, d);
        let share = probes_match_every_anchor(&a, &q, d, &mut |i, qx, _, bound| {
            p.bounds(&blk, i, qx, bound)
        });
        // The point of it: most anchors are ruled out without their full product.
        assert!(share < 0.25, "scored {share:.3} of the anchors");
    }

    #[test]
    fn no_probe_where_axes_would_not_pay() {
        // Spread evenly over every direction: no few axes hold 90% of it.
        let d = 128;
        let a: Vec<f32> = crate::synth::gaussian(1024, d, 3);
        assert!(Probe::new(&a, d, usize::MAX).is_none());
        // Too few dimensions, too few anchors.
        let a = crate::synth::low_rank(1024, 64, 4, 1);
        assert!(Probe::new(&a, 64, usize::MAX).is_none());
        let a = crate::synth::low_rank(128, 128, 4, 1);
        assert!(Probe::new(&a, 128, usize::MAX).is_none());
    }
}
