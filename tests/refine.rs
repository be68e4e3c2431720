//! Refinement vectors kept in the index: re-rank with nothing from the caller, close to the
//! re-rank against the raw vectors, and the same through save, memory-mapped load, merge and
//! remove.

mod common;
use vlc_compress::{DenseRaw, Error, Index, Metric, RawVectors, Refine, SearchParams};

fn refined(demo: &common::Demo, metric: Metric, refine: Refine) -> Index {
    let mut p = common::small_params(64, 8);
    p.metric = metric;
    let base = common::indexed(&common::ctx(2), p, &demo.base);
    let mut ix =
        Index::with_refine(base.context().clone(), base.codebook().clone(), refine).unwrap();
    let ids: Vec<u64> = (0..demo.base.rows as u64).collect();
    ix.add(&demo.base.data[..], &ids).unwrap();
    ix
}

#[test]
fn refined_rerank_matches_the_raw_rerank() {
    let demo = common::demo();
    let d = demo.base.cols;
    let raw = DenseRaw {
        data: &demo.base.data,
        d,
    };
    let p = SearchParams {
        k: 10,
        nprobe: 16,
        rerank: 100,
    };
    let q = &demo.query.data;
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for refine in [Refine::F16, Refine::Int8] {
            let ix = refined(&demo, metric, refine);
            assert_eq!(ix.refine(), refine);
            let want = ix.search(q, &p, Some(&raw as &dyn RawVectors)).unwrap();
            let got = ix.search(q, &p, None).unwrap();
            let same = common::same_records(&want.ids, &got.ids, 1);
            eprintln!("{metric:?} {refine}: same ids {same:.4}");
            // Near-ties swap places: int8 rows are coarser than f16 ones.
            let floor = if refine == Refine::F16 { 0.98 } else { 0.95 };
            assert!(same >= floor, "{metric:?} {refine}: {same}");
            let plain = ix
                .search(q, &SearchParams { rerank: 0, ..p }, None)
                .unwrap();
            if metric == Metric::L2 {
                let (r_raw, r_ref, r_plain) = (
                    common::recall(&want.ids, 10, &demo.gt.data, demo.gt.cols, 10),
                    common::recall(&got.ids, 10, &demo.gt.data, demo.gt.cols, 10),
                    common::recall(&plain.ids, 10, &demo.gt.data, demo.gt.cols, 10),
                );
                eprintln!("  recall@10: raw {r_raw:.4}, refined {r_ref:.4}, codes {r_plain:.4}");
                assert!(r_ref >= r_raw - 0.01 && r_ref > r_plain + 0.1);
            }
        }
    }
}

#[test]
fn refinement_rows_survive_save_load_merge_and_remove() {
    let demo = common::demo();
    let d = demo.base.cols;
    let q = &demo.query.data[..100 * d];
    let p = SearchParams {
        k: 10,
        nprobe: 16,
        rerank: 50,
    };
    let ix = refined(&demo, Metric::L2, Refine::Int8);
    let want = ix.search(q, &p, None).unwrap();
    let dir = std::env::temp_dir().join(format!("vlcc-refine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ix.vlcc");
    ix.save(&path).unwrap();
    for mmap in [true, false] {
        let l = Index::load(ix.context().clone(), &path, mmap).unwrap();
        assert_eq!(l.refine(), Refine::Int8);
        assert_eq!(l.search(q, &p, None).unwrap(), want, "loaded, mmap {mmap}");
    }
    let b = Index::from_bytes(ix.context().clone(), &ix.to_bytes()).unwrap();
    assert_eq!(b.search(q, &p, None).unwrap(), want);
    // Two halves merged answer as the whole.
    let half = demo.base.rows / 2;
    let (mut a, mut c) = (
        Index::with_refine(ix.context().clone(), ix.codebook().clone(), Refine::Int8).unwrap(),
        Index::with_refine(ix.context().clone(), ix.codebook().clone(), Refine::Int8).unwrap(),
    );
    let ids: Vec<u64> = (0..demo.base.rows as u64).collect();
    a.add(&demo.base.data[..half * d], &ids[..half]).unwrap();
    c.add(&demo.base.data[half * d..], &ids[half..]).unwrap();
    a.merge_from(&c).unwrap();
    let merged = a.search(q, &p, None).unwrap();
    assert_eq!(merged.distances, want.distances);
    // Removal moves rows: the refined re-rank still scores each id with its own vector.
    let gone: Vec<u64> = (0..demo.base.rows as u64).filter(|i| i % 3 == 0).collect();
    a.remove(&gone).unwrap();
    let l = Index::load(ix.context().clone(), &path, true).unwrap();
    let mut l = l;
    l.remove(&gone).unwrap();
    let after = a.search(q, &p, None).unwrap();
    assert_eq!(l.search(q, &p, None).unwrap().distances, after.distances);
    assert!(after.ids.iter().all(|i| i % 3 != 0));
    let raw = DenseRaw {
        data: &demo.base.data,
        d,
    };
    let exact = a.search(q, &p, Some(&raw as &dyn RawVectors)).unwrap();
    assert!(common::same_records(&exact.ids, &after.ids, 1) >= 0.97);
    // Different kinds do not merge; device input cannot make refinement rows.
    let f16 = Index::with_refine(ix.context().clone(), ix.codebook().clone(), Refine::F16).unwrap();
    assert!(matches!(a.merge_from(&f16), Err(Error::InvalidArgument(_))));
    // A plain index with rerank and no raw vectors still asks for them.
    let plain = common::indexed(&common::ctx(1), common::small_params(16, 8), &demo.base);
    assert!(matches!(
        plain.search(q, &p, None),
        Err(Error::InvalidArgument(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn f16_refinement_refuses_values_it_cannot_hold() {
    let demo = common::demo();
    let d = demo.base.cols;
    let ix = refined(&demo, Metric::L2, Refine::F16);
    let mut ix = ix;
    let mut big = demo.base.data[..d].to_vec();
    big[0] = 1e6;
    assert!(matches!(
        ix.add(&big[..], &[999_999]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!ix.contains(999_999).unwrap());
}

#[test]
fn refinement_rows_that_do_not_match_their_kind_are_corrupt() {
    use common::craft;
    let demo = common::demo();
    let ix = refined(&demo, Metric::L2, Refine::F16);
    let good = ix.to_bytes();
    // META says int8 (4 + d bytes a row) over f16 rows (2 d bytes): the sizes disagree.
    let mut b = good.clone();
    let (meta, _) = craft::section(&b, 1);
    b[meta + 28..meta + 32].copy_from_slice(&2u32.to_le_bytes());
    craft::reseal(&mut b);
    assert!(matches!(
        Index::from_bytes(ix.context().clone(), &b),
        Err(Error::Corrupt(_))
    ));
    // An unknown kind, and rows declared but not there.
    for kind in [7u32, 0] {
        let mut b = good.clone();
        b[meta + 28..meta + 32].copy_from_slice(&kind.to_le_bytes());
        craft::reseal(&mut b);
        match Index::from_bytes(ix.context().clone(), &b) {
            Err(Error::Corrupt(m)) => assert!(m.contains("refinement"), "{m}"),
            other => panic!("kind {kind}: {other:?}"),
        }
    }
}
