//! The CPU reference: rayon over fixed row blocks, faer GEMM inside each block, so results are
//! bit-identical whatever the thread count. Its searcher, the host scan, is `search`.

pub(crate) mod search;

use super::{
    host, layout, AssignStats, Backend, BackendKind, BackendOptions, Caps, CodebookView,
    KmeansSession, Poll, RowsView,
};
use crate::error::{try_vec, Result};
use crate::linalg::{self, AssignScratch, Centroids, BLOCK};
use rayon::prelude::*;

/// The CPU backend. Threads come from the rayon pool the caller runs in.
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    opts: BackendOptions,
}

impl CpuBackend {
    pub fn new(opts: BackendOptions) -> CpuBackend {
        CpuBackend { opts }
    }
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }
    fn options(&self) -> &BackendOptions {
        &self.opts
    }
    fn caps(&self) -> Caps {
        Caps::HOST
    }
    /// `host::encode_in_steps` a row block at a time: each block's anchor, residual, rotation
    /// and sub-codes while it is in cache, instead of a pass over the whole input per step.
    /// Blocks are `BLOCK` rows from the start, as every step's own blocks are, and the norms
    /// of the anchors and codewords are taken once, so the codes are the stepwise ones to
    /// the bit.
    fn encode_residuals(&self, cb: &CodebookView, x: &[f32]) -> Result<(Vec<u32>, Vec<u8>)> {
        let (d, dp, nsub, dsub) = (cb.d, cb.dp(), cb.nsub, cb.dsub);
        let n = x.len() / d;
        let mut assign = try_vec(n, 0u32, "assignment")?;
        let rb = cb.row_bytes();
        let mut codes = try_vec(n * rb, 0u8, "codes")?;
        let anchors = Centroids::new(cb.anchors, d);
        let per = cb.books.len() / nsub.max(1);
        let books: Vec<Centroids> = (0..nsub)
            .map(|j| Centroids::new(&cb.books[j * per..(j + 1) * per], dsub))
            .collect();
        x.par_chunks(BLOCK * d)
            .zip(assign.par_chunks_mut(BLOCK))
            .zip(codes.par_chunks_mut(BLOCK * rb))
            .for_each_init(EncodeScratch::default, |s, ((xb, ab), out)| {
                let r = ab.len();
                anchors.assign(xb, &mut s.scratch, ab);
                let res = layout::residuals(xb, d, dsub, dp, cb.anchors, ab);
                let y = if cb.rotation.is_empty() {
                    &res
                } else {
                    s.rotated.resize(res.len(), 0.0);
                    linalg::dot_block(&res, cb.rotation, dp, &mut s.rotated);
                    &s.rotated
                };
                s.ids.resize(r, 0);
                for (j, book) in books.iter().enumerate() {
                    s.sub.clear();
                    host::sub_columns_into(y, dp, j * dsub, dsub, &mut s.sub);
                    book.assign(&s.sub, &mut s.scratch, &mut s.ids);
                    for (o, &c) in out.chunks_exact_mut(rb).zip(&s.ids) {
                        o[j] = c as u8;
                    }
                }
                if rb > nsub {
                    for (o, ys) in out.chunks_exact_mut(rb).zip(y.chunks_exact(dp)) {
                        o[nsub] = host::error_level(cb, ys, &o[..nsub]);
                    }
                }
            });
        Ok((assign, codes))
    }
    fn kmeans_session_in_place<'a>(
        &'a self,
        rows: RowsView<'a>,
        _precision: crate::params::Precision, // fp32 always: the reference
    ) -> Result<Box<dyn KmeansSession + 'a>> {
        CpuSession::boxed(rows)
    }
    fn nearest(&self, x: &[f32], d: usize, centroids: &[f32]) -> Result<(Vec<u32>, Vec<f32>)> {
        let n = x.len() / d;
        let mut a = try_vec(n, 0u32, "assignment")?;
        let mut dist = try_vec(n, 0f32, "distances")?;
        let xn = linalg::row_norms(x, d);
        let cn = linalg::row_norms(centroids, d);
        let rows = RowsView::plain(x, d);
        linalg::nearest(
            rows,
            &xn,
            centroids,
            &cn,
            None,
            d,
            &mut a,
            &mut dist,
            &|| Ok(()),
        )?;
        Ok((a, dist))
    }
}

/// Buffers one encoding thread reuses from block to block.
#[derive(Default)]
struct EncodeScratch {
    scratch: AssignScratch,
    rotated: Vec<f32>,
    sub: Vec<f32>,
    ids: Vec<u32>,
}

/// A k-means session on the host: its points are read where they lie, a block at a time.
struct CpuSession<'a> {
    x: RowsView<'a>,
    d: usize,
    xn: Vec<f32>,
    c: Vec<f32>,
    cn: Vec<f32>,
    assign: Vec<u32>,
    dist: Vec<f32>,
    spread: Vec<f32>,
}

impl<'a> CpuSession<'a> {
    fn boxed(x: RowsView<'a>) -> Result<Box<dyn KmeansSession + 'a>> {
        let n = x.len();
        Ok(Box::new(CpuSession {
            x,
            d: x.d,
            xn: linalg::view_norms(x),
            c: Vec::new(),
            cn: Vec::new(),
            assign: try_vec(n, 0u32, "assignment")?,
            dist: try_vec(n, 0f32, "distances")?,
            spread: Vec::new(),
        }))
    }
}

impl KmeansSession for CpuSession<'_> {
    fn len(&self) -> usize {
        self.xn.len()
    }

    fn set_centroids(&mut self, centroids: &[f32]) -> Result<()> {
        self.c.clear();
        self.c.extend_from_slice(centroids);
        self.cn = linalg::row_norms(&self.c, self.d);
        Ok(())
    }

    fn assign(&mut self, bias: Option<&[f32]>) -> Result<AssignStats> {
        self.assign_polled(bias, &|| Ok(()))
    }

    fn assign_polled(&mut self, bias: Option<&[f32]>, poll: Poll) -> Result<AssignStats> {
        linalg::nearest(
            self.x,
            &self.xn,
            &self.c,
            &self.cn,
            bias,
            self.d,
            &mut self.assign,
            &mut self.dist,
            poll,
        )?;
        let k = self.cn.len();
        let mut counts = vec![0u32; k];
        for &a in &self.assign {
            counts[a as usize] += 1;
        }
        // Per-block sums in block order: the same total for any thread count.
        let energy = self
            .dist
            .par_chunks(BLOCK)
            .map(|b| b.iter().map(|&v| v as f64).sum::<f64>())
            .collect::<Vec<_>>()
            .iter()
            .sum();
        Ok(AssignStats { counts, energy })
    }

    fn update(&mut self, trim: f32) -> Result<()> {
        self.update_polled(trim, &|| Ok(()))
    }

    fn update_polled(&mut self, trim: f32, poll: Poll) -> Result<()> {
        let (d, k, n) = (self.d, self.cn.len(), self.assign.len());
        let (x, dist, assign) = (self.x, &self.dist, &self.assign);
        // With trimming, each centroid keeps its `keep` nearest points: those at or below a
        // (distance, index) cutoff, so ties are settled by index and the kept set is exact.
        let cutoff: Option<Vec<(f32, u32)>> = (trim > 0.0).then(|| {
            let members = group_by_centroid(assign, k);
            (0..k)
                .into_par_iter()
                .map(|j| {
                    let all = members.of(j);
                    let drop = (all.len() as f32 * trim).floor() as usize;
                    if drop == 0 {
                        return (f32::INFINITY, u32::MAX);
                    }
                    let mut v: Vec<(f32, u32)> =
                        all.iter().map(|&i| (dist[i as usize], i)).collect();
                    let keep = v.len() - drop;
                    let cmp =
                        |a: &(f32, u32), b: &(f32, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
                    *v.select_nth_unstable_by(keep - 1, cmp).1
                })
                .collect()
        });
        let kept = |i: usize| match &cutoff {
            None => true,
            Some(c) => {
                let (cd, ci) = c[assign[i] as usize];
                dist[i] < cd || (dist[i] == cd && i as u32 <= ci)
            }
        };
        poll()?;
        let mut count = vec![0u32; k];
        let mut spread_sum = vec![0f64; k];
        for i in 0..n {
            if kept(i) {
                count[assign[i] as usize] += 1;
                spread_sum[assign[i] as usize] += dist[i] as f64;
            }
        }
        // Sums over a fixed number of row chunks (set by n, k and d only, never by the thread
        // count): rows are read in order, each chunk adds into its own accumulators, and the
        // chunks are combined in order, so the result is the same on any number of threads.
        let chunks = (n / 2048)
            .min(8)
            .min((64 << 20) / (k * d * 8).max(1))
            .max(1);
        let per = n.div_ceil(chunks);
        let partial: Vec<Vec<f64>> = (0..chunks)
            .into_par_iter()
            .map(|ch| {
                poll()?;
                let mut acc = vec![0f64; k * d];
                let mut buf = Vec::new();
                let end = ((ch + 1) * per).min(n);
                for start in (ch * per..end).step_by(BLOCK) {
                    let xb = x.block(start, BLOCK.min(end - start), &mut buf);
                    for (i, row) in (start..).zip(xb.chunks_exact(d)) {
                        if kept(i) {
                            let a = assign[i] as usize;
                            for (s, v) in acc[a * d..(a + 1) * d].iter_mut().zip(row) {
                                *s += *v as f64;
                            }
                        }
                    }
                }
                Ok(acc)
            })
            .collect::<Result<_>>()?;
        poll()?;
        let mut sums = partial[0].clone();
        for p in &partial[1..] {
            for (s, v) in sums.iter_mut().zip(p) {
                *s += v;
            }
        }
        let mut spread = vec![0f32; k];
        for j in 0..k {
            if count[j] == 0 {
                continue;
            }
            let inv = 1.0 / count[j] as f64;
            for t in 0..d {
                self.c[j * d + t] = (sums[j * d + t] * inv) as f32;
            }
            spread[j] = (spread_sum[j] * inv) as f32;
        }
        self.cn = linalg::row_norms(&self.c, d);
        self.spread = spread;
        Ok(())
    }

    fn centroids_and_spread(&mut self) -> Result<(Vec<f32>, Vec<f32>)> {
        if self.spread.is_empty() {
            return Err(crate::error::Error::InvalidState(
                "spread before update".into(),
            ));
        }
        Ok((self.c.clone(), self.spread.clone()))
    }

    fn centroids(&mut self) -> Result<Vec<f32>> {
        Ok(self.c.clone())
    }

    fn assignment(&mut self) -> Result<Vec<u32>> {
        Ok(self.assign.clone())
    }

    fn assignment_with_distances(&mut self) -> Result<(Vec<u32>, Vec<f32>)> {
        Ok((self.assign.clone(), self.dist.clone()))
    }
}

/// Point indices grouped by centroid, each group in increasing order (a counting sort).
pub(crate) struct Groups {
    start: Vec<usize>,
    idx: Vec<u32>,
}

impl Groups {
    pub fn of(&self, j: usize) -> &[u32] {
        &self.idx[self.start[j]..self.start[j + 1]]
    }
}

pub(crate) fn group_by_centroid(assign: &[u32], k: usize) -> Groups {
    let mut start = vec![0usize; k + 1];
    for &a in assign {
        start[a as usize + 1] += 1;
    }
    for j in 0..k {
        start[j + 1] += start[j];
    }
    let mut fill = start.clone();
    let mut idx = vec![0u32; assign.len()];
    for (i, &a) in assign.iter().enumerate() {
        idx[fill[a as usize]] = i as u32;
        fill[a as usize] += 1;
    }
    Groups { start, idx }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Metric;

    #[test]
    fn block_encoding_equals_the_stepwise_encoding_bit_for_bit() {
        let mut seed = 3u64;
        let mut u = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        // d = 37 over 8 sub-spaces of 5 (padded to 40), and 40 unpadded; 700 rows: two whole
        // blocks and a part; 8-bit codes with an error level too.
        let cases = [
            (37, 8u32, false, false),
            (37, 8, true, false),
            (37, 4, true, false),
            (40, 8, true, false),
            (37, 8, true, true),
            (40, 8, false, true),
        ];
        for (d, bits, rotated, levelled) in cases {
            let (nsub, dsub, n, m) = (8, 5, 700, 20);
            let dp = nsub * dsub;
            let ks = 1usize << bits;
            let anchors: Vec<f32> = (0..m * d).map(|_| u()).collect();
            let books: Vec<f32> = (0..nsub * ks * dsub).map(|_| u() * 0.3).collect();
            let rotation: Vec<f32> = if rotated {
                (0..dp * dp).map(|_| u()).collect()
            } else {
                Vec::new()
            };
            let x: Vec<f32> = (0..n * d).map(|_| u()).collect();
            // Levels from 0.01 to about 2,600, spread over whatever errors these rows have.
            let levels: Vec<f32> = if levelled {
                (0..256).map(|i| 0.01 * 1.05f32.powi(i)).collect()
            } else {
                Vec::new()
            };
            let cb = CodebookView {
                key: 1,
                d,
                metric: Metric::L2,
                anchors: &anchors,
                rotation: &rotation,
                nsub,
                dsub,
                bits,
                books: &books,
                levels: &levels,
            };
            let cpu = CpuBackend::default();
            let want = host::encode_in_steps(&cpu, &cb, &x).unwrap();
            let got = cpu.encode_residuals(&cb, &x).unwrap();
            assert_eq!(
                got, want,
                "d {d} bits {bits} rotated {rotated} levels {levelled}"
            );
            if levelled {
                // The level bytes are spread, not stuck at an end.
                let lv: std::collections::BTreeSet<u8> =
                    got.1.chunks_exact(nsub + 1).map(|c| c[nsub]).collect();
                assert!(lv.len() > 20, "{} distinct levels", lv.len());
            }
        }
    }
}
