//! What an index's adds and searches take in memory: the estimates callers read and the fit
//! of each search under the context's caps.

use super::{Filter, Index, MAX_TERM_BYTES};
use crate::backend::host_scan::memory::{
    fast_scan_bytes, light_tables_bytes, search_bytes, search_tasks, tables_bytes,
};
use crate::backend::{Backend, Probes, SearchShape, Shape};
use crate::error::Result;
use crate::params::{Metric, SearchParams};
use crate::quant::estimate;

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
        probes: Probes,
        k: usize,
        want: usize,
        filter: Option<&Filter>,
    ) -> Result<usize> {
        self.search_within_reach(nq, probes, k)?;
        let s = self.cb.shape();
        let device = device_search_bytes(self.ctx.backend(), s, self.len(), nq, probes, want);
        let what = || format!("searching {nq} queries for {k} results");
        self.ctx.check_caps((0, device), what)?;
        let cap = self.ctx.memory_cap();
        if cap == 0 {
            return Ok(usize::MAX);
        }
        let work = search_bytes(&s, nq, k, want, self.ctx.threads())
            .saturating_add(self.filter_bytes(filter));
        self.ctx.check_cap(work, what)?;
        let mut room = cap - work;
        if self.tables.get().is_none() {
            let t = tables_bytes(&s, MAX_TERM_BYTES);
            if t <= room {
                room -= t;
                self.build_tables()?;
            } else {
                // Each task makes light tables instead.
                let light = search_tasks(nq, self.ctx.threads()) * light_tables_bytes(&s);
                self.ctx.check_cap(work + light, || {
                    format!("searching {nq} queries for {k} results without search tables")
                })?;
                room = room.saturating_sub(light);
            }
        }
        if self.scans_blocks() && self.packed4.get().is_none() {
            let b = fast_scan_bytes(&s, self.len());
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
    fn search_within_reach(&self, nq: usize, probes: Probes, k: usize) -> Result<()> {
        let what = "searching";
        estimate::within_reach(nq, self.cb.dim(), what)?;
        estimate::within_reach(nq, k, what)?;
        let want = k.min(self.len().max(1));
        estimate::within_reach(probes.get(), want, what)
    }

    /// `estimate_add_memory` for input in f16 where `f16` (converted a block at a time).
    pub(super) fn add_memory(&self, n: usize, f16: bool) -> (usize, usize) {
        let s = self.cb.shape();
        let rs = self.refine.row_bytes(self.cb.dim());
        let converted = f16 || s.metric == Metric::Cosine;
        let host = add_bytes(&s, n, rs, self.ctx.threads(), converted);
        let device = self.ctx.backend().encode_device_bytes(&s, n);
        (host, device)
    }

    /// The memory (host bytes, device bytes) searching `nq` queries with `p` takes at its peak:
    /// its working memory, and the search tables and fast-scan blocks it builds where this
    /// index has none yet. A range search's hits depend on the data: they are counted as they
    /// are found (28 bytes each while the call runs, 12 kept in its results), and one whose
    /// hits pass what the cap leaves stops with `OutOfMemory`. Sizes past what any machine
    /// holds are an `OutOfMemory`, never a figure that wrapped.
    pub fn estimate_search_memory(&self, nq: usize, p: &SearchParams) -> Result<(usize, usize)> {
        let probes = self.probes(p);
        self.search_within_reach(nq, probes, p.k.max(p.rerank))?;
        let s = self.cb.shape();
        let mut host = search_bytes(&s, nq, p.k, self.candidates(p), self.ctx.threads());
        if self.tables.get().is_none() {
            host += tables_bytes(&s, MAX_TERM_BYTES);
        }
        if self.scans_blocks() && self.packed4.get().is_none() {
            host += fast_scan_bytes(&s, self.len());
        }
        let want = self.candidates(p);
        let device = device_search_bytes(self.ctx.backend(), s, self.len(), nq, probes, want);
        Ok((host, device))
    }
}

/// Device bytes a search of `nq` queries (`nprobe` lists, `want` candidates each) over `n`
/// vectors of shape `s` takes on `b` (0 on the CPU): the lists' L2 terms go up with them
/// where the host keeps them (within `MAX_TERM_BYTES`).
pub(crate) fn device_search_bytes(
    b: &dyn Backend,
    s: Shape,
    n: usize,
    nq: usize,
    probes: Probes,
    want: usize,
) -> usize {
    let terms = s.metric == Metric::L2 && s.anchors * s.nsub * s.ksub * 4 <= MAX_TERM_BYTES;
    b.search_device_bytes(&SearchShape {
        codes: s,
        n,
        nq,
        probes,
        want,
        terms,
    })
}

/// The memory (host, device) of a first search of an index of `n` vectors of shape `s` on
/// `b` with `threads` threads, before one exists: the search tables, fast-scan blocks and
/// a block of queries per thread on the host; on the device, the lists uploaded and a full
/// batch of 4,096 queries at the default `k` and `nprobe`.
pub(crate) fn first_search_bytes(
    b: &dyn Backend,
    s: &Shape,
    n: usize,
    threads: usize,
) -> (usize, usize) {
    let host = tables_bytes(s, MAX_TERM_BYTES)
        + fast_scan_bytes(s, n)
        + search_bytes(s, threads * 128, 0, 0, threads);
    let p = SearchParams::default();
    let probes = Probes::of(p.nprobe, s.anchors);
    (host, device_search_bytes(b, *s, n, 4096, probes, p.k))
}

/// Bytes adding `n` vectors to an index allocates at its peak: the encoding (`encode_bytes`),
/// after which, beside its results: with refinement rows (`refine_row` bytes each), the vectors
/// prepared for the metric (cosine) with what the codes decode to and the decoder's two
/// intermediate copies, then the rows made; and what the lists grow by (an id, a code and a
/// refinement row each, and 2% for the allocator around each list's buffers: 1M x 768 at
/// 64 B peaked 1.7% over their bytes) while the rows are still held.
pub(crate) fn add_bytes(
    s: &Shape,
    n: usize,
    refine_row: usize,
    threads: usize,
    converted: bool,
) -> usize {
    let f = 4;
    let rows = n * refine_row;
    let grown = n * (8 + s.code + refine_row);
    let held = grown + grown / 50 + rows;
    let refine = if refine_row > 0 {
        let prepared = if s.metric == Metric::Cosine {
            n * s.d * f
        } else {
            0
        };
        prepared + n * (s.d + 2 * s.dp) * f
    } else {
        0
    };
    estimate::encode_bytes(s, n, threads, converted, refine.max(held))
}
