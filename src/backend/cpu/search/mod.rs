//! The host's search engine, the CPU backend's searcher (and every context's where a device
//! does not take a search): coarse probing (bounds from the anchors' axes or from their 8-bit
//! products, else one GEMM per block of queries), a lookup table per probed list, and the
//! scans of its codes (8-bit tables, 4-bit fast-scan blocks) into a keeper. It reads plain
//! views and the tables made from them; the index keeps the algorithm: what is kept (top k,
//! a radius, bounds), filters, re-rank and the merging of results.

pub(crate) mod coarse8;
pub(crate) mod fastscan;
mod keep;
pub(crate) mod memory;
pub(crate) mod probe;
pub(crate) mod scan;
mod tables;

pub(crate) use fastscan::Packed;
pub(crate) use keep::{Cand, HitRoom, Keep, TopK, Within, HIT_BYTES};
pub(crate) use tables::{Tables, MAX_TERM_BYTES};

use crate::backend::filter::Filter;
use crate::backend::{CodebookView, Poll};
use crate::error::Result;
use crate::linalg;
use crate::params::Metric;
use scan::{prefetch, scan, scan4_blocks, List};

/// A search's host searcher over an index's views: its codebook, its lists (`list`: list j's
/// ids and codes, as `ListsView::list` gives them, called directly here: it is asked once per
/// probed list), the tables made from the codebook, and its 4-bit lists in fast-scan blocks
/// where they were made (else each code is scanned alone, with the same results).
pub(crate) struct HostSearcher<'a, L> {
    pub cb: &'a CodebookView<'a>,
    pub list: L,
    pub tables: &'a Tables,
    pub packed: Option<&'a Packed>,
    /// Rotate queries in f32 products even where the rotation is held in integers.
    pub exact_rotation: bool,
}

impl<'a, L: Fn(usize) -> (&'a [u64], &'a [u8])> HostSearcher<'a, L> {
    /// Scans the lists each query of `qb` probes into a fresh `K` (`fresh`), given to `done`
    /// with the query's number: AVX2 code where the CPU has it. `poll` is asked between
    /// queries: its error (a cancel, a deadline) stops the scan.
    pub(crate) fn scan_block<K: Keep>(
        &self,
        qb: &[f32],
        nprobe: usize,
        filter: Option<&Filter>,
        poll: Poll,
        fresh: impl Fn() -> K,
        done: impl FnMut(usize, K) -> Result<()>,
    ) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { self.scan_block_avx2(qb, nprobe, filter, poll, fresh, done) };
        }
        self.scan_block_any(qb, nprobe, filter, poll, fresh, done)
    }

    /// The same code compiled for AVX2 (no FMA: results equal the baseline build's).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn scan_block_avx2<K: Keep>(
        &self,
        qb: &[f32],
        nprobe: usize,
        filter: Option<&Filter>,
        poll: Poll,
        fresh: impl Fn() -> K,
        done: impl FnMut(usize, K) -> Result<()>,
    ) -> Result<()> {
        self.scan_block_any(qb, nprobe, filter, poll, fresh, done)
    }

    #[inline(always)]
    fn scan_block_any<K: Keep>(
        &self,
        qb: &[f32],
        nprobe: usize,
        filter: Option<&Filter>,
        poll: Poll,
        fresh: impl Fn() -> K,
        mut done: impl FnMut(usize, K) -> Result<()>,
    ) -> Result<()> {
        let (cb, tables) = (self.cb, self.tables);
        let (d, m, dp) = (cb.d, cb.m(), cb.dp());
        let (nsub, ks) = (cb.nsub, cb.ksub());
        let r = qb.len() / d;
        let anorm = &tables.anchor_norms;
        // Bounds that leave a few anchors to score in full: from the queries on the anchors'
        // axes (`probe`) or from their products in integers (`coarse8`), where one serves this
        // nprobe; else every anchor's product with each query in f32.
        let probe = tables.probe.as_ref().filter(|p| p.serves(nprobe));
        let probe = probe.map(|p| (p, p.block(qb, d)));
        let ints = tables
            .coarse8
            .as_ref()
            .filter(|c| probe.is_none() && c.serves(nprobe));
        let ints = ints.map(|c| (c, c.block(qb, d)));
        let bounded = probe.is_some() || ints.is_some();
        let mut bound = vec![0f32; if bounded { m } else { 0 }];
        let mut dots = vec![0f32; if bounded { 0 } else { r * m }];
        if !bounded {
            linalg::dot_block(qb, cb.anchors, d, &mut dots);
        }
        let qy = tables.rotated_queries(cb, qb, self.exact_rotation);
        let l2 = cb.metric == Metric::L2;
        let mut coarse = vec![0f32; m];
        let mut probes = Vec::new();
        // The query's own table, built right before its probes so it stays in cache:
        // -2 <Rq_j, c> for L2 (added to the list's terms), -<Rq_j, c> for inner product.
        let mut qci = vec![0f32; nsub * ks];
        // Codes with an error level (L2 only) end in one more sub-code, whose row of the
        // table is the levels themselves: no query moves them.
        let levels = cb.levels;
        let rows = cb.row_bytes();
        let mut lut = vec![0f32; rows * ks];
        lut[nsub * ks..].copy_from_slice(levels);
        let (mut fly, mut fly_anchor) = if tables.l2_terms.is_none() && l2 {
            (vec![0f32; nsub * ks], vec![0f32; dp])
        } else {
            (Vec::new(), Vec::new())
        };
        let mut pair = Vec::new();
        let scale = if l2 { -2.0 } else { -1.0 };
        let mut bytes = fastscan::ByteTable::new(rows);
        // List a's precomputed L2 terms, where they are kept.
        let per = nsub * ks;
        let terms_of = |a: usize| tables.l2_terms.as_ref().map(|t| &t[a * per..(a + 1) * per]);
        for i in 0..r {
            // Between queries: a cancel or a deadline is heard within one query.
            poll()?;
            let qv = &qb[i * d..(i + 1) * d];
            let qn = linalg::dot(qv, qv);
            let terms = match (&probe, &ints) {
                (Some((p, blk)), _) => Some(p.bounds(blk, i, (qv, qn, l2), &mut bound)),
                (None, Some((c, blk))) => Some(c.bounds(blk, i, (qv, qn, l2), anorm, &mut bound)),
                (None, None) => None,
            };
            match terms {
                Some(terms) => {
                    let slack = probe::slack(terms, qn, tables.max_anchor_norm);
                    let out = (&mut coarse[..], &mut probes);
                    probe::settle(&bound, (qv, qn, l2), cb.anchors, anorm, nprobe, slack, out);
                }
                None => {
                    for j in 0..m {
                        coarse[j] = probe::coarse_score(dots[i * m + j], qn, anorm[j], l2);
                    }
                    linalg::smallest_k(&coarse, nprobe, &mut probes);
                }
            }
            let y = &qy[i * dp..(i + 1) * dp];
            tables.query_table(y, cb.dsub, ks, scale, &mut qci);
            let mut top = fresh();
            for (pi, &a) in probes.iter().enumerate() {
                let a = a as usize;
                let (lids, lcodes) = (self.list)(a);
                if lids.is_empty() {
                    continue;
                }
                // The next list's terms are a stream from memory the hardware prefetcher
                // only finds after its first misses: asked for now, they arrive while this
                // list is scanned.
                if let Some(next) = probes.get(pi + 1).and_then(|&n| terms_of(n as usize)) {
                    for line in next.iter().step_by(16) {
                        prefetch(line);
                    }
                }
                if l2 {
                    let terms: &[f32] = match terms_of(a) {
                        Some(t) => t,
                        None => {
                            tables.fly_terms(cb, a, &mut fly_anchor, &mut fly);
                            &fly
                        }
                    };
                    for ((l, t), c) in lut.iter_mut().zip(terms).zip(&qci) {
                        *l = t + c;
                    }
                }
                let table = if l2 { &lut } else { &qci };
                let list = List {
                    base: coarse[a],
                    ids: lids,
                    codes: lcodes,
                };
                match self.packed {
                    Some(p) => {
                        scan4_blocks(&list, table, rows, p.list(a), &mut bytes, filter, &mut top)?
                    }
                    None => scan(&list, table, cb.bits, rows, &mut pair, filter, &mut top)?,
                }
            }
            done(i, top)?;
        }
        Ok(())
    }
}
