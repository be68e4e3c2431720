//! List scans and exact re-rank on the device, with the codebook and lists kept resident.

use super::*;
use crate::backend::{Poll, RangeHits, SearchJob, Searcher, Session};
use crate::fallbacks::Fallbacks;
use std::sync::MutexGuard;

/// One index's lists on the device, back to back, with what its search needs.
pub(super) struct DeviceLists {
    pub(super) m: usize,
    pub(super) d: usize,
    pub(super) dp: usize,
    /// Table rows a code reads: its M sub-codes, and its error level where it has one (a
    /// row of the lists' terms that no query moves: its query table row stays zero).
    pub(super) nsub: usize,
    /// Sub-quantizers M (the query tables' rows made from the codebook).
    pub(super) books: usize,
    /// Codewords per sub-quantizer: 256 (8-bit codes) or 16 (4-bit).
    pub(super) ksub: usize,
    pub(super) dsub: usize,
    pub(super) l2: bool,
    pub(super) codes: CudaSlice<u8>,
    pub(super) ids: CudaSlice<u64>,
    pub(super) start: CudaSlice<u64>,
    /// m x nsub x ksub L2 table terms, the levels as each list's last row where the codes
    /// have them (one unused value for inner product).
    pub(super) terms: CudaSlice<f32>,
}

/// A codebook's arrays on the device.
pub(super) struct DeviceCodebook {
    pub(super) anchors: CudaSlice<f32>,
    /// |a|^2 per anchor, as the host computes them (coarse scores then round alike).
    pub(super) anorm: CudaSlice<f32>,
    /// The anchors split into fp16 pieces: encoding's 3xFP16 GEMMs.
    pub(super) anchors3: Split,
    pub(super) books: CudaSlice<f32>,
    pub(super) rot: Option<CudaSlice<f32>>,
    /// The error levels, where the codes keep them.
    pub(super) levels: Option<CudaSlice<f32>>,
}

/// `y` (n x dp) turned by the codebook's rotation (row-major y R^T, as `rotation::apply`), or
/// `y` itself when it has none.
pub(super) fn rotated(
    dev: &Device,
    dc: &DeviceCodebook,
    y: CudaSlice<f32>,
    n: usize,
    dp: usize,
) -> Result<CudaSlice<f32>> {
    let Some(r) = &dc.rot else { return Ok(y) };
    // SAFETY: the GEMM writes every element.
    let mut turned = unsafe { CudaBackend::filled_later::<f32>(&dev.stream, n * dp)? };
    gemm_rows_by(dev, r, dp, dp, &y.slice(..n * dp), n, &mut turned)?;
    Ok(turned)
}

impl DeviceCodebook {
    pub(super) fn upload(b: &CudaBackend, cb: &CodebookView) -> Result<DeviceCodebook> {
        let dev = b.lock();
        let s = &dev.stream;
        let (k, d) = (cb.m(), cb.d);
        let anchors = b.up(s, cb.anchors)?;
        let mut anchors3 = Split::new(s, k, d)?;
        anchors3.fill(&dev, &anchors, k, d, true)?;
        Ok(DeviceCodebook {
            anchors,
            anorm: b.up(s, &crate::linalg::row_norms(cb.anchors, d))?,
            anchors3,
            books: b.up(s, cb.books)?,
            rot: if cb.rotation.is_empty() {
                None
            } else {
                Some(b.up(s, cb.rotation)?)
            },
            levels: if cb.levels.is_empty() {
                None
            } else {
                Some(b.up(s, cb.levels)?)
            },
        })
    }
}

impl DeviceLists {
    pub(super) fn upload(
        b: &CudaBackend,
        dev: &Device,
        cb: &CodebookView,
        lists: &ListsView,
    ) -> Result<DeviceLists> {
        let s = &dev.stream;
        let m = lists.nlist;
        let (start, ids, codes) = lists.flatten();
        let terms = match lists.l2_terms {
            Some(t) if cb.metric == crate::params::Metric::L2 && cb.levels.is_empty() => {
                b.up(s, t)?
            }
            Some(t) if cb.metric == crate::params::Metric::L2 => {
                let per = cb.nsub * cb.ksub();
                let mut all = Vec::with_capacity(m * (per + cb.levels.len()));
                for list in t.chunks_exact(per) {
                    all.extend_from_slice(list);
                    all.extend_from_slice(cb.levels);
                }
                b.up(s, &all)?
            }
            _ => CudaBackend::zeros(s, 1)?,
        };
        Ok(DeviceLists {
            m,
            d: cb.d,
            dp: cb.dp(),
            nsub: cb.row_bytes(),
            books: cb.nsub,
            ksub: cb.ksub(),
            dsub: cb.dsub,
            l2: cb.metric == crate::params::Metric::L2,
            codes: if codes.is_empty() {
                CudaBackend::zeros(s, 1)?
            } else {
                b.up(s, &codes)?
            },
            ids: if ids.is_empty() {
                CudaBackend::zeros(s, 1)?
            } else {
                b.up(s, &ids)?
            },
            start: b.up(s, &start)?,
            terms,
        })
    }
}

/// A batch of queries after the probe: on the device, the queries, their probed lists and
/// coarse scores (nb x nprobe), and their tables (nb x nsub x ksub).
pub(super) struct Probed {
    qd: CudaSlice<f32>,
    probes: CudaSlice<u32>,
    base: CudaSlice<f32>,
    qt: CudaSlice<f32>,
}

/// A search session on the device (`Backend::searcher`): the device, with the codebook and
/// lists resident, held for the session's life.
pub(super) struct CudaSearcher<'a> {
    b: &'a CudaBackend,
    cb: CodebookView<'a>,
    job: SearchJob,
    keys: (u64, u64),
    lists: MutexGuard<'a, Resident<DeviceLists>>,
    codebook: MutexGuard<'a, Resident<DeviceCodebook>>,
    dev: MutexGuard<'a, Device>,
}

impl CudaBackend {
    /// `Backend::searcher`: the host where the device scan does not take `job` or the lists
    /// do not fit; else the codebook and lists uploaded where they changed, and the device
    /// held by the searcher. A device re-rank's range and depth are checked first.
    pub(super) fn open_searcher<'a>(
        &'a self,
        cb: &CodebookView<'a>,
        lists: &ListsView,
        job: SearchJob,
    ) -> Result<Session<'a>> {
        if let Some(raw) = job.rerank {
            self.check_rerank(cb.d, job.want, raw)?;
        }
        let why = crate::backend::declines(self.caps(), cb, lists, &job);
        if !why.is_empty() {
            return Ok(Session::Host(why));
        }
        self.bind()?;
        let mut resident = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let mut codebook = self.codebook.lock().unwrap_or_else(|e| e.into_inner());
        codebook.get(cb.key, || DeviceCodebook::upload(self, cb))?;
        let dev = self.lock();
        let upload = || DeviceLists::upload(self, &dev, cb, lists);
        if resident.get_or_host(lists.key, upload)?.is_none() {
            return Ok(Session::Host(Fallbacks::DEVICE_DECLINED));
        }
        Ok(Session::Device(Box::new(CudaSearcher {
            b: self,
            cb: *cb,
            job,
            keys: (cb.key, lists.key),
            lists: resident,
            codebook,
            dev,
        })))
    }

    /// The checks of a device re-rank, before any work: its depth within the scan's,
    /// results within its candidates, and its rows device memory this context reads.
    pub(super) fn check_rerank(&self, d: usize, want: usize, raw: DeviceRerank) -> Result<()> {
        if want > MAX_WANT {
            return Err(Error::InvalidArgument(format!(
                "re-ranking on the device takes up to {MAX_WANT} candidates per query, not {want}"
            )));
        }
        if raw.k == 0 || raw.k > want {
            return Err(Error::InvalidArgument(format!(
                "{} results per query from {want} candidates",
                raw.k
            )));
        }
        // No rows: any candidate fails as an id without a row, and there is no range to check.
        if raw.n > 0 {
            self.device_rows(raw.at, raw.n, d, "raw vectors")?;
        }
        Ok(())
    }
}

impl CudaSearcher<'_> {
    /// The resident codebook and lists.
    fn resident(&self) -> (&DeviceCodebook, &DeviceLists) {
        let dc = self.codebook.held(self.keys.0);
        let dl = self.lists.held(self.keys.1);
        (
            dc.expect("the session holds its codebook"),
            dl.expect("the session holds its lists"),
        )
    }

    /// The allowed positions on the device, once per call.
    fn allowed(&self, allow: Option<&[u32]>) -> Result<Option<CudaSlice<u32>>> {
        self.dev.bind()?;
        allow.map(|a| self.b.up(&self.dev.stream, a)).transpose()
    }

    /// The scan, batch by batch, with the candidates re-ranked on the device against `raw`
    /// when given (`raw.k` results per query, else the job's `want`).
    fn scan(
        &self,
        q: &[f32],
        raw: Option<DeviceRerank>,
        allow: Option<&[u32]>,
        poll: Poll,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let allow = self.allowed(allow)?;
        let (b, dev, cb) = (self.b, &*self.dev, &self.cb);
        let (dc, dl) = self.resident();
        let (nprobe, want) = (self.job.probes.get(), self.job.want);
        let s = &dev.stream;
        let mut rerank = match raw {
            Some(r) => Some((r, b.rerank_flags(s)?)),
            None => None,
        };
        let (mut ids, mut dist) = (Vec::new(), Vec::new());
        for batch in q.chunks(cb.d * QUERY_BATCH) {
            poll()?;
            let (qd, cid, cd) = b.search_batch(dev, dc, dl, batch, nprobe, want, allow.as_ref())?;
            let (i, v) = match &mut rerank {
                None => (b.down(s, &cid)?, b.down(s, &cd)?),
                Some((r, bad)) => b.rerank_batch(dev, cb, &qd, &cid, want, *r, bad)?,
            };
            ids.extend(i);
            dist.extend(v);
        }
        if let Some((_, bad)) = &rerank {
            b.rerank_errors(s, bad)?;
        }
        Ok((ids, dist))
    }
}

impl Searcher for CudaSearcher<'_> {
    fn top_k(
        &mut self,
        q: &[f32],
        allow: Option<&[u32]>,
        poll: Poll,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        self.scan(q, None, allow, poll)
    }

    fn range(
        &mut self,
        q: &[f32],
        radius: f32,
        allow: Option<&[u32]>,
        most_hits: usize,
        poll: Poll,
    ) -> Result<RangeHits> {
        let allow = self.allowed(allow)?;
        let (b, dev, cb) = (self.b, &*self.dev, &self.cb);
        let (dc, dl) = self.resident();
        let nprobe = self.job.probes.get();
        let (mut counts, mut ids, mut dist) = (Vec::new(), Vec::new(), Vec::new());
        for batch in q.chunks(cb.d * QUERY_BATCH) {
            poll()?;
            let most = most_hits - ids.len();
            let (c, i, v) =
                b.range_batch(dev, dc, dl, batch, nprobe, radius, allow.as_ref(), most)?;
            counts.extend(c);
            ids.extend(i);
            dist.extend(v);
        }
        Ok((counts, ids, dist))
    }

    unsafe fn top_k_reranked(&mut self, q: &[f32], poll: Poll) -> Result<(Vec<u64>, Vec<f32>)> {
        let raw = self
            .job
            .rerank
            .ok_or_else(|| crate::backend::session::not_opened_for("a device re-rank"))?;
        self.scan(q, Some(raw), None, poll)
    }
}

impl CudaBackend {
    /// The re-rank's error words for one call (`bad` in search.cu), none set: the smallest
    /// id without a row, then the smallest whose score is not finite.
    pub(super) fn rerank_flags(&self, s: &Arc<CudaStream>) -> Result<CudaSlice<u64>> {
        self.up(s, &[u64::MAX; 2])
    }

    /// The error a call's re-rank batches left in `bad`, if any.
    pub(super) fn rerank_errors(&self, s: &Arc<CudaStream>, bad: &CudaSlice<u64>) -> Result<()> {
        match self.down(s, bad)?[..] {
            [id, _] if id != u64::MAX => Err(crate::error::raw_missing(id)),
            [_, id] if id != u64::MAX => Err(crate::error::raw_not_finite(id)),
            _ => Ok(()),
        }
    }

    /// The `raw.k` best per query of `cand` (`want` per query of `qd`) by their exact
    /// scores against `raw`; ids without rows and scores that are not finite go to `bad`
    /// (`rerank_flags`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rerank_batch(
        &self,
        dev: &Device,
        cb: &CodebookView,
        qd: &CudaSlice<f32>,
        cand: &CudaSlice<u64>,
        want: usize,
        raw: DeviceRerank,
        bad: &mut CudaSlice<u64>,
    ) -> Result<(Vec<u64>, Vec<f32>)> {
        let (s, d, k) = (&dev.stream, cb.d, raw.k);
        let nb = cand.len() / want;
        // SAFETY: a query's `want` candidates take the ranks 0..want once each, and k <= want.
        let mut out_id = unsafe { CudaBackend::filled_later::<u64>(s, nb * k)? };
        let mut out_d = unsafe { CudaBackend::filled_later::<f32>(s, nb * k)? };
        let metric = match cb.metric {
            crate::params::Metric::L2 => 0i32,
            crate::params::Metric::InnerProduct => 1,
            crate::params::Metric::Cosine => 2,
        };
        let vec4 = d % 4 == 0 && raw.at.is_multiple_of(16);
        let (di, wi, ki, n) = (d as i32, want as i32, k as i32, raw.n as u64);
        // SAFETY: qd holds nb x d floats, cand nb x want ids, the outputs nb x k; the kernel
        // reads rows only below `raw.n`, within the range `device_rows` accepted.
        ran(
            unsafe {
                s.launch_builder(&dev.k.rerank_rows[vec4 as usize])
                    .arg(qd)
                    .arg(&di)
                    .arg(cand)
                    .arg(&wi)
                    .arg(&raw.at)
                    .arg(&n)
                    .arg(&metric)
                    .arg(&ki)
                    .arg(&mut out_id)
                    .arg(&mut out_d)
                    .arg(bad)
                    .launch(LaunchConfig {
                        grid_dim: (nb as u32, 1, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: 0,
                    })
            },
            "re-rank",
        )?;
        Ok((self.down(s, &out_id)?, self.down(s, &out_d)?))
    }

    /// One batch of queries (nb x d, prepared) through the device search: coarse GEMM and
    /// probe selection, the query tables, one block per (probe, query) scanning a list, and a
    /// merge per query, skipping the positions `allow` does not set. Returns the queries on
    /// the device and their `want` candidates (ids, scores), still there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn search_batch(
        &self,
        dev: &Device,
        dc: &DeviceCodebook,
        dl: &DeviceLists,
        q: &[f32],
        nprobe: usize,
        want: usize,
        allow: Option<&CudaSlice<u32>>,
    ) -> Result<(CudaSlice<f32>, CudaSlice<u64>, CudaSlice<f32>)> {
        let s = &dev.stream;
        let (nsub, ksub) = (dl.nsub, dl.ksub);
        let nb = q.len() / dl.d;
        let Probed {
            qd,
            probes,
            base,
            qt,
        } = self.probe_batch(dev, dc, dl, q, nprobe)?;
        let (l2i, npi, nsi, ksi) = (dl.l2 as i32, nprobe as i32, nsub as i32, ksub as i32);

        let per = nprobe * want;
        let mut cand_d = CudaBackend::zeros::<f32>(s, nb * per)?;
        let mut cand_p = CudaBackend::zeros::<u32>(s, nb * per)?;
        let wi = want as i32;
        let table = 4 * nsub * ksub;
        let staged = table <= self.scan_smem;
        let si = staged as i32;
        let unfiltered = CudaBackend::zeros::<u32>(s, 1)?;
        let fi = allow.is_some() as i32;
        let allow = allow.unwrap_or(&unfiltered);
        ran(
            unsafe {
                s.launch_builder(&dev.k.scan_lists)
                    .arg(&dl.codes)
                    .arg(&dl.start)
                    .arg(&dl.terms)
                    .arg(&l2i)
                    .arg(&qt)
                    .arg(&nsi)
                    .arg(&ksi)
                    .arg(&probes)
                    .arg(&base)
                    .arg(&npi)
                    .arg(&wi)
                    .arg(&mut cand_d)
                    .arg(&mut cand_p)
                    .arg(&si)
                    .arg(allow)
                    .arg(&fi)
                    .launch(LaunchConfig {
                        grid_dim: (nprobe as u32, nb as u32, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: if staged { table as u32 } else { 0 },
                    })
            },
            "scan lists",
        )?;
        let mut out_d = CudaBackend::zeros::<f32>(s, nb * want)?;
        let mut out_id = CudaBackend::zeros::<u64>(s, nb * want)?;
        let pi = per as i32;
        ran(
            unsafe {
                s.launch_builder(&dev.k.merge_candidates)
                    .arg(&cand_d)
                    .arg(&cand_p)
                    .arg(&pi)
                    .arg(&wi)
                    .arg(&dl.ids)
                    .arg(&mut out_d)
                    .arg(&mut out_id)
                    .launch(LaunchConfig {
                        grid_dim: (nb as u32, 1, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: 0,
                    })
            },
            "merge candidates",
        )?;
        Ok((qd, out_id, out_d))
    }

    /// The first steps of a batch of queries (nb x d, prepared): coarse GEMM and probe
    /// selection, the padded, rotated queries and their tables, left on the device.
    fn probe_batch(
        &self,
        dev: &Device,
        dc: &DeviceCodebook,
        dl: &DeviceLists,
        q: &[f32],
        nprobe: usize,
    ) -> Result<Probed> {
        let s = &dev.stream;
        let (d, dp, m, nsub, ksub) = (dl.d, dl.dp, dl.m, dl.nsub, dl.ksub);
        let nb = q.len() / d;
        let qd = self.up(s, q)?;
        let mut dots = CudaBackend::zeros::<f32>(s, nb * m)?;
        gemm_rows_by(dev, &dc.anchors, m, d, &qd.slice(..nb * d), nb, &mut dots)?;
        let mut probes = CudaBackend::zeros::<u32>(s, nb * nprobe)?;
        let mut base = CudaBackend::zeros::<f32>(s, nb * nprobe)?;
        let (nbi, di, mi, l2i, npi) = (nb as i32, d as i32, m as i32, dl.l2 as i32, nprobe as i32);
        // SAFETY (every launch here): buffers are sized from nb, d, dp, m, nsub, nprobe and
        // want as the kernels index them; list offsets and codes come from the same index.
        ran(
            unsafe {
                s.launch_builder(&dev.k.coarse_probe)
                    .arg(&qd)
                    .arg(&nbi)
                    .arg(&di)
                    .arg(&mut dots)
                    .arg(&mi)
                    .arg(&dc.anorm)
                    .arg(&l2i)
                    .arg(&npi)
                    .arg(&mut probes)
                    .arg(&mut base)
                    .launch(per_row(nb))
            },
            "coarse probe",
        )?;
        let mut y = CudaBackend::zeros::<f32>(s, nb * dp)?;
        let (dpi, dsubi) = (dp as i32, dl.dsub as i32);
        let none = 0u64; // null anchors: the residual kernel only pads
        ran(
            unsafe {
                s.launch_builder(&dev.k.residuals)
                    .arg(&qd)
                    .arg(&nbi)
                    .arg(&di)
                    .arg(&none)
                    .arg(&none)
                    .arg(&dpi)
                    .arg(&dsubi)
                    .arg(&mut y)
                    .launch(strided(nb * dp, self.sms))
            },
            "pad queries",
        )?;
        let y = rotated(dev, dc, y, nb, dp)?;
        let mut qt = CudaBackend::zeros::<f32>(s, nb * nsub * ksub)?;
        let (dsi, ksi, nsi) = (dl.dsub as i32, ksub as i32, nsub as i32);
        let scale: f32 = if dl.l2 { -2.0 } else { -1.0 };
        ran(
            unsafe {
                s.launch_builder(&dev.k.query_tables)
                    .arg(&y)
                    .arg(&dpi)
                    .arg(&dsi)
                    .arg(&ksi)
                    .arg(&dc.books)
                    .arg(&scale)
                    .arg(&mut qt)
                    .arg(&nsi)
                    .launch(LaunchConfig {
                        grid_dim: (nb as u32, dl.books as u32, 1),
                        block_dim: (256, 1, 1),
                        shared_mem_bytes: (4 * dl.dsub) as u32,
                    })
            },
            "query tables",
        )?;
        Ok(Probed {
            qd,
            probes,
            base,
            qt,
        })
    }

    /// Range search of a batch of queries (nb x d, prepared): every vector of the probed lists
    /// scoring at most `radius` (smaller is better), skipping the positions `allow` does not
    /// set. Two passes of `range_lists`: one counts each query's hits, the second writes them
    /// at offsets made from the counts. Returns the counts, then ids and scores query after
    /// query (unordered within a query).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn range_batch(
        &self,
        dev: &Device,
        dc: &DeviceCodebook,
        dl: &DeviceLists,
        q: &[f32],
        nprobe: usize,
        radius: f32,
        allow: Option<&CudaSlice<u32>>,
        most_hits: usize,
    ) -> Result<(Vec<usize>, Vec<u64>, Vec<f32>)> {
        let s = &dev.stream;
        let nb = q.len() / dl.d;
        let p = self.probe_batch(dev, dc, dl, q, nprobe)?;
        let unfiltered = CudaBackend::zeros::<u32>(s, 1)?;
        let fi = allow.is_some() as i32;
        let allow = allow.unwrap_or(&unfiltered);
        let (l2i, npi, nsi, ksi) = (dl.l2 as i32, nprobe as i32, dl.nsub as i32, dl.ksub as i32);
        let pass = |count: &mut CudaSlice<u32>,
                    at: Option<&CudaSlice<u64>>,
                    out_id: &mut CudaSlice<u64>,
                    out_d: &mut CudaSlice<f32>| {
            let none = 0u64;
            // SAFETY: buffers sized from nb, nprobe and the counts as the kernel indexes them;
            // a null `at` makes the kernel count only.
            ran(
                unsafe {
                    let mut b = s.launch_builder(&dev.k.range_lists);
                    b.arg(&dl.codes)
                        .arg(&dl.start)
                        .arg(&dl.terms)
                        .arg(&l2i)
                        .arg(&p.qt)
                        .arg(&nsi)
                        .arg(&ksi)
                        .arg(&p.probes)
                        .arg(&p.base)
                        .arg(&npi)
                        .arg(&radius)
                        .arg(allow)
                        .arg(&fi)
                        .arg(&dl.ids)
                        .arg(count);
                    match at {
                        Some(a) => b.arg(a),
                        None => b.arg(&none),
                    };
                    b.arg(out_id).arg(out_d).launch(LaunchConfig {
                        grid_dim: (nprobe as u32, nb as u32, 1),
                        block_dim: (128, 1, 1),
                        shared_mem_bytes: 0,
                    })
                },
                "range lists",
            )
        };
        let mut count = CudaBackend::zeros::<u32>(s, nb)?;
        let (mut id1, mut d1) = (
            CudaBackend::zeros::<u64>(s, 1)?,
            CudaBackend::zeros::<f32>(s, 1)?,
        );
        pass(&mut count, None, &mut id1, &mut d1)?;
        let counts: Vec<usize> = self
            .down(s, &count)?
            .into_iter()
            .map(|c| c as usize)
            .collect();
        let mut at = Vec::with_capacity(nb);
        let mut total = 0u64;
        for &c in &counts {
            at.push(total);
            total += c as u64;
        }
        if total == 0 {
            return Ok((counts, Vec::new(), Vec::new()));
        }
        if total > most_hits as u64 {
            return Err(crate::error::Error::OutOfMemory(format!(
                "range search: {total} hits in a batch of {nb} queries pass the {most_hits} \
                 that fit under the context's memory cap"
            )));
        }
        let n = usize::try_from(total)
            .map_err(|_| crate::error::Error::OutOfMemory(format!("range search: {total} hits")))?;
        let at = self.up(s, &at)?;
        let mut cursor = CudaBackend::zeros::<u32>(s, nb)?;
        let (mut ids, mut dist) = (
            CudaBackend::zeros::<u64>(s, n)?,
            CudaBackend::zeros::<f32>(s, n)?,
        );
        pass(&mut cursor, Some(&at), &mut ids, &mut dist)?;
        Ok((counts, self.down(s, &ids)?, self.down(s, &dist)?))
    }
}
