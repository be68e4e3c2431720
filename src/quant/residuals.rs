//! The codebooks' training rows: the sample's residuals to their nearest anchors, in the
//! padded layout. Held as one copy, or, where a memory cap leaves no room for that copy,
//! rebuilt a block at a time from the caller's rows. Every consumer reads them in the same
//! blocks of rows either way, so both give the same values and the same codebook.

use crate::backend::layout;
use crate::backend::RowsView;
use crate::linalg::{self, BLOCK};
use rayon::prelude::*;
use std::borrow::Cow;

pub(crate) struct Residuals<'a> {
    view: RowsView<'a>,
    anchors: &'a [f32],
    assign: Vec<u32>,
    dsub: usize,
    dp: usize,
    /// The residuals of every row (n x dp), where they are held.
    held: Option<Vec<f32>>,
}

impl<'a> Residuals<'a> {
    /// The residuals of `view`'s rows to `anchors[assign]` (`dp` = M x `dsub` columns),
    /// held where `hold` (written over `sample` where it is the view's own copy), else
    /// rebuilt where read.
    pub(crate) fn new(
        view: RowsView<'a>,
        sample: Option<Cow<'_, [f32]>>,
        anchors: &'a [f32],
        assign: Vec<u32>,
        dsub: usize,
        dp: usize,
    ) -> Self {
        let d = view.d;
        let held = sample.map(|s| match s {
            Cow::Owned(s) => layout::residuals_in_place(s, d, dsub, dp, anchors, &assign),
            Cow::Borrowed(s) => layout::residuals(s, d, dsub, dp, anchors, &assign),
        });
        Residuals {
            view,
            anchors,
            assign,
            dsub,
            dp,
            held,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.assign.len()
    }

    /// Every row, where they are held.
    pub(crate) fn held(&self) -> Option<&[f32]> {
        self.held.as_deref()
    }

    /// Rows `start..start + len` (len x dp).
    pub(crate) fn block(&self, start: usize, len: usize) -> Cow<'_, [f32]> {
        let dp = self.dp;
        if let Some(h) = &self.held {
            return h[start * dp..(start + len) * dp].into();
        }
        let mut rows = Vec::new();
        let x = self.view.block(start, len, &mut rows);
        let assign = &self.assign[start..start + len];
        layout::residuals(x, self.view.d, self.dsub, dp, self.anchors, assign).into()
    }

    /// Sub-space `j`'s columns of the rows turned by `rot` (n x dsub): for each block of
    /// rows, one product with the rotation's rows of that sub-space, so that no whole
    /// rotated copy is made and a sub-space's columns do not depend on the others.
    pub(crate) fn columns(&self, rot: &[f32], j: usize) -> Vec<f32> {
        let (dp, dsub) = (self.dp, self.dsub);
        let mut out = vec![0f32; self.rows() * dsub];
        out.par_chunks_mut(BLOCK * dsub)
            .enumerate()
            .for_each(|(b, o)| {
                let blk = self.block(b * BLOCK, o.len() / dsub);
                if rot.is_empty() {
                    for (o, r) in o.chunks_exact_mut(dsub).zip(blk.chunks_exact(dp)) {
                        o.copy_from_slice(&r[j * dsub..(j + 1) * dsub]);
                    }
                } else {
                    linalg::dot_block(&blk, &rot[j * dsub * dp..(j + 1) * dsub * dp], dp, o);
                }
            });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::rotation::random_orthogonal;

    #[test]
    fn held_and_rebuilt_rows_are_the_same() {
        let (n, d, nsub) = (1000, 10, 4);
        let (dsub, dp) = (3, 12);
        let x: Vec<f32> = (0..n * d).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let anchors: Vec<f32> = (0..3 * d).map(|i| i as f32 * 0.5).collect();
        let assign: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        let pick: Vec<usize> = (0..n).rev().step_by(3).collect();
        let rot = random_orthogonal(dp, 5);
        for (pick, unit) in [(None, false), (Some(&pick[..]), true)] {
            let view = RowsView {
                x: &x,
                d,
                pick,
                unit,
            };
            let a = assign[..view.len()].to_vec();
            let held = Residuals::new(view, Some(view.whole()), &anchors, a.clone(), dsub, dp);
            let rebuilt = Residuals::new(view, None, &anchors, a, dsub, dp);
            assert!(held.held().is_some() && rebuilt.held().is_none());
            let m = view.len();
            assert_eq!(held.block(0, m), rebuilt.block(0, m));
            for j in 0..nsub {
                assert_eq!(held.columns(&rot, j), rebuilt.columns(&rot, j));
                assert_eq!(held.columns(&[], j), rebuilt.columns(&[], j));
            }
            // A sub-space's columns are those of the whole rotation, to rounding.
            let whole = layout::rotate(&rot, &held.block(0, m), dp);
            let c = held.columns(&rot, 2);
            for (i, v) in c.chunks_exact(dsub).enumerate() {
                for t in 0..dsub {
                    assert!((v[t] - whole[i * dp + 2 * dsub + t]).abs() < 1e-3);
                }
            }
        }
    }
}
