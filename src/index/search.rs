//! Search: coarse probe (one GEMM per query block), a lookup table per probed list, a scan of
//! the list's codes summing table entries, a bounded heap of candidates, optional exact re-rank.
//!
//! L2 tables use the decomposition `|q - a - R^T y|^2 = |q - a|^2 + (|y|^2 + 2<Ra, y>) - 2<Rq, y>`:
//! the middle term depends only on the list and is precomputed per (anchor, sub-space,
//! centroid), the last only on the query, so a list's table is one add per entry.
//! Inner product needs no per-list term: `<q, a + R^T y> = <q, a> + <Rq, y>`.

pub use super::raw::{DenseRaw, FetchRaw, RawVectors};
use super::{Filter, Index};
use crate::backend::host_scan::HostSearcher;
pub(super) use crate::backend::host_scan::{Cand, HitRoom, Keep, TopK, Within, HIT_BYTES};
use crate::backend::{Backend, DeviceRerank, Probes, SearchJob, Searcher, Session};
use crate::check::check_finite;
use crate::context::watching;
use crate::error::{raw_not_finite, try_vec, Error, Result};
use crate::linalg;
use crate::params::{Metric, SearchParams};
use crate::progress::{Control, Phase, Watch};
use crate::quant::prepare;
use rayon::prelude::*;

/// `k` results per query, best first. Distances are squared L2 for `Metric::L2` and inner
/// products (similarities, larger is better) for `InnerProduct` and `Cosine`. Missing results
/// (fewer than k vectors reachable, or allowed by a filter) fill the last slots of a query's
/// row with id `u64::MAX` and distance NaN. Equality compares distances bit for bit.
#[derive(Clone, Debug)]
pub struct SearchResults {
    pub k: usize,
    pub ids: Vec<u64>,
    pub distances: Vec<f32>,
}

impl PartialEq for SearchResults {
    fn eq(&self, o: &Self) -> bool {
        let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        self.k == o.k && self.ids == o.ids && bits(&self.distances) == bits(&o.distances)
    }
}

impl SearchResults {
    /// Hits found for query `q`: its slots before the first missing one.
    pub fn found(&self, q: usize) -> usize {
        let row = &self.ids[q * self.k..(q + 1) * self.k];
        row.iter().position(|&i| i == u64::MAX).unwrap_or(self.k)
    }
}

/// Search results, refused when a distance came out NaN: the inputs' checks (finite values,
/// norms that f32 distances hold) should make that impossible, so it is reported, never
/// returned as a result.
fn results(k: usize, ids: Vec<u64>, distances: Vec<f32>) -> Result<SearchResults> {
    let nan = |(i, v): &(usize, &f32)| v.is_nan() && ids[*i] != u64::MAX;
    if let Some((i, _)) = distances.iter().enumerate().find(nan) {
        return Err(Error::NonFinite(format!(
            "the distance of id {} to query {} came out NaN",
            ids[i],
            i / k.max(1)
        )));
    }
    Ok(SearchResults { k, ids, distances })
}

/// Queries per parallel task, one coarse GEMM each, for `nq` queries: large enough that the
/// GEMM's packing of the anchors is paid over many queries (16 left it a sixth of a 4-bit
/// search), small enough to give every thread several tasks.
pub(super) fn query_block(nq: usize) -> usize {
    nq.div_ceil(4 * rayon::current_num_threads()).clamp(16, 128)
}

impl Index {
    /// Searches `queries` (nq x d) on the context's backend: on its device where it scans
    /// lists there (lists uploaded once and kept until the index changes), else on the host,
    /// with the same results up to the rounding of the distance sums. Safe to call from many
    /// threads at once. With `p.rerank > 0`, the best `rerank` candidates are re-scored
    /// exactly against `raw`.
    pub fn search(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
    ) -> Result<SearchResults> {
        self.search_filtered(queries, p, raw, None)
    }

    /// As [`Index::search`], returning only vectors whose id `filter` allows. The filter is
    /// applied during the scan: a query gets k hits whenever its probed lists hold k allowed
    /// vectors; fewer leave the last slots missing (id `u64::MAX`, distance NaN;
    /// [`SearchResults::found`] counts the hits). Bitsets and id lists are applied in the
    /// device scan on CUDA and WGPU (as a mask over the index's vectors, made per call); a
    /// predicate is the caller's code, so its searches scan on the host whatever the backend.
    /// A predicate's error ends the search with that error.
    pub fn search_filtered(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
    ) -> Result<SearchResults> {
        self.search_with(queries, p, raw, filter, &Control::default())
    }

    /// As [`Index::search_filtered`], watched as `ctl` says: its progress callback (else the
    /// index's, else the context's) hears `Phase::Search` (queries answered) and may cancel
    /// (`Error::Cancelled`); past its deadline (else the context's timeout) the search stops
    /// with `Error::TimedOut`. On the host a search stops within about 10 ms and one query of
    /// either; on a device, one batch.
    pub fn search_with(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        ctl: &Control,
    ) -> Result<SearchResults> {
        self.watched_search(ctl, queries, |w| {
            self.context()
                .run(|b| self.search_on(b, queries, p, raw, filter, w))
        })
    }

    /// Runs `f` with the watch of a search (or load, verify) on this index as `ctl` says.
    pub(super) fn watched<R>(&self, ctl: &Control, f: impl FnOnce(&Watch) -> R) -> R {
        let fallback = self.progress.or_context(&self.ctx);
        watching(&self.ctx, ctl, fallback.as_ref(), f)
    }

    /// `watched` for a search of `queries`: its position starts at none of them answered.
    pub(super) fn watched_search<R>(
        &self,
        ctl: &Control,
        queries: &[f32],
        f: impl FnOnce(&Watch) -> R,
    ) -> R {
        let nq = queries.len() / self.cb.dim().max(1);
        self.watched(ctl, |w| {
            w.begin(Phase::Search, nq);
            f(w)
        })
    }

    fn search_on(
        &self,
        backend: &dyn Backend,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        watch: &Watch,
    ) -> Result<SearchResults> {
        let own = self.refined();
        let (probes, raw) = self.check_search(queries, p, self.raw_or_refined(raw, &own))?;
        self.search_checked(backend, queries, p, probes, raw, filter, watch)
    }

    /// `search_on` once the parameters and queries are checked.
    #[allow(clippy::too_many_arguments)]
    fn search_checked(
        &self,
        backend: &dyn Backend,
        queries: &[f32],
        p: &SearchParams,
        probes: Probes,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        watch: &Watch,
    ) -> Result<SearchResults> {
        let d = self.cb.dim();
        let nq = queries.len() / d;
        let k = p.k;
        let want = self.candidates(p);
        self.fit_search(nq, probes, k, want, filter)?;
        let q = prepare(queries, d, self.cb.metric);
        let (mut ids, mut dist) = self.empty_results(nq, k)?;
        let job = SearchJob {
            probes,
            want,
            range: false,
            host_filter: !filter.is_none_or(Filter::on_device),
            rerank: None,
        };
        let poll = || watch.poll();
        let on_device = self.on_device(backend, job, filter, watch, |searcher, allow| {
            searcher.top_k(&q, allow, &poll)
        })?;
        match on_device {
            None => self.scan_host(&q, p, probes, raw, filter, (watch, nq), &mut ids, &mut dist)?,
            // The device's candidates, re-ranked and cut to k here.
            Some((cid, cdist)) => {
                let out = (&mut ids[..], &mut dist[..]);
                self.finish_all(&q, want, &cid, &cdist, raw, watch, out)?
            }
        }
        results(k, ids, dist)
    }

    /// Opens the backend's searcher for `job` once: on a device, `f` runs with it and the
    /// positions `filter` allows (a mask over the lists back to back, made for the call);
    /// `None` where the host scans, with the reasons in the call's report.
    pub(super) fn on_device<R>(
        &self,
        backend: &dyn Backend,
        job: SearchJob,
        filter: Option<&Filter>,
        watch: &Watch,
        f: impl FnOnce(&mut dyn Searcher, Option<&[u32]>) -> Result<R>,
    ) -> Result<Option<R>> {
        self.with_views(|cb, lists| match backend.searcher(cb, lists, job)? {
            Session::Host(why) => {
                watch.fell_back(why);
                Ok(None)
            }
            Session::Device(mut searcher) => {
                let allow = match filter {
                    Some(f) => Some(f.positions(&lists.flatten_ids())?),
                    None => None,
                };
                f(&mut *searcher, allow.as_deref()).map(Some)
            }
        })
    }

    /// As [`Index::search`], with the re-rank against raw vectors in CUDA device memory:
    /// `n` rows of the index's dimension at address `at` (row i holds the vector of id i;
    /// the memory `Compressor::encode_device` takes), read in place on the device, where the
    /// candidates stay (at most 128 per query: a larger `p.rerank` is an `InvalidArgument`).
    /// The range is checked first (`InvalidArgument`), then each candidate:
    /// an id without a row is an `InvalidArgument`, a row whose distance is not finite
    /// `NonFinite`. With `p.rerank` 0 the rows are not read. Contexts on other backends answer
    /// `BackendUnavailable`.
    ///
    /// # Safety
    /// Nothing writes the rows at `at` while the call runs.
    pub unsafe fn search_device_raw(
        &self,
        queries: &[f32],
        p: &SearchParams,
        at: u64,
        n: usize,
    ) -> Result<SearchResults> {
        // SAFETY: as the caller vouches.
        self.watched_search(&Control::default(), queries, |w| {
            self.context()
                .run(|b| unsafe { self.search_device_raw_on(b, queries, p, at, n, w) })
        })
    }

    /// `search_device_raw` on `backend`.
    ///
    /// # Safety
    /// As `search_device_raw`.
    unsafe fn search_device_raw_on(
        &self,
        backend: &dyn Backend,
        queries: &[f32],
        p: &SearchParams,
        at: u64,
        n: usize,
        watch: &Watch,
    ) -> Result<SearchResults> {
        // Bad parameters are named before the backend's answer.
        p.validate()?;
        crate::backend::need_device_memory(backend, "re-ranking against device memory")?;
        self.check_queries(queries)?;
        let probes = self.probes(p);
        if p.rerank == 0 {
            return self.search_checked(backend, queries, p, probes, None, None, watch);
        }
        let d = self.cb.dim();
        let nq = queries.len() / d;
        let (k, want) = (p.k, self.candidates(p));
        self.fit_search(nq, probes, k, want, None)?;
        let q = prepare(queries, d, self.cb.metric);
        let raw = DeviceRerank { at, n, k };
        let job = SearchJob {
            probes,
            want,
            range: false,
            host_filter: false,
            rerank: Some(raw),
        };
        let poll = || watch.poll();
        // SAFETY (both calls): as the caller vouches.
        let on_device = self.on_device(backend, job, None, watch, |searcher, _| unsafe {
            searcher.top_k_reranked(&q, &poll)
        })?;
        let (cid, cdist) = match on_device {
            Some(r) => r,
            // Lists the device does not scan: the host's candidates, re-ranked there.
            None => {
                let cands = SearchParams {
                    k: want,
                    nprobe: p.nprobe,
                    rerank: 0,
                };
                let (mut cid, mut cdist) = self.empty_results(nq, want)?;
                let w = (watch, nq);
                self.scan_host(&q, &cands, probes, None, None, w, &mut cid, &mut cdist)?;
                let cb = self.cb.view();
                unsafe { backend.rerank_device(&cb, &q, &cid, want, raw, &poll) }?
            }
        };
        let (mut ids, mut dist) = self.empty_results(nq, k)?;
        self.finish_all(&q, k, &cid, &cdist, None, watch, (&mut ids, &mut dist))?;
        results(k, ids, dist)
    }

    /// Candidates kept per query: k or the re-rank depth, but never more than the index
    /// holds (so a huge k or rerank sizes nothing by itself).
    pub(super) fn candidates(&self, p: &SearchParams) -> usize {
        p.k.max(p.rerank).min(self.len().max(1))
    }

    /// The host scan of the prepared queries `q` into their `p.k` result slots over their
    /// `probes` nearest lists, re-ranked against `raw` where given: one coarse GEMM per block
    /// of queries, each block reported to `watch` as it ends (as part of `total` queries of
    /// the call).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_host(
        &self,
        q: &[f32],
        p: &SearchParams,
        probes: Probes,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        (watch, total): (&Watch, usize),
        ids: &mut [u64],
        dist: &mut [f32],
    ) -> Result<()> {
        let (d, k, want) = (self.cb.dim(), p.k, self.candidates(p));
        let nq = q.len() / d.max(1);
        let block = query_block(nq);
        q.par_chunks(block * d)
            .zip(ids.par_chunks_mut(block * k))
            .zip(dist.par_chunks_mut(block * k))
            .map(|((qb, ib), db)| {
                self.search_block(qb, p.k, probes, want, raw, filter, watch, ib, db)?;
                watch.advance(Phase::Search, qb.len() / d.max(1), total)
            })
            .collect()
    }

    /// Each query's `per` candidates (ids and scores, best first, as the device gives them)
    /// through `finish` into its k result slots (`out`: ids and distances).
    #[allow(clippy::too_many_arguments)]
    fn finish_all(
        &self,
        q: &[f32],
        per: usize,
        cid: &[u64],
        cdist: &[f32],
        raw: Option<&dyn RawVectors>,
        watch: &Watch,
        (ids, dist): (&mut [u64], &mut [f32]),
    ) -> Result<()> {
        let (d, nq) = (self.cb.dim(), q.len() / self.cb.dim());
        if nq == 0 {
            return Ok(());
        }
        let k = ids.len() / nq;
        ids.par_chunks_mut(k)
            .zip(dist.par_chunks_mut(k))
            .enumerate()
            .map(|(i, (io, dout))| {
                watch.poll()?;
                let cands = (0..per)
                    .map(|r| Cand(cdist[i * per + r], cid[i * per + r]))
                    .filter(|c| c.1 != u64::MAX)
                    .collect();
                self.finish(&q[i * d..(i + 1) * d], cands, raw, io, dout)
            })
            .collect::<Result<()>>()?;
        watch.advance(Phase::Search, nq, nq)
    }

    /// The checks of the queries every search makes.
    fn check_queries(&self, queries: &[f32]) -> Result<()> {
        crate::check::whole_rows(queries.len(), self.cb.dim(), "query values")?;
        check_finite(queries, "queries")?;
        crate::check::check_norms(queries, self.cb.dim(), "queries")
    }

    /// The lists each query of a search with `p` probes: the one clamp of `p.nprobe`
    /// (validated), which every scan and device then reads.
    pub(super) fn probes(&self, p: &SearchParams) -> Probes {
        Probes::of(p.nprobe, self.nlist())
    }

    /// The checks every search with host raw vectors makes, the one validation of its
    /// parameters; returns the lists each query probes and the raw vectors to re-rank
    /// against, if any.
    pub(super) fn check_search<'r>(
        &self,
        queries: &[f32],
        p: &SearchParams,
        raw: Option<&'r dyn RawVectors>,
    ) -> Result<(Probes, Option<&'r dyn RawVectors>)> {
        p.validate()?;
        self.check_queries(queries)?;
        let d = self.cb.dim();
        let raw = match (p.rerank, raw) {
            (0, _) => Ok(None),
            (r, None) => Err(Error::InvalidArgument(format!(
                "rerank = {r} needs raw vectors, and none were given"
            ))),
            (_, Some(r)) if r.dim() != d => Err(Error::InvalidArgument(format!(
                "raw vectors have dimension {}, index {d}",
                r.dim()
            ))),
            (_, Some(r)) => Ok(Some(r)),
        }?;
        Ok((self.probes(p), raw))
    }

    /// Result arrays with every slot missing: id `u64::MAX`, distance NaN.
    /// Allocated fallibly: `nq * k` comes from the caller.
    pub(super) fn empty_results(&self, nq: usize, k: usize) -> Result<(Vec<u64>, Vec<f32>)> {
        let missing = f32::NAN;
        let Some(n) = nq.checked_mul(k) else {
            return Err(Error::OutOfMemory(format!(
                "results: {nq} queries x k = {k} overflows"
            )));
        };
        Ok((
            try_vec(n, u64::MAX, "search results")?,
            try_vec(n, missing, "search results")?,
        ))
    }

    /// One query's candidates (sorted, smaller is better) to its result slots: re-ranked
    /// exactly against `raw` when given, then the first k, with inner products turned back
    /// into similarities.
    fn finish(
        &self,
        qv: &[f32],
        mut cands: Vec<Cand>,
        raw: Option<&dyn RawVectors>,
        ids: &mut [u64],
        dist: &mut [f32],
    ) -> Result<()> {
        let l2 = self.cb.metric == Metric::L2;
        if let Some(raw) = raw {
            self.rescore(qv, &mut cands, raw)?;
            cands.sort_unstable();
        }
        for (t, c) in cands.iter().take(ids.len()).enumerate() {
            ids[t] = c.1;
            dist[t] = if l2 { c.0 } else { -c.0 };
        }
        Ok(())
    }

    /// Replaces each candidate's score with its exact one against `raw` (smaller is better).
    pub(super) fn rescore(
        &self,
        qv: &[f32],
        cands: &mut [Cand],
        raw: &dyn RawVectors,
    ) -> Result<()> {
        let (d, l2) = (self.cb.dim(), self.cb.metric == Metric::L2);
        let ids: Vec<u64> = cands.iter().map(|c| c.1).collect();
        let mut rows = try_vec(cands.len().saturating_mul(d), 0f32, "re-rank rows")?;
        raw.fetch(&ids, &mut rows)?;
        for (c, v) in cands.iter_mut().zip(rows.chunks_exact(d.max(1))) {
            let v = prepare(v, d, self.cb.metric);
            c.0 = if l2 {
                linalg::l2_sq(qv, &v)
            } else {
                -linalg::dot(qv, &v)
            };
            if !c.0.is_finite() {
                return Err(raw_not_finite(c.1));
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn search_block(
        &self,
        qb: &[f32],
        k: usize,
        probes: Probes,
        want: usize,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        watch: &Watch,
        ids: &mut [u64],
        dist: &mut [f32],
    ) -> Result<()> {
        let d = self.cb.dim();
        self.scan_block(
            qb,
            probes.get(),
            filter,
            watch,
            || TopK::new(want),
            |i, top| {
                let qv = &qb[i * d..(i + 1) * d];
                let (ids, dist) = (&mut ids[i * k..(i + 1) * k], &mut dist[i * k..(i + 1) * k]);
                self.finish(qv, top.sorted(), raw, ids, dist)
            },
        )
    }

    /// Scans the lists each query of `qb` probes into a fresh `K` (`fresh`), given to `done`
    /// with the query's number: the host scan over this index's views and tables, asking
    /// `watch` between queries.
    pub(super) fn scan_block<K: Keep>(
        &self,
        qb: &[f32],
        nprobe: usize,
        filter: Option<&Filter>,
        watch: &Watch,
        fresh: impl Fn() -> K,
        done: impl FnMut(usize, K) -> Result<()>,
    ) -> Result<()> {
        let mut light = None;
        let tables = self.tables(&mut light)?;
        let packed = self.scans_blocks().then(|| self.packed4()).flatten();
        let searcher = HostSearcher {
            cb: &self.cb.view(),
            list: |j: usize| self.list(j),
            tables,
            packed,
            exact_rotation: self.ctx.exact_rotation(),
        };
        let poll = || watch.poll();
        searcher.scan_block(qb, nprobe, filter, &poll, fresh, done)
    }
}

#[cfg(test)]
mod tests;
