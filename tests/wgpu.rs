//! The WGPU backend against the CPU reference on the same data. These run wherever a Vulkan or
//! Metal adapter is, a software one included (CI installs lavapipe); without one they skip,
//! unless `CI` or `VLCC_REQUIRE_WGPU` is set, where skipping fails. Sizes are small: a software
//! driver runs every kernel on two CPU cores.

mod common;
use common::Gpu;
use std::sync::Arc;
#[cfg(feature = "test-hooks")]
use vlc_compress::backend::Cooperative;
use vlc_compress::backend::WgpuOptions;
use vlc_compress::train::train_anchors;
use vlc_compress::{
    vecio, AnchorParams, BackendKind, BackendOptions, Context, Error, ErrorCode, Init, Metric,
    NoProgress, Precision, Rotation,
};

/// A WGPU context opened with `opts`.
fn open_with(opts: WgpuOptions) -> Result<Context, Error> {
    let opts = BackendOptions {
        wgpu: opts,
        ..BackendOptions::default()
    };
    Context::with_options(BackendKind::Wgpu, 0, 0, &opts)
}

/// Whether this run must have an adapter (CI installs a software one).
fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("VLCC_REQUIRE_WGPU").is_some()
}

fn gpu() -> Option<Gpu> {
    common::device(false, required(), || open_with(WgpuOptions::default()))
}

/// `gpu()` alone on the adapter: for tests that measure its memory.
fn gpu_alone() -> Option<Gpu> {
    common::device(true, required(), || open_with(WgpuOptions::default()))
}

/// `gpu_alone()` opened with `opts`, and describing itself with `says`.
fn gpu_with(opts: WgpuOptions, says: &str) -> Option<Gpu> {
    let asked = format!("{opts:?}");
    let g = common::device(true, false, || open_with(opts)).or_else(gpu_alone)?;
    let what = g.backend().describe();
    assert!(what.contains(says), "{asked}: {what}");
    Some(g)
}

/// The first `rows` demo vectors and their exact top-10 for the first `nq` demo queries.
struct Small {
    base: vecio::Matrix<f32>,
    query: Vec<f32>,
    gt: Vec<i32>,
}

fn small(rows: usize, nq: usize) -> Small {
    let demo = common::demo();
    let d = demo.base.cols;
    let data = demo.base.data[..rows * d].to_vec();
    let query = demo.query.data[..nq * d].to_vec();
    let gt = common::brute_force(&data, &query, d, 10, |a, b| {
        a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
    });
    Small {
        base: vecio::Matrix {
            data,
            rows,
            cols: d,
        },
        query,
        gt,
    }
}

/// A slice of the demo set (a software adapter runs every kernel on two CPU cores), the WGPU
/// backend's slack: its sums run in device order, so its sessions agree to rounding.
fn plan() -> common::parity::Plan {
    let s = small(6000, 200);
    common::parity::Plan {
        name: "wgpu",
        base: s.base,
        query: s.query,
        gt: s.gt,
        gt_cols: 10,
        anchors: 64,
        nprobe: 8,
        anchor_cases: vec![
            (64, 0.05, Init::Sample),
            (100, 0.0, Init::Sample),
            (48, 0.05, Init::KMeansPlusPlus),
        ],
        anchor_iters: Some(15),
        // 1 byte is a 50-d sub-vector (through `nearest`); 2 bytes are 25-d sub-vectors (the
        // widest the PQ kernel takes: seven four-float pieces); 13 bytes leave sub-spaces of 3
        // and 4 columns (the spread padding). With error levels: rotated and not.
        code_cases: vec![
            (16, 8, Rotation::None, ErrorCode::Off),
            (16, 8, Rotation::Random, ErrorCode::Off),
            (13, 8, Rotation::None, ErrorCode::Off),
            (2, 8, Rotation::None, ErrorCode::Off),
            (1, 8, Rotation::None, ErrorCode::Off),
            (8, 4, Rotation::None, ErrorCode::Off),
            (13, 8, Rotation::None, ErrorCode::On),
            (16, 8, Rotation::Random, ErrorCode::On),
            (8, 4, Rotation::None, ErrorCode::On),
        ],
        // WGPU's training draw moves from run to run: over 12 seeds one seed's recall here
        // has a spread (sd) of 0.011 on either backend, so a 3-seed mean 0.0065; 3 sd.
        recall_slack: 0.02,
        search_cases: vec![
            (Metric::L2, Rotation::None, 0, ErrorCode::Auto),
            (Metric::L2, Rotation::Random, 0, ErrorCode::Auto),
            (Metric::L2, Rotation::None, 50, ErrorCode::Auto),
            (Metric::InnerProduct, Rotation::None, 0, ErrorCode::Auto),
            (Metric::Cosine, Rotation::None, 20, ErrorCode::Auto),
            (Metric::L2, Rotation::Random, 0, ErrorCode::On),
            (Metric::L2, Rotation::None, 50, ErrorCode::On),
        ],
        search_slack: 0.01,
        session: (30_000, 32, 64, 40, 9),
        session_steps: (3, 1),
        precisions: vec![Precision::Exact],
        bit_exact: false,
        // Points and their per-point buffers take n x (4d + 16) bytes: half again as much as
        // that under the cap leaves them less than the half a resident session needs.
        stream_cap: |now, n, d| now + n * (4 * d + 16) * 3 / 2,
        cap_counts_held: true,
        range_reason: vlc_compress::Fallbacks::NO_RANGE_SCAN,
    }
}

parity_tests!(gpu, gpu_alone, plan);

#[test]
fn uploads_larger_than_a_piece_arrive_whole() {
    let Some(g) = gpu() else { return };
    // 70,000 x 64 floats: 17.9 MB, which goes up as a 16 MB piece and a ragged rest.
    let d = 64;
    let x = common::clustered(70_000, d, 50, 4);
    common::assignment_parity(&g, &x, d, &x[..100 * d], None, "streamed upload");
}

#[test]
fn uploads_through_mapped_buffers_arrive_whole() {
    // The path of adapters without host-memory staging (Metal, and Vulkan devices that lack
    // a host-cached memory type): small uploads in one mapped buffer, large ones in mapped
    // pieces.
    let Some(g) = gpu_with(
        WgpuOptions {
            mapped_uploads: true,
            ..WgpuOptions::default()
        },
        "uploads through mapped buffers",
    ) else {
        return;
    };
    let d = 64;
    let x = common::clustered(70_000, d, 50, 4);
    common::assignment_parity(&g, &x, d, &x[..100 * d], None, "mapped pieces");
    common::assignment_parity(
        &g,
        &x[..3000 * d],
        d,
        &x[..40 * d],
        None,
        "one mapped buffer",
    );
}

#[test]
fn split_bindings_give_the_same_steps() {
    let Some(g) = gpu() else { return };
    let s = small(3000, 0);
    let (x, d) = (&s.base.data, s.base.cols);
    let init = x[..32 * d].to_vec();
    // One assignment and trimmed update, as a whole and in blocks: the same counts, energy and
    // centroids up to the order of float sums. (Whole trainings are not compared: the annealed
    // loop turns last-bit differences into different, equally good, answers.)
    let step = |ctx: &Context| {
        ctx.run(|b| {
            let mut s = b.kmeans_session(x, d, Precision::Exact)?;
            s.set_centroids(&init)?;
            let a = s.assign(None)?;
            s.update(0.1)?;
            let (c, spread) = s.centroids_and_spread()?;
            let a2 = s.assign(Some(&[0.5; 32]))?;
            Ok::<_, Error>((a, spread, c, a2))
        })
        .unwrap()
    };
    let whole = step(&g);
    // 64 KB bindings: the 600 KB training set goes up in ten blocks.
    let split = open_with(WgpuOptions {
        max_binding: 65536,
        ..WgpuOptions::default()
    })
    .unwrap();
    let parts = step(&split);
    assert_eq!(whole.0.counts, parts.0.counts);
    assert!((whole.0.energy - parts.0.energy).abs() <= 1e-6 * whole.0.energy);
    for (a, b) in whole.1.iter().zip(&parts.1) {
        assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "spread {a} vs {b}");
    }
    for (a, b) in whole.2.iter().zip(&parts.2) {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + a.abs()),
            "centroid {a} vs {b}"
        );
    }
    assert_eq!(whole.3.counts.len(), 32);
    let rel = (whole.3.energy - parts.3.energy).abs() / whole.3.energy;
    eprintln!(
        "second assignment energy whole {} split {} ({rel:.2e})",
        whole.3.energy, parts.3.energy
    );
    assert!(rel < 1e-4);
    // Encoding in blocks of a few hundred rows, each read back while the next one runs.
    let frac = common::code_agreement(
        &common::ctx(0),
        &split,
        &s.base,
        32,
        (16, 8, Rotation::None, ErrorCode::Off),
    );
    assert!(frac >= 0.99, "blocks: only {frac} of codes are identical");
}

#[test]
#[cfg(feature = "test-hooks")]
fn a_lost_device_answers_every_call_with_an_error() {
    use vlc_compress::{Compressor, SearchParams};
    let Some(g) = gpu() else { return };
    let d = 16;
    let x = common::clustered(4000, d, 20, 9);
    let ids: Vec<u64> = (0..4000).collect();
    let sp = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    // Train, encode, build an index, search: every step on the device.
    let run = |ctx: &Arc<Context>| -> Result<usize, Error> {
        let mut c = Compressor::new(ctx.clone(), common::small_params(32, 8));
        c.train(&x, d)?;
        let cb = c.codebook()?.clone();
        let codes = ctx.run(|b| cb.encode(b, x[..].into()))?;
        let mut ix = c.new_index()?;
        ix.add(&x[..], &ids)?;
        let found = ix.search(&x[..100 * d], &sp, None)?;
        Ok(codes.len() + found.ids.len())
    };
    let whole = run(&g).unwrap();
    // The device is lost after its nth submission, n along a growing sequence, until the
    // whole run fits before the loss.
    let (mut n, mut next, mut lost) = (1, 2, 0);
    loop {
        let ctx = Arc::new(
            open_with(WgpuOptions {
                lose_after: n,
                ..WgpuOptions::default()
            })
            .unwrap(),
        );
        match run(&ctx) {
            Ok(got) => {
                assert_eq!(got, whole);
                break;
            }
            Err(Error::Device(m)) if m.contains("device was lost") => {
                // And so is every later call, at once.
                let again = run(&ctx).unwrap_err();
                assert!(
                    matches!(&again, Error::Device(m) if m.contains("lost")),
                    "{again:?}"
                );
                lost += 1;
            }
            Err(e) => panic!("lost after submission {n}: {e:?}"),
        }
        (n, next) = (next, n + next);
    }
    eprintln!("lost at {lost} points of a run; the whole run took under {n} submissions");
    assert!(lost >= 8, "only {lost} losses were tried");
}

#[test]
fn bad_devices_and_inputs_are_errors() {
    let Some(g) = gpu() else { return };
    assert!(matches!(
        Context::new(BackendKind::Wgpu, 99, 0),
        Err(Error::BackendUnavailable(_))
    ));
    let x = vec![1.0f32; 10 * 8];
    let p = AnchorParams {
        anchors: 20,
        ..AnchorParams::default()
    };
    assert!(g.run(|b| train_anchors(b, &x, 8, &p, &NoProgress)).is_err());
    // 2^27 centroids of 8 floats are 4 GiB: more than one binding of any adapter here.
    let rows = vec![1.0f32; 64 * 8];
    let huge = g.run(|b| b.nearest(&rows, 8, &vec![0.0; 8 << 27]));
    assert!(matches!(huge, Err(Error::OutOfMemory(_))), "{huge:?}");
    // The context still works afterwards.
    let (a, _) = g.run(|b| b.nearest(&rows, 8, &[0.0; 16])).unwrap();
    assert_eq!(a.len(), 64);
}

#[test]
fn auto_skips_software_adapters() {
    let auto = Context::new(BackendKind::Auto, 0, 1).unwrap();
    if let Ok(w) = Context::new(BackendKind::Wgpu, 0, 1) {
        if w.backend().describe().contains("Cpu") && auto.backend().kind() == BackendKind::Wgpu {
            panic!("AUTO chose a software adapter");
        }
    }
}

#[test]
#[cfg(feature = "test-hooks")]
fn emulated_cooperative_assignment_matches_the_cpu() {
    // Everything around the cooperative-matrix products (the fp16 halves, the bound, the
    // rows left to fp32, the winners' distances, blocks and padding), with the products
    // summed by every thread: it runs wherever the adapter has fp16 and subgroups.
    let Some(g) = gpu_with(
        WgpuOptions {
            cooperative: Cooperative::Emulate,
            ..WgpuOptions::default()
        },
        "cooperative matrices (emulated)",
    ) else {
        return;
    };
    common::ragged_assignment_parity(&g);
    let s = small(6000, 0);
    let p = AnchorParams {
        anchors: 64,
        trim: 0.05,
        max_iters: 15,
        ..AnchorParams::default()
    };
    common::anchor_parity(&g, &s.base.data, s.base.cols, &p, "emulated training");
    let (n, d) = (70_000, 64);
    let x = common::clustered(n, d, 50, 6);
    let cpu = common::ctx(0);
    let inf = f32::INFINITY;
    common::encoding_parity_and_bad_values(&cpu, &g, x, d, 10_000, (32, 8), 69_000, inf);
}

#[test]
fn encoding_checks_its_input_on_the_way_up() {
    let Some(g) = gpu() else { return };
    // 70,000 rows: two encoding blocks, the first over one 16 MB upload piece; the
    // infinity sits in the second.
    let (n, d) = (70_000, 64);
    let x = common::clustered(n, d, 50, 6);
    let cpu = common::ctx(0);
    let inf = f32::INFINITY;
    common::encoding_parity_and_bad_values(&cpu, &g, x, d, 10_000, (32, 8), 69_000, inf);
}

/// The device memory cap holds on WGPU: every buffer is checked, before it is made, against
/// what the allocator then holds. Training and adding (then searching) under caps at 300%,
/// 50%, 25% and 5% of what each took uncapped give a codebook, the uncapped search results or
/// `OutOfMemory`,
/// never more device memory than the cap; a refused call leaves its object as it was. The
/// calls' own checks use the CUDA figures, above WGPU's peaks (printed), so the 300% cap is
/// the one they pass.
#[test]
fn device_caps_hold() {
    if let Some(g) = gpu_alone() {
        // Training's peak is one k-means session: at a quarter of it, not even a streamed
        // one fits.
        caps_hold(&g, 20_000, &[3.0, 0.5, 0.25, 0.05], 0.5);
    }
}

/// `device_caps_hold` with cooperative matrices (emulated, hence fewer points), whose fp16
/// halves the estimates count (a streamed block then takes more: training fits down to half).
#[test]
#[cfg(feature = "test-hooks")]
fn device_caps_hold_with_cooperative_matrices() {
    let opts = WgpuOptions {
        cooperative: Cooperative::Emulate,
        ..WgpuOptions::default()
    };
    if let Some(g) = gpu_with(opts, "cooperative matrices (emulated)") {
        caps_hold(&g, 12_000, &[0.5, 0.05], 0.5);
    }
}

/// `device_caps_hold` where the cap is checked against the backend's count of its own
/// buffers, as on adapters whose allocator gives no report (Metal); the peaks are still the
/// allocator's.
#[test]
#[cfg(feature = "test-hooks")]
fn device_caps_hold_without_allocator_report() {
    let opts = WgpuOptions {
        no_allocator_report: true,
        ..WgpuOptions::default()
    };
    if let Some(g) = gpu_with(opts, "counted from its buffers") {
        caps_hold(&g, 20_000, &[0.5, 0.05], 0.25);
    }
}

/// `device_caps_hold` on `n` points, under caps at `fracs` of the uncapped peaks: training and
/// adding succeed down to `fits`.
fn caps_hold(g: &Arc<Context>, n: usize, fracs: &[f64], fits: f64) {
    let b = g.backend();
    if b.memory_usage(true).is_none() {
        eprintln!("skipped: this adapter's allocator does not report its memory");
        return;
    }
    let d = 32;
    let x = common::clustered(n, d, 50, 4);
    let ids: Vec<u64> = (0..n as u64).collect();
    let p = common::small_params(64, 8);
    let sp = vlc_compress::SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let q = &x[..500 * d];
    // (device bytes held before, the most held during `f`), with `f`'s result.
    let peak = |f: &mut dyn FnMut() -> Result<(), Error>| {
        let (before, _) = b.memory_usage(true).unwrap();
        let r = f();
        let (_, high) = b.memory_usage(false).unwrap();
        (before, high, r)
    };
    let mut c = vlc_compress::Compressor::new(g.clone(), p.clone());
    let want = c
        .estimate_memory(vlc_compress::Work::Train, n, d)
        .unwrap()
        .1;
    let (before, high, r) = peak(&mut || c.train(&x, d).map(|_| ()));
    r.unwrap();
    let codec = c.codebook().unwrap().codec_size();
    let train = high - before;
    let mut ix = c.new_index().unwrap();
    let want_add = ix.estimate_add_memory(n).unwrap().1;
    let (before, high, r) = peak(&mut || ix.add(&x[..], &ids));
    r.unwrap();
    let add = high - before;
    let want_search = ix.estimate_search_memory(500, &sp).unwrap().1;
    let mut found = None;
    let (before, high, r) = peak(&mut || {
        found = Some(ix.search(q, &sp, None)?);
        Ok(())
    });
    r.unwrap();
    let found = found.unwrap();
    let search = high - before;
    for (what, want, peak) in [
        ("train", want, train),
        ("add", want_add, add),
        ("search", want_search, search),
    ] {
        let ratio = want as f64 / peak.max(1) as f64;
        eprintln!("{what}: estimate {want} B, peak {peak} B ({ratio:.2})");
        assert!((0.75..=1.25).contains(&ratio), "{what}: {want} vs {peak}");
    }
    let mut outcomes = Vec::new();
    for &frac in fracs {
        // Training: a fresh compressor under a cap of `frac` of its uncapped peak.
        let (now, _) = b.memory_usage(true).unwrap();
        let cap = now + (train as f64 * frac) as usize;
        g.set_device_memory_cap(cap);
        let mut c2 = vlc_compress::Compressor::new(g.clone(), p.clone());
        let (_, high, r) = peak(&mut || c2.train(&x, d).map(|_| ()));
        assert!(
            high <= cap,
            "{frac}: training took {high} B under a cap of {cap}"
        );
        match r {
            // WGPU's sums of each anchor's members run in the order an atomic scatter gives
            // them, so two trainings agree to rounding, not bit for bit: same shape.
            Ok(()) => assert_eq!(c2.codebook().unwrap().codec_size(), codec, "{frac}"),
            Err(Error::OutOfMemory(_)) => assert!(c2.codebook().is_err()),
            Err(e) => panic!("{frac}: {e}"),
        }
        outcomes.push(format!("train {frac}: {}", r_name(&r)));
        g.set_device_memory_cap(0);
        // Adding: into an empty index on the same codebook.
        let mut ix2 = c.new_index().unwrap();
        let (now, _) = b.memory_usage(true).unwrap();
        let cap = now + (add as f64 * frac) as usize;
        g.set_device_memory_cap(cap);
        let (_, high, r) = peak(&mut || ix2.add(&x[..], &ids));
        assert!(
            high <= cap,
            "{frac}: adding took {high} B under a cap of {cap}"
        );
        match &r {
            Ok(()) => {
                let got = ix2.search(q, &sp, None);
                g.set_device_memory_cap(0);
                let got = got.or_else(|_| ix2.search(q, &sp, None)).unwrap();
                assert_eq!(got.ids, found.ids, "{frac}");
            }
            Err(Error::OutOfMemory(_)) => assert_eq!(ix2.len(), 0),
            Err(e) => panic!("{frac}: {e}"),
        }
        outcomes.push(format!("add {frac}: {}", r_name(&r)));
        g.set_device_memory_cap(0);
    }
    eprintln!("{outcomes:?}");
    // Down to `fits`, training streams its points and adding goes in smaller blocks.
    let must = 2 * fracs.iter().filter(|&&f| f >= fits).count();
    assert!(
        outcomes[..must].iter().all(|o| o.ends_with("done")),
        "{outcomes:?}"
    );
    // The backend itself, asked directly for more than the cap leaves: a session that does
    // not fit even streamed is refused as it opens; one that opens (streamed) but whose
    // centroids do not fit is refused at the buffer that would pass the cap.
    let (now, _) = b.memory_usage(true).unwrap();
    g.set_device_memory_cap(now + n * 16 + 1000);
    let r = b.kmeans_session(&x, d, Precision::Exact).map(|_| ());
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    let cap = now + n * (4 * d + 16) * 3 / 2;
    g.set_device_memory_cap(cap);
    let many = vec![0.5f32; 100_000 * d];
    let r = b.nearest(&x, d, &many).map(|_| ());
    let (_, high) = b.memory_usage(false).unwrap();
    g.set_device_memory_cap(0);
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    assert!(high <= cap, "{high} over {cap}");
}

fn r_name(r: &Result<(), Error>) -> String {
    match r {
        Ok(()) => "done".into(),
        Err(e) => format!("refused ({e})"),
    }
}
