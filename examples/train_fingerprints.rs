//! Codebook fingerprints of CPU trainings on five synthetic shapes that cover every path the
//! training's memory work touches: L2, inner product and cosine; sampled and whole inputs; no,
//! random and learned rotation (with alternations); padded sub-spaces. Run it at two commits
//! to check that a change leaves the codebooks bit-identical.
//!
//!     cargo run --release --example train_fingerprints

use std::sync::Arc;
use vlc_compress::{synth, BackendKind, Compressor, Context, Metric, Rotation, TrainParams};

fn main() -> vlc_compress::Result<()> {
    let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, 2)?);
    // (n, d, bytes, anchors, points per anchor, metric, rotation, alternations, PQ points)
    let shapes = [
        (
            40_000,
            96,
            16,
            128,
            64,
            Metric::L2,
            Rotation::Learned,
            0,
            20_000,
        ),
        (
            40_000,
            96,
            16,
            128,
            0,
            Metric::Cosine,
            Rotation::Learned,
            0,
            0,
        ),
        (
            40_000,
            100,
            16,
            128,
            64,
            Metric::Cosine,
            Rotation::Random,
            0,
            20_000,
        ),
        (30_000, 100, 32, 64, 0, Metric::L2, Rotation::Learned, 2, 0),
        (
            30_000,
            64,
            8,
            64,
            100,
            Metric::InnerProduct,
            Rotation::None,
            0,
            10_000,
        ),
    ];
    for (n, d, bytes, k, mpa, metric, rotation, opq, pq_points) in shapes {
        let x = synth::clustered(n, d, 40, 7);
        let mut p = TrainParams {
            bytes_per_vector: bytes,
            pq_iters: 8,
            rotation,
            opq_iters: opq,
            pq_train_points: pq_points,
            metric,
            ..TrainParams::default()
        };
        p.anchor.anchors = k;
        p.anchor.max_iters = 8;
        p.anchor.max_points_per_anchor = mpa;
        let mut c = Compressor::new(ctx.clone(), p);
        let r = c.train(&x, d)?.clone();
        println!(
            "{n} x {d}, {bytes} B, {metric:?}, {rotation:?}, {mpa} points per anchor, {opq} \
             alternations: fingerprint {:016x}, energy {}, pq_mse {}",
            c.codebook()?.fingerprint(),
            r.energy,
            r.pq_mse
        );
    }
    Ok(())
}
