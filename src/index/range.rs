//! Range search: every vector of the probed lists within a radius of the query (L2) or above a
//! similarity threshold (inner product, cosine), in the shape of FAISS's `RangeSearchResult`.

use super::search::{query_block, Cand, HitRoom, Within, HIT_BYTES};
use super::{Filter, Index, RawVectors};
use crate::backend::{Probes, SearchJob};
use crate::error::{Error, Result};
use crate::params::{Metric, SearchParams};
use crate::progress::{Control, Phase, Watch};
use crate::quant::prepare;
use rayon::prelude::*;

/// Range-search results: query i's hits are `ids[offsets[i]..offsets[i + 1]]` with their
/// `distances` (squared L2, nearest first; or similarities, largest first).
#[derive(Clone, Debug, PartialEq)]
pub struct RangeResults {
    /// nq + 1 offsets into `ids` and `distances`.
    pub offsets: Vec<usize>,
    pub ids: Vec<u64>,
    pub distances: Vec<f32>,
}

impl RangeResults {
    /// Number of queries.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Query i's hits: ids and distances.
    pub fn hits(&self, i: usize) -> (&[u64], &[f32]) {
        let (a, b) = (self.offsets[i], self.offsets[i + 1]);
        (&self.ids[a..b], &self.distances[a..b])
    }
}

/// Candidates re-scored at once per query: their rows are fetched a block at a time.
const RESCORE_ROWS: usize = 1024;

fn too_many(hits: usize) -> Error {
    Error::OutOfMemory(format!(
        "range search: {hits} hits for one query do not fit in memory ({HIT_BYTES} bytes each)"
    ))
}

impl Index {
    /// Every vector of the `p.nprobe` lists each query probes whose squared L2 distance is at
    /// most `radius` (L2), or whose similarity is at least `radius` (inner product, cosine),
    /// best first. Distances are those of the codes; with `p.rerank > 0` every hit is scored
    /// again exactly against `raw` and kept only if that exact score is within the radius (a
    /// vector whose code's score misses the radius is not found either way). `p.k` is not
    /// used; `filter` as in [`Index::search_filtered`]. Scans on the device on CUDA contexts
    /// (a predicate filter keeps the host path), on the host elsewhere. Hits count against the
    /// context's memory cap as they are found (28 bytes each while the call runs): a search
    /// whose hits pass what the cap leaves, or what memory holds, stops with `OutOfMemory`.
    pub fn range_search(
        &self,
        queries: &[f32],
        radius: f32,
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
    ) -> Result<RangeResults> {
        self.range_search_with(queries, radius, p, raw, filter, &Control::default())
    }

    /// As [`Index::range_search`], watched as `ctl` says (as [`Index::search_with`]).
    pub fn range_search_with(
        &self,
        queries: &[f32],
        radius: f32,
        p: &SearchParams,
        raw: Option<&dyn RawVectors>,
        filter: Option<&Filter>,
        ctl: &Control,
    ) -> Result<RangeResults> {
        let own = self.refined();
        let (probes, raw) = self.check_search(queries, p, self.raw_or_refined(raw, &own))?;
        if radius.is_nan() {
            return Err(Error::InvalidArgument(
                "radius is NaN: it must be a number (a squared distance under L2, else a \
                 similarity)"
                    .into(),
            ));
        }
        let (d, metric) = (self.cb.dim(), self.cb.metric);
        // Hits count against what the memory cap leaves as they are found.
        let room = HitRoom::new(self.fit_search(queries.len() / d, probes, 0, 0, filter)?);
        let l2 = metric == Metric::L2;
        // Scores are smaller-is-better: minus the similarity under inner product.
        let bound = if l2 { radius } else { -radius };
        let q = prepare(queries, d, metric);
        let per_query = self.watched_search(ctl, &q, |w| {
            self.context().run(|b| {
                let hits = match self.range_on_device(b, &q, probes, bound, filter, &room, w)? {
                    Some(h) => h,
                    None => self.range_on_host(&q, probes, bound, filter, &room, w)?,
                };
                self.range_finish(&q, hits, raw, bound, w)
            })
        })?;

        let total: usize = per_query.iter().map(Vec::len).sum();
        let mut r = RangeResults {
            offsets: Vec::with_capacity(q.len() / d.max(1) + 1),
            ids: Vec::new(),
            distances: Vec::new(),
        };
        let room = |what: &str| Error::OutOfMemory(format!("range search: {total} {what}"));
        r.ids.try_reserve_exact(total).map_err(|_| room("ids"))?;
        r.distances
            .try_reserve_exact(total)
            .map_err(|_| room("distances"))?;
        r.offsets.push(0);
        for hits in per_query {
            for c in hits {
                r.ids.push(c.1);
                r.distances.push(if l2 { c.0 } else { -c.0 });
            }
            r.offsets.push(r.ids.len());
        }
        Ok(r)
    }

    /// Each query's hits re-scored exactly where asked (a block of rows at a time, so that
    /// the rows fetched stay small whatever the hits), then best first.
    fn range_finish(
        &self,
        q: &[f32],
        hits: Vec<Vec<Cand>>,
        raw: Option<&dyn RawVectors>,
        bound: f32,
        watch: &Watch,
    ) -> Result<Vec<Vec<Cand>>> {
        let d = self.cb.dim();
        hits.into_par_iter()
            .enumerate()
            .map(|(i, mut hits)| {
                if let Some(raw) = raw {
                    for part in hits.chunks_mut(RESCORE_ROWS) {
                        watch.poll()?;
                        self.rescore(&q[i * d..(i + 1) * d], part, raw)?;
                    }
                    hits.retain(|c| c.0 <= bound);
                }
                hits.sort_unstable();
                Ok(hits)
            })
            .collect()
    }

    /// Each prepared query's hits within `bound` (smaller is better), from the host scan, in
    /// the `room` they may take.
    fn range_on_host(
        &self,
        q: &[f32],
        probes: Probes,
        bound: f32,
        filter: Option<&Filter>,
        room: &HitRoom,
        watch: &Watch,
    ) -> Result<Vec<Vec<Cand>>> {
        let d = self.cb.dim();
        let nq = q.len() / d.max(1);
        let blocks = q
            .par_chunks(query_block(q.len() / d.max(1)) * d)
            .map(|qb| {
                let mut out = Vec::with_capacity(qb.len() / d);
                let keep = |_: usize, w: Within| {
                    out.push(w.hits()?);
                    Ok(())
                };
                let fresh = || Within::new(bound, room);
                self.scan_block(qb, probes.get(), filter, watch, fresh, keep)?;
                watch.advance(Phase::Search, qb.len() / d, nq)?;
                Ok(out)
            })
            .collect::<Result<Vec<Vec<Vec<Cand>>>>>()?;
        Ok(blocks.into_iter().flatten().collect())
    }

    /// As `range_on_host`, on the backend's device where it scans these lists (`None`
    /// otherwise, and for predicate filters, which are the caller's host code).
    fn range_on_device(
        &self,
        backend: &dyn crate::backend::Backend,
        q: &[f32],
        probes: Probes,
        bound: f32,
        filter: Option<&Filter>,
        room: &HitRoom,
        watch: &Watch,
    ) -> Result<Option<Vec<Vec<Cand>>>> {
        let job = SearchJob {
            probes,
            want: 1,
            range: true,
            host_filter: !filter.is_none_or(Filter::on_device),
            rerank: None,
        };
        let (most, poll) = (room.hits(), || watch.poll());
        let found = self.on_device(backend, job, filter, watch, |searcher, allow| {
            searcher.range(q, bound, allow, most, &poll)
        })?;
        let Some((counts, ids, scores)) = found else {
            return Ok(None);
        };
        let mut at = 0;
        let hits = counts
            .iter()
            .map(|&c| {
                let mut h = Vec::new();
                h.try_reserve_exact(c).map_err(|_| too_many(c))?;
                h.extend((at..at + c).map(|t| Cand(scores[t], ids[t])));
                at += c;
                Ok(h)
            })
            .collect::<Result<_>>()?;
        Ok(Some(hits))
    }
}
