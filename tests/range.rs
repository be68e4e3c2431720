//! Range search on the real GloVe demo subset, against the exhaustive top-k of the same index
//! and against brute force on the raw vectors.

mod common;
use vlc_compress::{DenseRaw, Error, Filter, Metric, RawVectors, SearchParams};

fn all(n: usize) -> SearchParams {
    SearchParams {
        k: n,
        nprobe: 10_000,
        rerank: 0,
    }
}

#[test]
fn range_search_is_the_prefix_of_the_exhaustive_ranking() {
    let demo = common::demo();
    let d = demo.base.cols;
    let q = &demo.query.data[..20 * d];
    for (metric, bits) in [(Metric::L2, 8), (Metric::L2, 4), (Metric::InnerProduct, 8)] {
        let mut p = common::small_params(64, 16);
        p.metric = metric;
        p.bits = bits;
        let ix = common::indexed(&common::ctx(2), p, &demo.base);
        let n = ix.len();
        let every = ix.search(q, &all(n), None).unwrap();
        // A radius around the 50th hit of the first query.
        let radius = every.distances[50];
        let r = ix.range_search(q, radius, &all(n), None, None).unwrap();
        assert_eq!(r.len(), 20);
        let l2 = metric == Metric::L2;
        for i in 0..20 {
            let (ids, dist) = r.hits(i);
            let row = &every.distances[i * n..(i + 1) * n];
            let want = row
                .iter()
                .take_while(|&&v| if l2 { v <= radius } else { v >= radius })
                .count();
            assert_eq!(
                ids,
                &every.ids[i * n..i * n + want],
                "{metric:?} {bits}-bit query {i}"
            );
            assert_eq!(dist, &row[..want], "{metric:?} {bits}-bit query {i}");
        }
        assert!(r.hits(0).0.len() >= 51);
        // A filter keeps exactly the allowed hits, in the same order.
        let f = Filter::predicate(|id| Ok(id % 2 == 0));
        let fr = ix.range_search(q, radius, &all(n), None, Some(&f)).unwrap();
        for i in 0..20 {
            let (ids, dist) = r.hits(i);
            let keep: Vec<(u64, f32)> = ids
                .iter()
                .zip(dist)
                .filter(|(id, _)| *id % 2 == 0)
                .map(|(a, b)| (*a, *b))
                .collect();
            let (fi, fd) = fr.hits(i);
            let got: Vec<(u64, f32)> = fi.iter().copied().zip(fd.iter().copied()).collect();
            assert_eq!(got, keep);
        }
    }
}

#[test]
fn exact_range_search_keeps_only_true_hits() {
    let demo = common::demo();
    let d = demo.base.cols;
    let nq = 20;
    let q = &demo.query.data[..nq * d];
    let ix = common::indexed(&common::ctx(2), common::small_params(64, 16), &demo.base);
    let raw = DenseRaw {
        data: &demo.base.data,
        d,
    };
    let l2 =
        |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum() };
    // The exact 20th-nearest distance of query 0 as the radius.
    let mut d0: Vec<f32> = demo.base.data.chunks(d).map(|b| l2(&q[..d], b)).collect();
    d0.sort_by(f32::total_cmp);
    let radius = d0[19];
    let p = SearchParams {
        k: 1,
        nprobe: 10_000,
        rerank: 1,
    };
    let r = ix
        .range_search(q, radius, &p, Some(&raw as &dyn RawVectors), None)
        .unwrap();
    let (mut found, mut truth) = (0usize, 0usize);
    for i in 0..nq {
        let qv = &q[i * d..(i + 1) * d];
        let (ids, dist) = r.hits(i);
        for (&id, &v) in ids.iter().zip(dist) {
            let exact = l2(qv, &demo.base.data[id as usize * d..(id as usize + 1) * d]);
            assert!(
                (v - exact).abs() <= 1e-4 * (1.0 + exact),
                "re-scored exactly"
            );
            assert!(v <= radius);
        }
        assert!(dist.windows(2).all(|w| w[0] <= w[1]), "nearest first");
        found += ids.len();
        truth += demo
            .base
            .data
            .chunks(d)
            .filter(|b| l2(qv, b) <= radius)
            .count();
    }
    let recall = found as f64 / truth as f64;
    eprintln!("exact range search: {found} of {truth} true hits");
    assert!(recall >= 0.8, "found {found} of {truth}");
    // Bad radii.
    assert!(matches!(
        ix.range_search(q, f32::NAN, &p, Some(&raw as &dyn RawVectors), None),
        Err(Error::InvalidArgument(_))
    ));
    let none = ix.range_search(q, -1.0, &all(10), None, None).unwrap();
    assert_eq!(none.offsets, vec![0; nq + 1]);
    assert!(matches!(
        ix.range_search(q, 1.0, &p, None, None),
        Err(Error::InvalidArgument(_))
    ));
}

/// A range search's hits count against the context's memory cap as they are found: every
/// hit of thousands of queries (radius +inf) under a small cap stops with `OutOfMemory`;
/// where they fit, the results are those of the uncapped search.
#[test]
fn range_hits_count_against_the_memory_cap() {
    let demo = common::demo();
    let d = demo.base.cols;
    let ctx = common::ctx(2);
    let ix = common::indexed(&ctx, common::small_params(64, 16), &demo.base);
    let n = ix.len();
    // Every query's every hit: n x 1,000 of them, 28 bytes each while the call runs.
    let q: Vec<f32> = demo
        .query
        .data
        .iter()
        .cycle()
        .take(1000 * d)
        .copied()
        .collect();
    let p = all(n);
    let hits = n * 1000;
    ctx.set_memory_cap(hits * 28 / 4);
    let r = ix.range_search(&q, f32::INFINITY, &p, None, None);
    assert!(
        matches!(&r, Err(Error::OutOfMemory(m)) if m.contains("memory cap")),
        "{:?}",
        r.map(|r| r.ids.len())
    );
    // Twenty queries fit, and give the uncapped search's results.
    let few = &q[..20 * d];
    let capped = ix.range_search(few, f32::INFINITY, &p, None, None).unwrap();
    ctx.set_memory_cap(0);
    let free = ix.range_search(few, f32::INFINITY, &p, None, None).unwrap();
    assert_eq!(capped, free);
    assert_eq!(free.ids.len(), 20 * n);
}
