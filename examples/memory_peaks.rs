//! The memory estimates against measured peaks (Linux): training, adding every vector to an
//! empty index, and its first search of 1,000 queries, each measured as the growth of the
//! resident high-water mark during the call (reset before it, with freed memory handed back
//! first). Default parameters, but for the code size, bits and metric given.
//!
//!     cargo run --release --example memory_peaks -- BASE BYTES [BITS] [l2|ip|cosine] [THREADS]
//!
//! BASE is a vectors file (.fvecs, .npy) or `synthetic:N:D` (clustered random vectors).

use std::sync::Arc;
use vlc_compress::{
    synth, vecio, BackendKind, Compressor, Context, Metric, SearchParams, TrainParams, Work,
};

fn status_kib(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Growth of the resident high-water mark while `f` runs, in bytes.
fn peak_of<R>(f: impl FnOnce() -> R) -> (usize, R) {
    #[cfg(target_env = "gnu")]
    // SAFETY: these only change how glibc keeps free memory (a fixed mmap threshold stops it
    // serving the next call's buffers from memory already resident, unseen by the mark).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 16 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_kib("VmRSS:");
    let r = f();
    (status_kib("VmHWM:").saturating_sub(before) * 1024, r)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (data, d) = match args[1].strip_prefix("synthetic:") {
        Some(shape) => {
            let (n, d) = shape.split_once(':').ok_or("synthetic:N:D")?;
            let (n, d): (usize, usize) = (n.parse()?, d.parse()?);
            (synth::clustered(n, d, 1000, 7), d)
        }
        None => {
            let x = vecio::read_vectors(std::path::Path::new(&args[1]))?;
            (x.data, x.cols)
        }
    };
    let n = data.len() / d;
    let bits = args.get(3).map_or(Ok(8), |b| b.parse())?;
    let metric = match args.get(4).map(String::as_str) {
        Some("ip") => Metric::InnerProduct,
        Some("cosine") => Metric::Cosine,
        _ => Metric::L2,
    };
    let threads = args.get(5).map_or(Ok(2), |t| t.parse())?;
    let p = TrainParams {
        bytes_per_vector: args[2].parse()?,
        bits,
        metric,
        ..TrainParams::default()
    };
    let ctx = Arc::new(Context::new(BackendKind::Cpu, 0, threads)?);
    let mut c = Compressor::new(ctx, p);
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let show = |what: &str, want: usize, peak: usize| {
        println!(
            "{what:>6}: estimate {:>8.1} MiB, measured peak {:>8.1} MiB ({:.2})",
            mib(want),
            mib(peak),
            want as f64 / peak.max(1) as f64
        );
    };
    println!(
        "{}: {n} x {d}, {} B, {bits}-bit, {metric:?}",
        args[1], args[2]
    );

    let want = c.estimate_memory(Work::Train, n, d).unwrap().0;
    let (peak, r) = peak_of(|| c.train(&data, d).map(|_| ()));
    r?;
    show("train", want, peak);

    let mut ix = c.new_index()?;
    let ids: Vec<u64> = (0..n as u64).collect();
    let want = ix.estimate_add_memory(n).unwrap().0;
    let (peak, r) = peak_of(|| ix.add(&data[..], &ids));
    r?;
    show("add", want, peak);

    let sp = SearchParams::default();
    let nq = n.min(1000);
    let want = ix.estimate_search_memory(nq, &sp).unwrap().0;
    let (peak, r) = peak_of(|| ix.search(&data[..nq * d], &sp, None));
    r?;
    show("search", want, peak);
    Ok(())
}
