//! Device memory estimates against the peaks measured on CUDA: each call's growth of the
//! device memory pool's high-water mark (every buffer of the CUDA backend comes from it), for
//! training, adding every vector to an empty index, and its first and second searches.
//!
//!     cargo run --release --example device_memory -- N:D:BYTES[:BITS[:ANCHORS[:METRIC]]] ...
//!
//! Synthetic clustered vectors; default parameters otherwise.

use std::sync::Arc;
use vlc_compress::backend::cuda::pool_usage;
use vlc_compress::{
    synth, BackendKind, Compressor, Context, Metric, SearchParams, TrainParams, Work,
};

/// (device bytes held after `f`, growth of the high-water mark during `f`), with `f`'s result.
fn device_peak<R>(f: impl FnOnce() -> R) -> Result<(usize, usize, R), Box<dyn std::error::Error>> {
    let (before, _) = pool_usage(0, true)?.ok_or("the device has no memory pool")?;
    let r = f();
    let (now, high) = pool_usage(0, true)?.ok_or("the device has no memory pool")?;
    Ok((now.saturating_sub(before), high.saturating_sub(before), r))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let show = |what: &str, want: usize, held: usize, peak: usize| {
        println!(
            "  {what:>14}: estimate {:>9.1} MiB, peak {:>9.1} MiB ({:.2}), held after {:>9.1} MiB",
            mib(want),
            mib(peak),
            want as f64 / peak.max(1) as f64,
            mib(held)
        );
    };
    let (free, total) = vlc_compress::backend::cuda::memory_info(0)?;
    println!(
        "device 0: {:.1} GiB free of {:.1}",
        free as f64 / 2f64.powi(30),
        total as f64 / 2f64.powi(30)
    );
    for spec in std::env::args().skip(1) {
        let f: Vec<&str> = spec.split(':').collect();
        let (n, d, bytes): (usize, usize, usize) = (f[0].parse()?, f[1].parse()?, f[2].parse()?);
        let bits = f.get(3).map_or(Ok(8), |v| v.parse())?;
        let anchors = f.get(4).map_or(Ok(1024), |v| v.parse())?;
        let metric = match f.get(5).copied() {
            Some("ip") => Metric::InnerProduct,
            Some("cosine") => Metric::Cosine,
            _ => Metric::L2,
        };
        let mut p = TrainParams {
            bytes_per_vector: bytes,
            bits,
            metric,
            ..TrainParams::default()
        };
        p.anchor.anchors = anchors;
        let x = synth::clustered(n, d, 1000, 7);
        println!("{n} x {d}, {bytes} B, {bits}-bit, {anchors} anchors, {metric:?}");
        let ctx = Arc::new(Context::new(BackendKind::Cuda, 0, 0)?);
        let mut c = Compressor::new(ctx, p);
        let want = c.estimate_memory(Work::Train, n, d).unwrap().1;
        let (held, peak, r) = device_peak(|| c.train(&x, d).map(|_| ()))?;
        r?;
        show("train", want, held, peak);
        let mut ix = c.new_index()?;
        let ids: Vec<u64> = (0..n as u64).collect();
        let want = ix.estimate_add_memory(n).unwrap().1;
        let (held, peak, r) = device_peak(|| ix.add(&x[..], &ids))?;
        r?;
        show("add", want, held, peak);
        let sp = SearchParams {
            k: 10,
            nprobe: 32,
            rerank: 0,
        };
        let nq = n.min(10_000);
        for what in ["first search", "second search"] {
            let want = ix.estimate_search_memory(nq, &sp).unwrap().1;
            let (held, peak, r) = device_peak(|| ix.search(&x[..nq * d], &sp, None))?;
            r?;
            show(what, want, held, peak);
        }
    }
    Ok(())
}
