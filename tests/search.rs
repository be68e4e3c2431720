//! Index search: recall on real data, metrics, re-rank, remove, merge, concurrency.

mod common;
use std::sync::Arc;
use vlc_compress::{DenseRaw, Error, Index, Metric, RawVectors, SearchParams};

fn build(
    metric: Metric,
    bytes: usize,
    bits: u32,
) -> (common::Demo, Index, Arc<vlc_compress::Context>) {
    let demo = common::demo();
    let mut p = common::small_params(256, bytes);
    p.metric = metric;
    p.bits = bits;
    let ctx = common::ctx(2);
    let ix = common::indexed(&ctx, p, &demo.base);
    (demo, ix, ctx)
}

#[test]
fn recall_on_real_glove_subset() {
    let (demo, ix, _) = build(Metric::L2, 16, 8);
    assert_eq!(ix.len(), demo.base.rows);
    let raw = DenseRaw {
        data: &demo.base.data,
        d: demo.base.cols,
    };
    let mut last = 0.0;
    for nprobe in [1, 4, 16, 64] {
        let r = ix
            .search(
                &demo.query.data,
                &SearchParams {
                    k: 10,
                    nprobe,
                    rerank: 0,
                },
                None,
            )
            .unwrap();
        let rec = common::recall(&r.ids, 10, &demo.gt.data, demo.gt.cols, 10);
        assert!(rec >= last, "recall must not drop with nprobe");
        last = rec;
    }
    assert!(last > 0.55, "recall@10 at nprobe 64 = {last}");
    let r = ix
        .search(
            &demo.query.data,
            &SearchParams {
                k: 10,
                nprobe: 64,
                rerank: 100,
            },
            Some(&raw),
        )
        .unwrap();
    let rec = common::recall(&r.ids, 10, &demo.gt.data, demo.gt.cols, 10);
    assert!(rec >= 0.95, "recall@10 with re-rank 100 = {rec}");
    // Re-ranked distances are exact and sorted.
    for q in 0..5 {
        let row = &r.distances[q * 10..q * 10 + 10];
        assert!(row.windows(2).all(|w| w[0] <= w[1]));
        let id = r.ids[q * 10] as usize;
        let exact: f32 = demo.query.data[q * 50..q * 50 + 50]
            .iter()
            .zip(&demo.base.data[id * 50..id * 50 + 50])
            .map(|(a, b)| (a - b) * (a - b))
            .sum();
        assert!((exact - row[0]).abs() <= 1e-3 * exact.max(1.0));
    }
}

#[test]
fn four_bit_codes_search_too() {
    let (demo, ix, _) = build(Metric::L2, 16, 4);
    let r = ix
        .search(
            &demo.query.data,
            &SearchParams {
                k: 10,
                nprobe: 32,
                rerank: 0,
            },
            None,
        )
        .unwrap();
    let rec = common::recall(&r.ids, 10, &demo.gt.data, demo.gt.cols, 10);
    assert!(rec > 0.4, "4-bit recall@10 = {rec}");
}

#[test]
fn inner_product_and_cosine_find_the_true_neighbours() {
    let demo = common::demo();
    let d = demo.base.cols;
    let nq = 100;
    let q = &demo.query.data[..nq * d];
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let norm = |a: &[f32]| dot(a, a).sqrt().max(1e-30);
    for metric in [Metric::InnerProduct, Metric::Cosine] {
        let gt = match metric {
            Metric::InnerProduct => {
                common::brute_force(&demo.base.data, q, d, 10, |a, b| -dot(a, b))
            }
            _ => common::brute_force(&demo.base.data, q, d, 10, |a, b| {
                -dot(a, b) / (norm(a) * norm(b))
            }),
        };
        let (_, ix, _) = build(metric, 16, 8);
        let raw = DenseRaw {
            data: &demo.base.data,
            d,
        };
        let r = ix
            .search(
                q,
                &SearchParams {
                    k: 10,
                    nprobe: 64,
                    rerank: 200,
                },
                Some(&raw),
            )
            .unwrap();
        let rec = common::recall(&r.ids, 10, &gt, 10, 10);
        assert!(rec > 0.9, "{metric:?} recall@10 with re-rank = {rec}");
        // Similarities come best first.
        assert!(r.distances[..10].windows(2).all(|w| w[0] >= w[1]));
    }
}

#[test]
fn concurrent_searches_match_sequential() {
    let (demo, ix, _) = build(Metric::L2, 8, 8);
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let want = ix.search(&demo.query.data, &p, None).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| ix.search(&demo.query.data, &p, None).unwrap()))
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), want);
        }
    });
}

/// First searches race to build the search tables, from plain threads and from inside rayon
/// tasks: the build happens once and none waits on a build that needs its own thread (which
/// hung here when the builder held a lock across its parallel work).
#[test]
fn concurrent_first_searches_finish() {
    use rayon::prelude::*;
    let (demo, ix, ctx) = build(Metric::L2, 8, 8);
    let p = SearchParams {
        k: 10,
        nprobe: 8,
        rerank: 0,
    };
    let want = ix.search(&demo.query.data, &p, None).unwrap();
    let bytes = ix.to_bytes();
    let want = Arc::new(want.ids[..20 * 10].to_vec());
    let q = Arc::new(demo.query.data[..20 * demo.base.cols].to_vec());
    for round in 0..20 {
        let fresh = Arc::new(Index::from_bytes(ctx.clone(), &bytes).unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        // Detached threads: a hung one must not hold the test at a join.
        for t in 0..6 {
            let (fresh, tx, q) = (fresh.clone(), tx.clone(), q.clone());
            std::thread::spawn(move || {
                let got: Result<Vec<Vec<u64>>, Error> = if t % 2 == 0 {
                    fresh.search(&q, &p, None).map(|r| vec![r.ids])
                } else {
                    (0..4)
                        .into_par_iter()
                        .map(|_| fresh.search(&q, &p, None).map(|r| r.ids))
                        .collect()
                };
                let _ = tx.send(got);
            });
        }
        for _ in 0..6 {
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("round {round}: a first search hung"));
            for ids in got.unwrap() {
                assert_eq!(&ids, &*want);
            }
        }
    }
}

#[test]
fn remove_merge_and_bad_search_input() {
    let (demo, mut ix, _) = build(Metric::L2, 8, 8);
    let d = demo.base.cols;
    let n = ix.len();
    let gone: Vec<u64> = (0..1000).collect();
    assert_eq!(ix.remove(&gone).unwrap(), 1000);
    assert_eq!(ix.len(), n - 1000);
    let r = ix
        .search(
            &demo.query.data,
            &SearchParams {
                k: 10,
                nprobe: 256,
                rerank: 0,
            },
            None,
        )
        .unwrap();
    assert!(r.ids.iter().all(|&i| i >= 1000));

    // Merging an index built on the same codebook adds its vectors back.
    let mut other = Index::new(ix.context().clone(), ix.codebook().clone()).unwrap();
    other.add(&demo.base.data[..1000 * d], &gone).unwrap();
    ix.merge_from(&other).unwrap();
    assert_eq!(ix.len(), n);

    // k larger than the index: missing slots are marked.
    let mut tiny = Index::new(ix.context().clone(), ix.codebook().clone()).unwrap();
    tiny.add(&demo.base.data[..3 * d], &[7, 8, 9]).unwrap();
    let r = tiny
        .search(
            &demo.query.data[..d],
            &SearchParams {
                k: 5,
                nprobe: 256,
                rerank: 0,
            },
            None,
        )
        .unwrap();
    assert_eq!(r.ids.iter().filter(|&&i| i == u64::MAX).count(), 2);
    assert!(r.distances[4].is_nan() && r.found(0) == 3);

    let p = SearchParams::default();
    assert!(matches!(
        ix.search(&demo.query.data[..d + 1], &p, None),
        Err(Error::InvalidArgument(_))
    ));
    let mut nan = demo.query.data[..d].to_vec();
    nan[0] = f32::NAN;
    assert!(matches!(
        ix.search(&nan, &p, None),
        Err(Error::NonFinite(_))
    ));
    for bad in [
        SearchParams { k: 0, ..p },
        SearchParams { nprobe: 0, ..p },
        SearchParams { rerank: 5, ..p },
    ] {
        assert!(matches!(
            ix.search(&demo.query.data[..d], &bad, None),
            Err(Error::InvalidArgument(_))
        ));
    }
    let rr = SearchParams { rerank: 20, ..p };
    assert!(
        matches!(
            ix.search(&demo.query.data[..d], &rr, None),
            Err(Error::InvalidArgument(_))
        ),
        "rerank without raw"
    );
    let short = DenseRaw {
        data: &demo.base.data[..10 * d],
        d,
    };
    assert!(
        ix.search(&demo.query.data[..d], &rr, Some(&short as &dyn RawVectors))
            .is_err(),
        "raw lacks ids"
    );
    // A raw row that is not finite fails once a candidate reaches it; and device memory
    // needs a CUDA context.
    let first = ix
        .search(&demo.query.data[..d], &SearchParams { k: 1, ..p }, None)
        .unwrap()
        .ids[0] as usize;
    let mut bad = demo.base.data.clone();
    bad[first * d] = f32::INFINITY;
    let bad = DenseRaw { data: &bad, d };
    let e = ix
        .search(&demo.query.data[..d], &rr, Some(&bad as &dyn RawVectors))
        .unwrap_err();
    assert!(
        matches!(e, Error::NonFinite(_)) && e.to_string().contains(&format!("id {first}")),
        "{e}"
    );
    let at = demo.base.data.as_ptr() as u64;
    // SAFETY: nothing is read: the CPU backend refuses device memory.
    let e = unsafe { ix.search_device_raw(&demo.query.data[..d], &rr, at, 10) };
    assert!(matches!(e, Err(Error::BackendUnavailable(_))), "{e:?}");
    assert!(matches!(
        ix.add(&demo.base.data[..d], &[1, 2]),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(ix.len(), n, "failed add adds nothing");
}
