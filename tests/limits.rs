//! Arguments at and past their limits: huge k and re-rank depths, the no-result id, values
//! whose distances overflow f32, device calls on a CPU context; and every status message
//! naming the argument and its value (through the C ABI, as a C caller reads them).

mod common;

use std::ffi::{c_char, CString};
use std::ptr::{null, null_mut};
use vlc_compress::ffi::*;
use vlc_compress::{vecio, DenseRaw, Error, Index, SearchParams, TrainParams};

const D: usize = 16;

fn base() -> vecio::Matrix<f32> {
    vecio::Matrix {
        rows: 2000,
        cols: D,
        data: common::clustered(2000, D, 8, 11),
    }
}

fn small() -> (Index, vecio::Matrix<f32>) {
    let b = base();
    (
        common::indexed(&common::ctx(0), common::small_params(16, 8), &b),
        b,
    )
}

#[test]
fn huge_k_and_rerank_allocate_nothing_by_themselves() {
    let (ix, b) = small();
    let q = &b.data[..3 * D];
    let raw = DenseRaw {
        data: &b.data,
        d: D,
    };
    let p = |k, nprobe, rerank| SearchParams { k, nprobe, rerank };
    // A re-rank deeper than the index holds is the whole probed lists, exactly.
    let all = ix.search(q, &p(10, 4, b.rows), Some(&raw)).unwrap();
    let huge = ix.search(q, &p(10, 4, 1 << 40), Some(&raw)).unwrap();
    assert_eq!(all, huge);
    // k itself sizes the caller's results: 2^40 of them cannot be had, and say so.
    for (k, says) in [(1 << 40, "search results"), (usize::MAX, "overflows")] {
        let r = ix.search(q, &p(k, 4, 0), None);
        assert!(
            matches!(&r, Err(Error::OutOfMemory(m)) if m.contains(says)),
            "{r:?}"
        );
    }
    // k larger than the index: padded, not refused.
    let r = ix.search(q, &p(5000, 1 << 20, 0), None).unwrap();
    assert_eq!(
        r.ids[..5000].iter().filter(|&&i| i != u64::MAX).count(),
        2000
    );
}

#[test]
fn the_no_result_marker_is_no_id() {
    let (mut ix, b) = small();
    let before = ix.len();
    let mut ids: Vec<u64> = (0..10).collect();
    ids[7] = u64::MAX;
    let r = ix.add(&b.data[..10 * D], &ids);
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("ids[7]") && m.contains("18446744073709551615")),
        "{r:?}"
    );
    assert_eq!(ix.len(), before, "nothing added");
}

#[test]
fn values_whose_distances_overflow_are_named() {
    let (ix, b) = small();
    let mut q = b.data[..2 * D].to_vec();
    q[D + 3] = 3e38;
    let r = ix.search(&q, &SearchParams::default(), None);
    assert!(
        matches!(&r, Err(Error::NonFinite(m)) if m.contains("queries: row 1") && m.contains("squared norm")),
        "{r:?}"
    );
    // Training on data scaled by 1e30: its squared norms overflow, and the message says so
    // (it used to blame a NaN that the input does not hold).
    let scaled: Vec<f32> = b.data.iter().map(|v| v * 1e30).collect();
    let mut c = vlc_compress::Compressor::new(common::ctx(0), common::small_params(16, 8));
    let r = c.train(&scaled, D).map(drop);
    assert!(
        matches!(&r, Err(Error::NonFinite(m)) if m.contains("training vectors: row 0") && m.contains("squared norm") && !m.contains("NaN")),
        "{r:?}"
    );
    // Encoding such a vector, too.
    let mut x = b.data[..4 * D].to_vec();
    x[2 * D] = -2e19;
    let mut ix = ix;
    let r = ix.add(&x[..], &[1, 2, 3, 4]);
    assert!(
        matches!(&r, Err(Error::NonFinite(m)) if m.contains("vectors: row 2")),
        "{r:?}"
    );
}

#[test]
fn device_calls_on_a_cpu_context_say_so_even_with_no_work() {
    let mut c = vlc_compress::Compressor::new(common::ctx(0), common::small_params(16, 8));
    c.train(&base().data, D).unwrap();
    // SAFETY: no memory is read: the context cannot read device memory.
    let r = unsafe { c.encode_device(0, 0) };
    assert!(matches!(r, Err(Error::BackendUnavailable(_))), "{r:?}");
}

/// The message of the last failed call on this thread.
fn message() -> String {
    let mut buf = vec![0 as c_char; 1024];
    let mut n = 0usize;
    // SAFETY: buf holds 1024 bytes.
    unsafe { vlcc_last_error_message(buf.as_mut_ptr(), buf.len(), &mut n) };
    let bytes: Vec<u8> = buf[..n.min(1023)].iter().map(|&c| c as u8).collect();
    String::from_utf8(bytes).unwrap()
}

/// Asserts a failed call's status and that its message names every one of `names`.
fn says(what: &str, status: vlcc_status, want: vlcc_status, names: &[&str]) {
    assert_eq!(status, want, "{what}: {}", message());
    let m = message();
    for n in names {
        assert!(m.contains(n), "{what}: message {m:?} does not name {n:?}");
    }
    // One style: no value printed as a run of hundreds of digits.
    assert!(m.len() < 400, "{what}: {m:?}");
}

#[test]
fn every_status_message_names_the_argument_and_the_value() {
    use vlcc_status::*;
    // SAFETY (whole test): every pointer passed is valid for what it claims, or NULL on purpose.
    unsafe {
        let mut ctx = null_mut();
        says(
            "backend 9",
            vlcc_context_new(9, 0, 0, &mut ctx),
            InvalidArgument,
            &["backend", "9"],
        );
        assert_eq!(vlcc_context_new(1, 0, 0, &mut ctx), Ok);
        let mut c = null_mut();
        says(
            "compressor out",
            vlcc_compressor_new(ctx, null_mut()),
            NullPointer,
            &["out", "NULL"],
        );
        assert_eq!(vlcc_compressor_new(ctx, &mut c), Ok);

        // Setting: every integer parameter, a negative and a fractional value.
        let names = [
            (vlcc_param::Anchors, "anchors"),
            (vlcc_param::BytesPerVector, "bytes_per_vector"),
            (vlcc_param::MaxIters, "max_iters"),
            (vlcc_param::MaintenanceInterval, "maintenance_interval"),
            (vlcc_param::MaxPointsPerAnchor, "max_points_per_anchor"),
            (vlcc_param::Seed, "seed"),
            (vlcc_param::PqIters, "pq_iters"),
            (vlcc_param::PqTrainPoints, "pq_train_points"),
            (vlcc_param::OpqIters, "opq_iters"),
            (vlcc_param::OpqTrainPoints, "opq_train_points"),
        ];
        for (p, name) in names {
            for (v, shown) in [(-1.0, "-1"), (2.5, "2.5"), (1e300, "1e300")] {
                says(
                    &format!("{name} = {v}"),
                    vlcc_compressor_set_param(c, p as u32, v),
                    InvalidArgument,
                    &[name, shown],
                );
            }
        }
        for (p, name, v, shown) in [
            (vlcc_param::Bits, "bits", 9.0, "9"),
            (vlcc_param::Metric, "metric", 3.0, "3"),
            (vlcc_param::Rotation, "rotation", -2.0, "-2"),
            (vlcc_param::Init, "init", 2.0, "2"),
            (vlcc_param::Precision, "precision", 7.0, "7"),
            (vlcc_param::Tol, "tol", f64::INFINITY, "inf"),
            (vlcc_param::InitialTemp, "initial_temp", 1e300, "1e300"),
            (vlcc_param::CoolingRate, "cooling_rate", f64::NAN, "NaN"),
            (vlcc_param::Trim, "trim", -1e39, "-1e39"),
            (vlcc_param::Balance, "balance", f64::NEG_INFINITY, "-inf"),
            (vlcc_param::MergeThreshold, "merge_threshold", 1e40, "1e40"),
            (vlcc_param::SplitFactor, "split_factor", f64::NAN, "NaN"),
            // Whole, finite values out of each parameter's range.
            (vlcc_param::Anchors, "anchors", 0.0, "anchors = 0"),
            (
                vlcc_param::BytesPerVector,
                "bytes_per_vector",
                5000.0,
                "= 5000",
            ),
            (vlcc_param::Bits, "bits", 5.0, "bits = 5"),
            (vlcc_param::MaxIters, "max_iters", 0.0, "max_iters = 0"),
            (vlcc_param::PqIters, "pq_iters", 0.0, "pq_iters = 0"),
            (vlcc_param::CoolingRate, "cooling_rate", 1.5, "= 1.5"),
            (vlcc_param::Trim, "trim", 0.5, "= 0.5"),
            (vlcc_param::InitialTemp, "initial_temp", -1.0, "= -1"),
            (vlcc_param::Balance, "balance", -0.5, "= -0.5"),
            (vlcc_param::MergeThreshold, "merge_threshold", -1.0, "= -1"),
            (vlcc_param::SplitFactor, "split_factor", 1.0, "= 1"),
            (vlcc_param::Tol, "tol", -1.0, "= -1"),
        ] {
            says(
                &format!("{name} = {v}"),
                vlcc_compressor_set_param(c, p as u32, v),
                InvalidArgument,
                &[name, shown],
            );
        }
        says(
            "param 999",
            vlcc_compressor_set_param(c, 999, 1.0),
            InvalidArgument,
            &["param", "999"],
        );
        let x = base().data;
        says(
            "train x NULL",
            vlcc_compressor_train(c, null(), 10, D),
            NullPointer,
            &["x", "NULL"],
        );
        says(
            "train d 0",
            vlcc_compressor_train(c, x.as_ptr(), 10, 0),
            InvalidArgument,
            &["dimension", "0"],
        );
        for (p, v) in [
            (vlcc_param::Anchors, 16.0),
            (vlcc_param::BytesPerVector, 8.0),
        ] {
            vlcc_compressor_set_param(c, p as u32, v);
        }
        let mut bad = x.clone();
        bad[5 * D + 2] = f32::NAN;
        says(
            "train NaN",
            vlcc_compressor_train(c, bad.as_ptr(), 2000, D),
            NonFinite,
            &["training vectors", "NaN", "position 82"],
        );
        let mut few = null_mut();
        assert_eq!(vlcc_compressor_new(ctx, &mut few), Ok);
        says(
            "more anchors than vectors",
            vlcc_compressor_train(few, x.as_ptr(), 100, D),
            NotEnoughData,
            &["1024", "100"],
        );
        vlcc_compressor_free(few);
        assert_eq!(vlcc_compressor_train(c, x.as_ptr(), 2000, D), Ok);

        // Encoding: sizes named with their values.
        let mut codes = vec![0u8; 2000 * 9];
        says(
            "encode out short",
            vlcc_compressor_encode(c, x.as_ptr(), 10, codes.as_mut_ptr(), 5),
            BufferTooSmall,
            &["out", "5", "90"],
        );

        // An index and its searches.
        let mut ix = null_mut();
        assert_eq!(vlcc_index_new(c, &mut ix), Ok);
        let ids: Vec<u64> = (0..2000).collect();
        assert_eq!(vlcc_index_add(ix, x.as_ptr(), 2000, ids.as_ptr()), Ok);
        let (mut oi, mut od) = (vec![0u64; 100], vec![0f32; 100]);
        // Through a parameters object: the first call that fails gives the status.
        let search = |k: f64, nprobe: f64, rerank: f64, oi: &mut Vec<u64>, od: &mut Vec<f32>| {
            let mut p = null_mut();
            assert_eq!(vlcc_search_params_new(&mut p), Ok);
            let mut st = Ok;
            for (id, v) in [
                (vlcc_search_param::K, k),
                (vlcc_search_param::Nprobe, nprobe),
                (vlcc_search_param::Rerank, rerank),
            ] {
                if st == Ok {
                    st = vlcc_search_params_set(p, id as u32, v);
                }
            }
            if st == Ok {
                let (q, n) = (x.as_ptr(), 2000);
                st = vlcc_index_search(ix, q, 2, p, q, n, oi.as_mut_ptr(), od.as_mut_ptr());
            }
            vlcc_search_params_free(p);
            st
        };
        says(
            "k 0",
            search(0.0, 4.0, 0.0, &mut oi, &mut od),
            InvalidArgument,
            &["k = 0"],
        );
        says(
            "nprobe 0",
            search(10.0, 0.0, 0.0, &mut oi, &mut od),
            InvalidArgument,
            &["nprobe = 0"],
        );
        says(
            "rerank 5 < k",
            search(10.0, 4.0, 5.0, &mut oi, &mut od),
            InvalidArgument,
            &["rerank = 5", "k = 10"],
        );
        let path = CString::new("/nonexistent-dir/x.vlcc").unwrap();
        says(
            "save into a missing directory",
            vlcc_index_save(ix, path.as_ptr()),
            Io,
            &["/nonexistent-dir/x.vlcc"],
        );
        let dir = std::env::temp_dir();
        let dir_c = CString::new(dir.to_str().unwrap()).unwrap();
        let mut loaded = null_mut();
        says(
            "load a directory",
            vlcc_index_load(ctx, dir_c.as_ptr(), 1, &mut loaded),
            InvalidArgument,
            &[dir.to_str().unwrap(), "a directory"],
        );
        // A device is named as such, as the header says, for loads and saves alike.
        let null_dev = CString::new("/dev/null").unwrap();
        for flags in [0, 1] {
            says(
                "load a device",
                vlcc_index_load(ctx, null_dev.as_ptr(), flags, &mut loaded),
                InvalidArgument,
                &["/dev/null", "a character device"],
            );
        }
        let mut cb = null_mut();
        says(
            "load a codebook from a device",
            vlcc_compressor_load_codebook(ctx, null_dev.as_ptr(), &mut cb),
            InvalidArgument,
            &["/dev/null", "a character device"],
        );
        says(
            "save onto a device",
            vlcc_index_save(ix, null_dev.as_ptr()),
            InvalidArgument,
            &["/dev/null", "a character device"],
        );
        vlcc_index_free(ix);
        vlcc_compressor_free(c);
        vlcc_context_free(ctx);
    }
}

/// The defaults train: the table above changes one parameter at a time from them.
#[test]
fn defaults_are_valid() {
    TrainParams::default().validate().unwrap();
}

/// A codebook loaded from bytes reports the parameters that shaped it (it used to answer the
/// defaults: a 4-bit, 4-byte, rotated codebook read back as 8 bits, 16 bytes, no rotation).
#[test]
fn a_loaded_codebook_reports_its_shape() {
    let mut p = common::small_params(16, 4);
    p.bits = 4;
    p.rotation = vlc_compress::Rotation::Random;
    p.metric = vlc_compress::Metric::InnerProduct;
    let mut c = vlc_compress::Compressor::new(common::ctx(0), p);
    c.train(&base().data, D).unwrap();
    let bytes = vlc_compress::format::codebook_bytes(c.codebook().unwrap());
    // SAFETY: valid pointers and lengths throughout.
    unsafe {
        let mut ctx = null_mut();
        assert_eq!(vlcc_context_new(1, 0, 0, &mut ctx), vlcc_status::Ok);
        let mut h = null_mut();
        assert_eq!(
            vlcc_compressor_deserialize_codebook(ctx, bytes.as_ptr(), bytes.len(), &mut h),
            vlcc_status::Ok
        );
        for (param, want) in [
            (vlcc_param::Bits, 4.0),
            (vlcc_param::BytesPerVector, 4.0),
            (vlcc_param::Rotation, 1.0),
            (vlcc_param::Metric, 1.0),
            (vlcc_param::Anchors, 16.0),
        ] {
            let mut got = 0.0;
            assert_eq!(
                vlcc_compressor_get_param(h, param as u32, &mut got),
                vlcc_status::Ok
            );
            assert_eq!(got, want, "{param:?}");
        }
        vlcc_compressor_free(h);
        vlcc_context_free(ctx);
    }
}

/// Reading, decoding and reconstructing check the context's memory cap before they allocate;
/// a memory-mapped load, which copies nothing, passes under any cap.
#[test]
fn reads_and_decodes_answer_to_the_memory_cap() {
    let (ix, x) = small();
    let ctx = common::ctx(2);
    let cb = ix.codebook().clone();
    let c = vlc_compress::Compressor::with_codebook(ctx.clone(), cb);
    let codes = c.encode(x.data[..].into()).unwrap();
    let bytes = ix.to_bytes();
    let path = std::env::temp_dir().join(format!("vlcc-limits-cap-{}.vlcc", std::process::id()));
    ix.save(&path).unwrap();
    let ids: Vec<u64> = (0..100).collect();
    ctx.set_memory_cap(4096);
    let oom = |r: vlc_compress::Result<()>, what: &str| {
        assert!(matches!(r, Err(Error::OutOfMemory(_))), "{what}: {r:?}")
    };
    oom(c.decode(&codes).map(drop), "decode");
    oom(
        Index::from_bytes(ctx.clone(), &bytes).map(drop),
        "from_bytes",
    );
    oom(Index::load(ctx.clone(), &path, false).map(drop), "load");
    let mapped = Index::load(ctx.clone(), &path, true).unwrap();
    oom(mapped.reconstruct(&ids).map(drop), "reconstruct");
    oom(mapped.get_codes(&ids).map(drop), "get_codes");
    oom(mapped.reconstruct_all().map(drop), "reconstruct_all");
    ctx.set_memory_cap(0);
    assert_eq!(
        mapped.reconstruct(&ids).unwrap(),
        ix.reconstruct(&ids).unwrap()
    );
    assert_eq!(c.decode(&codes).unwrap().len(), x.data.len());
    std::fs::remove_file(&path).unwrap();
}

/// A bitset may claim any number of bits: past what memory holds the call answers with a
/// status (the copy is allocated fallibly), never an abort, and the filter stays as it was.
#[test]
fn a_bitset_claiming_any_size_gets_a_status() {
    // SAFETY (whole test): no byte past the first is read: each claim fails before the copy.
    unsafe {
        let mut p = null_mut();
        assert_eq!(vlcc_search_params_new(&mut p), vlcc_status::Ok);
        let one = [0xFFu8];
        for n_bits in [u64::MAX, u64::MAX - 7, 1 << 62, (isize::MAX as u64) << 2] {
            let st = vlcc_search_params_set_filter_bitset(p, one.as_ptr(), n_bits);
            assert!(
                matches!(st, vlcc_status::OutOfMemory | vlcc_status::InvalidArgument),
                "{n_bits} bits: {st:?} {}",
                message()
            );
        }
        // One wrapping past the end of the address space.
        let end = usize::MAX as *const u8;
        let st = vlcc_search_params_set_filter_bitset(p, end, 64);
        assert_eq!(st, vlcc_status::InvalidArgument, "{}", message());
        assert_eq!(
            vlcc_search_params_set_filter_bitset(p, one.as_ptr(), 8),
            vlcc_status::Ok
        );
        vlcc_search_params_free(p);
    }
}

/// Every output of `vlcc_index_search_bounds` is checked against every other output and the
/// inputs: an overlap is `OVERLAP`, with nothing written (the queries stay as they were).
#[test]
fn bounds_outputs_may_not_overlap_each_other_or_the_inputs() {
    let x = base().data;
    // SAFETY (whole test): every buffer is valid for what the call is told; some overlap on
    // purpose, which the call must refuse before writing.
    unsafe {
        let mut ctx = null_mut();
        assert_eq!(vlcc_context_new(1, 0, 2, &mut ctx), vlcc_status::Ok);
        let mut c = null_mut();
        assert_eq!(vlcc_compressor_new(ctx, &mut c), vlcc_status::Ok);
        vlcc_compressor_set_param(c, vlcc_param::Anchors as u32, 16.0);
        vlcc_compressor_set_param(c, vlcc_param::BytesPerVector as u32, 8.0);
        assert_eq!(
            vlcc_compressor_train(c, x.as_ptr(), 2000, D),
            vlcc_status::Ok
        );
        let mut ix = null_mut();
        assert_eq!(
            vlcc_index_new_with_refine(c, vlcc_refine::Bound as u32, &mut ix),
            vlcc_status::Ok
        );
        let ids: Vec<u64> = (0..2000).collect();
        assert_eq!(
            vlcc_index_add(ix, x.as_ptr(), 2000, ids.as_ptr()),
            vlcc_status::Ok
        );
        let mut p = null_mut();
        assert_eq!(vlcc_search_params_new(&mut p), vlcc_status::Ok);
        let (nq, k) = (4usize, 10usize);
        // One arena holds every output, so that any two can be made to meet.
        let mut q = x[..nq * D].to_vec();
        let q0 = q.clone();
        let mut arena = vec![0u64; 8 * nq * k];
        let base = arena.as_mut_ptr();
        let f = |at: usize| base.add(at) as *mut f32;
        let (oi, od, lo, hi) = (base, f(nq * k), f(2 * nq * k), f(3 * nq * k));
        let (rr, cf) = (base.add(4 * nq * k), base.add(5 * nq * k) as *mut u8);
        type Case = (*mut u64, *mut f32, *mut f32, *mut f32, *mut u64, *mut u8);
        let cases: [(&str, Case); 7] = [
            ("lower on ids", (oi, od, oi as *mut f32, hi, rr, cf)),
            ("upper on distances", (oi, od, lo, od.add(3), rr, cf)),
            ("lower on upper", (oi, od, lo, lo.add(1), rr, cf)),
            ("reranked on ids", (oi, od, lo, hi, oi.add(2), cf)),
            ("certified on lower", (oi, od, lo, hi, rr, lo as *mut u8)),
            ("certified on reranked", (oi, od, lo, hi, rr, rr as *mut u8)),
            ("upper on the queries", (oi, od, lo, q.as_mut_ptr(), rr, cf)),
        ];
        for (what, (i, d, l, u, r, c)) in cases {
            let qp = q.as_ptr();
            let st = vlcc_index_search_bounds(ix, qp, nq, p, null(), 0, i, d, l, u, r, c);
            assert_eq!(st, vlcc_status::Overlap, "{what}: {}", message());
            assert!(
                arena.iter().all(|&v| v == 0),
                "{what}: an output was written"
            );
            assert_eq!(q, q0, "{what}: the queries were written");
        }
        let st = vlcc_index_search_bounds(ix, q.as_ptr(), nq, p, null(), 0, oi, od, lo, hi, rr, cf);
        assert_eq!(st, vlcc_status::Ok, "{}", message());
        assert!((0..nq * k).all(|i| *oi.add(i) < 2000));
        vlcc_search_params_free(p);
        vlcc_index_free(ix);
        vlcc_compressor_free(c);
        vlcc_context_free(ctx);
    }
}

/// Memory estimates of sizes no machine holds are an error (OUT_OF_MEMORY; a dimension past
/// 2^24 INVALID_ARGUMENT), never a figure that wrapped; at
/// the edge of what they are made for (2^56 values) every figure is at least a byte a
/// vector (a wrapped product would come out small). A debug build (overflow checks on)
/// runs the same corners without a panic.
#[test]
fn estimates_refuse_sizes_past_reach_and_never_wrap() {
    use vlc_compress::quant::estimate::{MOST_DIMS, MOST_VALUES};
    use vlc_compress::{Compressor, Work};
    let ctx = common::ctx(2);
    for bits in [8, 4] {
        let mut p = common::small_params(1024, 32);
        p.bits = bits;
        let c = Compressor::new(ctx.clone(), p);
        for (n, d) in [
            (usize::MAX, usize::MAX),
            (usize::MAX, 1),
            (1, MOST_DIMS + 1),
        ] {
            for w in [Work::Train, Work::Build, Work::Search] {
                let r = c.estimate_memory(w, n, d);
                let refused = matches!(r, Err(Error::InvalidArgument(_) | Error::OutOfMemory(_)));
                assert!(refused, "{w:?} {n} x {d}: {r:?}");
            }
        }
        for d in [1, 128, 4096, MOST_DIMS] {
            let n = MOST_VALUES / d;
            for w in [Work::Train, Work::Build, Work::Search] {
                let (host, _) = c.estimate_memory(w, n, d).unwrap();
                // Training samples its input; the lists hold an id a vector; a 4-bit
                // index's blocks half a byte a vector and more.
                let least = match (w, bits) {
                    (Work::Train, _) => 1,
                    (Work::Search, 8) => 1024 * 4,
                    _ => n / 2,
                };
                assert!(host >= least, "{w:?} {n} x {d}, {bits}-bit: {host} bytes");
            }
        }
    }
    // Through the C ABI, and an index's own estimates.
    let (ix, _) = small();
    let sp = SearchParams {
        k: usize::MAX,
        nprobe: 16,
        rerank: 0,
    };
    for (n, p) in [(usize::MAX, SearchParams::default()), (1 << 40, sp)] {
        let r = ix.estimate_search_memory(n, &p);
        assert!(matches!(r, Err(Error::OutOfMemory(_))), "search {n}: {r:?}");
    }
    let r = ix.estimate_add_memory(usize::MAX);
    assert!(matches!(r, Err(Error::OutOfMemory(_))), "{r:?}");
    // SAFETY: every pointer is valid for what the calls write.
    unsafe {
        let mut c = null_mut();
        let mut cx = null_mut();
        assert_eq!(vlcc_context_new(1, 0, 1, &mut cx), vlcc_status::Ok);
        assert_eq!(vlcc_compressor_new(cx, &mut c), vlcc_status::Ok);
        let (mut h, mut dv) = (0u64, 0u64);
        for w in [vlcc_work::Train, vlcc_work::Build, vlcc_work::Search] {
            let st = vlcc_estimate_memory(c, w as u32, usize::MAX, usize::MAX, &mut h, &mut dv);
            assert_eq!(st, vlcc_status::InvalidArgument, "{w:?}: {}", message());
            let st = vlcc_estimate_memory(c, w as u32, usize::MAX, 64, &mut h, &mut dv);
            assert_eq!(st, vlcc_status::OutOfMemory, "{w:?}: {}", message());
            assert_eq!((h, dv), (0, 0), "{w:?}: written on error");
        }
        vlcc_compressor_free(c);
        vlcc_context_free(cx);
    }
}
