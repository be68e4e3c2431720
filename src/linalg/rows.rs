//! Rows where they lie, and the question long work asks between its parts: what the
//! numeric kernels and every backend read.

use super::dot;
use crate::error::Result;

/// A yes/no question a long piece of host work asks between its parts: `Err` stops it.
pub type Poll<'a> = &'a (dyn Fn() -> Result<()> + Sync);

/// Training rows where they lie: `pick`'s rows of `x` (every row where `None`), each made
/// unit length where `unit` (cosine), so that a sample needs no prepared copy.
#[derive(Clone, Copy, Debug)]
pub struct RowsView<'a> {
    /// n x d, row-major.
    pub x: &'a [f32],
    pub d: usize,
    /// The rows taken, in order (indices into `x`).
    pub pick: Option<&'a [usize]>,
    /// Each row is divided by its norm (zero rows stay zero).
    pub unit: bool,
}

impl<'a> RowsView<'a> {
    /// Every row of `x` as it is.
    pub fn plain(x: &'a [f32], d: usize) -> Self {
        RowsView {
            x,
            d,
            pick: None,
            unit: false,
        }
    }

    /// Rows taken.
    pub fn len(&self) -> usize {
        match self.pick {
            Some(p) => p.len(),
            None => self.x.len() / self.d.max(1),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `x` itself: nothing picked or prepared.
    pub fn is_plain(&self) -> bool {
        self.pick.is_none() && !self.unit
    }

    /// Row `i` of the view into `out` (`d` values): copied, and made unit length where asked.
    pub(crate) fn row_into(&self, i: usize, out: &mut [f32]) {
        let d = self.d;
        let src = self.pick.map_or(i, |p| p[i]);
        out.copy_from_slice(&self.x[src * d..(src + 1) * d]);
        if self.unit {
            unit_row(out);
        }
    }

    /// Rows `start..start + len`: `x`'s own where the view is plain, else gathered (and made
    /// unit length) into `buf`.
    pub fn block<'b>(&'b self, start: usize, len: usize, buf: &'b mut Vec<f32>) -> &'b [f32] {
        let d = self.d;
        if self.is_plain() {
            return &self.x[start * d..(start + len) * d];
        }
        buf.resize(len * d, 0.0);
        for (i, out) in (start..).zip(buf.chunks_exact_mut(d.max(1))) {
            self.row_into(i, out);
        }
        buf
    }

    /// Values `range` of the rows from `row0` on laid end to end (value t of row `row0 + i`
    /// at `i * d + t`), copied: pieces of rows for uploads that go a few MB at a time.
    #[cfg(feature = "wgpu")]
    pub(crate) fn values(&self, row0: usize, range: std::ops::Range<usize>) -> Vec<f32> {
        let d = self.d.max(1);
        let mut out = Vec::with_capacity(range.len());
        let mut row = vec![0f32; self.d];
        let mut f = range.start;
        while f < range.end {
            let (r, c) = (f / d, f % d);
            self.row_into(row0 + r, &mut row);
            let take = (d - c).min(range.end - f);
            out.extend_from_slice(&row[c..c + take]);
            f += take;
        }
        out
    }

    /// The rows at `idx` (positions in this view), copied.
    pub fn gather(&self, idx: &[usize]) -> Vec<f32> {
        let mut out = vec![0f32; idx.len() * self.d];
        for (&i, o) in idx.iter().zip(out.chunks_exact_mut(self.d.max(1))) {
            self.row_into(i, o);
        }
        out
    }

    /// Every row taken, as one block: `x` itself where the view is plain.
    pub fn whole(&self) -> std::borrow::Cow<'a, [f32]> {
        use rayon::prelude::*;
        if self.is_plain() {
            return self.x.into();
        }
        let mut out = vec![0f32; self.len() * self.d];
        out.par_chunks_mut(self.d.max(1))
            .enumerate()
            .for_each(|(i, o)| self.row_into(i, o));
        out.into()
    }
}

/// One row scaled to unit length (a zero row stays zero).
pub(crate) fn unit_row(r: &mut [f32]) {
    let n = dot(r, r).sqrt();
    if n > 0.0 {
        r.iter_mut().for_each(|t| *t /= n);
    }
}
