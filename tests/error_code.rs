//! Codes whose last byte is an error level (`ErrorCode`): what `Auto` chooses, the shapes they
//! take, their distances (the reconstruction's plus the level, closer to the true ones), and
//! that they survive save and load.

mod common;
use vlc_compress::{
    Compressor, Error, ErrorCode, Index, Metric, Refine, SearchParams, TrainParams,
};

fn params(bytes: usize, error_code: ErrorCode) -> TrainParams {
    let mut p = common::small_params(64, bytes);
    p.error_code = error_code;
    p
}

#[test]
fn auto_keeps_a_level_for_l2_codes_of_8_dimensions_a_byte() {
    let p = |bytes, bits, metric| TrainParams {
        bytes_per_vector: bytes,
        bits,
        metric,
        ..TrainParams::default()
    };
    // 384 dimensions: on up to 48 bytes; 50: up to 6.
    assert!(p(32, 8, Metric::L2).error_code_for(384));
    assert!(p(48, 8, Metric::L2).error_code_for(384));
    assert!(!p(49, 8, Metric::L2).error_code_for(384));
    assert!(!p(16, 8, Metric::L2).error_code_for(50));
    assert!(p(6, 8, Metric::L2).error_code_for(50));
    assert!(p(32, 4, Metric::L2).error_code_for(384));
    // At 4 bits the level takes a nibble: 63 sub-quantizers in 32 bytes.
    assert_eq!(p(32, 4, Metric::L2).subquantizers(384), 63);
    assert!(!p(32, 8, Metric::InnerProduct).error_code_for(384));
    assert!(!p(32, 8, Metric::Cosine).error_code_for(384));
    assert!(!p(1, 8, Metric::L2).error_code_for(384));
    assert_eq!(p(32, 8, Metric::L2).subquantizers(384), 31);
    assert_eq!(p(16, 8, Metric::L2).subquantizers(50), 16);
    // Asked for where it cannot be: refused, not ignored.
    for (bits, metric) in [
        (4, Metric::InnerProduct),
        (8, Metric::InnerProduct),
        (8, Metric::Cosine),
    ] {
        let q = TrainParams {
            error_code: ErrorCode::On,
            ..p(16, bits, metric)
        };
        assert!(
            matches!(q.validate(), Err(Error::InvalidArgument(_))),
            "{bits} {metric:?}"
        );
    }
}

#[test]
fn a_level_takes_one_byte_of_the_code_and_survives_save_and_load() {
    let demo = common::demo();
    let d = demo.base.cols;
    let ix = common::indexed(&common::ctx(2), params(5, ErrorCode::On), &demo.base);
    let cb = ix.codebook();
    assert_eq!(cb.residual_code_size(), 5);
    assert_eq!(cb.quantizer().nsub, 4);
    let levels = &cb.quantizer().levels;
    assert_eq!(levels.len(), 256);
    assert!(levels.windows(2).all(|w| w[0] <= w[1]) && levels[0] >= 0.0);
    // The same training without the level: another codebook, another fingerprint.
    let off = common::indexed(&common::ctx(2), params(5, ErrorCode::Off), &demo.base);
    assert_eq!(off.codebook().quantizer().nsub, 5);
    assert_ne!(off.codebook().fingerprint(), cb.fingerprint());
    // Levels are used: the codes name many of them.
    let codes = ix.get_codes(&(0..2000).collect::<Vec<u64>>()).unwrap();
    let named: std::collections::BTreeSet<u8> = codes.chunks_exact(5).map(|c| c[4]).collect();
    assert!(named.len() > 100, "{} levels named", named.len());

    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let q = &demo.query.data;
    let want = ix.search(q, &p, None).unwrap();
    let dir = std::env::temp_dir().join(format!("vlcc-levels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("levels.vlcc");
    ix.save(&path).unwrap();
    for mmap in [false, true] {
        let back = Index::load(common::ctx(2), &path, mmap).unwrap();
        assert_eq!(back.codebook().quantizer().levels, *levels);
        assert_eq!(back.codebook().fingerprint(), cb.fingerprint());
        assert_eq!(back.search(q, &p, None).unwrap(), want);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // Version 3 only where the codes keep levels.
    let version = |b: &[u8]| u32::from_le_bytes(b[8..12].try_into().unwrap());
    assert_eq!(version(&ix.to_bytes()), 3);
    assert_eq!(version(&off.to_bytes()), 2);
    // Codec mode: the level's byte rides along and decoding ignores it.
    let c = Compressor::with_codebook(common::ctx(2), cb.clone());
    let rec = c.encode(demo.base.data[..100 * d].into()).unwrap();
    assert_eq!(rec.len(), 100 * cb.codec_size());
    assert_eq!(c.decode(&rec).unwrap().len(), 100 * d);
}

/// Squared distances of each query to each vector: exact, from the reconstruction, and from
/// the reconstruction plus the vector's level, as an exhaustive search scores them.
#[test]
fn search_scores_are_the_reconstruction_plus_the_level_and_closer_to_the_truth() {
    let demo = common::demo();
    let d = demo.base.cols;
    let n = 3000;
    let base = vlc_compress::vecio::Matrix {
        rows: n,
        cols: d,
        data: demo.base.data[..n * d].to_vec(),
    };
    for bits in [8u32, 4] {
        scores_of(&demo, &base, bits);
    }
}

fn scores_of(demo: &common::Demo, base: &vlc_compress::vecio::Matrix<f32>, bits: u32) {
    let (d, n) = (base.cols, base.rows);
    let mut p = params(5, ErrorCode::On);
    p.bits = bits;
    let ix = common::indexed(&common::ctx(2), p, base);
    let cb = ix.codebook();
    // 5 bytes: 4 sub-codes and the level at 8 bits, 9 and the level at 4.
    let m = cb.quantizer().nsub;
    assert_eq!(m, if bits == 8 { 4 } else { 9 });
    let ids: Vec<u64> = (0..n as u64).collect();
    let codes = ix.get_codes(&ids).unwrap();
    let c = Compressor::with_codebook(common::ctx(2), cb.clone());
    // `get_codes` gives codec records: anchor id then code.
    let xh = c.decode(&codes).unwrap();
    let cs = cb.codec_size();
    let levels = &cb.quantizer().levels;
    let nq = 50;
    let all = SearchParams {
        k: n,
        nprobe: cb.anchors(),
        rerank: 0,
    };
    let res = ix.search(&demo.query.data[..nq * d], &all, None).unwrap();
    let (mut err_plain, mut err_level) = (0f64, 0f64);
    for i in 0..nq {
        let qv = &demo.query.data[i * d..(i + 1) * d];
        for t in 0..n {
            let (id, got) = (res.ids[i * n + t] as usize, res.distances[i * n + t]);
            let recon: f32 = qv
                .iter()
                .zip(&xh[id * d..(id + 1) * d])
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            // The level is the code's last sub-code: a byte, or the high nibble of the last.
            let last = codes[id * cs + cs - 1];
            let level = levels[if bits == 8 { last } else { last >> 4 } as usize];
            let want = recon + level;
            assert!(
                (got - want).abs() <= 1e-3 * (1.0 + want),
                "query {i} id {id}: {got} vs {want}"
            );
            let exact: f32 = qv
                .iter()
                .zip(&base.data[id * d..(id + 1) * d])
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            err_plain += (exact - recon).abs() as f64;
            err_level += (exact - want).abs() as f64;
        }
    }
    eprintln!(
        "{bits} bits: mean |error| of the distances: reconstruction {:.4}, with levels {:.4}",
        err_plain / (nq * n) as f64,
        err_level / (nq * n) as f64
    );
    assert!(err_level < 0.8 * err_plain, "{err_level} vs {err_plain}");
    // Through a file and back: the same levels, the same scores.
    let back = Index::from_bytes(common::ctx(1), &ix.to_bytes()).unwrap();
    assert_eq!(back.codebook().quantizer().levels, *levels);
    assert_eq!(
        back.search(&demo.query.data[..nq * d], &all, None).unwrap(),
        res
    );
}

#[test]
fn bounds_hold_with_levels() {
    let demo = common::demo();
    let base = common::indexed(&common::ctx(2), params(24, ErrorCode::On), &demo.base);
    let mut ix = Index::with_refine(
        base.context().clone(),
        base.codebook().clone(),
        Refine::Bound,
    )
    .unwrap();
    let d = demo.base.cols;
    let ids: Vec<u64> = (0..demo.base.rows as u64).collect();
    ix.add(&demo.base.data[..], &ids).unwrap();
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let q = &demo.query.data;
    let r = ix.search_bounded(q, &p, None, None, false).unwrap();
    let mut checked = 0;
    for i in 0..demo.query.rows {
        let qv = &q[i * d..(i + 1) * d];
        for t in i * 10..i * 10 + r.results.found(i) {
            let id = r.results.ids[t] as usize;
            let exact: f32 = qv
                .iter()
                .zip(&demo.base.data[id * d..(id + 1) * d])
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            assert!(
                r.lower[t] <= exact && exact <= r.upper[t],
                "{} <= {exact} <= {}",
                r.lower[t],
                r.upper[t]
            );
            checked += 1;
        }
    }
    assert!(checked > 0);
    // The certified re-rank finds the exact top-k of the probed lists.
    let raw = vlc_compress::DenseRaw {
        data: &demo.base.data,
        d,
    };
    // Without a cap every query is certified, after re-scoring only part of its lists.
    let pa = SearchParams {
        rerank: demo.base.rows,
        ..p
    };
    let auto = ix.search_bounded(q, &pa, Some(&raw), None, true).unwrap();
    // Certified queries hold the exact top-k of their probed lists: what re-ranking every
    // vector of those lists gives.
    let full = SearchParams {
        rerank: demo.base.rows,
        ..p
    };
    let exact = ix.search(q, &full, Some(&raw)).unwrap();
    let certified: Vec<usize> = (0..demo.query.rows)
        .filter(|&i| auto.certified[i])
        .collect();
    eprintln!(
        "{} of {} queries certified",
        certified.len(),
        demo.query.rows
    );
    assert!(!certified.is_empty());
    for i in certified {
        let r = i * 10..(i + 1) * 10;
        assert_eq!(
            auto.results.distances[r.clone()],
            exact.distances[r],
            "query {i}"
        );
    }
}

#[test]
fn files_with_bad_levels_or_versions_are_refused() {
    use common::craft;
    let demo = common::demo();
    let n = 2000 * demo.base.cols;
    let small = vlc_compress::vecio::Matrix {
        rows: 2000,
        cols: demo.base.cols,
        data: demo.base.data[..n].to_vec(),
    };
    let ix = common::indexed(&common::ctx(2), params(5, ErrorCode::On), &small);
    let good = ix.to_bytes();
    let load = |b: &[u8]| Index::from_bytes(common::ctx(1), b);
    assert!(load(&good).is_ok());
    let corrupt = |b: Vec<u8>, what: &str| match load(&b) {
        Err(Error::Corrupt(m)) => eprintln!("{what}: {m}"),
        other => panic!("{what}: {:?}", other.map(|_| ())),
    };
    let (at, len) = craft::section(&good, 9);
    assert_eq!(len, 256 * 4);
    let level = |b: &mut [u8], i: usize, v: f32| {
        b[at + 4 * i..at + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
    };
    for (what, i, v) in [
        ("descending", 10, -1.0),
        ("negative", 0, -1.0),
        ("NaN", 7, f32::NAN),
        ("infinite", 255, f32::INFINITY),
    ] {
        let mut b = good.clone();
        if what == "descending" {
            // Level 10 below level 9.
            let prev = f32::from_le_bytes(b[at + 36..at + 40].try_into().unwrap());
            level(&mut b, i, prev - 1.0);
        } else {
            level(&mut b, i, v);
        }
        craft::reseal(&mut b);
        corrupt(b, what);
    }
    // The version says whether LEVELS is there: 2 with it, or 3 without it, is damage.
    let version = |b: &mut Vec<u8>, v: u32| {
        b[8..12].copy_from_slice(&v.to_le_bytes());
        craft::reseal(b);
    };
    let mut b = good.clone();
    version(&mut b, 2);
    corrupt(b, "version 2 with levels");
    let plain = common::indexed(&common::ctx(2), params(5, ErrorCode::Off), &small).to_bytes();
    let mut b = plain.clone();
    version(&mut b, 3);
    corrupt(b, "version 3 without levels");
    let mut b = good;
    version(&mut b, 4);
    assert!(matches!(
        load(&b),
        Err(Error::UnsupportedVersion { found: 4, .. })
    ));
}
