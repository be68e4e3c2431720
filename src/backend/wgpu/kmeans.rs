//! k-means on the WGPU device: the training set is uploaded once (in blocks of rows that each
//! fit one storage binding) and every iteration runs there. Under a device memory cap that the
//! points do not fit, one block's buffer is refilled from the host at every pass instead. Per iteration the bias goes up
//! and the counts and energy partials come down (the spreads too, when maintenance asks):
//! O(k) values. The group offsets of the update are made on the device from its counts.
//!
//! A warm iteration makes no buffers and no bind groups: the session keeps both, since at
//! small sizes the host's time per iteration is what bounds training.

use super::memory;
use super::mma::Halves;
use super::{fold, u32_of, Assign, Binds, Buf, Params, Rec, Trace, WgpuBackend};
use crate::backend::{AssignStats, Backend, KmeansSession, RowsView};
use crate::error::{Error, Result};

/// Most workgroups of the energy reduction (fewer for small n).
const ENERGY_GROUPS: usize = 256;

/// Fewest rows of points a streamed session holds at once: below that, it is refused.
const MIN_BLOCK_ROWS: usize = 1024;

/// Rows of the `n` x `d` points a session holds at once: `None` (all of them) without a device
/// memory cap or where they fit in half of what it leaves; else the rows (at most `per`) that
/// take a quarter of what the per-point buffers leave, their staging copy another.
fn streamed_rows(b: &WgpuBackend, n: usize, d: usize, per: usize) -> Result<Option<usize>> {
    let Some(free) = b.memory_free() else {
        return Ok(None);
    };
    let Some(rows) = memory::streamed_rows(n, d, free, b.mma().is_some()) else {
        return Ok(None);
    };
    let rows = rows.min(per);
    if rows < MIN_BLOCK_ROWS.min(n) {
        return Err(Error::OutOfMemory(format!(
            "WGPU: k-means on {n} x {d} points needs more than the {free} bytes of device memory \
             its cap leaves"
        )));
    }
    Ok(Some(b.block_rows(d, d, rows)))
}

/// Buffers sized by the number of centroids.
struct Centroids {
    k: usize,
    c: Buf,
    /// |c_j|^2.
    cn: Buf,
    /// |c_j|^2 + bias_j, rebuilt by every assignment.
    off: Buf,
    bias: Buf,
    counts: Buf,
    cursor: Buf,
    start: Buf,
    cut: Buf,
    kept: Buf,
    spread: Buf,
    sums: Buf,
    /// Where the counts and energy partials come back, every assignment.
    back: Buf,
    /// fp16 halves for cooperative matrices, remade with the norms whenever the centroids
    /// change.
    halves: Option<Halves>,
}

impl Centroids {
    /// Records what the assignment reads besides the centroids, once they have changed:
    /// their norms, and their fp16 halves where cooperative matrices are used.
    fn derive(&self, b: &WgpuBackend, enc: &mut Rec, keep: &Binds, d: usize) {
        b.row_norms(enc, Some(keep), &self.c, self.k, d, 0, &self.cn);
        if let (Some(m), Some(h)) = (b.mma(), &self.halves) {
            b.halves(enc, Some(keep), m, &self.c, self.k, d, h);
        }
    }
}

/// A training set resident on a WGPU device.
pub struct WgpuSession<'a> {
    b: &'a WgpuBackend,
    n: usize,
    d: usize,
    /// (first row, rows, points) per block; streamed sessions have one, refilled per block.
    blocks: Vec<(usize, usize, Buf)>,
    /// (first row, rows) of every block.
    plan: Vec<(usize, usize)>,
    /// A streamed session's points (n x d) on the host, read where they lie, and the first
    /// row of the block its buffer holds now.
    host: Option<RowsView<'a>>,
    loaded: std::cell::Cell<Option<usize>>,
    /// With cooperative matrices: each block's halves, and room for the rows they leave.
    halves: Vec<Halves>,
    listed: Option<Buf>,
    xn: Buf,
    assigned: Buf,
    dist: Buf,
    order: Buf,
    partial: Buf,
    /// The update's trim fraction, and the value it holds (written when it changes).
    trim: (Buf, Option<f32>),
    c: Option<Centroids>,
    /// Counts of the last assignment (the update's group offsets come from them).
    counts: Vec<u32>,
    /// Whether the centroid buffers hold an update's spread.
    updated: bool,
    keep: Binds,
    trace: std::cell::RefCell<Trace>,
}

impl<'a> WgpuSession<'a> {
    /// A session on the rows of `x`, read where they lie (uploaded a few MB at a time).
    pub(super) fn new(b: &'a WgpuBackend, x: RowsView<'a>) -> Result<WgpuSession<'a>> {
        let (n, d) = (x.len(), x.d);
        u32_of(n, "points")?;
        // Blocks of rows within one binding and one dispatch of the assignment (with
        // cooperative matrices, whole workgroups of rows).
        let mut per = b.block_rows(d, d, super::MAX_GROUPS as usize * super::TILE);
        let streamed = streamed_rows(b, n, d, per)?;
        if let Some(rows) = streamed {
            per = rows;
        }
        let plan: Vec<_> = (0..n)
            .step_by(per.max(1))
            .map(|r| (r, per.min(n - r)))
            .collect();
        let xn = b.zeros(n * 4, "point norms")?;
        let mut blocks = Vec::new();
        let mut halves = Vec::new();
        let mut enc = b.encoder();
        // Where a value is not finite, the error names its position in the caller's rows
        // (rows read through a sample, or made unit length, come from a training that
        // checked them all).
        let bad = || crate::check::non_finite_in(x.x, "training vectors");
        if streamed.is_some() {
            if x.is_plain() {
                crate::check::check_finite(x.x, "training vectors")?;
            }
            blocks.push((0, per, b.zeros(per * d * 4, "training points")?));
            if let Some(m) = b.mma() {
                halves.push(Halves::new(b, m, per, d, "training points (fp16)")?);
            }
        } else {
            for (i, &(row0, rows)) in plan.iter().enumerate() {
                let buf = b
                    .upload_rows_finite(x, (row0, rows), "training points")?
                    .ok_or_else(bad)?;
                b.row_norms(&mut enc, None, &buf, rows, d, i * per, &xn);
                if let Some(m) = b.mma() {
                    let h = Halves::new(b, m, rows, d, "training points (fp16)")?;
                    b.halves(&mut enc, None, m, &buf, rows, d, &h);
                    halves.push(h);
                }
                blocks.push((i * per, rows, buf));
            }
        }
        b.finish(enc)?;
        let listed = match b.mma() {
            Some(_) => Some(b.zeros((per.min(n) + 1) * 4, "rows left to fp32")?),
            None => None,
        };
        Ok(WgpuSession {
            b,
            n,
            d,
            blocks,
            plan,
            host: streamed.map(|_| x),
            loaded: std::cell::Cell::new(None),
            halves,
            listed,
            xn,
            assigned: b.zeros(n * 4, "assignment")?,
            dist: b.zeros(n * 4, "distances")?,
            order: b.zeros(n * 4, "members")?,
            partial: b.zeros(ENERGY_GROUPS * 4, "energy partials")?,
            trim: (b.zeros(4, "trim")?, None),
            c: None,
            counts: Vec::new(),
            updated: false,
            keep: Binds::default(),
            trace: std::cell::RefCell::new(Trace::new(b)),
        })
    }

    /// Makes block `i` of the plan readable by what `enc` records next: a streamed session
    /// submits what `enc` holds (which may read the buffer), then copies the block's rows up
    /// and records their norms and halves. Resident blocks are always there.
    fn load(&self, enc: &mut Rec, i: usize) {
        let (b, d) = (self.b, self.d);
        let (row0, rows) = self.plan[i];
        let Some(host) = self.host else { return };
        if self.loaded.get() == Some(row0) {
            return;
        }
        b.submit(std::mem::replace(enc, b.encoder()));
        let buf = &self.blocks[0].2;
        b.write_rows(buf, host, (row0, rows));
        b.row_norms(enc, Some(&self.keep), buf, rows, d, row0, &self.xn);
        if let (Some(m), Some(h)) = (b.mma(), self.halves.first()) {
            b.halves(enc, Some(&self.keep), m, buf, rows, d, h);
        }
        self.loaded.set(Some(row0));
    }

    /// The buffer and halves that hold block `i` (after `load`).
    fn block(&self, i: usize) -> (&Buf, Option<&Halves>) {
        let j = if self.host.is_some() { 0 } else { i };
        (&self.blocks[j].2, self.halves.get(j))
    }

    fn centroids_ref(&self) -> Result<&Centroids> {
        self.c
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("no centroids were set".into()))
    }
}

impl KmeansSession for WgpuSession<'_> {
    fn len(&self) -> usize {
        self.n
    }

    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        let (b, d) = (self.b, self.d);
        let k = crate::check::whole_rows(centroids.len(), d, "centroid values")?;
        if k == 0 {
            return Err(Error::InvalidArgument("no centroids".into()));
        }
        if self.c.as_ref().is_some_and(|c| c.k == k) {
            b.write(&self.c.as_ref().expect("checked").c, centroids);
        } else {
            self.c = None; // free the old buffers first
            self.keep.clear();
            self.updated = false;
            let z = |bytes: usize, what: &str| b.zeros(bytes, what);
            self.c = Some(Centroids {
                k,
                c: b.upload(centroids, "centroids")?,
                cn: z(k * 4, "centroid norms")?,
                off: z(k * 4, "offsets")?,
                bias: z(k * 4, "bias")?,
                counts: z(k * 4, "counts")?,
                cursor: z(k * 4, "cursor")?,
                start: z((k + 1) * 4, "group offsets")?,
                cut: z(k * 4, "trim cutoffs")?,
                kept: z(k * 4, "kept counts")?,
                spread: z(k * 4, "spreads")?,
                sums: z(k * d * 4, "centroid sums")?,
                back: b.buffer(
                    "counts read-back",
                    (k + ENERGY_GROUPS) * 4,
                    WgpuBackend::READ_BACK,
                    false,
                )?,
                halves: match b.mma() {
                    Some(m) => Some(Halves::new(b, m, k, d, "centroids (fp16)")?),
                    None => None,
                },
            });
        }
        let c = self.centroids_ref()?;
        let mut enc = b.encoder();
        c.derive(b, &mut enc, &self.keep, d);
        // Not waited for: the queue keeps the order, and the next read-back waits for it.
        b.submit(enc);
        Ok(())
    }

    fn assign(&mut self, bias: Option<&[f32]>) -> Result<AssignStats> {
        let (b, d, n) = (self.b, self.d, self.n);
        let c = self.centroids_ref()?;
        let k = c.k;
        if let Some(v) = bias {
            if v.len() != k {
                return Err(Error::InvalidArgument(format!(
                    "bias has {} values for {k} centroids",
                    v.len()
                )));
            }
            b.write(&c.bias, v);
        }
        let keep = Some(&self.keep);
        let mut enc = b.encoder();
        let g = b.groups_for(k);
        let p = Params::new(&[0, 0, k as u32, 0, 0, 0, bias.is_some() as u32, g.0]);
        let bufs = [(2, &c.off), (5, &c.counts), (15, &c.bias), (16, &c.cn)];
        b.dispatch_kept(&mut enc, keep, &b.k.offsets, p, &bufs, g);
        for (i, &(row0, rows)) in self.plan.iter().enumerate() {
            self.load(&mut enc, i);
            let (buf, xh) = self.block(i);
            let halves = match (xh, &c.halves, &self.listed) {
                (Some(xh), Some(ch), Some(l)) => Some((xh, ch, l)),
                _ => None,
            };
            let a = Assign {
                x: buf,
                rows,
                row0,
                d,
                c: &c.c,
                n: k,
                off: &c.off,
                bias: bias.map(|_| &c.bias),
                norms: &self.xn,
                assigned: &self.assigned,
                dist: &self.dist,
                halves,
                keep,
            };
            b.assign_rows(&mut enc, &a, &mut self.trace.borrow_mut());
        }
        self.trace.borrow_mut().mark(b, &mut enc, "assign");
        // A grid set by n alone, so the energy's order of sums repeats.
        let groups = n.div_ceil(b.wg as usize).min(ENERGY_GROUPS);
        let p = Params::new(&[n as u32, d as u32, k as u32]);
        b.dispatch_kept(
            &mut enc,
            keep,
            &b.k.count_energy,
            p,
            &[
                (3, &self.assigned),
                (4, &self.dist),
                (5, &c.counts),
                (6, &self.partial),
            ],
            (groups as u32, 1, 1),
        );
        let parts = [(&c.counts, k * 4), (&self.partial, groups * 4)];
        let mut r = b.start_read(enc, &parts, Some(&c.back))?.finish(b)?;
        let partial: Vec<f32> = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
        self.counts = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
        let energy = partial.iter().map(|&v| v as f64).sum();
        Ok(AssignStats {
            counts: self.counts.clone(),
            energy,
        })
    }

    fn update(&mut self, trim: f32) -> Result<()> {
        let (b, d, n) = (self.b, self.d, self.n);
        if self.trim.1 != Some(trim) {
            b.write(&self.trim.0, &[trim]);
            self.trim.1 = Some(trim);
        }
        let c = self.centroids_ref()?;
        let k = c.k;
        if self.counts.len() != k {
            return Err(Error::InvalidArgument(
                "update needs an assignment to the current centroids".into(),
            ));
        }
        let keep = Some(&self.keep);
        let mut enc = b.encoder();
        let p = Params::new(&[n as u32, d as u32, k as u32]);
        let bufs = [(5, &c.counts), (7, &c.cursor), (17, &c.start)];
        b.dispatch_kept(&mut enc, keep, &b.k.group_starts, p, &bufs, (1, 1, 1));
        let g = b.groups_for(n);
        let p = Params::new(&[n as u32, d as u32, k as u32, 0, 0, 0, 0, g.0]);
        b.dispatch_kept(
            &mut enc,
            keep,
            &b.k.scatter,
            p,
            &[(3, &self.assigned), (7, &c.cursor), (8, &self.order)],
            g,
        );
        self.trace.borrow_mut().mark(b, &mut enc, "scatter");
        let (gx, gy) = fold(k);
        let p = Params::new(&[n as u32, d as u32, k as u32, 0, 0, 0, 0, gx]);
        b.dispatch_kept(
            &mut enc,
            keep,
            &b.k.update_cut,
            p,
            &[
                (4, &self.dist),
                (8, &self.order),
                (9, &c.start),
                (10, &c.cut),
                (11, &c.kept),
                (12, &c.spread),
                (18, &self.trim.0),
            ],
            (gx, gy, 1),
        );
        self.trace.borrow_mut().mark(b, &mut enc, "trim cutoff");
        // Last block first: a streamed session holds it from the assignment.
        for (j, i) in (0..self.plan.len()).rev().enumerate() {
            self.load(&mut enc, i);
            let (row0, rows) = self.plan[i];
            let p = Params::new(&[
                n as u32,
                d as u32,
                k as u32,
                row0 as u32,
                rows as u32,
                (j == 0) as u32,
                0,
                gx,
            ]);
            b.dispatch_kept(
                &mut enc,
                keep,
                &b.k.update_sums,
                p,
                &[
                    (1, self.block(i).0),
                    (4, &self.dist),
                    (8, &self.order),
                    (9, &c.start),
                    (10, &c.cut),
                    (13, &c.sums),
                ],
                (gx, gy, 1),
            );
        }
        self.trace.borrow_mut().mark(b, &mut enc, "sums");
        let g = b.groups_for(k * d);
        let p = Params::new(&[0, d as u32, k as u32, 0, 0, 0, 0, g.0]);
        b.dispatch_kept(
            &mut enc,
            keep,
            &b.k.finalize,
            p,
            &[(11, &c.kept), (13, &c.sums), (14, &c.c)],
            g,
        );
        c.derive(b, &mut enc, &self.keep, d);
        // Not waited for: the next assignment's read-back waits for both.
        b.submit(enc);
        self.trace.borrow_mut().mark(b, &mut b.encoder(), "means");
        self.updated = true;
        Ok(())
    }

    fn centroids_and_spread(&mut self) -> Result<(Vec<f32>, Vec<f32>)> {
        let c = self
            .c
            .as_ref()
            .filter(|_| self.updated)
            .ok_or_else(|| Error::InvalidState("spread before update".into()))?;
        // One round trip for both.
        let mut r = self.b.read(
            self.b.encoder(),
            &[(&c.c, c.k * self.d * 4), (&c.spread, c.k * 4)],
        )?;
        let spread = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
        Ok((
            bytemuck::pod_collect_to_vec(&r.pop().expect("two parts")),
            spread,
        ))
    }

    fn centroids(&mut self) -> Result<Vec<f32>> {
        let c = self.centroids_ref()?;
        let r = self.b.read(self.b.encoder(), &[(&c.c, c.k * self.d * 4)])?;
        Ok(bytemuck::pod_collect_to_vec(&r[0]))
    }

    fn assignment(&mut self) -> Result<Vec<u32>> {
        let r = self
            .b
            .read(self.b.encoder(), &[(&self.assigned, self.n * 4)])?;
        Ok(bytemuck::pod_collect_to_vec(&r[0]))
    }

    fn assignment_with_distances(&mut self) -> Result<(Vec<u32>, Vec<f32>)> {
        // One round trip for both.
        let mut r = self.b.read(
            self.b.encoder(),
            &[(&self.assigned, self.n * 4), (&self.dist, self.n * 4)],
        )?;
        let dist = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
        let a = bytemuck::pod_collect_to_vec(&r.pop().expect("two parts"));
        Ok((a, dist))
    }
}
