//! What an index's adds and searches take in memory: the estimates callers read and the fit
//! of each search under the context's caps.

use super::{Filter, Index, MAX_TERM_BYTES};
use crate::error::Result;
use crate::params::SearchParams;
use crate::quant::estimate::{self, Shape};

impl Index {
    /// A search's memory under the context's caps: `OutOfMemory` where its device memory or
    /// its own working memory (`nq` queries, `nprobe` lists, `k` results and `want`
    /// candidates each) does not fit; else the search
    /// tables and then the fast-scan blocks are built where they fit beside it. What does not
    /// fit is done without: each probed list's terms are made as needed and its codes scanned
    /// one by one, with the same results, more slowly. Returns the bytes the cap leaves
    /// beside all that (`usize::MAX` without a cap): a range search's room for its hits.
    pub(crate) fn fit_search(
        &self,
        nq: usize,
        nprobe: usize,
        k: usize,
        want: usize,
        filter: Option<&Filter>,
    ) -> Result<usize> {
        self.search_within_reach(nq, nprobe, k)?;
        let s = Shape::of_codebook(&self.cb);
        let kind = self.ctx.backend().kind();
        let device = estimate::device_search_bytes(kind, &s, self.len(), nq, nprobe, want);
        let what = || format!("searching {nq} queries for {k} results");
        self.ctx.check_caps((0, device), what)?;
        let cap = self.ctx.memory_cap();
        if cap == 0 {
            return Ok(usize::MAX);
        }
        let work = estimate::search_bytes(&s, nq, k, want, self.ctx.threads())
            .saturating_add(self.filter_bytes(filter));
        self.ctx.check_cap(work, what)?;
        let mut room = cap - work;
        if self.tables.get().is_none() {
            let t = estimate::tables_bytes(&s, MAX_TERM_BYTES);
            if t <= room {
                room -= t;
                self.build_tables()?;
            } else {
                // Each task makes light tables instead.
                let light = estimate::search_tasks(nq, self.ctx.threads())
                    * estimate::light_tables_bytes(&s);
                self.ctx.check_cap(work + light, || {
                    format!("searching {nq} queries for {k} results without search tables")
                })?;
                room = room.saturating_sub(light);
            }
        }
        if self.scans_blocks() && self.packed4.get().is_none() {
            let b = estimate::fast_scan_bytes(&s, self.len());
            if b <= room {
                room -= b;
                self.build_packed4();
            }
        }
        Ok(room)
    }

    /// Host bytes a search's filter takes while it runs: the copy of the caller's bitset or
    /// ids it holds, and where the backend scans lists, the mask of positions made from it.
    fn filter_bytes(&self, filter: Option<&Filter>) -> usize {
        let Some(f) = filter else { return 0 };
        let mask = if self.ctx.backend().caps().list_search && f.on_device() {
            self.len().div_ceil(32).max(1) * 4
        } else {
            0
        };
        f.heap_bytes().saturating_add(mask)
    }

    /// The memory (host bytes, device bytes) adding `n` vectors to this index takes at its
    /// peak: what its lists grow by and the encoding's working memory (f32 input; f16 input
    /// adds two blocks of converted rows). What the context's caps are checked against.
    pub fn estimate_add_memory(&self, n: usize) -> Result<(usize, usize)> {
        estimate::rows_within_reach(n, self.cb.dim(), "estimating an add")?;
        Ok(self.add_memory(n, false))
    }

    /// `OutOfMemory` where a search of `nq` queries for `k` results each (`nprobe` lists)
    /// passes what memory estimates are made for (`estimate::MOST_VALUES`).
    fn search_within_reach(&self, nq: usize, nprobe: usize, k: usize) -> Result<()> {
        let what = "searching";
        estimate::within_reach(nq, self.cb.dim(), what)?;
        estimate::within_reach(nq, k, what)?;
        let want = k.min(self.len().max(1));
        estimate::within_reach(nprobe.min(self.nlist()), want, what)
    }

    /// `estimate_add_memory` for input in f16 where `f16` (converted a block at a time).
    pub(super) fn add_memory(&self, n: usize, f16: bool) -> (usize, usize) {
        let s = Shape::of_codebook(&self.cb);
        let rs = self.refine.row_bytes(self.cb.dim());
        let converted = f16 || s.metric == crate::params::Metric::Cosine;
        let host = estimate::add_bytes(&s, n, rs, self.ctx.threads(), converted);
        let device = estimate::device_build_bytes(self.ctx.backend(), &s, n);
        (host, device)
    }

    /// The memory (host bytes, device bytes) searching `nq` queries with `p` takes at its peak:
    /// its working memory, and the search tables and fast-scan blocks it builds where this
    /// index has none yet. A range search's hits depend on the data: they are counted as they
    /// are found (28 bytes each while the call runs, 12 kept in its results), and one whose
    /// hits pass what the cap leaves stops with `OutOfMemory`. Sizes past what any machine
    /// holds are an `OutOfMemory`, never a figure that wrapped.
    pub fn estimate_search_memory(&self, nq: usize, p: &SearchParams) -> Result<(usize, usize)> {
        self.search_within_reach(nq, p.nprobe, p.k.max(p.rerank))?;
        let s = Shape::of_codebook(&self.cb);
        let mut host = estimate::search_bytes(&s, nq, p.k, self.candidates(p), self.ctx.threads());
        if self.tables.get().is_none() {
            host += estimate::tables_bytes(&s, MAX_TERM_BYTES);
        }
        if self.scans_blocks() && self.packed4.get().is_none() {
            host += estimate::fast_scan_bytes(&s, self.len());
        }
        let kind = self.ctx.backend().kind();
        Ok((
            host,
            estimate::device_search_bytes(kind, &s, self.len(), nq, p.nprobe, self.candidates(p)),
        ))
    }
}
