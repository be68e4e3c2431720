//! The memory estimates (training, adding, searching) against the measured peak: resident
//! memory's high-water mark, reset before each call, less what was resident before it; and the
//! context's cap on each. Linux only (it reads and resets /proc/self's counters); one test, so
//! no other test's memory mixes in.
mod common;

use vlc_compress::quant::estimate;
use vlc_compress::{Compressor, Error, Index, Metric, Refine, Rotation, SearchParams, TrainParams};

/// Resets the high-water mark; returns the resident KiB it starts from. The allocator's
/// settings are left as a host has them (the library's large buffers are on pages of their
/// own, `pages`); the small blocks earlier calls freed go back to the system first, so that
/// reusing them does not hide a call's growth.
fn fresh_peak() -> usize {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory; it changes no setting.
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    status_kib("VmRSS:")
}

/// A context whose cap no call reaches: calls plan as uncapped ones do, and put their large
/// buffers on pages of their own as every capped call does (`pages`), so that what they
/// take shows in resident memory rather than in memory the allocator kept from earlier calls.
fn no_cap_reached(threads: usize) -> std::sync::Arc<vlc_compress::Context> {
    let ctx = common::ctx(threads);
    ctx.set_memory_cap(usize::MAX);
    ctx
}

fn status_kib(field: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The growth of the resident high-water mark while `f` runs, in bytes, with `f`'s result.
fn peak_of<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = fresh_peak();
    let r = f();
    ((status_kib("VmHWM:").saturating_sub(before)) * 1024, r)
}

/// "what: estimate E MiB, peak P MiB (ratio)", the ratio read back by `assert_within`.
fn row(what: &str, want: usize, peak: usize) -> String {
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let ratio = want as f64 / peak.max(1) as f64;
    format!(
        "{what}: estimate {:.1} MiB, peak {:.1} MiB ({ratio:.2})",
        mib(want),
        mib(peak)
    )
}

fn assert_within(rows: &[String]) {
    assert_ratios(rows, 0.75..=1.25);
}

/// Each row's ratio in `range`.
fn assert_ratios(rows: &[String], range: std::ops::RangeInclusive<f64>) {
    eprintln!("{}", rows.join("\n"));
    for r in rows {
        let ratio: f64 = r
            .rsplit('(')
            .next()
            .unwrap()
            .trim_end_matches(')')
            .parse()
            .unwrap();
        assert!(range.contains(&ratio), "{r}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn memory_stays_within_a_quarter_of_its_estimates_and_under_caps() {
    training_stays_within_a_quarter_of_its_estimate();
    adding_and_searching_stay_within_a_quarter_of_their_estimates();
    adding_and_searching_stay_under_caps();
}

/// Adding n vectors to an empty index, then its first search of 2,000 queries (which builds
/// the search tables, and the fast-scan blocks of 4-bit codes).
fn adding_and_searching_stay_within_a_quarter_of_their_estimates() {
    let threads = 2;
    let ctx = no_cap_reached(threads);
    let mut rows = Vec::new();
    for (n, d, bytes, bits, anchors, metric, refine) in [
        (200_000, 128, 32, 8, 1024, Metric::L2, Refine::None),
        (200_000, 128, 32, 4, 1024, Metric::L2, Refine::None),
        (100_000, 128, 32, 8, 1024, Metric::Cosine, Refine::None),
        (100_000, 128, 32, 8, 1024, Metric::L2, Refine::F16),
        // A bit a dimension: queries rotated in integers where the CPU has the kernel.
        (100_000, 128, 16, 8, 1024, Metric::L2, Refine::None),
    ] {
        let x = common::clustered(n, d, 50, 5);
        let mut p = common::small_params(anchors, bytes);
        p.metric = metric;
        p.bits = bits;
        p.rotation = Rotation::Random;
        let mut c = Compressor::new(ctx.clone(), p);
        c.train(&x[..40_000 * d], d).unwrap();
        let mut ix = c.new_index_with_refine(refine).unwrap();
        let ids: Vec<u64> = (0..n as u64).collect();
        let want = ix.estimate_add_memory(n).unwrap().0;
        let (peak, r) = peak_of(|| ix.add(&x[..], &ids));
        r.unwrap();
        let what = format!("add {n} x {d}, {bytes} B, {bits}-bit, {metric:?}, {refine}");
        rows.push(row(&what, want, peak));
        let sp = SearchParams {
            k: 10,
            nprobe: 16,
            rerank: 0,
        };
        let q = &x[..2000 * d];
        let want = ix.estimate_search_memory(2000, &sp).unwrap().0;
        let (peak, r) = peak_of(|| ix.search(q, &sp, None));
        r.unwrap();
        rows.push(row("first search of the same, 2000 queries", want, peak));
    }
    assert_within(&rows);
}

/// Caps at 50%, 25% and 5% of an add's and a search's estimates: the add is refused before it
/// allocates; the search goes without its tables and fast-scan blocks and gives the same
/// results, or is refused where even its working memory does not fit. Never over the cap.
fn adding_and_searching_stay_under_caps() {
    let threads = 2;
    let (n, d) = (100_000, 128);
    let x = common::clustered(n, d, 50, 7);
    let ids: Vec<u64> = (0..n as u64).collect();
    let mut p = common::small_params(1024, 32);
    p.bits = 4;
    let mut c = Compressor::new(common::ctx(threads), p);
    c.train(&x[..40_000 * d], d).unwrap();
    let cb = c.codebook().unwrap().clone();
    let sp = SearchParams {
        k: 10,
        nprobe: 16,
        rerank: 0,
    };
    let q = &x[..2000 * d];
    let mut free = c.new_index().unwrap();
    free.add(&x[..], &ids).unwrap();
    let add_need = free.estimate_add_memory(n).unwrap().0;
    let search_need = free.estimate_search_memory(2000, &sp).unwrap().0;
    let want = free.search(q, &sp, None).unwrap();
    for frac in [0.5, 0.25, 0.05] {
        let ctx = common::ctx(threads);
        let mut ix = Index::new(ctx.clone(), cb.clone()).unwrap();
        let cap = (add_need as f64 * frac) as usize;
        ctx.set_memory_cap(cap);
        let (grew, r) = peak_of(|| ix.add(&x[..], &ids));
        assert!(
            matches!(r, Err(Error::OutOfMemory(_))),
            "add at {frac}: {r:?}"
        );
        // A few hundred KiB of noise: the new context's threads start and touch their stacks.
        assert!(
            grew < add_need / 8,
            "a refused add grew by {grew} of {add_need} bytes"
        );
        assert_eq!(ix.len(), 0);

        ctx.set_memory_cap(0);
        ix.add(&x[..], &ids).unwrap();
        let cap = (search_need as f64 * frac) as usize;
        ctx.set_memory_cap(cap);
        let (grew, r) = peak_of(|| ix.search(q, &sp, None));
        match r {
            Ok(got) => assert_eq!(got, want, "search at {frac} of its estimate"),
            Err(Error::OutOfMemory(_)) => {}
            Err(e) => panic!("search at {frac}: {e}"),
        }
        assert!(
            grew <= cap,
            "search at {frac}: grew {grew} bytes, cap {cap}"
        );
        let s = ix.stats();
        eprintln!(
            "cap {frac} of the search estimate ({search_need} B): cap {cap} B, tables {} B, \
             fast-scan blocks {} B, grew {grew} B",
            s.table_bytes, s.fast_scan_bytes
        );
    }
}

fn training_stays_within_a_quarter_of_its_estimate() {
    let threads = 2;
    let ctx = no_cap_reached(threads);
    let mut rows = Vec::new();
    for (n, d, bytes, anchors, metric, rotation) in [
        (60_000, 128, 32, 256, Metric::L2, Rotation::Learned),
        (60_000, 128, 32, 256, Metric::Cosine, Rotation::Learned),
        (150_000, 48, 16, 512, Metric::L2, Rotation::Learned),
        // Both steps train on samples: no normalised copy of the whole input.
        (200_000, 96, 16, 256, Metric::Cosine, Rotation::Learned),
        (30_000, 384, 64, 256, Metric::L2, Rotation::None),
    ] {
        let x = common::clustered(n, d, 50, 3);
        let mut p = common::small_params(anchors, bytes);
        p.metric = metric;
        p.rotation = rotation;
        let want = estimate::training_fit(ctx.backend(), &p, n, d, threads, 0).host_bytes;
        let before = fresh_peak();
        let mut c = Compressor::new(ctx.clone(), p);
        c.train(&x, d).unwrap();
        let peak = status_kib("VmHWM:").saturating_sub(before) * 1024;
        let ratio = want as f64 / peak as f64;
        rows.push(format!(
            "{n} x {d}, {bytes} B, {anchors} anchors, {metric:?}, {rotation:?}: estimate {:.1} MiB, peak {:.1} MiB ({ratio:.2})",
            want as f64 / (1 << 20) as f64,
            peak as f64 / (1 << 20) as f64
        ));
        drop(c);
    }

    // The context's cap: at the estimate, training runs within it and gives what an
    // uncapped one does; at 50%, 25% or 5% of it, the same codebook within the cap, its
    // residuals rebuilt where read, or OutOfMemory before anything grows.
    let (n, d) = (60_000, 128);
    let x = common::clustered(n, d, 50, 3);
    let p = common::small_params(256, 32);
    let mut free = Compressor::new(ctx.clone(), p.clone());
    free.train(&x, d).unwrap();
    let want = free.estimate_training_memory(n, d).unwrap().0;
    let (mut capped_rows, tiled) = train_under_caps(&x, d, threads, &p, &free, want);
    assert!(
        tiled.iter().any(|fit| !fit.held),
        "no cap trained with its residuals rebuilt"
    );
    let capped = common::ctx(threads);
    capped.set_memory_cap(want);
    let mut c = Compressor::new(capped, p);
    let (grew, r) = peak_of(|| c.train(&x, d).map(|_| ()));
    r.unwrap();
    assert!(
        grew <= want,
        "at its estimate, training grew {grew} B past {want} B"
    );
    assert_eq!(
        c.codebook().unwrap().fingerprint(),
        free.codebook().unwrap().fingerprint()
    );
    let (free_row, capped_more) = training_tiles_under_caps();
    rows.push(free_row);
    assert_within(&rows);
    // Under a cap, the figure training is held to: never below what it takes, and above
    // it by the per-thread buffers the codebooks' small blocks reuse (up to 37% measured
    // on 8 threads), so that no cap that would fit is refused for much more.
    capped_rows.extend(capped_more);
    assert_ratios(&capped_rows, 0.95..=1.5);
}

/// Many threads, each training a sub-quantizer on its own copy of a sub-space: under caps
/// at 50%, 25% and 5% of the uncapped estimate, fewer train at once where that fits.
/// Returns the uncapped training's row and the capped ones'.
fn training_tiles_under_caps() -> (String, Vec<String>) {
    let (n, d, threads) = (200_000, 16, 8);
    let x = common::clustered(n, d, 50, 3);
    let mut p = common::small_params(256, 8);
    p.pq_train_points = 0;
    let mut free = Compressor::new(no_cap_reached(threads), p.clone());
    let want = free.estimate_training_memory(n, d).unwrap().0;
    let (peak, r) = peak_of(|| free.train(&x, d).map(|_| ()));
    r.unwrap();
    let what = format!("{n} x {d} on {threads} threads, no cap");
    let (capped, tiled) = train_under_caps(&x, d, threads, &p, &free, want);
    assert!(
        tiled.iter().any(|fit| fit.at_once < threads),
        "no cap left room for fewer sub-quantizers at once"
    );
    (row(&what, want, peak), capped)
}

/// Trains `x` under caps at 50%, 25% and 5% of `want` (the uncapped estimate): where the
/// estimate under the cap fits, `free`'s codebook within the cap (fewer sub-quantizers at
/// once, residuals rebuilt where read), else OutOfMemory before memory grows. Returns the
/// estimate-vs-peak rows and how each capped training fitted.
fn train_under_caps(
    x: &[f32],
    d: usize,
    threads: usize,
    p: &TrainParams,
    free: &Compressor,
    want: usize,
) -> (Vec<String>, Vec<estimate::TrainingFit>) {
    let n = x.len() / d;
    let (mut rows, mut tiled) = (Vec::new(), Vec::new());
    for frac in [0.5, 0.25, 0.05] {
        let cap = (want as f64 * frac) as usize;
        let capped = common::ctx(threads);
        capped.set_memory_cap(cap);
        let fit = estimate::training_fit(capped.backend(), p, n, d, threads, cap);
        let mut c = Compressor::new(capped, p.clone());
        let need = c.estimate_training_memory(n, d).unwrap().0;
        assert_eq!(need, fit.host_bytes);
        let before = fresh_peak();
        let r = c.train(x, d);
        // A pool that ends its threads meanwhile can leave the mark under `before`.
        let grew = status_kib("VmHWM:").saturating_sub(before) * 1024;
        if need <= cap {
            r.unwrap();
            assert_eq!(
                c.codebook().unwrap().fingerprint(),
                free.codebook().unwrap().fingerprint(),
                "{frac}"
            );
            assert!(grew <= cap, "{frac}: grew {grew} B over a cap of {cap} B");
            let how = if fit.held { "held" } else { "rebuilt" };
            let what = format!(
                "{n} x {d} on {threads} threads, cap {frac} of {want} B ({} at once, residuals {how})",
                fit.at_once
            );
            rows.push(row(&what, need, grew));
            tiled.push(fit);
        } else {
            assert!(matches!(r, Err(Error::OutOfMemory(_))), "{frac}: {r:?}");
            assert!(grew < want / 50, "a refused training grew by {grew} bytes");
        }
    }
    (rows, tiled)
}
