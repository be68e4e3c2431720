//! Training's memory estimate against its measured peak on a vectors file (Linux): the
//! resident high-water mark, reset before training, less what was resident before it.
//!
//!     cargo run --release --example train_memory -- BASE.fvecs BYTES [l2|ip|cosine] [THREADS]

use std::sync::Arc;
use vlc_compress::{quant::estimate, vecio, BackendKind, Compressor, Context, Metric, TrainParams};

fn status_kib(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let x = vecio::read_vectors(std::path::Path::new(&args[1]))?;
    let metric = match args.get(3).map(String::as_str) {
        Some("ip") => Metric::InnerProduct,
        Some("cosine") => Metric::Cosine,
        _ => Metric::L2,
    };
    let threads = args.get(4).map_or(Ok(2), |t| t.parse())?;
    let p = TrainParams {
        bytes_per_vector: args[2].parse()?,
        metric,
        ..TrainParams::default()
    };
    let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, threads)?);
    let want = estimate::training_bytes(&p, x.rows, x.cols, threads);
    std::fs::write("/proc/self/clear_refs", "5")?;
    let before = status_kib("VmRSS:");
    Compressor::new(ctx, p).train(&x.data, x.cols)?;
    let peak = (status_kib("VmHWM:") - before) * 1024;
    println!(
        "{}: {} x {}, {} B, {metric:?}: estimate {:.1} MiB, measured peak {:.1} MiB ({:.2})",
        args[1],
        x.rows,
        x.cols,
        args[2],
        want as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
        want as f64 / peak as f64
    );
    Ok(())
}
