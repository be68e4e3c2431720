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
