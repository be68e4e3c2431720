//! The CUDA backend against the CPU reference on the same data. These run where a GPU is;
//! elsewhere they skip, unless `VLCC_REQUIRE_CUDA` is set (GPU runs), where skipping fails.

mod common;
use std::sync::Arc;
use vlc_compress::backend::cuda;
use vlc_compress::train::train_anchors;
use vlc_compress::{
    AnchorParams, BackendKind, Context, Error, ErrorCode, Init, Metric, NoProgress, Precision,
    Rotation,
};

/// The device, one test at a time: one test fills its memory on purpose.
fn gpu() -> Option<common::Gpu> {
    let required = std::env::var_os("VLCC_REQUIRE_CUDA").is_some();
    common::device(true, required, || Context::new(BackendKind::Cuda, 0, 0))
}

/// The whole demo set, the CUDA backend's slack: its sessions give the CPU's bits, streamed
/// or in place, at both precisions.
fn plan() -> common::parity::Plan {
    let demo = common::demo();
    common::parity::Plan {
        name: "cuda",
        base: demo.base,
        query: demo.query.data,
        gt: demo.gt.data,
        gt_cols: demo.gt.cols,
        anchors: 256,
        nprobe: 16,
        // Real data only: on synthetic sets with many equally good minima the annealed loop
        // is chaotic, and the last bit of a GEMM sends the two backends to different (equally
        // valid) answers.
        anchor_cases: vec![
            (256, 0.05, Init::Sample),
            (1000, 0.0, Init::Sample),
            (128, 0.05, Init::KMeansPlusPlus),
        ],
        anchor_iters: None,
        // 16 and 7 bytes are 4- and 8-d sub-vectors (PQ kernels built for their width), 2
        // bytes 25-d (a padded kernel); 1 byte is a 50-d sub-vector: wider than the PQ kernel
        // takes, so it runs through `nearest`. With error levels: 6 sub-spaces of 9 columns
        // read from raw rows, and 15 of 4 rotated.
        code_cases: vec![
            (16, 8, Rotation::None, ErrorCode::Off),
            (7, 8, Rotation::None, ErrorCode::Off),
            (16, 8, Rotation::Random, ErrorCode::Off),
            (2, 8, Rotation::None, ErrorCode::Off),
            (1, 8, Rotation::None, ErrorCode::Off),
            (8, 4, Rotation::None, ErrorCode::Off),
            (7, 8, Rotation::None, ErrorCode::On),
            (16, 8, Rotation::Random, ErrorCode::On),
            (8, 4, Rotation::None, ErrorCode::On),
        ],
        // The mean over three seeds may fall at most one point below the CPU on these 500
        // queries (the dev datasets' half-point comparison is `vlcc eval`'s, in
        // notes/perf-cuda.md).
        recall_slack: 0.01,
        search_cases: vec![
            (Metric::L2, Rotation::None, 0, ErrorCode::Auto),
            (Metric::L2, Rotation::Random, 0, ErrorCode::Auto),
            (Metric::L2, Rotation::None, 50, ErrorCode::Auto),
            (Metric::L2, Rotation::None, 100, ErrorCode::Auto),
            (Metric::InnerProduct, Rotation::None, 0, ErrorCode::Auto),
            (Metric::Cosine, Rotation::None, 20, ErrorCode::Auto),
            (Metric::L2, Rotation::Random, 0, ErrorCode::On),
            (Metric::L2, Rotation::None, 50, ErrorCode::On),
        ],
        search_slack: 0.002,
        session: (200_000, 96, 512, 300, 7),
        session_steps: (4, 3),
        precisions: vec![Precision::Exact, Precision::Tf32],
        bit_exact: true,
        // The points alone take n x (4d + 4) bytes: a cap of a third streams them.
        stream_cap: |_, n, d| n * (4 * d + 4) / 3,
        cap_counts_held: false,
        range_reason: vlc_compress::Fallbacks::NONE,
    }
}

// Every CUDA test holds the device alone.
parity_tests!(gpu, gpu, plan);

#[test]
fn contexts_free_their_device_memory() {
    let Some(_g) = gpu() else { return };
    let x = common::clustered(100_000, 64, 200, 3);
    let p = AnchorParams {
        anchors: 512,
        max_iters: 5,
        ..AnchorParams::default()
    };
    let round = || {
        let g = Context::new(BackendKind::Cuda, 0, 0).unwrap();
        g.run(|b| train_anchors(b, &x, 64, &p, &NoProgress))
            .unwrap();
    };
    round();
    let (before, _) = cuda::memory_info(0).unwrap();
    for _ in 0..10 {
        round();
    }
    let (after, _) = cuda::memory_info(0).unwrap();
    let lost = before.saturating_sub(after);
    eprintln!("free before {before}, after 10 rounds {after}");
    assert!(
        lost < 16 << 20,
        "{lost} bytes of device memory lost over 10 rounds"
    );
}

#[test]
fn bad_devices_and_inputs_are_errors() {
    let Some(g) = gpu() else { return };
    assert!(matches!(
        Context::new(BackendKind::Cuda, 99, 0),
        Err(Error::BackendUnavailable(_))
    ));
    let x = vec![1.0f32; 10 * 8];
    let p = AnchorParams {
        anchors: 20,
        ..AnchorParams::default()
    };
    assert!(g.run(|b| train_anchors(b, &x, 8, &p, &NoProgress)).is_err());
    // A 2 GB training set (2M x 256) under a 40 MB cap is OutOfMemory: not even a block of
    // it fits beside its assignment buffers. With all but 512 MB of the device taken it
    // trains, streamed, to the codebook it gets with the whole device. Checked before the
    // large request below: memory it frees stays in the stream-ordered allocator's pool,
    // which the free count does not see.
    let big = common::clustered(1 << 21, 256, 64, 2);
    let p = AnchorParams {
        anchors: 16,
        max_iters: 8,
        max_points_per_anchor: 0, // every point goes to the device
        ..AnchorParams::default()
    };
    g.set_device_memory_cap(40 << 20);
    let r = g.run(|b| train_anchors(b, &big, 256, &p, &NoProgress));
    g.set_device_memory_cap(0);
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{:?}", r.err());
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let (free, _) = ctx.mem_get_info().unwrap();
    let hog = ctx
        .default_stream()
        .alloc_zeros::<u8>(free - (512 << 20))
        .unwrap();
    let streamed = g.run(|b| train_anchors(b, &big, 256, &p, &NoProgress));
    drop(hog);
    let whole = g.run(|b| train_anchors(b, &big, 256, &p, &NoProgress));
    assert_eq!(streamed.unwrap().centroids, whole.unwrap().centroids);
    let small = common::clustered(1000, 8, 4, 1);
    assert!(g
        .run(|b| train_anchors(b, &small, 8, &p, &NoProgress))
        .is_ok());
    // 2^27 centroids need a 128 GiB distance block: more than the device holds.
    let rows = vec![1.0f32; 4096 * 8];
    let huge = g.run(|b| b.nearest(&rows, 8, &vec![0.0; 8 << 27]));
    assert!(
        matches!(huge, Err(Error::OutOfMemory(_))),
        "{:?}",
        huge.err()
    );
}

#[test]
fn auto_picks_cuda_when_it_can_and_the_cpu_otherwise() {
    let _alone = common::device_alone();
    let auto = Context::new(BackendKind::Auto, 0, 1).unwrap();
    match Context::new(BackendKind::Cuda, 0, 1) {
        Ok(_) => assert_eq!(auto.backend().kind(), BackendKind::Cuda),
        Err(e) => {
            assert!(matches!(e, Error::BackendUnavailable(_)), "{e}");
            assert!(!e.to_string().is_empty());
            assert_eq!(auto.backend().kind(), BackendKind::Cpu);
        }
    }
}

#[test]
fn range_search_runs_on_the_device() {
    let Some(g) = gpu() else { return };
    let demo = common::demo();
    common::range_search_parity(&g, &demo.base, &demo.query.data);
}

#[test]
fn tf32_assignment_is_rechecked_and_leaves_exact_sessions_exact() {
    let Some(g) = gpu() else { return };
    let demo = common::demo();
    let (x, d) = (&demo.base.data, demo.base.cols);
    let exact = AnchorParams {
        anchors: 256,
        ..AnchorParams::default()
    };
    let fast = AnchorParams {
        precision: Precision::Tf32,
        ..exact.clone()
    };
    let e1 = g
        .run(|b| train_anchors(b, x, d, &exact, &NoProgress))
        .unwrap();
    let f = g
        .run(|b| train_anchors(b, x, d, &fast, &NoProgress))
        .unwrap();
    let e2 = g
        .run(|b| train_anchors(b, x, d, &exact, &NoProgress))
        .unwrap();
    let rel = (f.energy - e1.energy).abs() / e1.energy;
    eprintln!("energy exact {} tf32 {} ({rel:.2e})", e1.energy, f.energy);
    assert!(rel < 0.01, "TF32 energy differs by {rel}");
    // The math mode is restored: an exact run after a TF32 one repeats the first exactly.
    assert_eq!(e1.centroids, e2.centroids);

    // One assignment from the same 1,000 anchors: the TF32 products, re-checked in fp32 where
    // they could mislead, give the fp32 session's anchors and distances (up to fp32 rounding
    // on exact ties).
    let one = |precision| common::assign_once(&g, x, d, &x[..1000 * d], None, precision);
    let ((ae, de, _), (at, dt, _)) = (one(Precision::Exact), one(Precision::Tf32));
    let same: Vec<usize> = (0..ae.len()).filter(|&i| ae[i] == at[i]).collect();
    eprintln!("TF32 assignment: {} of {} as in fp32", same.len(), ae.len());
    assert!(same.len() as f64 >= 0.9999 * ae.len() as f64);
    for i in same {
        assert!(
            (de[i] - dt[i]).abs() <= 1e-4 * de[i].max(1.0),
            "{} vs {}",
            de[i],
            dt[i]
        );
    }

    // Rough passes (training's warm iterations) skip the re-check: TF32's own distances, yet
    // nearly every point goes where fp32 sends it. Turned off, the re-check is back.
    let mut s = g.backend().kmeans_session(x, d, Precision::Tf32).unwrap();
    s.set_centroids(&x[..1000 * d]).unwrap();
    s.allow_rough(true);
    s.assign(None).unwrap();
    let (ar, dr) = s.assignment_with_distances().unwrap();
    let rough_same = (0..ae.len()).filter(|&i| ae[i] == ar[i]).count();
    let off = (0..ae.len())
        .filter(|&i| (de[i] - dr[i]).abs() > 1e-4 * de[i].max(1.0))
        .count();
    eprintln!(
        "rough TF32 assignment: {rough_same} of {} as in fp32, {off} distances off",
        ae.len()
    );
    assert!(rough_same as f64 >= 0.99 * ae.len() as f64);
    assert!(off > 0, "a rough pass gives TF32 distances");
    s.allow_rough(false);
    s.assign(None).unwrap();
    assert_eq!(s.assignment_with_distances().unwrap().0, at);
}

#[test]
fn pipelined_encoding_matches_the_cpu_and_rejects_non_finite_values() {
    let Some(g) = gpu() else { return };
    // At 16-d a staging block is 524,288 rows: 1.2M rows take both buffers, reuse the
    // first and end in a partial block; the NaN sits in the third block.
    let (n, d) = (1_200_000, 16);
    let x = common::clustered(n, d, 64, 5);
    let cpu = common::ctx(0);
    common::encoding_parity_and_bad_values(&cpu, &g, x, d, 200_000, (64, 4), 1_100_000, f32::NAN);
}

/// `len` floats of device memory from `cuMemAlloc`, as a user's own code would have them (the
/// driver reports such an allocation's range exactly; pooled ones belong to a larger range).
struct UserBuffer(u64);

impl UserBuffer {
    fn new(ctx: &cudarc::driver::CudaContext, x: &[f32]) -> UserBuffer {
        use cudarc::driver::result;
        ctx.bind_to_thread().unwrap();
        // SAFETY: a fresh allocation as long as `x`, filled from it.
        unsafe {
            let at = result::malloc_sync(std::mem::size_of_val(x)).unwrap();
            result::memcpy_htod_sync(at, x).unwrap();
            UserBuffer(at)
        }
    }
}

impl Drop for UserBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`; nothing uses it any more.
        unsafe { cudarc::driver::result::free_sync(self.0) }.unwrap();
    }
}

#[test]
fn encoding_and_adding_from_device_memory_match_host_memory_and_check_the_input() {
    let Some(g) = gpu() else { return };
    let cpu = common::ctx(0);
    // At 48-d a block is 174,762 rows: 393,216 rows take three, the last one partial; their
    // 72 MB are a whole number of the driver's 2 MB allocation steps, so the allocation ends
    // where the rows do.
    let (n, d) = (393_216, 48);
    let mut x = common::clustered(n, d, 64, 9);
    let cuda = cudarc::driver::CudaContext::new(0).unwrap();
    let buf = UserBuffer::new(&cuda, &x);
    let at = buf.0;
    // No rotation (the PQ kernel subtracts the anchors), cosine (unit rows on the device),
    // a random rotation (the residual and rotation pass).
    for (metric, rotation) in [
        (Metric::L2, Rotation::None),
        (Metric::Cosine, Rotation::None),
        (Metric::L2, Rotation::Random),
    ] {
        let mut p = common::small_params(64, 16);
        p.metric = metric;
        p.rotation = rotation;
        let mut c = vlc_compress::Compressor::new(cpu.clone(), p);
        c.train(&x[..50_000 * d], d).unwrap();
        let cb = c.codebook().unwrap().clone();
        let host = g.run(|b| cb.encode(b, x[..].into())).unwrap();
        let on_cpu = cpu.run(|b| cb.encode(b, x[..].into())).unwrap();
        // SAFETY: nothing writes the buffer during the call.
        let dev = g.run(|b| unsafe { cb.encode_device(b, at, n) }).unwrap();
        assert_eq!((dev.len(), dev.len()), (host.len(), on_cpu.len()));
        let (vs_host, vs_cpu) = (
            common::same_records(&dev, &host, cb.codec_size()),
            common::same_records(&dev, &on_cpu, cb.codec_size()),
        );
        eprintln!(
            "{metric:?} {rotation:?}: identical to host input {vs_host:.5}, to the CPU {vs_cpu:.5}"
        );
        if metric == Metric::L2 {
            // The same rows through the same kernels.
            assert_eq!(dev, host);
        }
        assert!(vs_host >= 0.99 && vs_cpu >= 0.99, "{vs_host} {vs_cpu}");
    }
    let mut c = vlc_compress::Compressor::new(cpu.clone(), common::small_params(64, 16));
    c.train(&x[..50_000 * d], d).unwrap();
    let cb = c.codebook().unwrap().clone();
    // An index filled from device memory holds what one filled from host memory does.
    let ids: Vec<u64> = (0..n as u64).map(|i| 7 * i + 3).collect();
    let on_g = || vlc_compress::Index::new(g.clone(), cb.clone()).unwrap();
    let (mut from_host, mut from_dev) = (on_g(), on_g());
    from_host.add(&x[..], &ids).unwrap();
    // SAFETY: nothing writes the buffer during the call.
    unsafe { from_dev.add_device(at, &ids) }.unwrap();
    let p = vlc_compress::SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let q = &x[..500 * d];
    let (a, b) = (
        from_host.search(q, &p, None).unwrap(),
        from_dev.search(q, &p, None).unwrap(),
    );
    assert_eq!((a.ids, a.distances), (b.ids, b.distances));
    // With a progress callback, device input is encoded block by block: the same codes, and
    // a cancel between blocks leaves the index as it was.
    let mut watched = vlc_compress::Compressor::with_codebook(g.clone(), cb.clone());
    let all = Arc::new(common::CancelAt::new(usize::MAX));
    watched.set_progress(Some(all.clone()));
    let plain = vlc_compress::Compressor::with_codebook(g.clone(), cb.clone());
    // SAFETY: nothing writes the buffer during the calls.
    let (blocks, whole) = unsafe { (watched.encode_device(at, n), plain.encode_device(at, n)) };
    assert_eq!(blocks.unwrap(), whole.unwrap());
    assert!(all.count() >= 3, "{} reports", all.count());
    let before = from_dev.to_bytes();
    for stop in [0, 1, all.count() - 1] {
        from_dev.set_progress(Some(Arc::new(common::CancelAt::new(stop))));
        // SAFETY: nothing writes the buffer during the call.
        let r = unsafe { from_dev.add_device(at, &ids) };
        assert!(matches!(r, Err(vlc_compress::Error::Cancelled(_))), "{r:?}");
        assert!(from_dev.to_bytes() == before, "stop {stop}");
    }
    from_dev.set_progress(None);
    // Memory from the stream-ordered pool (cuMemAllocAsync, as cudarc allocates) reads alike.
    let s = cuda.default_stream();
    let pooled = s.clone_htod(&x[..1000 * d]).unwrap();
    let (pat, _sync) = cudarc::driver::DevicePtr::device_ptr(&pooled, &s);
    s.synchronize().unwrap();
    // SAFETY: nothing writes `pooled` during the call.
    let dev = g
        .run(|b| unsafe { cb.encode_device(b, pat, 1000) })
        .unwrap();
    let host = g.run(|b| cb.encode(b, x[..1000 * d].into())).unwrap();
    assert_eq!(dev, host);
    // SAFETY (every call below): nothing writes the memory during the call.
    let err = |at: u64, n: usize| {
        g.run(|b| unsafe { cb.encode_device(b, at, n) })
            .unwrap_err()
    };
    // Ranges the device cannot read are errors before anything is read; the context
    // works afterwards.
    for (bad, what) in [
        (err(at, n + 1), "one row past the allocation"),
        (err(at + 4 * d as u64, n), "shifted by a row"),
        (err(x.as_ptr() as u64, 10), "host memory"),
        (err(at + 2, 10), "misaligned"),
        (err(0x10, 10), "no allocation"),
    ] {
        assert!(matches!(bad, Error::InvalidArgument(_)), "{what}: {bad}");
        eprintln!("{what}: {bad}");
    }
    // A NaN in the third block fails as host input does, naming the same position.
    let pos = 390_000 * d + 5;
    x[pos] = f32::INFINITY;
    let buf = UserBuffer::new(&cuda, &x);
    let on_dev = err(buf.0, n);
    let on_host = g.run(|b| cb.encode(b, x[..].into())).unwrap_err();
    assert_eq!(on_dev.to_string(), on_host.to_string());
    assert!(
        on_dev.to_string().contains(&format!("position {pos}")),
        "{on_dev}"
    );
    assert!(g.run(|b| unsafe { cb.encode_device(b, at, 1000) }).is_ok());
    // Other backends say they cannot.
    let on_cpu = cpu
        .run(|b| unsafe { cb.encode_device(b, at, 10) })
        .unwrap_err();
    assert!(matches!(on_cpu, Error::BackendUnavailable(_)), "{on_cpu}");
}

#[test]
fn device_rerank_matches_the_host_rerank_and_checks_its_rows() {
    use vlc_compress::{DenseRaw, RawVectors, SearchParams};
    let Some(g) = gpu() else { return };
    let cpu = common::ctx(0);
    let demo = common::demo();
    let (base, q) = (&demo.base, &demo.query.data);
    let (n, d) = (base.rows, base.cols);
    let cuda = cudarc::driver::CudaContext::new(0).unwrap();
    let buf = UserBuffer::new(&cuda, &base.data);
    let raw = DenseRaw {
        data: &base.data,
        d,
    };
    // The device scan's candidates (L2, inner product, cosine, the most it keeps), and the
    // host scan's for 4-bit codes (the device does not scan those), re-ranked on the device.
    for (metric, bits, rerank) in [
        (Metric::L2, 8, 50),
        (Metric::InnerProduct, 8, 20),
        (Metric::Cosine, 8, 30),
        (Metric::L2, 8, 128),
        (Metric::L2, 4, 40),
    ] {
        let mut p = common::small_params(64, 16);
        (p.metric, p.bits) = (metric, bits);
        let ix = common::indexed(&cpu, p, base);
        let sp = SearchParams {
            k: 10,
            nprobe: 4,
            rerank,
        };
        let host = ix.search(q, &sp, Some(&raw as &dyn RawVectors)).unwrap();
        let before = g.backend().transfers().d2h_bytes;
        // SAFETY (every device search here): nothing writes the buffer meanwhile.
        let on_g = ix.to_context(g.clone()).unwrap();
        let dev = unsafe { on_g.search_device_raw(q, &sp, buf.0, n) }.unwrap();
        let d2h = g.backend().transfers().d2h_bytes - before;
        let frac = common::same_records(&host.ids, &dev.ids, 1);
        eprintln!("{metric:?} {bits}-bit rerank {rerank}: same ids {frac:.4}, {d2h} bytes back");
        assert!(frac >= 0.99, "{metric:?} rerank {rerank}: {frac}");
        for (a, b) in host.distances.iter().zip(&dev.distances) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "{a} vs {b}");
        }
        // Only the results (and two error words per batch) come back, not the candidates.
        let nq = q.len() / d;
        if bits == 8 {
            assert!(d2h <= (nq * 10 * 12 + 64) as u64, "{d2h} bytes back");
        }
    }
    let mut p = common::small_params(64, 16);
    p.metric = Metric::L2;
    let ix = common::indexed(&cpu, p, base);
    let sp = SearchParams {
        k: 10,
        nprobe: 4,
        rerank: 40,
    };
    let on_g = ix.to_context(g.clone()).unwrap();
    let search = |at: u64, rows: usize| unsafe { on_g.search_device_raw(q, &sp, at, rows) };
    // Ids without a row, as on the host.
    let half = search(buf.0, n / 2).unwrap_err();
    let half_host = DenseRaw {
        data: &base.data[..n / 2 * d],
        d,
    };
    let on_host = ix
        .search(q, &sp, Some(&half_host as &dyn RawVectors))
        .unwrap_err();
    assert!(matches!(half, Error::InvalidArgument(_)), "{half}");
    assert!(matches!(on_host, Error::InvalidArgument(_)), "{on_host}");
    assert!(half.to_string().contains("no vector for id"), "{half}");
    // A row that is not finite, once a query's candidates reach it; the host says so too.
    let mut bad = base.data.clone();
    let hit = dev_first_result(&ix, q, d);
    bad[hit as usize * d + 3] = f32::NAN;
    let bad_buf = UserBuffer::new(&cuda, &bad);
    let e = search(bad_buf.0, n).unwrap_err();
    assert!(matches!(e, Error::NonFinite(_)), "{e}");
    assert!(e.to_string().contains(&format!("id {hit}")), "{e}");
    let bad_host = DenseRaw { data: &bad, d };
    let e = ix
        .search(q, &sp, Some(&bad_host as &dyn RawVectors))
        .unwrap_err();
    assert!(matches!(e, Error::NonFinite(_)), "{e}");
    // Ranges the device cannot read: errors before anything is read.
    for (e, what) in [
        (
            search(buf.0, n + 1).unwrap_err(),
            "one row past the allocation",
        ),
        (
            search(base.data.as_ptr() as u64, n).unwrap_err(),
            "host memory",
        ),
        (search(0x10, n).unwrap_err(), "no allocation"),
    ] {
        assert!(matches!(e, Error::InvalidArgument(_)), "{what}: {e}");
    }
    // More candidates than the device keeps.
    let many = SearchParams { rerank: 200, ..sp };
    let e = unsafe { on_g.search_device_raw(q, &many, buf.0, n) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(search(buf.0, n).is_ok());
    // Other backends say they cannot.
    let e = unsafe { ix.search_device_raw(q, &sp, buf.0, n) }.unwrap_err();
    assert!(matches!(e, Error::BackendUnavailable(_)), "{e}");
}

/// The id the first query finds first (without re-rank).
fn dev_first_result(ix: &vlc_compress::Index, q: &[f32], d: usize) -> u64 {
    let sp = vlc_compress::SearchParams {
        k: 1,
        nprobe: 4,
        rerank: 0,
    };
    ix.search(&q[..d], &sp, None).unwrap().ids[0]
}

/// (device bytes held after `f` beyond before, growth of the pool's high-water mark during
/// `f`), with `f`'s result.
fn device_peak<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let (before, _) = cuda::pool_usage(0, true).unwrap().expect("a memory pool");
    let r = f();
    let (_, high) = cuda::pool_usage(0, true).unwrap().expect("a memory pool");
    (high.saturating_sub(before), r)
}

/// The device estimates of training, adding and the first search against the peaks the
/// memory pool measures (every buffer of the backend comes from it).
#[test]
fn device_memory_stays_within_a_quarter_of_its_estimates() {
    let Some(_g) = gpu() else { return };
    let mut rows = Vec::new();
    for (n, d, bytes, bits, anchors, metric) in [
        (300_000, 128, 32, 8, 1024, Metric::L2),
        (300_000, 96, 16, 4, 2048, Metric::L2),
        (200_000, 384, 32, 8, 1024, Metric::Cosine),
        // Few anchors: the PQ sample's nearest-anchor pass, not the anchors', sets the peak.
        (300_000, 128, 16, 8, 256, Metric::L2),
    ] {
        let x = common::clustered(n, d, 500, 3);
        let mut p = common::small_params(anchors, bytes);
        p.bits = bits;
        p.metric = metric;
        // A context of its own: the lists the last one searched stay on its device.
        let ctx = Arc::new(Context::new(BackendKind::Cuda, 0, 0).unwrap());
        let mut c = vlc_compress::Compressor::new(ctx, p);
        let want = c
            .estimate_memory(vlc_compress::Work::Train, n, d)
            .unwrap()
            .1;
        let (peak, r) = device_peak(|| c.train(&x, d).map(|_| ()));
        r.unwrap();
        rows.push((
            format!("train {n} x {d} {bits}-bit {anchors} {metric:?}"),
            want,
            peak,
        ));
        let mut ix = c.new_index().unwrap();
        let ids: Vec<u64> = (0..n as u64).collect();
        let want = ix.estimate_add_memory(n).unwrap().1;
        let (peak, r) = device_peak(|| ix.add(&x[..], &ids));
        r.unwrap();
        rows.push((format!("add {n}"), want, peak));
        let sp = vlc_compress::SearchParams {
            k: 10,
            nprobe: 32,
            rerank: 0,
        };
        let want = ix.estimate_search_memory(5000, &sp).unwrap().1;
        let (peak, r) = device_peak(|| ix.search(&x[..5000 * d], &sp, None));
        r.unwrap();
        rows.push(("first search, 5000 queries".into(), want, peak));
    }
    for (what, want, peak) in &rows {
        let ratio = *want as f64 / (*peak).max(1) as f64;
        eprintln!("{what}: estimate {want} B, peak {peak} B ({ratio:.2})");
    }
    for (what, want, peak) in rows {
        let ratio = want as f64 / peak.max(1) as f64;
        assert!((0.75..=1.25).contains(&ratio), "{what}: {want} vs {peak}");
    }
}

/// Device caps at 50%, 25% and 5% of training's uncapped estimate: training fits under each,
/// its GEMM tiles sized under the cap and, where its points do not fit, streamed a block at a
/// time, and gives the uncapped codebook without passing the cap. A cap below what one block
/// needs is refused before anything is allocated. An add past the cap is refused and leaves
/// the index.
#[test]
fn device_caps_give_the_same_codebook_or_out_of_memory() {
    let Some(g) = gpu() else { return };
    let (n, d) = (300_000, 128);
    let x = common::clustered(n, d, 500, 4);
    let p = common::small_params(1024, 32);
    let mut free = vlc_compress::Compressor::new(Arc::clone(&g), p.clone());
    let want = free
        .estimate_memory(vlc_compress::Work::Train, n, d)
        .unwrap()
        .1;
    free.train(&x, d).unwrap();
    let fp = free.codebook().unwrap().fingerprint();
    let mut outcomes = Vec::new();
    for frac in [0.5, 0.25, 0.05] {
        let cap = (want as f64 * frac) as usize;
        g.set_device_memory_cap(cap);
        let mut c = vlc_compress::Compressor::new(Arc::clone(&g), p.clone());
        let (peak, r) = device_peak(|| c.train(&x, d).map(|_| ()));
        match r {
            Ok(()) => {
                assert_eq!(
                    c.codebook().unwrap().fingerprint(),
                    fp,
                    "{frac}: another codebook"
                );
                assert!(peak <= cap, "{frac}: peak {peak} over the cap {cap}");
                outcomes.push(format!("{frac}: trained, peak {peak} under {cap}"));
            }
            Err(e) => panic!("{frac}: {e}"),
        }
    }
    eprintln!("estimate {want} B; {outcomes:?}");
    // Below one block of points beside the assignment buffers: refused, nothing allocated.
    g.set_device_memory_cap(16 * n);
    let mut c = vlc_compress::Compressor::new(Arc::clone(&g), p.clone());
    let (peak, r) = device_peak(|| c.train(&x, d).map(|_| ()));
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    assert!(peak < 1 << 20, "a refused training took {peak} bytes");
    g.set_device_memory_cap(0);
    let mut ix = free.new_index().unwrap();
    let ids: Vec<u64> = (0..n as u64).collect();
    let add = ix.estimate_add_memory(n).unwrap().1;
    g.set_device_memory_cap(add / 2);
    assert!(matches!(ix.add(&x[..], &ids), Err(Error::OutOfMemory(_))));
    assert_eq!(ix.len(), 0);
    g.set_device_memory_cap(0);
}
