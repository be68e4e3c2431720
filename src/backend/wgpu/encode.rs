//! Encoding on the device: nearest anchor, residual, rotation and PQ per block of rows, each
//! block's results read back while the next one runs.

use super::*;
use crate::backend::CodebookView;

/// Rows per encoding block (64K rows of 384-d: 100 MB).
pub(super) const ENCODE_BLOCK: usize = 65_536;

/// A codebook on the device.
pub(super) struct DeviceCodebook {
    pub(super) anchors: Buf,
    /// |a_j|^2: the assignment's offsets and the coarse L2 terms.
    pub(super) anorm: Buf,
    pub(super) books: Buf,
    pub(super) rot: Option<Buf>,
    /// The error levels, where the codes keep them.
    pub(super) levels: Option<Buf>,
    /// The anchors' fp16 halves, for cooperative matrices.
    pub(super) halves: Option<super::mma::Halves>,
}

impl DeviceCodebook {
    pub(super) fn upload(b: &WgpuBackend, cb: &CodebookView) -> Result<DeviceCodebook> {
        let anchors = b.upload(cb.anchors, "anchors")?;
        let halves = match b.mma() {
            Some(m) => {
                let h = super::mma::Halves::new(b, m, cb.m(), cb.d, "anchors (fp16)")?;
                let mut enc = b.encoder();
                b.halves(&mut enc, None, m, &anchors, cb.m(), cb.d, &h);
                // Not waited for: the queue keeps the order, and each block's read-back
                // waits for it.
                b.submit(enc);
                Some(h)
            }
            None => None,
        };
        Ok(DeviceCodebook {
            anchors,
            halves,
            anorm: b.upload(&crate::linalg::row_norms(cb.anchors, cb.d), "anchor norms")?,
            books: b.upload(cb.books, "sub-codebooks")?,
            rot: if cb.rotation.is_empty() {
                None
            } else {
                Some(b.upload(cb.rotation, "rotation")?)
            },
            levels: if cb.levels.is_empty() {
                None
            } else {
                Some(b.upload(cb.levels, "error levels")?)
            },
        })
    }
}

/// `y` (rows x dp, on the device) rotated by the codebook's rotation, if it has one.
pub(super) fn rotated(
    b: &WgpuBackend,
    enc: &mut Rec,
    dc: &DeviceCodebook,
    y: Buf,
    rows: usize,
    dp: usize,
) -> Result<Buf> {
    let Some(r) = &dc.rot else { return Ok(y) };
    let out = b.zeros(rows * dp * 4, "rotated residuals")?;
    b.dots(enc, &y, rows, r, dp, dp, &out)?;
    Ok(out)
}

/// Records the padded residuals of `x` (rows x d on the device; against `assigned` anchors,
/// or none) into a new rows x dp buffer.
#[allow(clippy::too_many_arguments)]
pub(super) fn residuals(
    b: &WgpuBackend,
    enc: &mut Rec,
    x: &Buf,
    rows: usize,
    cb: &CodebookView,
    anchors: Option<(&Buf, &Buf)>,
) -> Result<Buf> {
    let (d, dp, dsub) = (cb.d, cb.dp(), cb.dsub);
    let y = b.zeros(rows * dp * 4, "residuals")?;
    let g = b.groups_for(rows * dp);
    let p = Params::new(&[
        rows as u32,
        d as u32,
        dp as u32,
        dsub as u32,
        0,
        cb.nsub as u32,
        anchors.is_some() as u32,
        g.0,
    ]);
    // Without anchors the kernel reads none; any buffer satisfies the bindings.
    let (a, assigned) = anchors.unwrap_or((x, x));
    b.dispatch(
        enc,
        &b.k.residuals,
        p,
        &[(1, x), (2, a), (3, assigned), (4, &y)],
        g,
    );
    Ok(y)
}

pub(super) fn encode_residuals(
    b: &WgpuBackend,
    cb: &CodebookView,
    x: &[f32],
) -> Result<(Vec<u32>, Vec<u8>)> {
    let (d, dp, nsub, dsub) = (cb.d, cb.dp(), cb.nsub, cb.dsub);
    if !b.pq_fits(dsub, cb.ksub()) || dp < d {
        crate::check::check_finite(x, "vectors")?;
        return crate::backend::host::encode_in_steps(b, cb, x);
    }
    let n = x.len() / d;
    let mut slot = b.codebook.lock().unwrap_or_else(|e| e.into_inner());
    let dc = slot.get(cb.key, || DeviceCodebook::upload(b, cb))?;
    let m = cb.m();
    // Blocks of rows: within one binding and one dispatch, and small enough that uploading
    // the next block overlaps the device's work on this one.
    // Under a device memory cap, two blocks in flight take half of what it leaves.
    let copies = if dc.rot.is_some() { 2 } else { 1 };
    let row = 4 * d + 16 + copies * 4 * dp + 6 * cb.row_bytes();
    let cap = (MAX_GROUPS as usize * b.wg as usize)
        .min(ENCODE_BLOCK)
        .min(b.rows_in_cap(row, 4, 256));
    let per = b.block_rows(d, dp.max(nsub), cap);
    // With cooperative matrices: the blocks' halves and the rows they leave, made once (a
    // shorter last block leaves stale padding rows, which the kernel computes and ignores).
    let halves = match (b.mma(), &dc.halves) {
        (Some(mm), Some(ch)) => {
            let rows = per.min(n);
            let xh = super::mma::Halves::new(b, mm, rows, d, "vectors (fp16)")?;
            Some((mm, xh, b.zeros((rows + 1) * 4, "rows left to fp32")?, ch))
        }
        _ => None,
    };
    let (mut ids, mut codes) = (Vec::with_capacity(n), Vec::with_capacity(n * nsub));
    let mut trace = Trace::new(b);
    let mut pending: Option<super::PendingRead> = None;
    let mut collect = |p: Option<super::PendingRead>| -> Result<()> {
        if let Some(p) = p {
            let mut r = p.finish(b)?;
            codes.extend(r.pop().expect("two parts"));
            ids.extend(bytemuck::pod_collect_to_vec::<u8, u32>(
                &r.pop().expect("two parts"),
            ));
        }
        Ok(())
    };
    for block in x.chunks(per * d) {
        let rows = block.len() / d;
        let mut enc = b.encoder();
        // Checked as it goes up: the caller leaves that to us (`checks_input`).
        let Some(xd) = b.upload_finite(block, "vectors")? else {
            return Err(crate::check::non_finite_in(x, "vectors"));
        };
        trace.mark(b, &mut enc, "upload");
        let xn = b.zeros(rows * 4, "vector norms")?;
        let assigned = b.zeros(rows * 4, "anchor ids")?;
        let dist = b.zeros(rows * 4, "anchor distances")?;
        b.row_norms(&mut enc, None, &xd, rows, d, 0, &xn);
        if let Some((mm, xh, _, _)) = &halves {
            b.halves(&mut enc, None, mm, &xd, rows, d, xh);
        }
        let a = super::Assign {
            x: &xd,
            rows,
            row0: 0,
            d,
            c: &dc.anchors,
            n: m,
            off: &dc.anorm,
            bias: None,
            norms: &xn,
            assigned: &assigned,
            dist: &dist,
            halves: halves.as_ref().map(|(_, xh, l, ch)| (xh, *ch, l)),
            keep: None,
        };
        b.assign_rows(&mut enc, &a, &mut trace);
        trace.mark(b, &mut enc, "anchors");
        let y = residuals(b, &mut enc, &xd, rows, cb, Some((&dc.anchors, &assigned)))?;
        let y = rotated(b, &mut enc, dc, y, rows, dp)?;
        trace.mark(b, &mut enc, "residuals");
        let books = (&dc.books, dc.levels.as_ref());
        let packed = b.pq_on_device(&mut enc, &y, rows, nsub, dsub, books, cb.ksub())?;
        trace.mark(b, &mut enc, "pq");
        let code = cb.row_bytes();
        let next = b.start_read(enc, &[(&assigned, rows * 4), (&packed, rows * code)], None)?;
        // The previous block comes back while this one runs.
        collect(pending.replace(next))?;
    }
    collect(pending.take())?;
    Ok((ids, codes))
}

/// Four-float pieces per codeword in the PQ kernel.
pub(super) fn pq_pieces(dsub: usize) -> u32 {
    dsub.div_ceil(4) as u32
}

impl WgpuBackend {
    /// PQ indices of `y` (rows x nsub*dsub, on the device) packed as bytes (rows x nsub, and
    /// each row's error level after them where `levels` are given), recorded into `enc`;
    /// returns the packed buffer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pq_on_device(
        &self,
        enc: &mut Rec,
        y: &Buf,
        rows: usize,
        nsub: usize,
        dsub: usize,
        (books, levels): (&Buf, Option<&Buf>),
        ksub: usize,
    ) -> Result<Buf> {
        // Bytes a row: the kernels' `nsub` parameter is this stride; their grid has a column
        // a sub-space.
        let stride = nsub + usize::from(levels.is_some());
        let idx = self.zeros(rows * stride * 4, "PQ indices")?;
        let packed = self.zeros(rows * stride, "codes")?;
        let dp = nsub * dsub;
        let pipe = self.pq_pipeline(dsub)?;
        // Two rows per thread (encode.wgsl).
        let tiles = rows.div_ceil(2 * self.wg as usize);
        if tiles > MAX_GROUPS as usize || nsub > MAX_GROUPS as usize {
            return Err(Error::InvalidArgument(format!(
                "WGPU: {rows} rows x {nsub} sub-spaces is too large for one dispatch"
            )));
        }
        // The PQ and level kernels' parameters, `gx` workgroups along x for a folded grid.
        let shape = |gx: u32| {
            let v = [rows, 0, dp, dsub, ksub, stride, 0].map(|v| v as u32);
            Params::new(&[v[0], v[1], v[2], v[3], v[4], v[5], v[6], gx])
        };
        self.dispatch(
            enc,
            &pipe,
            shape(0),
            &[(4, y), (5, books), (6, &idx)],
            (tiles as u32, nsub as u32, 1),
        );
        if let Some(levels) = levels {
            let g = self.groups_for(rows);
            let bufs = [(4, y), (5, books), (6, &idx), (8, levels)];
            self.dispatch(enc, &self.k.error_levels, shape(g.0), &bufs, g);
        }
        let g = self.groups_for((rows * stride).div_ceil(4));
        let p = Params::new(&[rows as u32, 0, 0, 0, 0, stride as u32, 0, g.0]);
        self.dispatch(enc, &self.k.pack, p, &[(6, &idx), (7, &packed)], g);
        Ok(packed)
    }

    pub(super) fn pq_pipeline(&self, dsub: usize) -> Result<Arc<wgpu::ComputePipeline>> {
        cached(&self.pq, dsub, || {
            let extra = [("D4", pq_pieces(dsub))];
            let m = module(
                &self.device,
                &self.limits,
                self.opts.wgpu.checks,
                "encode.wgsl",
                &extra,
            )?;
            pipeline(&self.device, &m, "pq_assign")
        })
    }

    /// Whether the PQ kernel takes this shape (sub-codebook in workgroup memory).
    pub(super) fn pq_fits(&self, dsub: usize, ksub: usize) -> bool {
        (1..=MAX_DSUB).contains(&dsub)
            && (1..=256).contains(&ksub)
            && ksub * 4 * pq_pieces(dsub) as usize <= book_floats(&self.limits)
    }
}
