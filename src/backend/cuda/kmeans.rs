//! A k-means session: points, centroids and assignments resident on the device, or the
//! points streamed up a block at a time where the device cannot hold them all.

use super::*;

/// Fewest rows of points a streamed session holds at once: below that, it is refused.
const MIN_BLOCK_ROWS: usize = 1024;

/// Most values of rows read where they lie (picked, or made unit length) gathered on the
/// host at once for an upload: large enough for the page-locked copies.
pub(crate) const GATHER_VALUES: usize = STAGE / 4;

/// Device bytes per row of points held: values, norm, and the fp16 split (`exact`).
fn row_bytes(d: usize, exact: bool) -> usize {
    4 * d + 4 + if exact { Split::bytes(1, d) } else { 0 }
}

/// Rows of the `n` x `d` points a k-means session holds on the device at once with `free`
/// bytes free: all of them where they fit beside their other buffers, with room to split them
/// (`exact`) or for a block of scores; else the largest block (at least 1,024 rows) that takes
/// half of what the per-point assignment buffers leave, streamed from the host at every pass;
/// `None` where not even that fits. The split rule keeps a streamed session's arithmetic that
/// of a resident one: its results are the same.
pub(crate) fn session_rows(n: usize, d: usize, exact: bool, free: usize) -> Option<usize> {
    let values = n * (4 * d + 4) + 16 * n;
    let room = if exact {
        2 * Split::bytes(n, d)
    } else {
        DOTS_BYTES
    };
    if values + room <= free {
        return Some(n);
    }
    let left = free.checked_sub(16 * n + DOTS_BYTES)? / 2;
    let rows = (left / row_bytes(d, exact)).min(n);
    (rows >= MIN_BLOCK_ROWS.min(n)).then_some(rows)
}

/// Device bytes a k-means session's points take with `rows` of the `n` held at once (as
/// `session_rows` says): those rows' values, norms and split, and every point's assignment
/// buffers.
pub(crate) fn session_point_bytes(n: usize, d: usize, exact: bool, rows: usize) -> usize {
    16 * n + rows.min(n) * row_bytes(d, exact)
}

/// The fewest free bytes with which `session_rows` opens a session on `n` x `d` points.
pub(crate) fn session_least_bytes(n: usize, d: usize, exact: bool) -> usize {
    16 * n + DOTS_BYTES + 2 * MIN_BLOCK_ROWS.min(n) * row_bytes(d, exact)
}

/// The points the GEMMs read: all `n` of them (resident), or `block` rows at a time copied up
/// from the host before each use (streamed).
pub(super) struct Points<'a> {
    /// A streamed session's points (n x d), read on the host where they lie.
    pub(super) host: Option<RowsView<'a>>,
    /// A block of them gathered for its upload, where the view is not the caller's rows.
    pub(super) gathered: Vec<f32>,
    /// Rows the buffers hold: n when resident.
    pub(super) block: usize,
    /// The first row of the block the buffers hold now (streamed).
    pub(super) loaded: Option<usize>,
    pub(super) x: CudaSlice<f32>,
    pub(super) xn: CudaSlice<f32>,
    /// The rows split into fp16 pieces for fp32-class GEMMs on tensor cores; `None` in
    /// TF32 sessions, or where a resident session had no room (then plain fp32 GEMMs).
    pub(super) split: Option<Split>,
}

impl Points<'_> {
    /// Makes the buffers hold rows `row0 .. row0 + rows` (a block's worth), uploading them,
    /// their norms and split, unless they already do. Resident points always do.
    fn load(
        &mut self,
        b: &CudaBackend,
        dev: &mut Device,
        d: usize,
        (row0, rows): (usize, usize),
    ) -> Result<()> {
        let Some(host) = self.host else {
            return Ok(());
        };
        if self.loaded == Some(row0) {
            return Ok(());
        }
        self.loaded = None;
        let v = host.block(row0, rows, &mut self.gathered);
        b.up_staged_into(
            dev,
            v,
            &mut self.x.slice_mut(..rows * d),
            "training vectors",
        )?;
        row_norms(dev, &self.x, rows, d, &mut self.xn)?;
        if let Some(sp) = self.split.as_mut() {
            sp.fill(dev, &self.x, rows, d, false)?;
        }
        self.loaded = Some(row0);
        Ok(())
    }

    /// The blocks of `n` rows as (first row, rows), in order or in reverse: a pass that
    /// starts with the block the last one ended on uploads it once.
    fn blocks(&self, n: usize, reverse: bool) -> Vec<(usize, usize)> {
        let step = self.block.max(1);
        let mut v: Vec<_> = (0..n).step_by(step).map(|r| (r, step.min(n - r))).collect();
        if reverse {
            v.reverse();
        }
        v
    }
}

/// The rows of `x` uploaded whole: the caller's own where the view is plain, else gathered
/// `GATHER_VALUES` at a time, so that no prepared copy of them all is made on the host.
fn up_rows(b: &CudaBackend, dev: &mut Device, x: RowsView) -> Result<CudaSlice<f32>> {
    use rayon::prelude::*;
    if x.is_plain() {
        return b.up_staged(dev, x.x);
    }
    let (n, d) = (x.len(), x.d);
    // SAFETY: every row is written by the uploads below before any kernel reads it.
    let mut out = unsafe { CudaBackend::filled_later::<f32>(&dev.stream, n * d)? };
    let rows = (GATHER_VALUES / d.max(1)).max(1);
    let mut buf = vec![0f32; rows.min(n) * d];
    for start in (0..n).step_by(rows) {
        let len = rows.min(n - start);
        // Gathered by the pool's threads; the upload has copied the block out of `buf`
        // when it returns.
        let v = &mut buf[..len * d];
        v.par_chunks_mut(d.max(1))
            .enumerate()
            .for_each(|(i, o)| x.row_into(start + i, o));
        let mut dst = out.slice_mut(start * d..(start + len) * d);
        b.up_staged_into(dev, v, &mut dst, "training vectors")?;
    }
    Ok(out)
}

/// A training set on the device.
pub(super) struct CudaSession<'a> {
    pub(super) trace: Trace,
    /// Distance GEMMs on TF32 tensor cores.
    pub(super) tf32: bool,
    /// TF32 without the fp32 re-check (`allow_rough`).
    pub(super) rough: bool,
    pub(super) b: &'a CudaBackend,
    pub(super) n: usize,
    pub(super) d: usize,
    pub(super) k: usize,
    pub(super) pts: Points<'a>,
    pub(super) assign: CudaSlice<u32>,
    pub(super) dist: CudaSlice<f32>,
    pub(super) order: CudaSlice<u32>,
    /// Each member's distance at its place in `order`.
    pub(super) mdist: CudaSlice<f32>,
    /// Per-centroid buffers, sized at `set_centroids`.
    pub(super) c: Option<Centroids>,
    /// Counts of the last assignment (host copy: they set the group offsets).
    pub(super) counts: Vec<u32>,
    /// Whether the centroid buffers hold an update's spread.
    pub(super) updated: bool,
}

pub(super) struct Centroids {
    pub(super) c: CudaSlice<f32>,
    /// The centroids split into fp16 pieces, in sessions with split points.
    pub(super) c3: Option<Split>,
    pub(super) cn: CudaSlice<f32>,
    pub(super) off: CudaSlice<f32>,
    pub(super) bias: CudaSlice<f32>,
    pub(super) dots: CudaSlice<f32>,
    pub(super) chunk: usize,
    pub(super) counts: CudaSlice<u32>,
    pub(super) energy: CudaSlice<f64>,
    pub(super) start: CudaSlice<u32>,
    pub(super) cursor: CudaSlice<u32>,
    pub(super) spread: CudaSlice<f32>,
    /// Streamed sessions' update: per-centroid sums of the kept points (k x d), and each
    /// centroid's trim cutoff and kept count.
    pub(super) sums: Option<(CudaSlice<f64>, CudaSlice<u32>, CudaSlice<u32>)>,
}

impl Centroids {
    /// What the assignment reads besides the centroids, once they have changed: their
    /// norms, and their fp16 pieces in split sessions.
    pub(super) fn derive(&mut self, dev: &Device, k: usize, d: usize) -> Result<()> {
        row_norms(dev, &self.c, k, d, &mut self.cn)?;
        match self.c3.as_mut() {
            Some(c3) => c3.fill(dev, &self.c, k, d, true),
            None => Ok(()),
        }
    }
}

impl<'a> CudaSession<'a> {
    /// Sizes the per-centroid buffers for k centroids, lets `fill` write the centroids, and
    /// computes their norms.
    pub(super) fn load_centroids(
        &mut self,
        k: usize,
        fill: impl FnOnce(&Device, &mut CudaSlice<f32>) -> Result<()>,
    ) -> Result<()> {
        as_i32(k, "centroids")?;
        let dev = self.b.lock();
        let s = &dev.stream;
        self.trace.mark(s, "host");
        if self.k != k || self.c.is_none() {
            self.c = Some(self.buffers(s, k)?);
            self.k = k;
            self.updated = false;
        }
        let cb = self.c.as_mut().expect("centroid buffers were just made");
        fill(&dev, &mut cb.c)?;
        cb.derive(&dev, k, self.d)?;
        self.trace.mark(s, "set_centroids");
        Ok(())
    }

    /// A session on the rows of `x` (n x d), read where they lie: resident where
    /// `session_rows` says the device holds them all, else streamed. TF32 sessions (`tf32`)
    /// do not split their points.
    pub(super) fn new(b: &'a CudaBackend, x: RowsView<'a>, tf32: bool) -> Result<Self> {
        let (n, d) = (x.len(), x.d);
        as_i32(n, "points")?;
        as_i32(d, "dimension")?;
        let mut dev = b.lock();
        let mut trace = Trace::new(b);
        let free = b.free_bytes(dev.stream.context());
        let block = session_rows(n, d, !tf32, free).ok_or_else(|| {
            let least = session_least_bytes(n, d, !tf32);
            Error::OutOfMemory(format!(
                "k-means on {n} x {d} points needs at least {least} bytes of device memory \
                 ({free} free under the context's cap)"
            ))
        })?;
        let s = dev.stream.clone();
        let pts = if block == n {
            let xd = up_rows(b, &mut dev, x)?;
            let mut xn = CudaBackend::zeros::<f32>(&s, n)?;
            row_norms(&dev, &xd, n, d, &mut xn)?;
            let split = if tf32 {
                None
            } else {
                split_points(b, &dev, &xd, n, d)?
            };
            Points {
                host: None,
                gathered: Vec::new(),
                block,
                loaded: None,
                x: xd,
                xn,
                split,
            }
        } else {
            // Checked whole first, so that an error names its position in `x`. Rows read
            // through a sample or made unit length come from a training that checked them.
            if x.is_plain() {
                crate::check::check_finite(x.x, "training vectors")?;
            }
            // SAFETY (all three): `Points::load` writes a block's rows before anything reads them.
            unsafe {
                Points {
                    host: Some(x),
                    gathered: Vec::new(),
                    block,
                    loaded: None,
                    x: CudaBackend::filled_later(&s, block * d)?,
                    xn: CudaBackend::filled_later(&s, block)?,
                    split: if tf32 {
                        None
                    } else {
                        Some(Split::new(&s, block, d)?)
                    },
                }
            }
        };
        trace.mark(&s, "upload");
        Ok(CudaSession {
            trace,
            tf32,
            rough: false,
            b,
            n,
            d,
            k: 0,
            pts,
            assign: CudaBackend::zeros(&s, n)?,
            dist: CudaBackend::zeros(&s, n)?,
            order: CudaBackend::zeros(&s, n)?,
            mdist: CudaBackend::zeros(&s, n)?,
            c: None,
            counts: Vec::new(),
            updated: false,
        })
    }

    /// The sum of `update`'s trimmed means for streamed points: the cutoffs from the grouped
    /// distances, then each block's kept points added into the sums, then the means. The
    /// blocks go last to first, so the one the assignment ended on is not uploaded again.
    fn update_streamed(&mut self, dev: &mut Device, threads: u32, trim: f32) -> Result<()> {
        let (n, d, k) = (self.n, self.d, self.k);
        let b = self.b;
        let cb = self.c.as_mut().expect("checked by update");
        let (sums, cut, kept) = cb.sums.as_mut().expect("streamed sessions have sums");
        let s = dev.stream.clone();
        // SAFETY (all launches below): every buffer was sized from n, d, k and the block at
        // creation, and the kernels index within those sizes.
        ran(
            unsafe {
                s.launch_builder(&dev.k.trim_cuts)
                    .arg(&self.mdist)
                    .arg(&cb.start)
                    .arg(&trim)
                    .arg(&mut *cut)
                    .arg(&mut *kept)
                    .arg(&mut cb.spread)
                    .launch(per_centroid(k, threads))
            },
            "trim",
        )?;
        s.memset_zeros(sums).map_err(|e| dev_err("clear sums", e))?;
        let di = d as i32;
        for (row0, rows) in self.pts.blocks(n, true) {
            self.pts.load(b, dev, d, (row0, rows))?;
            let ri = rows as i32;
            ran(
                unsafe {
                    s.launch_builder(&dev.k.add_kept)
                        .arg(&self.pts.x)
                        .arg(&ri)
                        .arg(&di)
                        .arg(&self.assign.slice(row0..))
                        .arg(&self.dist.slice(row0..))
                        .arg(&*cut)
                        .arg(&mut *sums)
                        .launch(per_row(rows))
                },
                "sums",
            )?;
        }
        let ki = k as i32;
        ran(
            unsafe {
                s.launch_builder(&dev.k.finish_means)
                    .arg(&*sums)
                    .arg(&*kept)
                    .arg(&ki)
                    .arg(&di)
                    .arg(&mut cb.c)
                    .launch(strided(k * d, b.sms))
            },
            "means",
        )
    }

    pub(super) fn buffers(&self, s: &Arc<CudaStream>, k: usize) -> Result<Centroids> {
        let z32 = |n| CudaBackend::zeros::<u32>(s, n);
        let zf = |n| CudaBackend::zeros::<f32>(s, n);
        let bytes = if self.tf32 || self.pts.split.is_some() {
            (self.b.free_bytes(s.context()) / 8).clamp(DOTS_BYTES, TC_DOTS_BYTES)
        } else {
            DOTS_BYTES
        };
        let chunk = (bytes / (4 * k)).max(256).min(self.pts.block.max(1));
        let sums = match self.pts.host {
            Some(_) => Some((CudaBackend::zeros::<f64>(s, k * self.d)?, z32(k)?, z32(k)?)),
            None => None,
        };
        Ok(Centroids {
            c: zf(k * self.d)?,
            c3: match self.pts.split {
                Some(_) => Some(Split::new(s, k, self.d)?),
                None => None,
            },
            cn: zf(k)?,
            off: zf(k)?,
            bias: zf(k)?,
            dots: zf(chunk * k)?,
            chunk,
            counts: z32(k)?,
            energy: CudaBackend::zeros::<f64>(s, 1)?,
            start: z32(k + 1)?,
            cursor: z32(k)?,
            spread: zf(k)?,
            sums,
        })
    }
}

/// One block of `threads` per centroid (the update's kernels).
fn per_centroid(k: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (k as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The points split for 3xFP16 GEMMs, or `None` where the three pieces would take more than
/// half the free device memory (assignment then runs plain fp32 GEMMs).
fn split_points(
    b: &CudaBackend,
    dev: &Device,
    x: &CudaSlice<f32>,
    n: usize,
    d: usize,
) -> Result<Option<Split>> {
    let free = b.free_bytes(dev.stream.context());
    if Split::bytes(n, d) > free / 2 {
        return Ok(None);
    }
    let Some(mut out) = Split::if_room(&dev.stream, n, d)? else {
        return Ok(None);
    };
    out.fill(dev, x, n, d, false)?;
    Ok(Some(out))
}

impl Drop for CudaSession<'_> {
    fn drop(&mut self) {
        // The buffers are freed on the dropping thread, which may not have the context.
        let _ = self.b.bind();
    }
}

impl KmeansSession for CudaSession<'_> {
    fn len(&self) -> usize {
        self.n
    }

    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        let d = self.d;
        let k = crate::check::whole_rows(centroids.len(), d, "centroid values")?;
        if k == 0 {
            return Err(Error::InvalidArgument("no centroids".into()));
        }
        let b = self.b;
        self.load_centroids(k, |dev, c| b.up_into(&dev.stream, centroids, c))
    }

    fn assign(&mut self, bias: Option<&[f32]>) -> Result<AssignStats> {
        let (n, d, k) = (self.n, self.d, self.k);
        let cb = self
            .c
            .as_mut()
            .ok_or_else(|| Error::InvalidState("assign before set_centroids".into()))?;
        let b = self.b;
        let mut dev = b.lock();
        let stream = dev.stream.clone();
        let s = &stream;
        self.trace.mark(s, "host");
        let use_bias: i32 = match bias {
            Some(v) if v.len() == k => {
                b.up_into(s, v, &mut cb.bias)?;
                1
            }
            Some(v) => {
                return Err(Error::InvalidArgument(format!(
                    "bias has {} values for {k} centroids",
                    v.len()
                )))
            }
            None => 0,
        };
        let (ni, ki) = (n as i32, k as i32);
        // SAFETY (all launches below): every buffer was sized from n, d and k at creation,
        // and the kernels index within those sizes.
        ran(
            unsafe {
                s.launch_builder(&dev.k.offsets)
                    .arg(&cb.cn)
                    .arg(&cb.bias)
                    .arg(&use_bias)
                    .arg(&ki)
                    .arg(&mut cb.off)
                    .launch(LaunchConfig::for_num_elems(k as u32))
            },
            "offsets",
        )?;
        // Exact sessions take 3xFP16 GEMMs where the split points fit (TF32 sessions have
        // none), TF32 sessions plain TF32; either is re-checked in fp32 wherever it could have
        // picked the wrong anchor (TF32 not while `rough`). Only plain fp32 GEMMs go unchecked.
        let slack = match (&self.pts.split, &cb.c3) {
            (Some(_), Some(_)) => SPLIT_SLACK,
            _ if self.tf32 && !self.rough => tf32_slack(d),
            _ => 0f32,
        };
        for (g0, len) in self.pts.blocks(n, false) {
            self.pts.load(b, &mut dev, d, (g0, len))?;
            let split = self.pts.split.as_ref().zip(cb.c3.as_ref());
            let _math = MathMode::set(&dev, self.tf32)?;
            let mut row0 = 0usize;
            while row0 < len {
                let rows = cb.chunk.min(len - row0);
                let x = &self.pts.x;
                dots_rows(&dev, x, &cb.c, split, k, d, (row0, rows), &mut cb.dots)?;
                self.trace.mark(s, "gemm");
                Argmin {
                    dots: &cb.dots,
                    rows,
                    k,
                    off: &cb.off,
                    bias: &cb.bias,
                    use_bias: use_bias != 0,
                    x,
                    xn: &self.pts.xn,
                    row0,
                    d,
                    c: &cb.c,
                    cn: &cb.cn,
                    slack,
                    unscale: split.map(|(x3, c3)| (&x3.unscale, &c3.unscale)),
                }
                .launch(
                    &dev,
                    &mut self.assign.slice_mut(g0..),
                    &mut self.dist.slice_mut(g0..),
                )?;
                self.trace.mark(s, "argmin");
                row0 += rows;
            }
        }
        s.memset_zeros(&mut cb.counts)
            .map_err(|e| dev_err("clear counts", e))?;
        s.memset_zeros(&mut cb.energy)
            .map_err(|e| dev_err("clear energy", e))?;
        ran(
            unsafe {
                s.launch_builder(&dev.k.count_energy)
                    .arg(&self.assign)
                    .arg(&self.dist)
                    .arg(&ni)
                    .arg(&mut cb.counts)
                    .arg(&mut cb.energy)
                    .launch(strided(n, b.sms))
            },
            "counts",
        )?;
        let counts = b.down(s, &cb.counts)?;
        let energy = b.down(s, &cb.energy)?[0];
        self.counts.clone_from(&counts);
        self.trace.mark(s, "counts");
        Ok(AssignStats { counts, energy })
    }

    fn allow_rough(&mut self, rough: bool) {
        self.rough = rough;
    }

    fn update(&mut self, trim: f32) -> Result<()> {
        let (n, d, k) = (self.n, self.d, self.k);
        let cb = self
            .c
            .as_mut()
            .ok_or_else(|| Error::InvalidState("update before set_centroids".into()))?;
        if self.counts.len() != k {
            return Err(Error::InvalidState("update before assign".into()));
        }
        let b = self.b;
        let mut dev = b.lock();
        let stream = dev.stream.clone();
        let s = &stream;
        self.trace.mark(s, "host");
        let (ni, di) = (n as i32, d as i32);
        // Group offsets from the counts the host already has.
        let mut start = Vec::with_capacity(k + 1);
        let mut acc = 0u32;
        start.push(0);
        for &c in &self.counts {
            acc += c;
            start.push(acc);
        }
        b.up_into(s, &start, &mut cb.start)?;
        b.up_into(s, &start[..k], &mut cb.cursor)?;
        ran(
            unsafe {
                s.launch_builder(&dev.k.scatter)
                    .arg(&self.assign)
                    .arg(&self.dist)
                    .arg(&ni)
                    .arg(&mut cb.cursor)
                    .arg(&mut self.order)
                    .arg(&mut self.mdist)
                    .launch(strided(n, b.sms))
            },
            "group",
        )?;
        self.trace.mark(s, "scatter");
        // Warps take 32 members at a time, so the largest group sets the kernel's time: enough
        // warps for it (up to eight), not for the mean group.
        let most = self.counts.iter().copied().max().unwrap_or(0) as usize;
        let threads = (most.div_ceil(32) * 32).clamp(32, 256) as u32;
        if self.pts.host.is_some() {
            self.update_streamed(&mut dev, threads, trim)?;
        } else {
            ran(
                unsafe {
                    s.launch_builder(&dev.k.update_means)
                        .arg(&self.pts.x)
                        .arg(&di)
                        .arg(&self.order)
                        .arg(&self.mdist)
                        .arg(&cb.start)
                        .arg(&trim)
                        .arg(&mut cb.c)
                        .arg(&mut cb.spread)
                        .launch(per_centroid(k, threads))
                },
                "means",
            )?;
        }
        self.trace.mark(s, "means");
        let cb = self.c.as_mut().expect("checked above");
        cb.derive(&dev, k, d)?;
        self.trace.mark(s, "norms");
        self.updated = true;
        Ok(())
    }

    fn centroids_and_spread(&mut self) -> Result<(Vec<f32>, Vec<f32>)> {
        let cb = self
            .c
            .as_ref()
            .filter(|_| self.updated)
            .ok_or_else(|| Error::InvalidState("spread before update".into()))?;
        let dev = self.b.lock();
        let c = self.b.down(&dev.stream, &cb.c)?;
        Ok((c, self.b.down(&dev.stream, &cb.spread)?))
    }

    fn centroids(&mut self) -> Result<Vec<f32>> {
        let cb = self
            .c
            .as_ref()
            .ok_or_else(|| Error::InvalidState("no centroids yet".into()))?;
        let dev = self.b.lock();
        self.trace.mark(&dev.stream, "host");
        let c = self.b.down(&dev.stream, &cb.c);
        self.trace.mark(&dev.stream, "get_centroids");
        c
    }

    fn assignment(&mut self) -> Result<Vec<u32>> {
        let dev = self.b.lock();
        self.b.down(&dev.stream, &self.assign)
    }

    fn assignment_with_distances(&mut self) -> Result<(Vec<u32>, Vec<f32>)> {
        let dev = self.b.lock();
        let a = self.b.down(&dev.stream, &self.assign)?;
        Ok((a, self.b.down(&dev.stream, &self.dist)?))
    }
}
