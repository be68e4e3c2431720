//! Distance bounds and the certified re-rank. An index that keeps side rows (`Refine`, any
//! kind but `None`) knows for each vector a bound `b >= |x - x_hat|` of what its code misses.
//! A hit's code distance `|q - x_hat|` then bounds its true distance by the triangle
//! inequality (L2: `(|q - x_hat| -+ b)^2`; inner product and cosine: `<q, x_hat> -+ |q| b`),
//! and a re-rank can stop as soon as no unexamined candidate's lower bound can beat the k-th
//! exact distance: its top-k is then exact over the probed lists.

use super::search::{Cand, TopK};
use super::{Filter, Index, RawVectors, SearchResults};
use crate::error::{Error, Result};
use crate::params::{Metric, SearchParams};
use crate::progress::{Control, Watch};
use crate::quant::prepare;
use rayon::prelude::*;

/// Queries scanned together by an `auto` re-rank.
const AUTO_BATCH: usize = 64;

/// Search results with, per slot, a lower and an upper bound of the true distance (squared L2,
/// or similarity; NaN where the slot is missing), and per query the candidates re-scored
/// exactly and whether its top-k is certified exact over its probed lists.
#[derive(Clone, Debug, PartialEq)]
pub struct BoundedResults {
    pub results: SearchResults,
    pub lower: Vec<f32>,
    pub upper: Vec<f32>,
    /// Candidates re-scored exactly, per query.
    pub reranked: Vec<usize>,
    /// Per query: the top-k is the exact top-k of the probed lists (an `auto` re-rank that
    /// ran to its proof; a fixed re-rank or none certifies nothing).
    pub certified: Vec<bool>,
}

/// The slack for the float rounding of a code score `s` of query norm `qn`, `a` the largest
/// anchor norm: generous next to the magnitudes summed (query, anchors, score).
fn slack(s: f32, qn: f32, a: f32) -> f32 {
    2e-5 * (1.0 + s.abs() + qn * qn + qn * a + a * a)
}

/// Bounds of one hit's score (smaller is better: squared L2, or minus the similarity) from its
/// code's score `s`, its error bound `b` and the query's norm `qn`, widened by `slack` for the
/// float rounding of `s`.
fn score_bounds(l2: bool, s: f32, b: f32, qn: f32, slack: f32) -> (f32, f32) {
    if l2 {
        let r = s.max(0.0).sqrt();
        let lo = (r - b).max(0.0);
        ((lo * lo - slack).max(0.0), (r + b) * (r + b) + slack)
    } else {
        (s - qn * b - slack, s + qn * b + slack)
    }
}

impl Index {
    /// The error bound of `id` (the largest over the vectors holding it); +inf when unknown.
    fn bound_of(&self, id: u64) -> Result<f32> {
        let map = self.id_map()?;
        let rs = self.refine.row_bytes(self.cb.dim());
        Ok(map
            .locations(id)
            .map(|l| {
                let r = l.row as usize;
                self.refine
                    .bound(&self.lists.refine(l.list as usize)[r * rs..(r + 1) * rs])
            })
            .fold(f32::NEG_INFINITY, f32::max)
            .max(0.0))
    }

    /// The smallest and largest error level (`ProductQuantizer::levels`) the codes of `id`
    /// name: a hit's code score holds one of them, which its bounds take away again (zeros
    /// for codes without levels).
    fn levels_of(&self, id: u64) -> Result<(f32, f32)> {
        let levels = &self.cb.pq.levels;
        if levels.is_empty() {
            return Ok((0.0, 0.0));
        }
        let (pq, cs) = (&self.cb.pq, self.cb.residual_code_size());
        let map = self.id_map()?;
        Ok(map
            .locations(id)
            .map(|l| {
                let code = &self.list(l.list as usize).1[l.row as usize * cs..][..cs];
                levels[crate::quant::pq::get_code(code, pq.nsub, pq.bits) as usize]
            })
            .fold((f32::INFINITY, 0f32), |(lo, hi), v| (lo.min(v), hi.max(v))))
    }

    /// Bounds of a hit's score `s` (smaller is better) for `id`: `score_bounds` of its code
    /// distance, which is `s` less its error level, and within `moved` of the score the exact
    /// rotation of the query gives (`Tables::rotation_slack`).
    fn hit_bounds(
        &self,
        l2: bool,
        s: f32,
        id: u64,
        qn: f32,
        (amax, moved): (f32, f32),
    ) -> Result<(f32, f32)> {
        let b = self.bound_of(id)?;
        let (lmin, lmax) = self.levels_of(id)?;
        let lo = score_bounds(l2, s - lmax - moved, b, qn, slack(s, qn, amax)).0;
        let hi = score_bounds(l2, s - lmin.min(lmax) + moved, b, qn, slack(s, qn, amax)).1;
        Ok((lo, hi))
    }

    /// The largest error bound the index holds (+inf without side rows; 0 when empty).
    fn max_bound(&self) -> f32 {
        *self.max_bound.get_or_init(|| {
            let rs = self.refine.row_bytes(self.cb.dim());
            if rs == 0 {
                return f32::INFINITY;
            }
            (0..self.nlist())
                .flat_map(|j| self.lists.refine(j).chunks_exact(rs))
                .map(|row| self.refine.bound(row))
                .fold(0f32, f32::max)
        })
    }

    /// As [`Index::search_filtered`], with each hit's distance bounds. With `auto`, the
    /// re-rank is certified: `p.rerank` (>= k) is the most candidates kept per query, taken in
    /// the order of their lower bounds, and re-scoring stops once no unexamined candidate's
    /// lower bound can beat the k-th exact distance; the query is then `certified` (its top-k
    /// is exact over its probed lists) unless the cap was hit first. Bounds need an index with
    /// side rows (`Refine`, any kind but `None`), else `InvalidState`; `auto` needs raw
    /// vectors or a fetch (`InvalidArgument`). Scans on the host.
    pub fn search_bounded(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        auto: bool,
    ) -> Result<BoundedResults> {
        self.search_bounded_with(queries, p, raw, filter, auto, &Control::default())
    }

    /// As [`Index::search_bounded`], watched as `ctl` says (as [`Index::search_with`]).
    pub fn search_bounded_with(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        auto: bool,
        ctl: &Control,
    ) -> Result<BoundedResults> {
        if self.refine == super::Refine::None {
            return Err(Error::InvalidState(
                "this index keeps no error bounds: make it with a refinement kind (bound, f16 or int8)"
                    .into(),
            ));
        }
        if auto && raw.is_none() {
            return Err(Error::InvalidArgument(
                "an auto re-rank needs raw vectors or a fetch".into(),
            ));
        }
        if !auto {
            let res = self.search_with(queries, p, raw, filter, ctl)?;
            let exact = (p.rerank > 0).then(|| self.candidates(p));
            return self.bounded(queries, res, exact);
        }
        self.watched_search(ctl, queries, |w| {
            self.auto_search(queries, p, raw, filter, w)
        })
    }

    /// The certified re-rank of `search_bounded_with`, watched by `watch`.
    fn auto_search(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        watch: &Watch,
    ) -> Result<BoundedResults> {
        let (probes, _) = self.check_search(queries, p, raw)?;
        let (d, k, cap) = (self.cb.dim(), p.k, self.candidates(p));
        self.fit_search(queries.len() / d, probes, k, cap, filter)?;
        let l2 = self.cb.metric == Metric::L2;
        let q = prepare(queries, d, self.cb.metric);
        let nq = q.len() / d;
        // Each query's `cap` best by code score (smaller is better), from a host scan of a
        // batch of queries at a time (the candidates of all of them at once could be large).
        let scan = SearchParams {
            k: cap,
            nprobe: p.nprobe,
            rerank: 0,
        };
        let raw = raw.expect("checked above");
        let mut light = None;
        let tables = self.tables(&mut light)?;
        let (bmax, amax) = (self.max_bound(), tables.max_anchor_norm);
        let exact_rotation = self.ctx.exact_rotation();
        if self.ctx.backend().caps().list_search {
            // A device context's certified re-rank still scans its candidates here.
            watch.fell_back(crate::report::Fallbacks::CERTIFIED_RERANK);
        }
        let mut per: Vec<(Vec<Cand>, usize, bool)> = Vec::with_capacity(nq);
        for qb in q.chunks(AUTO_BATCH * d) {
            let nb = qb.len() / d;
            let (mut cid, mut cscore) = self.empty_results(nb, cap)?;
            let w = (watch, nq);
            self.context().run(|_| {
                self.scan_host(qb, &scan, probes, None, filter, w, &mut cid, &mut cscore)
            })?;
            let part = self.context().run(|_| {
                (0..nb)
                    .into_par_iter()
                    .map(|i| {
                        watch.poll()?;
                        let qv = &qb[i * d..(i + 1) * d];
                        let ids = &cid[i * cap..(i + 1) * cap];
                        // Back to smaller-is-better scores.
                        let s = |t: usize| {
                            if l2 {
                                cscore[i * cap + t]
                            } else {
                                -cscore[i * cap + t]
                            }
                        };
                        let moved = tables.rotation_slack(qv, l2, exact_rotation);
                        self.auto_one(qv, ids, s, k, raw, (bmax, amax, moved))
                    })
                    .collect::<Result<Vec<_>>>()
            })?;
            per.extend(part);
        }
        let (mut ids, mut dist) = self.empty_results(nq, k)?;
        let (mut reranked, mut certified) = (Vec::with_capacity(nq), Vec::with_capacity(nq));
        for (i, (top, n, ok)) in per.into_iter().enumerate() {
            for (t, c) in top.iter().enumerate() {
                ids[i * k + t] = c.1;
                dist[i * k + t] = if l2 { c.0 } else { -c.0 };
            }
            reranked.push(n);
            certified.push(ok);
        }
        let results = SearchResults {
            k,
            ids,
            distances: dist.clone(),
        };
        Ok(BoundedResults {
            results,
            lower: dist.clone(),
            upper: dist,
            reranked,
            certified,
        })
    }

    /// One query's certified re-rank over its candidates (`ids`, best code score first,
    /// `u64::MAX` past the last; `score(t)` the t-th's code score): the exact top-k, the
    /// candidates re-scored, and whether the result is proven exact over the probed lists.
    fn auto_one(
        &self,
        qv: &[f32],
        ids: &[u64],
        score: impl Fn(usize) -> f32,
        k: usize,
        raw: &dyn RawVectors,
        (bmax, amax, moved): (f32, f32, f32),
    ) -> Result<(Vec<Cand>, usize, bool)> {
        let l2 = self.cb.metric == Metric::L2;
        let qn = crate::linalg::dot(qv, qv).sqrt();
        let found = ids.iter().position(|&i| i == u64::MAX).unwrap_or(ids.len());
        let mut order = Vec::with_capacity(found);
        for (t, &id) in ids[..found].iter().enumerate() {
            let lo = self.hit_bounds(l2, score(t), id, qn, (amax, moved))?.0;
            order.push(Cand(lo, id));
        }
        order.sort_unstable();
        // What a vector the scan did not keep can score at best: its code score is no better
        // than the last kept one's (when the scan kept as many as it could).
        let tail = if found == ids.len() && found > 0 {
            // Its code distance is its score less its level, at most the largest.
            let s = score(found - 1);
            let top_level = self.cb.pq.levels.last().copied().unwrap_or(0.0);
            score_bounds(l2, s - top_level - moved, bmax, qn, slack(s, qn, amax)).0
        } else {
            f32::INFINITY
        };
        let mut top = TopK::new(k);
        let mut at = 0;
        let step = k.max(16);
        while at < order.len() {
            let full = top.len() == k;
            if full && order[at].0 >= top.worst {
                break;
            }
            let end = (at + step).min(order.len());
            let mut batch: Vec<Cand> = order[at..end].to_vec();
            self.rescore(qv, &mut batch, raw)?;
            for c in batch {
                top.push(c.0, c.1);
            }
            at = end;
        }
        let proven = top.len() == k && tail >= top.worst || top.len() < k && tail.is_infinite();
        Ok((top.sorted(), at, proven))
    }

    /// Bounds for each hit of `res` (of `queries`): its exact distance twice where re-ranked
    /// (`exact`: the candidates each query re-scored), else the code distance widened by the
    /// hit's error bound.
    fn bounded(
        &self,
        queries: &[f32],
        res: SearchResults,
        exact: Option<usize>,
    ) -> Result<BoundedResults> {
        let (d, k) = (self.cb.dim(), res.k);
        let l2 = self.cb.metric == Metric::L2;
        let q = prepare(queries, d, self.cb.metric);
        let nq = q.len() / d.max(1);
        let (mut lower, mut upper) = (res.distances.clone(), res.distances.clone());
        if exact.is_none() {
            let mut light = None;
            let tables = self.tables(&mut light)?;
            let amax = tables.max_anchor_norm;
            let exact_rotation = self.ctx.exact_rotation();
            for i in 0..nq {
                let qv = &q[i * d..(i + 1) * d];
                let qn = crate::linalg::dot(qv, qv).sqrt();
                let moved = tables.rotation_slack(qv, l2, exact_rotation);
                for t in i * k..i * k + res.found(i) {
                    let s = if l2 {
                        res.distances[t]
                    } else {
                        -res.distances[t]
                    };
                    let (lo, hi) = self.hit_bounds(l2, s, res.ids[t], qn, (amax, moved))?;
                    (lower[t], upper[t]) = if l2 { (lo, hi) } else { (-hi, -lo) };
                }
            }
        }
        let reranked = vec![exact.unwrap_or(0); nq];
        Ok(BoundedResults {
            results: res,
            lower,
            upper,
            reranked,
            certified: vec![false; nq],
        })
    }
}
