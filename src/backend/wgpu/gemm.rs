//! Dot products and the nearest-anchor assignment over their tiles.

use super::*;

/// One assignment: per row of a block of points (`x`, rows x d, global rows `row0..`), the
/// nearest of `n` anchors (`c`) under offsets `off` (|c|^2 [+ bias]), into `assigned` and
/// `dist` (global rows).
pub(crate) struct Assign<'a> {
    pub(super) x: &'a Buf,
    pub(super) rows: usize,
    pub(super) row0: usize,
    pub(super) d: usize,
    pub(super) c: &'a Buf,
    pub(super) n: usize,
    pub(super) off: &'a Buf,
    pub(super) bias: Option<&'a Buf>,
    /// |x|^2 of every row (global rows).
    pub(super) norms: &'a Buf,
    pub(super) assigned: &'a Buf,
    pub(super) dist: &'a Buf,
    /// For cooperative matrices: the points' and anchors' halves, and room for the rows
    /// they leave to fp32 (a count, then up to `rows` rows).
    pub(super) halves: Option<(&'a mma::Halves, &'a mma::Halves, &'a Buf)>,
    /// Where a session keeps the bind groups.
    pub(super) keep: Option<&'a Binds>,
}

impl Assign<'_> {
    /// The assignment kernels' parameters: the shape, then `gx` (workgroups along x) and the
    /// kernel's own last word.
    pub(super) fn params(&self, gx: u32, last: u32) -> Params {
        let bias = self.bias.is_some() as u32;
        let (rows, n, d, row0) = (self.rows, self.n, self.d, self.row0);
        Params::new(&[rows as u32, n as u32, d as u32, row0 as u32, bias, gx, last])
    }
}

impl WgpuBackend {
    /// `out (rows x n) = a (rows x k) . b (n x k)^T`.
    pub(super) fn dots(
        &self,
        enc: &mut Rec,
        a: &Buf,
        rows: usize,
        b: &Buf,
        n: usize,
        k: usize,
        out: &Buf,
    ) -> Result<()> {
        let (gx, gy) = (n.div_ceil(TILE), rows.div_ceil(TILE));
        if gx > MAX_GROUPS as usize || gy > MAX_GROUPS as usize {
            return Err(Error::InvalidArgument(format!(
                "WGPU: a {rows} x {n} product is too large for one dispatch"
            )));
        }
        let p = Params::new(&[u32_of(rows, "rows")?, n as u32, k as u32]);
        self.dispatch(
            enc,
            &self.k.dots,
            p,
            &[(1, a), (2, b), (3, out), (9, a)],
            (gx as u32, gy as u32, 1),
        );
        Ok(())
    }

    /// Records an assignment: on cooperative matrices where the backend has them and the
    /// caller gave halves, else in fp32. The same answers either way.
    pub(super) fn assign_rows(&self, enc: &mut Rec, a: &Assign<'_>, trace: &mut Trace) {
        match (self.mma(), a.halves) {
            (Some(mma), Some(h)) => self.assign_mma(enc, mma, a, h, trace),
            _ => self.assign_exact(enc, a, None),
        }
    }

    /// The fp32 assignment (dots.wgsl) of every row of the block, or of the rows `listed`
    /// names (a count, then rows within the block).
    pub(super) fn assign_exact(&self, enc: &mut Rec, a: &Assign<'_>, listed: Option<&Buf>) {
        let (gx, gy) = fold(a.rows.div_ceil(TILE));
        let p = a.params(gx, listed.is_some() as u32);
        self.dispatch_kept(
            enc,
            a.keep,
            &self.k.assign,
            p,
            &[
                (1, a.x),
                (2, a.c),
                (4, a.off),
                (5, a.bias.unwrap_or(a.off)),
                (6, a.norms),
                (7, a.assigned),
                (8, a.dist),
                (9, listed.unwrap_or(a.x)),
            ],
            (gx, gy, 1),
        );
    }

    /// Squared norms of `rows` rows of `x` into `out[row0..]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn row_norms(
        &self,
        enc: &mut Rec,
        keep: Option<&Binds>,
        x: &Buf,
        rows: usize,
        d: usize,
        row0: usize,
        out: &Buf,
    ) {
        let g = self.groups_for(rows);
        let p = Params::new(&[0, d as u32, 0, row0 as u32, rows as u32, 0, 0, g.0]);
        let bufs = [(1, x), (2, out)];
        self.dispatch_kept(enc, keep, &self.k.row_norms, p, &bufs, g);
    }

    /// Rows per block so that a block of `width` floats per row fits one binding.
    pub(super) fn rows_per_block(&self, width: usize) -> usize {
        ((self.max_binding() as usize / 4) / width.max(1)).max(1)
    }
}
