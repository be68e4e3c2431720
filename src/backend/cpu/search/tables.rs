//! Lookup-table terms derived from a codebook once per index (`search` reads them).

use super::coarse8::{self, Coarse8};
use super::probe::Probe;
use crate::backend::{layout, CodebookView};
use crate::error::{try_vec, Result};
use crate::linalg;
use crate::params::Metric;
use rayon::prelude::*;

/// Tables derived from the codebook once per index. Each is allocated fallibly and bounded by
/// `cap_bytes` where it can grow past the codebook's own size (a file's shapes are checked,
/// but a legal shape can still ask for more than the machine has).
#[derive(Debug)]
pub(crate) struct Tables {
    /// m x M x ksub: `|c|^2 + 2 <(R a)_j, c>` (None when larger than the cap).
    pub(crate) l2_terms: Option<Vec<f32>>,
    /// m x dp: rotated, padded anchors for tables built on the fly (None when larger than
    /// the cap: then each probed list's is made when needed).
    rot_anchors: Option<Vec<f32>>,
    /// |a|^2 per anchor, for coarse L2 distances.
    pub anchor_norms: Vec<f32>,
    /// The largest |a|, for the rounding slack of distance bounds.
    pub max_anchor_norm: f32,
    /// PQ centroids transposed to M x dsub x ksub: a query's table is then a run of
    /// contiguous multiply-adds over the centroids.
    cent_t: Vec<f32>,
    /// The anchors' leading axes, for probing with bounds (None where they would not pay,
    /// or do not fit the cap).
    pub(crate) probe: Option<Probe>,
    /// The anchors in 8-bit integers, for probing from integer products where the CPU has
    /// their kernel (None elsewhere).
    pub(crate) coarse8: Option<Coarse8>,
    /// The rotation as a query meets it (None without a rotation).
    rot_in: Option<QueryRotation>,
}

/// Precomputed tables above this size are skipped (they are then built per probed list).
pub(crate) const MAX_TERM_BYTES: usize = 512 << 20;

/// The widest rotation (its smaller side) whose spectral norms are bounded for
/// `Coarse8::error_norm`: Fashion-MNIST's 784 is within it, 4,096-d embeddings are not.
const SPECTRAL_SIDE: usize = 1024;

/// The rotation's columns that meet a query's own dimensions (the rest meet padding, zero),
/// less its rows that are zero on all of them (a padding dimension's own axis, as the
/// learned rotation keeps it): a query is rotated without being padded first, in fewer
/// products, and its values on those rows are zero without any.
///
/// Where the CPU has the 8-bit kernel (`coarse8`), the products are taken in integers, four
/// times as many a cycle as in f32: the rotated query is then within `Coarse8::error_norm`
/// of the exact one, which moves a code's score by at most that times the largest code's
/// norm (twice under L2), and the bounds of `index::bounds` widen by as much
/// (`Tables::rotation_slack`).
#[derive(Debug)]
struct QueryRotation {
    /// rows x d.
    r: Vec<f32>,
    /// Where each row's value goes among the dp outputs, the rest being zero; None: every
    /// row, in order.
    at: Option<Vec<u32>>,
    /// The rows in 8-bit integers, where the CPU has their kernel and they are long enough
    /// to gain from it.
    ints: Option<Coarse8>,
    /// The largest norm a code's residual decodes to (`sqrt(sum_j max_c |c_j|^2)`).
    code_norm: f32,
}

impl Tables {
    /// Heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        let n = self.l2_terms.as_ref().map_or(0, |t| t.len())
            + self.rot_anchors.as_ref().map_or(0, |t| t.len())
            + self
                .rot_in
                .as_ref()
                .map_or(0, |t| t.r.len() + t.at.as_ref().map_or(0, Vec::len))
            + self.anchor_norms.len()
            + self.cent_t.len();
        let ints = [
            self.coarse8.as_ref(),
            self.rot_in.as_ref().and_then(|t| t.ints.as_ref()),
        ];
        n * 4
            + self.probe.as_ref().map_or(0, Probe::heap_bytes)
            + ints
                .into_iter()
                .flatten()
                .map(Coarse8::heap_bytes)
                .sum::<usize>()
    }

    /// A query's table into `out` (M x `ks`): `scale <y_j, c>` for each sub-space j and its
    /// codewords c, `y` being the query padded and rotated (`scale` -2 under L2, -1 under
    /// inner product).
    ///
    /// 16 entries at a time are summed in registers over the sub-space's dimensions in order,
    /// from zero: each entry is `((0 + y_0 c_0) + y_1 c_1) + ...`. Inlined, so that the scan's
    /// AVX2 build (`scan_block_avx2`) holds them in vector registers.
    #[inline(always)]
    pub(crate) fn query_table(&self, y: &[f32], ds: usize, ks: usize, scale: f32, out: &mut [f32]) {
        const L: usize = 16;
        for (j, row) in out.chunks_exact_mut(ks).enumerate() {
            let cols = &self.cent_t[j * ds * ks..(j + 1) * ds * ks];
            let ys = &y[j * ds..(j + 1) * ds];
            for (c0, chunk) in row.chunks_exact_mut(L).enumerate() {
                let mut acc = [0f32; L];
                for (t, &yt) in ys.iter().enumerate() {
                    let yv = scale * yt;
                    let col: &[f32; L] = cols[t * ks + c0 * L..t * ks + (c0 + 1) * L]
                        .try_into()
                        .unwrap();
                    for l in 0..L {
                        acc[l] += yv * col[l];
                    }
                }
                chunk.copy_from_slice(&acc);
            }
        }
    }

    pub fn new(cb: &CodebookView, cap_bytes: usize) -> Result<Tables> {
        let (d, dp, m) = (cb.d, cb.dp(), cb.m());
        let fits = |n: usize| n.checked_mul(4).is_some_and(|b| b <= cap_bytes);
        let rot_anchors = if fits(m.saturating_mul(dp)) {
            let mut t = try_vec(m * dp, 0f32, "rotated anchors")?;
            t.par_chunks_mut(dp)
                .zip(cb.anchors.par_chunks(d))
                .for_each(|(out, a)| rotated_anchor(cb, a, out));
            Some(t)
        } else {
            None
        };
        let per = cb.nsub * cb.ksub();
        let l2_terms = match (
            cb.metric == Metric::L2 && fits(m.saturating_mul(per)),
            &rot_anchors,
        ) {
            (true, Some(ra)) => {
                let mut t = try_vec(m * per, 0f32, "list tables")?;
                t.par_chunks_mut(per)
                    .zip(ra.par_chunks(dp))
                    .for_each(|(out, ra)| list_terms(cb, ra, out));
                Some(t)
            }
            _ => None,
        };
        let (ks, ds) = (cb.ksub(), cb.dsub);
        let mut cent_t = try_vec(cb.books.len(), 0f32, "transposed centroids")?;
        for j in 0..cb.nsub {
            for (c, v) in sub(cb, j).chunks_exact(ds).enumerate() {
                for t in 0..ds {
                    cent_t[(j * ds + t) * ks + c] = v[t];
                }
            }
        }
        // No larger than the rotation already held: made under any cap, so that a search
        // rotates its queries alike with or without room for the larger tables (and so
        // gives the same bits).
        let rot_in = if !cb.rotation.is_empty() {
            Some(QueryRotation::new(cb)?)
        } else {
            None
        };
        // m values: no larger than the anchors already held.
        let anchor_norms = linalg::row_norms(cb.anchors, d);
        Ok(Tables {
            probe: Probe::new(cb.anchors, d, cap_bytes),
            coarse8: Coarse8::new(cb.anchors, d),
            rot_in,
            l2_terms,
            rot_anchors,
            max_anchor_norm: anchor_norms.iter().fold(0f32, |m, &v| m.max(v)).sqrt(),
            anchor_norms,
            cent_t,
        })
    }

    /// The queries `qb` (r x d) padded to the sub-spaces' layout and rotated (r x dp).
    /// With `exact`, in f32 products even where the rotation is held in integers.
    pub(crate) fn rotated_queries(&self, cb: &CodebookView, qb: &[f32], exact: bool) -> Vec<f32> {
        let (d, dp) = (cb.d, cb.dp());
        let Some(rot) = &self.rot_in else {
            return layout::pad_rows(qb, d, cb.dsub, dp);
        };
        let nq = qb.len() / d.max(1);
        let rows = rot.r.len() / d.max(1);
        let mut live = vec![0f32; nq * rows];
        match &rot.ints {
            Some(ints) if !exact => ints.scaled_products(qb, d, &mut live),
            _ => linalg::dot_block(qb, &rot.r, d, &mut live),
        }
        let Some(at) = &rot.at else {
            return live;
        };
        // Each query's values on the rows kept, to their places; none where every row is
        // zero (a hostile file's rotation can be).
        let mut out = vec![0f32; nq * dp];
        for (i, o) in out.chunks_exact_mut(dp).enumerate() {
            for (&p, &v) in at.iter().zip(&live[i * rows..]) {
                o[p as usize] = v;
            }
        }
        out
    }

    /// How far the rotation in integers can move a code's score for the prepared query `q`
    /// from what the exact rotation gives (0 where queries are rotated in f32, or `exact`):
    /// the rotated query's error bound times the largest code's norm, twice under L2
    /// (`QueryRotation`).
    pub(crate) fn rotation_slack(&self, q: &[f32], l2: bool, exact: bool) -> f32 {
        let Some(QueryRotation {
            ints: Some(ints),
            code_norm,
            ..
        }) = &self.rot_in
        else {
            return 0.0;
        };
        if exact {
            return 0.0;
        }
        let k = if l2 { 2.0 } else { 1.0 };
        k * ints.error_norm(q) * code_norm
    }

    /// Rows of the rotation a query is multiplied by (0 without one).
    #[cfg(test)]
    pub(crate) fn query_rotation_rows(&self, d: usize) -> usize {
        self.rot_in.as_ref().map_or(0, |q| q.r.len() / d.max(1))
    }

    /// List `a`'s terms into `out` (M x ksub), from the stored rotated anchor or one made now
    /// in `scratch` (dp values).
    pub(crate) fn fly_terms(
        &self,
        cb: &CodebookView,
        a: usize,
        scratch: &mut [f32],
        out: &mut [f32],
    ) {
        let dp = cb.dp();
        let ra = match &self.rot_anchors {
            Some(t) => &t[a * dp..(a + 1) * dp],
            None => {
                rotated_anchor(cb, &cb.anchors[a * cb.d..(a + 1) * cb.d], scratch);
                &*scratch
            }
        };
        list_terms(cb, ra, out);
    }
}

impl QueryRotation {
    /// From the codebook's rotation: no larger than it, so made under any cap (a search
    /// rotates its queries alike with or without room for the larger tables, and so gives
    /// the same bits).
    fn new(cb: &CodebookView) -> Result<QueryRotation> {
        let (d, dp) = (cb.d, cb.dp());
        let mut r = try_vec(dp * d, 0f32, "rotation")?;
        for p in 0..dp {
            if let Some(c) = layout::source_column(p, d, cb.dsub, dp) {
                for (row, rot) in r.chunks_exact_mut(d).zip(cb.rotation.chunks_exact(dp)) {
                    row[c] = rot[p];
                }
            }
        }
        // The rows zero on every real dimension leave; the others move up in place.
        let mut at = Vec::new();
        for p in 0..dp {
            if r[p * d..(p + 1) * d].iter().any(|&v| v != 0.0) {
                r.copy_within(p * d..(p + 1) * d, at.len() * d);
                at.push(p as u32);
            }
        }
        let at = if at.len() == dp {
            None
        } else {
            r.truncate(at.len() * d);
            r.shrink_to_fit();
            Some(at)
        };
        // Rounded up a part in a thousand, for the float sums that take it.
        let code_norm = (0..cb.nsub)
            .map(|j| {
                let sub = sub(cb, j).chunks_exact(cb.dsub);
                sub.map(|c| f64::from(linalg::dot(c, c)))
                    .fold(0f64, f64::max)
            })
            .sum::<f64>()
            .sqrt()
            * 1.001;
        let mut ints = coarse8::rotates(cb.code_bytes(), d)
            .then(|| Coarse8::new(&r, d))
            .flatten();
        // The spectral bounds' Gram matrix takes the smaller side squared times the larger
        // side in products, at the first search: past `SPECTRAL_SIDE` each value's own bound
        // serves alone (looser, as sound).
        if let Some(c) = ints
            .as_mut()
            .filter(|_| (r.len() / d).min(d) <= SPECTRAL_SIDE)
        {
            c.measure(&r, d);
        }
        Ok(QueryRotation {
            r,
            at,
            ints,
            code_norm: code_norm as f32,
        })
    }
}

/// Anchor `a` (d values) padded to the sub-space layout and rotated, into `out` (dp values).
fn rotated_anchor(cb: &CodebookView, a: &[f32], out: &mut [f32]) {
    let (d, dp) = (cb.d, cb.dp());
    let padded = layout::pad_rows(a, d, cb.dsub, dp);
    if cb.rotation.is_empty() {
        out.copy_from_slice(&padded);
    } else {
        out.copy_from_slice(&layout::rotate(cb.rotation, &padded, dp));
    }
}

/// `|c|^2 + 2 <ra_j, c>` for every sub-space j and centroid c.
fn list_terms(cb: &CodebookView, ra: &[f32], out: &mut [f32]) {
    let (ks, ds) = (cb.ksub(), cb.dsub);
    for j in 0..cb.nsub {
        let cents = sub(cb, j);
        let a = &ra[j * ds..(j + 1) * ds];
        for c in 0..ks {
            let cv = &cents[c * ds..(c + 1) * ds];
            out[j * ks + c] = linalg::dot(cv, cv) + 2.0 * linalg::dot(a, cv);
        }
    }
}

/// Sub-space `j`'s codewords (ksub x dsub).
fn sub<'a>(cb: &CodebookView<'a>, j: usize) -> &'a [f32] {
    let n = cb.ksub() * cb.dsub;
    &cb.books[j * n..(j + 1) * n]
}
