//! Index search on the WGPU device. The codebook of the last call and the lists
//! of the last searched index stay resident (re-uploaded when they change).

use super::encode::{residuals, rotated, DeviceCodebook};
use super::{Buf, Params, Trace, WgpuBackend, MAX_GROUPS, TILE};
use crate::backend::session::not_opened_for;
use crate::backend::{
    Backend, CodebookView, ListsView, Poll, RangeHits, Resident, SearchJob, Searcher, Session,
};
use crate::error::Result;
use crate::fallbacks::Fallbacks;
use std::sync::{Arc, MutexGuard};

/// Most candidates per query the device scan keeps (the largest `WANT` built).
pub(super) const MAX_WANT: usize = 128;

/// Queries per search batch: bounds the coarse scores and candidate buffers.
pub(super) const QUERY_BATCH: usize = 4096;

/// Threads per search workgroup: one workgroup scans every list a query probes.
const SEARCH_WG: u32 = 256;

/// An index's lists on the device, back to back.
pub(super) struct DeviceLists {
    m: usize,
    codes: Buf,
    ids: Buf,
    start: Buf,
    /// L2: each vector's query-independent part of its distance.
    vterm: Buf,
}

/// The search pipelines built for one table size and candidate count.
pub(super) struct Pipes {
    coarse: wgpu::ComputePipeline,
    tables: wgpu::ComputePipeline,
    scan: wgpu::ComputePipeline,
}

/// Search pipelines by (table floats, candidates per thread).
pub(super) type PipeCache = Vec<((u32, u32), Arc<Pipes>)>;

/// Workgroup bytes of the scan kernel beside its table.
fn scan_extra(want: usize) -> usize {
    SEARCH_WG as usize * 12 + want * 8
}

/// Under L2, the sum over sub-spaces of each vector's list term (`l2_terms`: |c|^2 + 2 a.c
/// for its list's anchor a and its codeword c), plus its error level where its code has one,
/// list after list.
fn vector_terms(cb: &CodebookView, lists: &ListsView) -> Vec<f32> {
    use rayon::prelude::*;
    let (nsub, ksub) = (cb.nsub, cb.ksub());
    let per = nsub * ksub;
    let row = cb.code_bytes();
    // Sub-code s of a code: a byte at 8 bits, a nibble (low first) at 4; the error level
    // is the field after the last sub-code.
    let sub = move |c: &[u8], s: usize| match ksub {
        256 => c[s] as usize,
        _ => ((c[s / 2] >> ((s & 1) * 4)) & 15) as usize,
    };
    let level = move |c: &[u8]| match cb.levels {
        [] => 0.0,
        l => l[sub(c, nsub)],
    };
    let Some(terms) = lists.l2_terms else {
        return Vec::new();
    };
    (0..lists.nlist)
        .into_par_iter()
        .flat_map_iter(|j| {
            let t = &terms[j * per..(j + 1) * per];
            let (_, codes) = (lists.list)(j);
            codes
                .chunks_exact(row)
                .map(move |c| (0..nsub).map(|s| t[s * ksub + sub(c, s)]).sum::<f32>() + level(c))
                .collect::<Vec<_>>()
        })
        .collect()
}

impl DeviceLists {
    fn upload(b: &WgpuBackend, cb: &CodebookView, lists: &ListsView) -> Result<DeviceLists> {
        let m = lists.nlist;
        let (start, ids, mut codes) = lists.flatten();
        // The kernel reads sub-codes only: an error level is in the vector's term. A 4-bit
        // level's nibble stays (the kernel steps over it), an 8-bit level's byte goes.
        if !cb.levels.is_empty() && cb.bits == 8 {
            codes = codes
                .chunks_exact(cb.code_bytes())
                .flat_map(|c| &c[..cb.nsub])
                .copied()
                .collect();
        }
        // Fewer than 2^32 vectors (search_lists checks): offsets fit the kernel's words.
        let start: Vec<u32> = start.iter().map(|&v| v as u32).collect();
        let vterm = match cb.metric {
            crate::params::Metric::L2 if !ids.is_empty() => {
                b.upload(&vector_terms(cb, lists), "vector terms")?
            }
            _ => b.zeros(4, "vector terms")?,
        };
        Ok(DeviceLists {
            m,
            codes: b.upload(&codes, "codes")?,
            ids: b.upload(&ids, "ids")?,
            start: b.upload(&start, "list offsets")?,
            vterm,
        })
    }
}

impl WgpuBackend {
    /// Pipelines for a table of `lut` entries staged in workgroup memory (0: read from
    /// storage) and `want` candidates.
    fn search_pipes(&self, lut: u32, want: u32) -> Result<Arc<Pipes>> {
        super::cached(&self.search, (lut, want), || {
            let staged = (lut > 0) as u32;
            let extra = [
                ("WG", SEARCH_WG),
                ("LUT", lut.max(4)),
                ("STAGED", staged),
                ("WANT", want),
            ];
            let m = super::module(
                &self.device,
                &self.limits,
                self.opts.wgpu.checks,
                "search.wgsl",
                &extra,
            )?;
            let pipe = |e: &str| super::pipeline(&self.device, &m, e);
            Ok(Pipes {
                coarse: pipe("coarse_probe")?,
                tables: pipe("query_tables")?,
                scan: pipe("scan_lists")?,
            })
        })
    }
}

/// A search session on the device (`Backend::searcher`): the codebook and lists resident,
/// held for the session's life, and the pipelines for its table size and candidates.
pub(super) struct WgpuSearcher<'a> {
    b: &'a WgpuBackend,
    cb: CodebookView<'a>,
    job: SearchJob,
    keys: (u64, u64),
    pipes: Arc<Pipes>,
    lists: MutexGuard<'a, Resident<DeviceLists>>,
    codebook: MutexGuard<'a, Resident<DeviceCodebook>>,
}

/// `Backend::searcher`: the host where the device scan does not take `job`, the lists pass a
/// binding or workgroup limit, or they do not fit; else the codebook and lists uploaded where
/// they changed.
pub(super) fn open_searcher<'a>(
    b: &'a WgpuBackend,
    cb: &CodebookView<'a>,
    lists: &ListsView,
    job: SearchJob,
) -> Result<Session<'a>> {
    let why = crate::backend::declines(b.caps(), cb, lists, &job);
    if !why.is_empty() {
        return Ok(Session::Host(why));
    }
    let lut = cb.nsub * cb.ksub();
    let want_built = job.want.max(1).next_power_of_two();
    let m = lists.nlist;
    let room = b.limits.max_compute_workgroup_storage_size as usize;
    // A table beyond workgroup memory is read from the query tables in storage.
    let staged = lut * 4 + scan_extra(want_built) <= room;
    let fits = scan_extra(want_built) + 16 <= room
        && (lists.len * cb.code_bytes()) as u64 <= b.max_binding()
        && m.div_ceil(TILE) <= MAX_GROUPS as usize;
    if !fits {
        return Ok(Session::Host(Fallbacks::DEVICE_DECLINED));
    }
    let pipes = b.search_pipes(if staged { lut as u32 } else { 0 }, want_built as u32)?;
    let mut resident = b.lists.lock().unwrap_or_else(|e| e.into_inner());
    let mut codebook = b.codebook.lock().unwrap_or_else(|e| e.into_inner());
    codebook.get(cb.key, || DeviceCodebook::upload(b, cb))?;
    let upload = || DeviceLists::upload(b, cb, lists);
    if resident.get_or_host(lists.key, upload)?.is_none() {
        return Ok(Session::Host(Fallbacks::DEVICE_DECLINED));
    }
    Ok(Session::Device(Box::new(WgpuSearcher {
        b,
        cb: *cb,
        job,
        keys: (cb.key, lists.key),
        pipes,
        lists: resident,
        codebook,
    })))
}

impl Searcher for WgpuSearcher<'_> {
    fn top_k(
        &mut self,
        q: &[f32],
        allow: Option<&[u32]>,
        poll: Poll,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let (b, cb) = (self.b, &self.cb);
        let dc = self.codebook.held(self.keys.0);
        let dc = dc.expect("the session holds its codebook");
        let dl = self.lists.held(self.keys.1);
        let dl = dl.expect("the session holds its lists");
        let (nprobe, want) = (self.job.probes.get(), self.job.want);
        let d = cb.d;
        let nq = q.len() / d;
        // Coarse scores (batch x m) must fit one binding too.
        let batch = QUERY_BATCH.min(b.rows_per_block(dl.m)).max(1);
        // The allowed positions, once per call (a word, unread, without a filter).
        let filter = match allow {
            Some(a) if !a.is_empty() => Some(b.upload(a, "allowed positions")?),
            Some(_) => Some(b.zeros(4, "allowed positions")?),
            None => None,
        };
        let unfiltered;
        let allow = match &filter {
            Some(f) => (f, true),
            None => {
                unfiltered = b.zeros(4, "allowed positions")?;
                (&unfiltered, false)
            }
        };
        let mut ids = Vec::with_capacity(nq * want);
        let mut dist = Vec::with_capacity(nq * want);
        for chunk in q.chunks(batch * d) {
            poll()?;
            let (i, s) = search_batch(b, &self.pipes, dc, dl, cb, chunk, nprobe, want, allow)?;
            ids.extend(i);
            dist.extend(s);
        }
        Ok((ids, dist))
    }

    fn range(
        &mut self,
        _q: &[f32],
        _radius: f32,
        _allow: Option<&[u32]>,
        _most_hits: usize,
        _poll: Poll,
    ) -> Result<RangeHits> {
        // `Caps::range_search` is off: `declines` sends range searches to the host.
        Err(not_opened_for("a range search"))
    }

    unsafe fn top_k_reranked(&mut self, _q: &[f32], _poll: Poll) -> Result<(Vec<u64>, Vec<f32>)> {
        // No `Caps::device_pointers`: device re-ranks are refused before a session opens.
        Err(not_opened_for("a device re-rank"))
    }
}

/// One batch of queries (nb x d, prepared): coarse products and probe selection, the query
/// tables, and one workgroup per query scanning every list it probes (only the positions set
/// in `allow.0` when `allow.1`).
#[allow(clippy::too_many_arguments)]
fn search_batch(
    b: &WgpuBackend,
    pipes: &Pipes,
    dc: &DeviceCodebook,
    dl: &DeviceLists,
    cb: &CodebookView,
    q: &[f32],
    nprobe: usize,
    want: usize,
    allow: (&Buf, bool),
) -> Result<(Vec<u64>, Vec<f32>)> {
    let (d, dp, m, nsub) = (cb.d, cb.dp(), dl.m, cb.nsub);
    let nb = q.len() / d;
    let l2 = cb.metric == crate::params::Metric::L2;
    let qd = b.upload(q, "queries")?;
    let scores = b.zeros(nb * m * 4, "coarse scores")?;
    let probes = b.zeros(nb * nprobe * 4, "probes")?;
    let base = b.zeros(nb * nprobe * 4, "probe bases")?;
    let qt = b.zeros(nb * nsub * cb.ksub() * 4, "query tables")?;
    let out_d = b.zeros(nb * want * 4, "distances")?;
    let out_id = b.zeros(nb * want * 8, "ids")?;
    let p = || {
        Params::new(&[
            nb as u32,
            d as u32,
            m as u32,
            l2 as u32,
            nprobe as u32,
            nsub as u32,
            cb.dsub as u32,
            want as u32,
            dp as u32,
            cb.ksub() as u32,
            allow.1 as u32,
        ])
    };
    let mut trace = Trace::new(b);
    let mut enc = b.encoder();
    trace.mark(b, &mut enc, "upload");
    b.dots(&mut enc, &qd, nb, &dc.anchors, m, d, &scores)?;
    trace.mark(b, &mut enc, "coarse dots");
    b.dispatch(
        &mut enc,
        &pipes.coarse,
        p(),
        &[
            (1, &qd),
            (2, &scores),
            (3, &dc.anorm),
            (4, &probes),
            (5, &base),
        ],
        (nb as u32, 1, 1),
    );
    trace.mark(b, &mut enc, "coarse probe");
    let y = residuals(b, &mut enc, &qd, nb, cb, None)?;
    let y = rotated(b, &mut enc, dc, y, nb, dp)?;
    b.dispatch(
        &mut enc,
        &pipes.tables,
        p(),
        &[(1, &y), (6, &dc.books), (7, &qt)],
        (nb as u32, nsub as u32, 1),
    );
    // The vector terms are read only under L2 but bound either way.
    b.dispatch(
        &mut enc,
        &pipes.scan,
        p(),
        &[
            (4, &probes),
            (5, &base),
            (8, &dl.codes),
            (9, &dl.start),
            (10, &dl.vterm),
            (13, &dl.ids),
            (14, &out_id),
            (15, &out_d),
            (16, &qt),
            (17, allow.0),
        ],
        (nb as u32, 1, 1),
    );
    trace.mark(b, &mut enc, "scan");
    let mut r = b.read(enc, &[(&out_id, nb * want * 8), (&out_d, nb * want * 4)])?;
    trace.mark(b, &mut b.encoder(), "download");
    // Missing candidates (id u64::MAX) keep whatever distance: the index drops them.
    let dist: Vec<f32> = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
    let ids: Vec<u64> = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
    Ok((ids, dist))
}
