//! The training memory estimate against the measured peak: resident memory's high-water mark,
//! reset before each training, less what was resident before it. Linux only (it reads and
//! resets /proc/self's counters); one test, so no other test's memory mixes in.
mod common;

use vlc_compress::quant::estimate;
use vlc_compress::{Compressor, Metric, Rotation};

/// Hands the memory freed by earlier work back to the system (glibc keeps it otherwise, and
/// the next training reuses it unseen), then resets the high-water mark. Returns the resident
/// KiB it starts from.
fn fresh_peak() -> usize {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt and malloc_trim only change how glibc keeps free memory. A fixed mmap
    // threshold stops glibc raising it after large frees (it would then serve the next
    // training's buffers from memory already resident, unseen by the high-water mark).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024);
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    status_kib("VmRSS:")
}

fn status_kib(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn training_stays_within_a_quarter_of_its_estimate() {
    let threads = 2;
    let ctx = common::ctx(threads);
    let mut rows = Vec::new();
    for (n, d, bytes, anchors, metric, rotation) in [
        (60_000, 128, 32, 256, Metric::L2, Rotation::Learned),
        (60_000, 128, 32, 256, Metric::Cosine, Rotation::Learned),
        (150_000, 48, 16, 512, Metric::L2, Rotation::Learned),
        (30_000, 384, 64, 256, Metric::L2, Rotation::None),
    ] {
        let x = common::clustered(n, d, 50, 3);
        let mut p = common::small_params(anchors, bytes);
        p.metric = metric;
        p.rotation = rotation;
        let want = estimate::training_bytes(&p, n, d, threads);
        let before = fresh_peak();
        let mut c = Compressor::new(ctx.clone(), p);
        c.train(&x, d).unwrap();
        let peak = (status_kib("VmHWM:") - before) * 1024;
        let ratio = want as f64 / peak as f64;
        rows.push(format!(
            "{n} x {d}, {bytes} B, {anchors} anchors, {metric:?}, {rotation:?}: estimate {:.1} MiB, peak {:.1} MiB ({ratio:.2})",
            want as f64 / (1 << 20) as f64,
            peak as f64 / (1 << 20) as f64
        ));
        drop(c);
    }
    eprintln!("{}", rows.join("\n"));

    // The context's cap: at the estimate, training runs and gives what an uncapped one does;
    // at 50%, 25% or 5% of it, OutOfMemory before anything grows.
    let (n, d) = (60_000, 128);
    let x = common::clustered(n, d, 50, 3);
    let p = common::small_params(256, 32);
    let mut free = Compressor::new(ctx.clone(), p.clone());
    free.train(&x, d).unwrap();
    let want = free.estimate_training_memory(n, d).0;
    for frac in [0.5, 0.25, 0.05] {
        let capped = common::ctx(threads);
        capped.set_memory_cap((want as f64 * frac) as usize);
        let mut c = Compressor::new(capped, p.clone());
        let before = fresh_peak();
        let r = c.train(&x, d);
        let grew = (status_kib("VmHWM:") - before) * 1024;
        assert!(
            matches!(r, Err(vlc_compress::Error::OutOfMemory(_))),
            "{frac}: {r:?}"
        );
        assert!(grew < want / 50, "a refused training grew by {grew} bytes");
    }
    let capped = common::ctx(threads);
    capped.set_memory_cap(want);
    let mut c = Compressor::new(capped, p);
    c.train(&x, d).unwrap();
    assert_eq!(
        c.codebook().unwrap().fingerprint(),
        free.codebook().unwrap().fingerprint()
    );
    for r in &rows {
        let ratio: f64 = r
            .rsplit('(')
            .next()
            .unwrap()
            .trim_end_matches(')')
            .parse()
            .unwrap();
        assert!((0.75..=1.25).contains(&ratio), "{r}");
    }
}
