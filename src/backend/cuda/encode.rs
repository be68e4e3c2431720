//! Encoding on the device: anchors, residuals, rotation and PQ per block, pipelined with the copies.

use super::*;

/// Most bytes of anchor scores per encoding GEMM.
pub(super) const ENCODE_DOTS_BYTES: usize = 256 << 20;

/// One encoding call's device buffers, per block of `block` rows.
pub(super) struct EncodeScratch {
    pub(super) block: usize,
    /// Blocks of points: the copy stream fills one while another is encoded.
    pub(super) x: [CudaSlice<f32>; BUFS],
    pub(super) xn: CudaSlice<f32>,
    pub(super) dist: CudaSlice<f32>,
    /// The block split for 3xFP16 GEMMs (`None` where there was no room: fp32 GEMMs).
    pub(super) x3: Option<Split>,
    /// Anchor scores for `chunk` rows.
    pub(super) dots: CudaSlice<f32>,
    pub(super) chunk: usize,
}

impl EncodeScratch {
    pub(super) fn new(
        s: &Arc<CudaStream>,
        block: usize,
        d: usize,
        k: usize,
    ) -> Result<EncodeScratch> {
        let chunk = (ENCODE_DOTS_BYTES / (4 * k)).clamp(1, block);
        // SAFETY (all of them): each block's rows arrive by copy, then its norms, split, dots
        // and distances are written by kernels and GEMMs before anything reads them.
        let f = |len| unsafe { CudaBackend::filled_later::<f32>(s, len) };
        Ok(EncodeScratch {
            block,
            x: per_buf(|| f(block * d))?,
            xn: f(block)?,
            dist: f(block)?,
            x3: Split::if_room(s, block, d)?,
            dots: f(chunk * k)?,
            chunk,
        })
    }
}

/// Where the rows an encoding reads live.
#[derive(Clone, Copy)]
pub(super) enum Source<'a> {
    /// Host memory (n x d), staged through page-locked memory and checked on the way up.
    Host(&'a [f32]),
    /// `n` rows of device memory at `at` (a range `device_rows` accepted), copied block by
    /// block on the device and checked there.
    Device { at: u64, n: usize },
}

impl CudaBackend {
    /// Everything on the device (nearest anchor, residual, rotation, PQ) with the codebook
    /// uploaded once for all calls, through `encode_pipelined`; `None` where the kernels do
    /// not take the codebook's shapes or page-locked memory cannot be had.
    pub(super) fn encode_resident(
        &self,
        cb: &CodebookView,
        src: Source<'_>,
    ) -> Result<Option<(Vec<u32>, Vec<u8>)>> {
        if !(pq_kernel_fits(cb.dsub, cb.ksub()) && cb.dp() >= cb.d) {
            return Ok(None);
        }
        self.bind()?;
        let mut slot = self.codebook.lock().unwrap_or_else(|e| e.into_inner());
        let dc = slot.get(cb.key, || DeviceCodebook::upload(self, cb))?;
        let mut dev = self.lock();
        if dev.staging().is_none() {
            return Ok(None);
        }
        // Out of `dev` while the pipeline borrows both.
        let mut st = dev.staging.take().expect("made above");
        let out = self.encode_pipelined(&dev, &mut st, dc, cb, src);
        dev.staging = Some(st);
        out.map(Some)
    }

    /// Encodes the rows of `src` a block at a time, up to `BUFS` blocks in flight. From host
    /// memory, while block j is encoded, the next blocks cross the bus on the copy stream,
    /// and the host refills each staging buffer as soon as its copy ends (checking every
    /// value on the way), not when its block's kernels do; from device memory each block is
    /// a device copy and a check kernel. Each block's anchor ids and PQ indices come back
    /// into page-locked memory behind it, and from there into the output on every thread.
    pub(super) fn encode_pipelined(
        &self,
        dev: &Device,
        st: &mut Staging,
        dc: &DeviceCodebook,
        cb: &CodebookView,
        src: Source<'_>,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        // Bytes of each row's codes: its sub-codes, and its error level where it has one.
        let (d, nsub) = (cb.d, cb.row_bytes());
        let n = match src {
            Source::Host(x) => x.len() / d,
            Source::Device { n, .. } => n,
        };
        let s = &dev.stream;
        let mut sc = EncodeScratch::new(s, (STAGE / d).clamp(1, n), d, cb.m())?;
        let block = sc.block;
        // Copies a failed call left in flight may still use the buffers.
        for e in st
            .sent
            .iter_mut()
            .chain(&mut st.done)
            .filter_map(Option::take)
        {
            e.synchronize().map_err(|e| dev_err("encode", e))?;
        }
        // SAFETY: each block's argmin and PQ kernel write the rows its download reads.
        let mut ids_d = unsafe { CudaBackend::filled_later::<u32>(s, block)? };
        let mut idx_d = unsafe { CudaBackend::filled_later::<u8>(s, block * nsub)? };
        // Device input: the first position that is not finite, folded in by every block.
        let mut first = match src {
            Source::Device { .. } => Some(self.up(s, &[u64::MAX])?),
            Source::Host(_) => None,
        };
        // Each block's results: its ids (4 bytes a row, first, so they stay aligned), then its
        // indices.
        st.back(s.context(), block * (4 + nsub))?;
        // The copy stream writes buffers this stream allocated.
        dev.copy.join(s).map_err(|e| dev_err("upload", e))?;
        let mut trace = Trace::new(self);
        // Host time per step, without the device waits of `trace` (which would stop the
        // pipeline): `BackendOptions::trace_host`.
        let mut host_trace = crate::trace::Trace::new("cuda host", self.opts.trace_host.as_ref());
        let (mut ids, mut idx) = (vec![0u32; n], vec![0u8; n * nsub]);
        // Blocks in flight, oldest first: (buffer, first row, rows).
        let mut flight = std::collections::VecDeque::new();
        for j in 0..n.div_ceil(block) {
            let (b, r0) = (j % BUFS, j * block);
            let rows = block.min(n - r0);
            // Block j - BUFS used these buffers: its results go out first.
            let old = (flight.len() == BUFS).then(|| flight.pop_front().expect("a full flight"));
            match src {
                Source::Host(x) => {
                    let blk = &x[r0 * d..(r0 + rows) * d];
                    // Block j - BUFS's kernels read the device buffer the copy below writes:
                    // the copy stream waits for them, the host does not.
                    if let Some(e) = &st.done[b] {
                        dev.copy.wait(e).map_err(|e| dev_err("upload", e))?;
                    }
                    host_trace.mark("other", || ());
                    // The fill waits only for the copy of block j - BUFS out of this buffer;
                    // that block's results go out beside it on other threads, not after it
                    // (notes/perf-cuda.md, encoding version 13).
                    let Staging {
                        bufs,
                        sent,
                        done,
                        back,
                    } = &mut *st;
                    let back = back.as_ref().expect("made above");
                    let (filled, taken) = rayon::join(
                        || Staging::fill_buf(&mut sent[b], &mut bufs[b], blk),
                        || match old {
                            Some((ob, or0, orows)) => take_back(
                                &mut done[ob],
                                &back[ob],
                                (or0, orows),
                                &mut ids,
                                &mut idx,
                            ),
                            None => Ok(()),
                        },
                    );
                    taken?;
                    let Some(host) = filled? else {
                        s.synchronize().map_err(|e| dev_err("encode", e))?;
                        return Err(crate::check::non_finite_in(x, "vectors"));
                    };
                    host_trace.mark("fill", || ());
                    trace.mark(s, "fill");
                    let mut xv = sc.x[b].slice_mut(..blk.len());
                    dev.copy
                        .memcpy_htod(host, &mut xv)
                        .map_err(|e| dev_err("upload", e))?;
                    let up = dev
                        .copy
                        .record_event(None)
                        .map_err(|e| dev_err("upload", e))?;
                    s.wait(&up).map_err(|e| dev_err("upload", e))?;
                    st.sent[b] = Some(up);
                    self.h2d
                        .fetch_add(std::mem::size_of_val(blk) as u64, Ordering::Relaxed);
                    trace.mark(s, "upload");
                }
                Source::Device { at, .. } => {
                    let first = first.as_mut().expect("made for device input");
                    self.device_block(dev, cb, at, (r0, rows), &mut sc.x[b], first)?;
                    trace.mark(s, "device copy");
                    if let Some((ob, or0, orows)) = old {
                        host_trace.mark("other", || ());
                        st.take_back(ob, (or0, orows), &mut ids, &mut idx)?;
                        host_trace.mark("results", || ());
                    }
                }
            }
            let (mut iv, mut xv) = (ids_d.slice_mut(..rows), idx_d.slice_mut(..rows * nsub));
            self.encode_block(dev, dc, cb, &mut sc, b, rows, &mut iv, &mut xv, &mut trace)?;
            let back = st.back.as_mut().expect("made above")[b]
                .as_mut_slice()
                .map_err(|e| dev_err("download", e))?;
            let (bi, bx) = back.split_at_mut(rows * 4);
            s.memcpy_dtoh(
                &ids_d.slice(..rows),
                bytemuck::cast_slice_mut::<u8, u32>(bi),
            )
            .map_err(|e| dev_err("download", e))?;
            s.memcpy_dtoh(&idx_d.slice(..rows * nsub), &mut bx[..rows * nsub])
                .map_err(|e| dev_err("download", e))?;
            self.d2h
                .fetch_add((rows * (4 + nsub)) as u64, Ordering::Relaxed);
            st.done[b] = Some(s.record_event(None).map_err(|e| dev_err("encode", e))?);
            flight.push_back((b, r0, rows));
            trace.mark(s, "download");
        }
        host_trace.mark("other", || ());
        while let Some((b, r0, rows)) = flight.pop_front() {
            st.take_back(b, (r0, rows), &mut ids, &mut idx)?;
        }
        host_trace.mark("results", || ());
        if let (Some(first), Source::Device { at, .. }) = (&first, src) {
            let at_pos = self.down(s, first)?[0];
            if at_pos != u64::MAX {
                return Err(self.non_finite_at(at, at_pos as usize));
            }
        }
        Ok((ids, idx))
    }

    /// Block `(r0, rows)` of the device input at `at` into `x`, checked for values that are
    /// not finite (into `first`) and made unit length for cosine, all on the stream.
    pub(super) fn device_block(
        &self,
        dev: &Device,
        cb: &CodebookView,
        at: u64,
        (r0, rows): (usize, usize),
        x: &mut CudaSlice<f32>,
        first: &mut CudaSlice<u64>,
    ) -> Result<()> {
        let (s, d) = (&dev.stream, cb.d);
        let len = rows * d;
        {
            let (dst, _sync) = x.device_ptr_mut(s);
            // SAFETY: `x` holds at least `len` floats; the source range lies within the
            // memory `device_rows` accepted; both are read and written in stream order.
            ran(
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        dst,
                        at + (r0 * d * 4) as u64,
                        len * 4,
                        s.cu_stream(),
                    )
                },
                "device copy",
            )?;
        }
        let (total, base) = (len as u64, (r0 * d) as u64);
        // SAFETY: x holds `len` floats; `first` one value.
        ran(
            unsafe {
                s.launch_builder(&dev.k.first_non_finite)
                    .arg(&*x)
                    .arg(&total)
                    .arg(&base)
                    .arg(&mut *first)
                    .launch(strided(len, self.sms))
            },
            "finite check",
        )?;
        if cb.metric == crate::params::Metric::Cosine {
            let (ri, di) = (rows as i32, d as i32);
            // SAFETY: x holds rows x d floats.
            ran(
                unsafe {
                    s.launch_builder(&dev.k.unit_rows)
                        .arg(&mut *x)
                        .arg(&ri)
                        .arg(&di)
                        .launch(per_row(rows))
                },
                "unit rows",
            )?;
        }
        Ok(())
    }

    /// Checks that `n` rows of `d` floats at `at` lie in one allocation this device reads:
    /// device memory of this device, or managed memory, as the driver reports it. Anything
    /// else (host memory, another device's, freed or never allocated, a range running past
    /// the allocation, a size that overflows) is an `InvalidArgument`, before anything is
    /// read. The driver knows allocations, not tensors: a range inside a larger allocation (a
    /// framework's caching pool) passes, so the row count is the caller's to get right.
    /// Returns the rows' size in bytes.
    pub(super) fn device_rows(&self, at: u64, n: usize, d: usize, what: &str) -> Result<usize> {
        use cudarc::driver::sys::{self, CUmemorytype, CUpointer_attribute as A};
        let bytes = n
            .checked_mul(d)
            .and_then(|v| v.checked_mul(4))
            .ok_or_else(|| Error::InvalidArgument(format!("{n} {what} overflow the size")))?;
        let dev = self.lock();
        dev.bind()?;
        let ctx = dev.stream.context();
        let bad = |why: String| Err(Error::InvalidArgument(format!("{what} at {at:#x}: {why}")));
        if !at.is_multiple_of(4) {
            return bad("not 4-byte aligned".into());
        }
        // SAFETY (each query): `v` points to a value as large as the attribute's.
        let query = |attr: A, v: *mut std::ffi::c_void| unsafe {
            sys::cuPointerGetAttribute(v, attr, at).result()
        };
        let (mut kind, mut managed, mut ordinal) = (0u32, 0u32, -1i32);
        if query(A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (&raw mut kind).cast()).is_err() {
            return bad(
                "not memory CUDA knows of (vectors in host memory take the host calls)".into(),
            );
        }
        let known = query(
            A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            (&raw mut managed).cast(),
        );
        known.map_err(|e| dev_err("pointer attributes", e))?;
        if managed == 0 {
            if kind != CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
                return bad("host memory (vectors in host memory take the host calls)".into());
            }
            let known = query(
                A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                (&raw mut ordinal).cast(),
            );
            known.map_err(|e| dev_err("pointer attributes", e))?;
            if ordinal != ctx.ordinal() as i32 {
                return bad(format!(
                    "memory of CUDA device {ordinal}, not of this context's device {}",
                    ctx.ordinal()
                ));
            }
        }
        let (mut start, mut size) = (0u64, 0usize);
        query(
            A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            (&raw mut start).cast(),
        )
        .and_then(|_| query(A::CU_POINTER_ATTRIBUTE_RANGE_SIZE, (&raw mut size).cast()))
        .map_err(|e| dev_err("pointer attributes", e))?;
        let room = (start + size as u64).saturating_sub(at);
        if (bytes as u64) > room {
            return bad(format!(
                "{bytes} bytes asked for, {room} left in the allocation holding them"
            ));
        }
        Ok(bytes)
    }

    /// The error the host's check gives for position `i` of the device input at `at`.
    pub(super) fn non_finite_at(&self, at: u64, i: usize) -> Error {
        let mut v = [0f32];
        // SAFETY: position i lies within the range `device_rows` accepted.
        match unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut v, at + 4 * i as u64) } {
            Ok(()) => Error::NonFinite(format!("vectors: value {} at position {i}", v[0])),
            Err(e) => dev_err("download", e),
        }
    }

    /// Nearest anchors (into `ids`) and PQ indices (into `idx`) of the `rows` rows in block
    /// buffer `b` of `sc`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode_block(
        &self,
        dev: &Device,
        dc: &DeviceCodebook,
        cb: &CodebookView,
        sc: &mut EncodeScratch,
        b: usize,
        rows: usize,
        ids: &mut CudaViewMut<'_, u32>,
        idx: &mut CudaViewMut<'_, u8>,
        trace: &mut Trace,
    ) -> Result<()> {
        let (d, dp, nsub, dsub, k) = (cb.d, cb.dp(), cb.nsub, cb.dsub, cb.m());
        let stride = cb.row_bytes();
        let s = &dev.stream;
        let xb = &sc.x[b];
        row_norms(dev, xb, rows, d, &mut sc.xn)?;
        if let Some(x3) = sc.x3.as_mut() {
            x3.fill(dev, xb, rows, d, false)?;
        }
        let split = sc.x3.as_ref().map(|x3| (x3, &dc.anchors3));
        for r0 in (0..rows).step_by(sc.chunk) {
            let rr = sc.chunk.min(rows - r0);
            dots_rows(dev, xb, &dc.anchors, split, k, d, (r0, rr), &mut sc.dots)?;
            Argmin {
                dots: &sc.dots,
                rows: rr,
                k,
                off: &dc.anorm,
                bias: &dc.anorm,
                use_bias: false,
                x: xb,
                xn: &sc.xn,
                row0: r0,
                d,
                c: &dc.anchors,
                cn: &dc.anorm,
                slack: if split.is_some() { SPLIT_SLACK } else { 0.0 },
                unscale: split.map(|(x3, a3)| (&x3.unscale, &a3.unscale)),
            }
            .launch(dev, ids, &mut sc.dist.slice_mut(..))?;
        }
        trace.mark(s, "anchors");
        let assign = ids.as_view();
        let ksub = cb.ksub();
        // Without a rotation the PQ kernels read the residuals from the rows themselves.
        let turned;
        let rows_in = if dc.rot.is_none() {
            PqRows::Residual {
                x: xb,
                d,
                anchors: &dc.anchors,
                assign: &assign,
            }
        } else {
            // SAFETY: the residual kernel writes every element, pads included.
            let mut y = unsafe { CudaBackend::filled_later::<f32>(s, rows * dp)? };
            let (ni, di, dpi, dsi) = (rows as i32, d as i32, dp as i32, dsub as i32);
            // SAFETY: x is rows x d, anchors k x d with every assignment below k, y rows x dp.
            ran(
                unsafe {
                    s.launch_builder(&dev.k.residuals)
                        .arg(xb)
                        .arg(&ni)
                        .arg(&di)
                        .arg(&dc.anchors)
                        .arg(&assign)
                        .arg(&dpi)
                        .arg(&dsi)
                        .arg(&mut y)
                        .launch(strided(rows * dp, self.sms))
                },
                "residuals",
            )?;
            turned = rotated(dev, dc, y, rows, dp)?;
            PqRows::Padded(&turned)
        };
        let shape = (nsub, stride);
        pq_assign_into(dev, &rows_in, rows, shape, dsub, &dc.books, ksub, idx)?;
        error_levels_into(dev, &rows_in, rows, shape, dsub, dc, ksub, idx)?;
        trace.mark(s, "pq");
        Ok(())
    }
}

/// Where the PQ kernel reads its sub-vectors.
pub(super) enum PqRows<'a> {
    /// Rows already in the padded layout (n x nsub*dsub).
    Padded(&'a CudaSlice<f32>),
    /// Raw rows (n x d) minus their anchors: the residuals, padded as they are read.
    Residual {
        x: &'a CudaSlice<f32>,
        d: usize,
        anchors: &'a CudaSlice<f32>,
        assign: &'a CudaView<'a, u32>,
    },
}

/// Sub-space widths with a kernel of their own, and the rows each of its threads takes.
pub(super) const PQ_EXACT: [(usize, usize); 6] =
    [(4, 4), (8, 4), (12, 4), (16, 4), (24, 2), (32, 2)];

/// PQ indices (n x nsub bytes, into `out` on the device) of `n` rows against the codebooks
/// `books` (nsub x ksub x dsub, on the device).
#[allow(clippy::too_many_arguments)]
/// The row width, padding split (first sub-spaces holding a column more) and columns per
/// sub-space with which the kernels read `rows`' sub-vectors.
fn read_shape(rows: &PqRows<'_>, nsub: usize, dsub: usize) -> (usize, usize, usize) {
    match rows {
        PqRows::Padded(_) => (nsub * dsub, nsub, 0),
        PqRows::Residual { d, .. } => (*d, d % nsub, d / nsub),
    }
}

/// Pushes the arguments the PQ and level kernels begin with: the rows, `ints` (rows, row
/// width, dsub, ksub), the books, `out` and `ints`' row stride, the anchors and assignment
/// (zeros for padded rows) and `ints`' padding split.
fn push_rows<'a>(
    lb: &mut cudarc::driver::LaunchArgs<'a>,
    rows: &'a PqRows<'a>,
    ints: &'a [i32; 7],
    none: &'a u64,
    books: &'a CudaSlice<f32>,
    out: &'a mut CudaViewMut<'_, u8>,
) {
    match rows {
        PqRows::Padded(y) => lb.arg(*y),
        PqRows::Residual { x, .. } => lb.arg(*x),
    };
    let [n, ld, dsub, ksub, stride, rem, q] = ints;
    lb.arg(n)
        .arg(ld)
        .arg(dsub)
        .arg(ksub)
        .arg(books)
        .arg(out)
        .arg(stride);
    match rows {
        PqRows::Padded(_) => lb.arg(none).arg(none),
        PqRows::Residual {
            anchors, assign, ..
        } => lb.arg(*anchors).arg(*assign),
    };
    lb.arg(rem).arg(q);
}

/// `push_rows`' integers for `n` rows of `rows` into codes of `stride` bytes.
fn row_ints(
    rows: &PqRows<'_>,
    n: usize,
    (nsub, stride): (usize, usize),
    dsub: usize,
    ksub: usize,
) -> Result<[i32; 7]> {
    let (ld, rem, q) = read_shape(rows, nsub, dsub);
    let n = as_i32(n, "rows")?;
    Ok([
        n,
        ld as i32,
        dsub as i32,
        ksub as i32,
        stride as i32,
        rem as i32,
        q as i32,
    ])
}

/// Nearest codewords of `n` rows into `out`, rows of `stride` bytes whose first `nsub` are
/// the sub-codes (`(nsub, stride)`).
#[allow(clippy::too_many_arguments)]
pub(super) fn pq_assign_into(
    dev: &Device,
    rows: &PqRows<'_>,
    n: usize,
    (nsub, stride): (usize, usize),
    dsub: usize,
    books: &CudaSlice<f32>,
    ksub: usize,
    out: &mut CudaViewMut<'_, u8>,
) -> Result<()> {
    // The kernels' `nsub` is the output's row stride; their grid has a column a sub-space.
    let ints = row_ints(rows, n, (nsub, stride), dsub, ksub)?;
    // Rows per thread, as built into each kernel (kernels/cuda/encode.cu).
    let (kernel, rows_per_thread) = match PQ_EXACT.iter().position(|&(w, _)| w == dsub) {
        Some(i) => (&dev.k.pq_exact[i], PQ_EXACT[i].1),
        None => match dsub {
            0..=8 => (&dev.k.pq_assign[0], 4),
            9..=16 => (&dev.k.pq_assign[1], 4),
            _ => (&dev.k.pq_assign[2], 2),
        },
    };
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(128 * rows_per_thread) as u32, nsub as u32, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: (4 * ksub * (dsub + 1)) as u32,
    };
    let none = 0u64;
    let mut lb = dev.stream.launch_builder(kernel);
    push_rows(&mut lb, rows, &ints, &none, books, out);
    // SAFETY: the rows hold n x ld floats (anchors k x ld, with every assignment below k),
    // books nsub x ksub x dsub, out n x stride bytes (stride >= nsub); the shared block holds
    // one sub-codebook and its norms.
    ran(unsafe { lb.launch(cfg) }, "pq assign")
}

/// Where the codebook keeps error levels: each row's level into byte `nsub` of its `stride`
/// bytes of `out`, from its sub-codes there (written by `pq_assign_into`) and its rows.
#[allow(clippy::too_many_arguments)]
fn error_levels_into(
    dev: &Device,
    rows: &PqRows<'_>,
    n: usize,
    (nsub, stride): (usize, usize),
    dsub: usize,
    dc: &DeviceCodebook,
    ksub: usize,
    out: &mut CudaViewMut<'_, u8>,
) -> Result<()> {
    let Some(levels) = &dc.levels else {
        return Ok(());
    };
    let ints = row_ints(rows, n, (nsub, stride), dsub, ksub)?;
    let (nsi, nli, none) = (nsub as i32, levels.len() as i32, 0u64);
    let mut lb = dev.stream.launch_builder(&dev.k.error_levels);
    push_rows(&mut lb, rows, &ints, &none, &dc.books, out);
    lb.arg(&nsi).arg(levels).arg(&nli);
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(128) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: as `pq_assign_into`'s reads, and out n x stride bytes whose first nsub of each
    // row are sub-codes below ksub (written by the PQ kernel before, on the same stream).
    ran(unsafe { lb.launch(cfg) }, "error levels")
}

/// The encoding results of rows `r0..r0 + rows` (into `ids` and `idx`, whole: one id and
/// `idx.len() / ids.len()` indices a row) out of return buffer `back` once `done` (the copy
/// into it) has ended, laid out as `encode_pipelined` has them copied: ids (4 bytes each),
/// then indices.
pub(super) fn take_back(
    done: &mut Option<CudaEvent>,
    back: &PinnedHostSlice<u8>,
    (r0, rows): (usize, usize),
    ids: &mut [u32],
    idx: &mut [u8],
) -> Result<()> {
    if let Some(e) = done.take() {
        e.synchronize().map_err(|e| dev_err("encode", e))?;
    }
    let nsub = idx.len() / ids.len().max(1);
    let bytes = back.as_slice().map_err(|e| dev_err("download", e))?;
    let (bi, bx) = bytes[..rows * (4 + nsub)].split_at(rows * 4);
    let ids = &mut ids[r0..r0 + rows];
    crate::stage::copy_spread(ids, bytemuck::cast_slice::<u8, u32>(bi));
    crate::stage::copy_spread(&mut idx[r0 * nsub..(r0 + rows) * nsub], bx);
    Ok(())
}
