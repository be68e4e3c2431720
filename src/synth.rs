//! Seeded synthetic data for benchmarks and tests: identical on every platform.

use crate::rng::Rng;

/// n x d independent standard normal values.
pub fn gaussian(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n * d).map(|_| r.normal() as f32).collect()
}

/// n x d points around `clusters` centres (spread 4, unit noise); point i belongs to cluster
/// `(i * 7919) % clusters`, so any prefix covers every cluster.
pub fn clustered(n: usize, d: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    let clusters = clusters.max(1);
    let centres: Vec<f32> = (0..clusters * d).map(|_| r.normal() as f32 * 4.0).collect();
    let mut x = Vec::with_capacity(n * d);
    for i in 0..n {
        let c = (i * 7919) % clusters;
        x.extend((0..d).map(|t| centres[c * d + t] + r.normal() as f32));
    }
    x
}

/// n x d points spread mostly along `rank` random directions (standard normal weights), a
/// little along every direction (noise 0.05), around a common offset off the origin: data
/// whose spread a few axes hold. Rows of one seed share directions and offset, so a prefix
/// and the rows after it (a base and its queries) come from one distribution.
pub fn low_rank(n: usize, d: usize, rank: usize, seed: u64) -> Vec<f32> {
    let basis = gaussian(rank + 1, d, seed);
    let weights = gaussian(n, rank, seed + 1);
    let noise = gaussian(n, d, seed + 2);
    let mut out = vec![0f32; n * d];
    for (i, row) in out.chunks_exact_mut(d).enumerate() {
        for (t, v) in row.iter_mut().enumerate() {
            let s: f32 = (0..rank)
                .map(|e| weights[i * rank + e] * basis[e * d + t])
                .sum();
            *v = 3.0 * basis[rank * d + t] + s + 0.05 * noise[i * d + t];
        }
    }
    out
}
