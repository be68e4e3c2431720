//! The CPU reference: rayon over fixed row blocks, faer GEMM inside each block, so results are
//! bit-identical whatever the thread count.

use super::{AssignStats, Backend, BackendKind, KmeansSession};
use crate::error::{try_vec, Result};
use crate::linalg::{self, BLOCK};
use rayon::prelude::*;

/// The CPU backend. Threads come from the rayon pool the caller runs in.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }
    fn kmeans_session<'a>(&'a self, x: &'a [f32], d: usize) -> Result<Box<dyn KmeansSession + 'a>> {
        let n = x.len() / d;
        Ok(Box::new(CpuSession {
            x,
            d,
            xn: linalg::row_norms(x, d),
            c: Vec::new(),
            cn: Vec::new(),
            assign: try_vec(n, 0u32, "assignment")?,
            dist: try_vec(n, 0f32, "distances")?,
        }))
    }
    fn nearest(&self, x: &[f32], d: usize, centroids: &[f32]) -> Result<(Vec<u32>, Vec<f32>)> {
        let n = x.len() / d;
        let mut a = try_vec(n, 0u32, "assignment")?;
        let mut dist = try_vec(n, 0f32, "distances")?;
        let xn = linalg::row_norms(x, d);
        let cn = linalg::row_norms(centroids, d);
        linalg::nearest(x, &xn, centroids, &cn, None, d, &mut a, &mut dist);
        Ok((a, dist))
    }
}

struct CpuSession<'a> {
    x: &'a [f32],
    d: usize,
    xn: Vec<f32>,
    c: Vec<f32>,
    cn: Vec<f32>,
    assign: Vec<u32>,
    dist: Vec<f32>,
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
        linalg::nearest(self.x, &self.xn, &self.c, &self.cn, bias, self.d, &mut self.assign, &mut self.dist);
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

    fn update(&mut self, trim: f32) -> Result<Vec<f32>> {
        let (d, k) = (self.d, self.cn.len());
        let members = group_by_centroid(&self.assign, k);
        let (x, dist) = (self.x, &self.dist);
        let mut spread = vec![0f32; k];
        self.c.par_chunks_mut(d).zip(spread.par_iter_mut()).enumerate().for_each_init(
            Vec::new,
            |acc: &mut Vec<f64>, (j, (cj, sj))| {
                let all = members.of(j);
                if all.is_empty() {
                    return;
                }
                let drop = (all.len() as f32 * trim).floor() as usize;
                let kept;
                let idx: &[u32] = if drop > 0 {
                    // Keep the points nearest the anchor, then sum them in index order.
                    let mut v = all.to_vec();
                    let keep = v.len() - drop;
                    v.select_nth_unstable_by(keep - 1, |a, b| {
                        dist[*a as usize].total_cmp(&dist[*b as usize]).then(a.cmp(b))
                    });
                    v.truncate(keep);
                    v.sort_unstable();
                    kept = v;
                    &kept
                } else {
                    all
                };
                acc.clear();
                acc.resize(d, 0.0);
                let mut s = 0f64;
                for &i in idx {
                    let row = &x[i as usize * d..(i as usize + 1) * d];
                    for (a, v) in acc.iter_mut().zip(row) {
                        *a += *v as f64;
                    }
                    s += dist[i as usize] as f64;
                }
                let inv = 1.0 / idx.len() as f64;
                for (c, a) in cj.iter_mut().zip(acc.iter()) {
                    *c = (*a * inv) as f32;
                }
                *sj = (s * inv) as f32;
            },
        );
        self.cn = linalg::row_norms(&self.c, d);
        Ok(spread)
    }

    fn centroids(&mut self) -> Result<Vec<f32>> {
        Ok(self.c.clone())
    }

    fn assignment(&mut self) -> Result<Vec<u32>> {
        Ok(self.assign.clone())
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
