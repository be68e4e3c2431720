//! Shared test data: the real GloVe demo subset and small seeded synthetic sets.
#![allow(dead_code)]

pub mod craft;
pub mod parity;

use std::sync::Arc;
use vlc_compress::{vecio, BackendKind, Compressor, Context, Index, TrainParams};

/// A device context for a test: shared with other tests, or held alone by one that measures
/// its memory (devices report their allocations whole, so another test's buffers would
/// count). Tests take the device through `device` before they open anything on it.
pub struct Gpu {
    ctx: Arc<Context>,
    _shared: Option<std::sync::RwLockReadGuard<'static, ()>>,
    _alone: Option<std::sync::RwLockWriteGuard<'static, ()>>,
}

impl std::ops::Deref for Gpu {
    type Target = Arc<Context>;
    fn deref(&self) -> &Arc<Context> {
        &self.ctx
    }
}

static DEVICE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The device to this test alone until the guard drops (for tests that open contexts
/// themselves).
pub fn device_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    DEVICE.write().unwrap_or_else(|e| e.into_inner())
}

/// `open()` with the device held as `alone` says; where it fails, the test skips (`None`),
/// or panics where `required` (a run that must have the device).
pub fn device(
    alone: bool,
    required: bool,
    open: impl FnOnce() -> vlc_compress::Result<Context>,
) -> Option<Gpu> {
    let (_alone, _shared) = match alone {
        true => (Some(device_alone()), None),
        false => (None, Some(DEVICE.read().unwrap_or_else(|e| e.into_inner()))),
    };
    match open() {
        Ok(c) => Some(Gpu {
            ctx: Arc::new(c),
            _shared,
            _alone,
        }),
        Err(e) if required => panic!("no device: {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// The rows of `x` (n x d) as training reads a sample where it lies: picked by `pick` and
/// made unit length.
pub fn sample_view<'a>(
    x: &'a [f32],
    d: usize,
    pick: &'a [usize],
) -> vlc_compress::backend::RowsView<'a> {
    vlc_compress::backend::RowsView {
        x,
        d,
        pick: Some(pick),
        unit: true,
    }
}

/// The largest difference between `a` and `b`, each relative to `a`'s value (at least 1).
pub fn worst_relative(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
        .fold(0f32, f32::max)
}

pub struct Demo {
    pub base: vecio::Matrix<f32>,
    pub query: vecio::Matrix<f32>,
    pub gt: vecio::Matrix<i32>,
}

pub fn demo() -> Demo {
    // From the source tree, or relative to the working directory when the test binary was
    // carried elsewhere (GPU runs).
    let mut dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/glove-demo");
    if !dir.exists() {
        dir = "tests/data/glove-demo".into();
    }
    Demo {
        base: vecio::read_fvecs(&dir.join("base.fvecs")).unwrap(),
        query: vecio::read_fvecs(&dir.join("query.fvecs")).unwrap(),
        gt: vecio::read_ivecs(&dir.join("gt_l2.ivecs")).unwrap(),
    }
}

/// An index trained on `base` with `p` and holding every row of it (id = row number).
/// The demo's rows joined in pairs: 100 dimensions, which the 8-bit kernels take (a query's
/// rotation in integers), with exact L2 ground truth (10 per query).
pub fn demo_wide() -> Demo {
    let demo = demo();
    let join = |m: vecio::Matrix<f32>| {
        let rows = m.rows / 2;
        vecio::Matrix {
            rows,
            cols: 2 * m.cols,
            data: m.data[..rows * 2 * m.cols].to_vec(),
        }
    };
    let (base, query) = (join(demo.base), join(demo.query));
    let l2 = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let gt = brute_force(&base.data, &query.data, base.cols, 10, l2);
    Demo {
        gt: vecio::Matrix {
            rows: query.rows,
            cols: 10,
            data: gt,
        },
        base,
        query,
    }
}

pub fn indexed(ctx: &Arc<Context>, p: TrainParams, base: &vecio::Matrix<f32>) -> Index {
    let mut c = Compressor::new(ctx.clone(), p);
    c.train(&base.data, base.cols).unwrap();
    let mut ix = c.new_index().unwrap();
    let ids: Vec<u64> = (0..base.rows as u64).collect();
    ix.add(&base.data[..], &ids).unwrap();
    ix
}

/// One codebook trained on `cpu` (`anchors`, `bytes`, `bits`, `rotation`), then `base` encoded on
/// `cpu` and on `dev`: the fraction of vectors whose codes are identical.
pub fn code_agreement(
    cpu: &Arc<Context>,
    dev: &Context,
    base: &vecio::Matrix<f32>,
    anchors: usize,
    (bytes, bits, rotation, error_code): (
        usize,
        u32,
        vlc_compress::Rotation,
        vlc_compress::ErrorCode,
    ),
) -> f64 {
    let mut p = small_params(anchors, bytes);
    p.bits = bits;
    p.rotation = rotation;
    p.error_code = error_code;
    let mut c = Compressor::new(cpu.clone(), p);
    c.train(&base.data, base.cols).unwrap();
    let cb = c.codebook().unwrap().clone();
    let on_cpu = cpu.run(|b| cb.encode(b, base.data[..].into())).unwrap();
    let on_dev = dev.run(|b| cb.encode(b, base.data[..].into())).unwrap();
    let frac = same_records(&on_cpu, &on_dev, on_cpu.len() / base.rows);
    eprintln!("{bytes} B, {bits} bits, {rotation:?}, {error_code:?}: identical codes {frac:.4}");
    frac
}

/// The share of records (`size` values each: code bytes, or one result id) that are equal in
/// `a` and `b`.
pub fn same_records<T: PartialEq>(a: &[T], b: &[T], size: usize) -> f64 {
    let same = a
        .chunks_exact(size)
        .zip(b.chunks_exact(size))
        .filter(|(x, y)| x == y)
        .count();
    same as f64 / (a.len() / size).max(1) as f64
}

/// Mean recall@10 over seeds 1..=3 of an index trained on `ctx` (`anchors`, 16 B) from `base`
/// and searched with `nprobe` (ground truth: 10 per query).
pub fn mean_recall(
    ctx: &Arc<Context>,
    base: &vecio::Matrix<f32>,
    query: &[f32],
    gt: &[i32],
    gt_cols: usize,
    anchors: usize,
    nprobe: usize,
) -> f64 {
    let mut total = 0.0;
    for seed in 1..=3 {
        let mut p = small_params(anchors, 16);
        p.anchor.seed = seed;
        let ix = indexed(ctx, p, base);
        let sp = vlc_compress::SearchParams {
            k: 10,
            nprobe,
            rerank: 0,
        };
        let r = ix.search(query, &sp, None).unwrap();
        total += recall(&r.ids, 10, gt, gt_cols, 10);
    }
    total / 3.0
}

/// For each (metric, rotation, re-rank) case: an index trained on the CPU from `base`
/// (`anchors`, 16 B), searched on the host and on `dev` (with `nprobe`), fresh and after a third
/// of its vectors are removed (a changed index must be uploaded again, not searched stale). The
/// result ids agree for at least 99% and the distances within 1e-3; `check` adds the backend's
/// own assertions, given both results, the device-to-host bytes of the device search and a
/// label.
pub fn search_parity(
    dev: &Arc<Context>,
    base: &vecio::Matrix<f32>,
    query: &[f32],
    anchors: usize,
    nprobe: usize,
    cases: &[(
        vlc_compress::Metric,
        vlc_compress::Rotation,
        usize,
        vlc_compress::ErrorCode,
    )],
    check: impl Fn(&vlc_compress::SearchResults, &vlc_compress::SearchResults, u64, &str),
) {
    use vlc_compress::{DenseRaw, RawVectors, SearchParams};
    let cpu = host_reference();
    let raw = DenseRaw {
        data: &base.data,
        d: base.cols,
    };
    for &(metric, rotation, rerank, error_code) in cases {
        let mut p = small_params(anchors, 16);
        p.metric = metric;
        p.rotation = rotation;
        p.error_code = error_code;
        // Encoded on the host, searched on the device; the host's copy is the reference.
        let mut ix = indexed(&cpu, p, base).to_context(dev.clone()).unwrap();
        let sp = SearchParams {
            k: 10,
            nprobe,
            rerank,
        };
        let rawp = (rerank > 0).then_some(&raw as &dyn RawVectors);
        let compare = |ix: &Index, when: &str| {
            let what = format!("{metric:?} {rotation:?} rerank {rerank} {error_code:?} {when}");
            let host_ix = ix.to_context(cpu.clone()).unwrap();
            let host = host_ix.search(query, &sp, rawp).unwrap();
            let before = dev.backend().transfers().d2h_bytes;
            let got = ix.search(query, &sp, rawp).unwrap();
            let d2h = dev.backend().transfers().d2h_bytes - before;
            let frac = same_records(&host.ids, &got.ids, 1);
            eprintln!("{what}: same ids {frac:.4}");
            assert!(frac >= 0.99, "{what}: only {frac} of result ids agree");
            for (a, b) in host.distances.iter().zip(&got.distances) {
                assert!(
                    (a - b).abs() <= 1e-3 * (1.0 + a.abs()),
                    "{what}: distance {a} vs {b}"
                );
            }
            check(&host, &got, d2h, &what);
        };
        compare(&ix, "fresh");
        let gone: Vec<u64> = (0..base.rows as u64).step_by(3).collect();
        ix.remove(&gone).unwrap();
        compare(&ix, "after remove");
    }
}

/// Anchors trained with `p` on the CPU and on `dev` from the same `x` (n x d): the energies are
/// within 1% and every point is counted once on the device.
pub fn anchor_parity(
    dev: &Context,
    x: &[f32],
    d: usize,
    p: &vlc_compress::AnchorParams,
    label: &str,
) {
    use vlc_compress::{train::train_anchors, NoProgress};
    let cpu = ctx(0)
        .run(|b| train_anchors(b, x, d, p, &NoProgress))
        .unwrap();
    let got = dev.run(|b| train_anchors(b, x, d, p, &NoProgress)).unwrap();
    let rel = (got.energy - cpu.energy).abs() / cpu.energy;
    eprintln!(
        "{label}: energy cpu {} {} {} ({rel:.2e})",
        cpu.energy,
        dev.backend().kind().name(),
        got.energy
    );
    assert!(rel < 0.01, "{label}: energy differs by {rel}");
    assert_eq!(
        got.counts.iter().map(|&c| c as usize).sum::<usize>(),
        got.points
    );
}

/// One assignment of `x` (n x d) to the centroids `c` in a fresh session on `ctx`: each
/// row's centroid and distance, and the points per centroid.
pub fn assign_once(
    ctx: &Context,
    x: &[f32],
    d: usize,
    c: &[f32],
    bias: Option<&[f32]>,
    precision: vlc_compress::Precision,
) -> (Vec<u32>, Vec<f32>, Vec<u32>) {
    let mut s = ctx.backend().kmeans_session(x, d, precision).unwrap();
    s.set_centroids(c).unwrap();
    let counts = s.assign(bias).unwrap().counts;
    let (a, dist) = s.assignment_with_distances().unwrap();
    (a, dist, counts)
}

/// One assignment of `x` (n x d) to the centroids `c`, with an optional balancing bias, on
/// `dev` and on the CPU: at least 99.9% of rows get the same centroid, and those rows the
/// same distance up to fp32 rounding of |x|^2 + |c|^2 - 2 x.c.
pub fn assignment_parity(
    dev: &Context,
    x: &[f32],
    d: usize,
    c: &[f32],
    bias: Option<&[f32]>,
    label: &str,
) {
    let exact = vlc_compress::Precision::Exact;
    let (ac, dc, nc) = assign_once(&ctx(2), x, d, c, bias, exact);
    let (ag, dg, ng) = assign_once(dev, x, d, c, bias, exact);
    for counts in [nc, ng] {
        assert_eq!(counts.iter().sum::<u32>() as usize, x.len() / d);
    }
    let sq = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
    let same = (0..ac.len()).filter(|&i| ac[i] == ag[i]).count();
    eprintln!("{label}: {same} of {} assignments as on the CPU", ac.len());
    assert!(same as f64 >= 0.999 * ac.len() as f64, "{label}");
    for i in (0..ac.len()).filter(|&i| ac[i] == ag[i]) {
        let a = ac[i] as usize;
        let scale = sq(&x[i * d..(i + 1) * d]) + sq(&c[a * d..(a + 1) * d]);
        assert!(
            (dc[i] - dg[i]).abs() <= 1e-5 * scale + 1e-6,
            "{label}: row {i}: distance {} vs {}",
            dc[i],
            dg[i]
        );
    }
}

/// `update_parity` with 700 centroids (above a workgroup of threads, not a multiple of one),
/// untrimmed and trimmed: how the device places each group's members.
pub fn many_anchor_update_parity(dev: &Context) {
    let (n, d, k) = (12_000, 16, 700);
    let x = clustered(n, d, 40, 7);
    for trim in [0.0, 0.1] {
        update_parity(dev, &x, d, &x[..k * d], trim, &format!("k={k} trim={trim}"));
    }
}

/// One assignment and trimmed update of `x` (n x d) from the centroids `c` on `dev` and on the
/// CPU, twice (the second reuses what the first made): the same counts, and means and spreads
/// equal up to the order of float sums.
pub fn update_parity(dev: &Context, x: &[f32], d: usize, c: &[f32], trim: f32, label: &str) {
    let step = |ctx: &Context| {
        let mut s = ctx
            .backend()
            .kmeans_session(x, d, vlc_compress::Precision::Exact)
            .unwrap();
        s.set_centroids(c).unwrap();
        let mut out = Vec::new();
        for _ in 0..2 {
            let counts = s.assign(None).unwrap().counts;
            s.update(trim).unwrap();
            let (means, spread) = s.centroids_and_spread().unwrap();
            out.push((counts, means, spread));
        }
        out
    };
    let (want, got) = (step(&ctx(2)), step(dev));
    // Distances carry the rounding of |x|^2 + |c|^2 - 2 x.c: up to a few ulps of |x|^2.
    let sq = x.iter().map(|v| v * v).sum::<f32>() / (x.len() / d) as f32;
    let close = |a: &[f32], b: &[f32], floor: f32, what: &str| {
        for (i, (u, v)) in a.iter().zip(b).enumerate() {
            let tol = 1e-4 * u.abs() + floor;
            assert!((u - v).abs() <= tol, "{label}: {what} {i}: {u} vs {v}");
        }
    };
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w.0, g.0, "{label}: counts");
        close(&w.1, &g.1, 1e-4, "mean value");
        close(&w.2, &g.2, 1e-5 * sq, "spread");
    }
}

/// `assignment_parity` on ragged shapes (sizes off any power of two, d below a warp and
/// above it, one centroid, more centroids than rows), each with and without a bias.
pub fn ragged_assignment_parity(dev: &Context) {
    for (n, d, k, seed) in [
        (1000, 3, 5, 1),
        (777, 37, 130, 2),
        (300, 200, 1, 3),
        (129, 8, 300, 4),
        (5000, 128, 256, 5),
    ] {
        let x = clustered(n, d, 20, seed);
        let c = clustered(k, d, 20, seed + 100);
        let label = format!("n={n} d={d} k={k}");
        assignment_parity(dev, &x, d, &c, None, &label);
        let bias: Vec<f32> = (0..k).map(|j| (j % 7) as f32 * 0.01).collect();
        assignment_parity(dev, &x, d, &c, Some(&bias), &format!("{label} bias"));
    }
}

/// The host as the devices are checked against: queries rotated in f32 products, as the
/// devices rotate them (`Context::set_exact_rotation`; a host with AVX-512 VNNI would
/// otherwise take them in 8-bit integers where codes are coarse).
pub fn host_reference() -> Arc<Context> {
    let c = ctx(0);
    c.set_exact_rotation(true);
    c
}

pub fn ctx(threads: usize) -> Arc<Context> {
    Arc::new(Context::new(BackendKind::Cpu, 0, threads).unwrap())
}

/// Gaussian clusters, seeded, n x d.
pub fn clustered(n: usize, d: usize, clusters: usize, seed: u64) -> Vec<f32> {
    vlc_compress::synth::clustered(n, d, clusters, seed)
}

pub fn small_params(anchors: usize, bytes: usize) -> TrainParams {
    let mut p = TrainParams {
        bytes_per_vector: bytes,
        pq_iters: 10,
        ..TrainParams::default()
    };
    p.anchor.anchors = anchors;
    p.anchor.max_iters = 10;
    p
}

/// recall@at of `ids` (k per query) against ground truth rows.
pub fn recall(ids: &[u64], k: usize, gt: &[i32], gt_cols: usize, at: usize) -> f64 {
    vlc_compress::recall_at(ids, k, gt, gt_cols, at)
}

/// Exact top-k by brute force (smaller score is better).
pub fn brute_force(
    base: &[f32],
    q: &[f32],
    d: usize,
    k: usize,
    score: impl Fn(&[f32], &[f32]) -> f32,
) -> Vec<i32> {
    let mut out = Vec::new();
    for qv in q.chunks_exact(d) {
        let mut s: Vec<(f32, usize)> = base
            .chunks_exact(d)
            .map(|b| score(qv, b))
            .zip(0..)
            .collect();
        s.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        out.extend(s.iter().take(k).map(|p| p.1 as i32));
    }
    out
}

/// Encodes `x` (n x d) on the CPU and on `dev` with one codebook, trained on the CPU from
/// the first `train_rows` rows (`anchors`, `bytes`): the codes must agree for 99% of rows.
/// Then, with `bad` at row `row`, encoding and training on every point must both fail on
/// both with the same `NonFinite` error, naming the same position in the input.
#[allow(clippy::too_many_arguments)]
pub fn encoding_parity_and_bad_values(
    cpu: &Arc<Context>,
    dev: &Context,
    mut x: Vec<f32>,
    d: usize,
    train_rows: usize,
    (anchors, bytes): (usize, usize),
    row: usize,
    bad: f32,
) {
    let n = x.len() / d;
    let mut c = Compressor::new(cpu.clone(), small_params(anchors, bytes));
    c.train(&x[..train_rows * d], d).unwrap();
    let cb = c.codebook().unwrap().clone();
    let on_cpu = cpu.run(|b| cb.encode(b, x[..].into())).unwrap();
    let on_dev = dev.run(|b| cb.encode(b, x[..].into())).unwrap();
    assert_eq!(on_cpu.len(), on_dev.len());
    let same = same_records(&on_cpu, &on_dev, cb.codec_size());
    eprintln!("identical codes over {n} rows: {same:.5}");
    assert!(same >= 0.99, "only {same} of codes are identical");
    let at = row * d + 3;
    x[at] = bad;
    let on_cpu = cpu.run(|b| cb.encode(b, x[..].into())).unwrap_err();
    let on_dev = dev.run(|b| cb.encode(b, x[..].into())).unwrap_err();
    assert!(
        matches!(on_dev, vlc_compress::Error::NonFinite(_)),
        "{on_dev}"
    );
    assert_eq!(on_cpu.to_string(), on_dev.to_string());
    assert!(
        on_dev.to_string().contains(&format!("position {at}")),
        "{on_dev}"
    );
    // A session that trains on every point checks them on their way to the device.
    let p = vlc_compress::AnchorParams {
        anchors,
        max_points_per_anchor: 0,
        ..Default::default()
    };
    let train = |ctx: &Context| {
        ctx.run(|b| {
            vlc_compress::train::train_anchors(b, &x, d, &p, &vlc_compress::train::NoProgress)
        })
        .map(|_| ())
        .unwrap_err()
        .to_string()
    };
    let on_cpu = train(cpu);
    assert!(on_cpu.contains(&format!("position {at}")), "{on_cpu}");
    assert_eq!(on_cpu, train(dev));
}

/// Codes the device scans with tables of every size, under every metric: 4-bit (32 B), 8-bit
/// at 64 sub-quantizers (beyond WGPU's workgroup memory) on `base`, and 8-bit at 256 (beyond
/// CUDA's shared memory) on 256-d clusters. The device's results are the host's, and they came
/// from the device.
pub fn wide_table_search_parity(dev: &Arc<Context>, base: &vecio::Matrix<f32>, query: &[f32]) {
    let cpu = host_reference();
    let wide = vecio::Matrix {
        rows: 3000,
        cols: 256,
        data: clustered(3000, 256, 24, 7),
    };
    let wide_q = clustered(60, 256, 24, 8);
    // 8 and 7 bytes of 4-bit codes with an error level (L2): 15 sub-codes and the level's
    // nibble; 13 and the level, in rows of an odd count of bytes.
    let shapes: [(&vecio::Matrix<f32>, &[f32], usize, u32); 5] = [
        (base, query, 32, 4),
        (base, query, 64, 8),
        (&wide, &wide_q, 256, 8),
        (base, query, 8, 4),
        (base, query, 7, 4),
    ];
    for (base, query, bytes, bits) in shapes {
        for metric in [
            vlc_compress::Metric::L2,
            vlc_compress::Metric::InnerProduct,
            vlc_compress::Metric::Cosine,
        ] {
            let levels = metric == vlc_compress::Metric::L2 && bytes < 32;
            let what = format!("{metric:?} {bytes} B {bits}-bit levels {levels}");
            let mut p = small_params(64, bytes);
            (p.metric, p.bits) = (metric, bits);
            p.error_code = if levels {
                vlc_compress::ErrorCode::On
            } else {
                vlc_compress::ErrorCode::Off
            };
            let host = indexed(&cpu, p, base);
            let on_dev = host.to_context(dev.clone()).unwrap();
            let sp = vlc_compress::SearchParams {
                k: 10,
                nprobe: 8,
                rerank: 0,
            };
            let want = host.search(query, &sp, None).unwrap();
            let before = dev.backend().transfers().d2h_bytes;
            let got = on_dev.search(query, &sp, None).unwrap();
            assert!(
                dev.backend().transfers().d2h_bytes > before,
                "{what}: searched on the host"
            );
            let frac = same_records(&want.ids, &got.ids, 1);
            eprintln!("{what}: same ids {frac:.4}");
            assert!(frac >= 0.99, "{what}: {frac}");
            for (a, b) in want.distances.iter().zip(&got.distances) {
                assert!(
                    (a - b).abs() <= 1e-3 * (1.0 + a.abs()),
                    "{what}: {a} vs {b}"
                );
            }
        }
    }
}

/// Filtered search on `dev` against the host on one index (`base`, 64 anchors, 8-bit and
/// 4-bit codes): bitsets and id lists (scanned on the device) at 1%, 10% and 50% selectivity
/// give the host's ids for at least 99% of slots (the same padding where fewer than k are
/// allowed in the probed lists) and distances within 1e-3; a predicate (the host path on any
/// context) gives the host's results exactly.
pub fn filtered_search_parity(dev: &Arc<Context>, base: &vecio::Matrix<f32>, query: &[f32]) {
    use vlc_compress::{Filter, SearchParams};
    let cpu = host_reference();
    let n = base.rows as u64;
    for bits in [8, 4] {
        let mut p = small_params(64, 16);
        p.bits = bits;
        let host = indexed(&cpu, p, base);
        let ix = host.to_context(dev.clone()).unwrap();
        for pct in [1u64, 10, 50] {
            let allowed: Vec<u64> = (0..n)
                .filter(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 100 < pct)
                .collect();
            let mut mask = vec![0u8; n.div_ceil(8) as usize];
            for &i in &allowed {
                mask[(i / 8) as usize] |= 1 << (i % 8);
            }
            let sp = SearchParams {
                k: 10,
                nprobe: 4,
                rerank: 0,
            };
            for f in [
                Filter::bitset(&mask, n).unwrap(),
                Filter::Ids(allowed.clone().into()),
            ] {
                let what = format!("{bits}-bit {pct}% {f:?}");
                let want = host.search_filtered(query, &sp, None, Some(&f)).unwrap();
                let before = dev.backend().transfers().d2h_bytes;
                let got = ix.search_filtered(query, &sp, None, Some(&f)).unwrap();
                let d2h = dev.backend().transfers().d2h_bytes - before;
                assert!(d2h > 0, "{what}: searched on the host");
                let frac = same_records(&want.ids, &got.ids, 1);
                eprintln!("{what}: same ids {frac:.4}");
                assert!(frac >= 0.99, "{what}: only {frac} of result ids agree");
                assert!(got
                    .ids
                    .iter()
                    .all(|&i| i == u64::MAX || allowed.binary_search(&i).is_ok()));
                let nq = query.len() / base.cols;
                for q in 0..nq {
                    assert_eq!(want.found(q), got.found(q), "{what}: query {q}");
                }
                for (a, b) in want.distances.iter().zip(&got.distances) {
                    assert!(
                        (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-3 * (1.0 + a.abs()),
                        "{what}: distance {a} vs {b}"
                    );
                }
            }
            let set: std::collections::HashSet<u64> = allowed.iter().copied().collect();
            let f = Filter::predicate(move |id| Ok(set.contains(&id)));
            assert_eq!(
                ix.search_filtered(query, &sp, None, Some(&f)).unwrap(),
                host.search_filtered(query, &sp, None, Some(&f)).unwrap(),
                "{bits}-bit {pct}% predicate"
            );
        }
    }
}

/// Range search on `dev` against the host on one index (`base`, 64 anchors, 8-bit and 4-bit
/// codes, L2 and inner product), plain and with a bitset filter: each query's hits agree (as
/// sets, allowing 0.1% that sit on the radius within float rounding) with distances within
/// 1e-3, and came from the device.
pub fn range_search_parity(dev: &Arc<Context>, base: &vecio::Matrix<f32>, query: &[f32]) {
    use vlc_compress::{Filter, Metric, SearchParams};
    let cpu = host_reference();
    let n = base.rows as u64;
    let evens = Filter::bitset(&vec![0x55u8; n.div_ceil(8) as usize], n).unwrap();
    for (metric, bits) in [(Metric::L2, 8), (Metric::L2, 4), (Metric::InnerProduct, 8)] {
        let mut p = small_params(64, 16);
        p.metric = metric;
        p.bits = bits;
        let host = indexed(&cpu, p, base);
        let ix = host.to_context(dev.clone()).unwrap();
        let sp = SearchParams {
            k: 50,
            nprobe: 8,
            rerank: 0,
        };
        // The 50th hit of the first query as the radius.
        let radius = host.search(query, &sp, None).unwrap().distances[49];
        for filter in [None, Some(&evens)] {
            let what = format!("{metric:?} {bits}-bit filter {}", filter.is_some());
            let want = host.range_search(query, radius, &sp, None, filter).unwrap();
            let before = dev.backend().transfers().d2h_bytes;
            let got = ix.range_search(query, radius, &sp, None, filter).unwrap();
            assert!(
                dev.backend().transfers().d2h_bytes > before,
                "{what}: on the host"
            );
            let (mut same, mut all) = (0usize, 0usize);
            for i in 0..want.len() {
                let (wi, wd) = want.hits(i);
                let (gi, gd) = got.hits(i);
                let g: std::collections::HashMap<u64, f32> =
                    gi.iter().copied().zip(gd.iter().copied()).collect();
                for (id, v) in wi.iter().zip(wd) {
                    if let Some(u) = g.get(id) {
                        assert!(
                            (u - v).abs() <= 1e-3 * (1.0 + v.abs()),
                            "{what}: {u} vs {v}"
                        );
                        same += 1;
                    }
                }
                all += wi.len().max(gi.len());
                assert!(gd.windows(2).all(|w| if metric == Metric::L2 {
                    w[0] <= w[1]
                } else {
                    w[0] >= w[1]
                }));
            }
            eprintln!("{what}: {same} of {all} hits agree");
            assert!(
                all > 0 && same as f64 >= 0.999 * all as f64,
                "{what}: {same} of {all}"
            );
        }
    }
}

/// When a `CancelAt` says stop: given the phase, done, total and the reports before this one.
type StopWhen = Box<dyn Fn(vlc_compress::Phase, u64, u64, usize) -> bool + Send + Sync>;

/// A `Progress` that counts reports, checks that each phase's `done` never decreases and
/// stays within `total`, and cancels when its condition holds.
pub struct CancelAt {
    stop: StopWhen,
    pub seen: std::sync::Mutex<Vec<(vlc_compress::Phase, u64, u64)>>,
}

impl CancelAt {
    /// Cancels at report number `stop_at` (0 = the first). Only for calls whose reports are
    /// fixed in number (encode, add, merge): training also re-reports on a clock.
    pub fn new(stop_at: usize) -> CancelAt {
        CancelAt::when(move |_, _, _, before| before >= stop_at)
    }
    pub fn when(
        stop: impl Fn(vlc_compress::Phase, u64, u64, usize) -> bool + Send + Sync + 'static,
    ) -> CancelAt {
        CancelAt {
            stop: Box::new(stop),
            seen: Default::default(),
        }
    }
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl vlc_compress::Progress for CancelAt {
    fn report(&self, phase: vlc_compress::Phase, done: u64, total: u64) -> bool {
        let mut seen = self.seen.lock().unwrap();
        assert!(done <= total, "{phase:?}: {done} of {total}");
        if let Some(&(p, last, _)) = seen.iter().rev().find(|r| r.0 == phase) {
            assert!(
                p == phase && done >= last,
                "{phase:?} went back from {last} to {done}"
            );
        }
        let stop = (self.stop)(phase, done, total, seen.len());
        seen.push((phase, done, total));
        !stop
    }
}

/// Cancels train, encode, add and merge at points spread over each call's reports, on `dev`,
/// and checks that each call answered `Cancelled` and left its objects as they were; an
/// uncancelled call with a callback gives what one without gives.
pub fn cancel_leaves_objects_as_they_were(dev: &Arc<Context>) {
    use vlc_compress::{Error, Phase};
    // Two encoding blocks when watched (16,384 rows at 128-d), a small training.
    let (n, d) = (20_000, 128);
    let x = clustered(n, d, 40, 17);
    let p = small_params(64, 16);
    let cancelled = |r: Result<(), Error>, what: &str| match r {
        Err(Error::Cancelled(_)) => {}
        other => panic!("{what}: expected Cancelled, got {other:?}"),
    };

    // Training: count the reports of a full run, then cancel across them.
    let mut plain = Compressor::new(dev.clone(), p.clone());
    plain.train(&x, d).unwrap();
    let all = CancelAt::new(usize::MAX);
    let mut watched = Compressor::new(dev.clone(), p.clone());
    watched.train_with_progress(&x, d, &all).unwrap();
    let fp = plain.codebook().unwrap().fingerprint();
    // Where training is deterministic (the CPU; not every device), a callback changes nothing.
    let mut again = Compressor::new(dev.clone(), p.clone());
    again.train(&x, d).unwrap();
    if again.codebook().unwrap().fingerprint() == fp {
        let got = watched.codebook().unwrap().fingerprint();
        assert_eq!(got, fp, "a callback changed the codebook");
    }
    let reports = all.count();
    let phases: Vec<Phase> = all.seen.lock().unwrap().iter().map(|r| r.0).collect();
    assert_eq!(phases.first(), Some(&Phase::Anchors));
    assert_eq!(phases.last(), Some(&Phase::Codebooks));
    assert!(reports > 20, "only {reports} reports in training");
    let mut other = p.clone();
    other.anchor.seed ^= 5;
    // Points every training reaches (the number of reports varies: long steps re-report on a
    // clock): the first report, the codebooks' first, their half-way mark, the very last.
    type Stop = fn(Phase, u64, u64, usize) -> bool;
    let stops: [Stop; 4] = [
        |_, _, _, before| before == 0,
        |phase, _, _, _| phase == Phase::Codebooks,
        |phase, done, total, _| phase == Phase::Codebooks && 2 * done >= total,
        |phase, done, total, _| phase == Phase::Codebooks && done == total,
    ];
    for (i, stop) in stops.into_iter().enumerate() {
        let mut fresh = Compressor::new(dev.clone(), other.clone());
        let r = fresh.train_with_progress(&x, d, &CancelAt::when(stop));
        cancelled(r.map(|_| ()), "train");
        assert!(
            fresh.codebook().is_err(),
            "a cancelled train left a codebook"
        );
        // A trained compressor keeps its codebook.
        let mut kept = Compressor::with_codebook(dev.clone(), plain.codebook().unwrap().clone());
        *kept.params_mut() = other.clone();
        let r = kept.train_with_progress(&x, d, &CancelAt::when(stop));
        cancelled(r.map(|_| ()), "retrain");
        assert_eq!(kept.codebook().unwrap().fingerprint(), fp, "stop {i}");
    }

    // Encoding: blocks of rows, each a report.
    let want = plain.encode(x[..].into()).unwrap();
    let all = CancelAt::new(usize::MAX);
    assert_eq!(
        plain.encode_with_progress(x[..].into(), &all).unwrap(),
        want
    );
    let reports = all.count();
    assert!(reports >= 3, "{reports} encode reports for {n} rows");
    for stop in 0..reports {
        let r = plain.encode_with_progress(x[..].into(), &CancelAt::new(stop));
        cancelled(r.map(|_| ()), "encode");
    }

    // Adding and merging: the index keeps its bytes.
    let ids: Vec<u64> = (0..n as u64).collect();
    let half = n / 2;
    let mut ix = plain.new_index().unwrap();
    ix.add(&x[..half * d], &ids[..half]).unwrap();
    let before = ix.to_bytes();
    let all = CancelAt::new(usize::MAX);
    let mut grown = plain.new_index().unwrap();
    grown.add(&x[..half * d], &ids[..half]).unwrap();
    grown
        .add_with_progress(&x[half * d..], &ids[half..], &all)
        .unwrap();
    let reports = all.count();
    for stop in 0..reports {
        let r = ix.add_with_progress(&x[half * d..], &ids[half..], &CancelAt::new(stop));
        cancelled(r, "add");
        assert!(
            ix.to_bytes() == before,
            "a cancelled add changed the index (stop {stop})"
        );
    }
    let mut rest = plain.new_index().unwrap();
    rest.add(&x[half * d..], &ids[half..]).unwrap();
    let all = CancelAt::new(usize::MAX);
    let mut merged = plain.new_index().unwrap();
    merged.add(&x[..half * d], &ids[..half]).unwrap();
    merged.merge_from_with_progress(&rest, &all).unwrap();
    assert!(
        merged.to_bytes() == grown.to_bytes(),
        "merge and add disagree"
    );
    let reports = all.count();
    for stop in [0, 1, reports / 2, reports - 1] {
        cancelled(
            ix.merge_from_with_progress(&rest, &CancelAt::new(stop)),
            "merge",
        );
        assert!(
            ix.to_bytes() == before,
            "a cancelled merge changed the index (stop {stop})"
        );
    }
    ix.merge_from(&rest).unwrap();
    assert!(ix.to_bytes() == grown.to_bytes());
}

/// An index whose anchors' spread lies along a few directions, searched with few probes: the
/// host chooses its lists from bounds on those directions (`index/probe.rs`), the device by
/// scoring every anchor. Both give the same results, 8-bit and 4-bit, under each metric.
pub fn bounded_probe_parity(dev: &Arc<Context>) {
    let cpu = host_reference();
    let (n, nq, d) = (6000, 100, 256);
    let mut data = vlc_compress::synth::low_rank(n + nq, d, 12, 41);
    let query = data.split_off(n * d);
    let base = vecio::Matrix {
        rows: n,
        cols: d,
        data,
    };
    for bits in [8, 4] {
        for metric in [vlc_compress::Metric::L2, vlc_compress::Metric::InnerProduct] {
            let mut p = small_params(512, 32);
            (p.bits, p.metric) = (bits, metric);
            let host = indexed(&cpu, p, &base);
            let on_dev = host.to_context(dev.clone()).unwrap();
            // At most 1/128 of the anchors: the host probes with bounds.
            let sp = vlc_compress::SearchParams {
                k: 10,
                nprobe: 4,
                rerank: 0,
            };
            let want = host.search(&query, &sp, None).unwrap();
            let got = on_dev.search(&query, &sp, None).unwrap();
            let frac = same_records(&want.ids, &got.ids, 1);
            eprintln!("{bits}-bit {metric:?}: same ids {frac:.4}");
            assert!(frac >= 0.99, "{bits}-bit {metric:?}: {frac}");
        }
    }
}

/// Each call's run report on `dev` names what ran on the host and why: nothing for a plain
/// search; the predicate filter, more than 128 candidates and the certified re-rank each by
/// name; range search by `range_reason` (NONE where the device range-scans). On the CPU,
/// every report is the CPU's with nothing fallen back.
pub fn run_reports_name_every_fallback(dev: &Arc<Context>, range_reason: vlc_compress::Fallbacks) {
    use vlc_compress::{last_run_report, Fallbacks, Filter, Refine, SearchParams};
    let demo = demo();
    let d = demo.base.cols;
    let base = vecio::Matrix {
        data: demo.base.data[..4000 * d].to_vec(),
        rows: 4000,
        cols: d,
    };
    let q = &demo.query.data[..20 * d];
    let mut c = vlc_compress::Compressor::new(dev.clone(), small_params(32, 16));
    c.train(&base.data, d).unwrap();
    let mut ix = c.new_index_with_refine(Refine::Bound).unwrap();
    let ids: Vec<u64> = (0..base.rows as u64).collect();
    ix.add(&base.data[..], &ids).unwrap();
    let host = dev.backend().caps().list_search;
    let expect = |what: &str, why: Fallbacks| {
        let r = last_run_report().expect("a report");
        assert_eq!(r.backend, dev.backend().kind(), "{what}");
        let want = if host { why } else { Fallbacks::NONE };
        assert_eq!(r.fallbacks, want, "{what}: {:?}", r.fallbacks.names());
    };
    expect("add", Fallbacks::NONE);
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    ix.search(q, &p, None).unwrap();
    expect("a plain search", Fallbacks::NONE);
    let f = Filter::predicate(|id| Ok(id % 2 == 0));
    ix.search_filtered(q, &p, None, Some(&f)).unwrap();
    expect("a predicate filter", Fallbacks::PREDICATE_FILTER);
    let raw = vlc_compress::DenseRaw {
        data: &base.data,
        d,
    };
    let deep = SearchParams { rerank: 200, ..p };
    ix.search(q, &deep, Some(&raw)).unwrap();
    expect("200 candidates", Fallbacks::TOO_MANY_CANDIDATES);
    ix.search_bounded(q, &SearchParams { rerank: 50, ..p }, Some(&raw), None, true)
        .unwrap();
    expect("the certified re-rank", Fallbacks::CERTIFIED_RERANK);
    ix.range_search(q, 1e3, &p, None, None).unwrap();
    expect("a range search", range_reason);
    // A refused call leaves its own report, not the last one's.
    assert!(ix.search(&q[..d - 1], &p, None).is_err());
}
